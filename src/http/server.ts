import Fastify, { type FastifyInstance } from "fastify";
import { newId } from "../core/ids.ts";

export interface HttpOptions {
  bodyLimit: number;
  logger?: boolean;
}

/**
 * The bare HTTP server every dialect is mounted on: body limits, body parsing and request ids. It
 * knows no dialect; each dialect plugin installs its own error envelope (see error-envelope.ts), and
 * the assembly (src/app.ts) decides which envelope answers routes no dialect owns.
 */
export function createHttpServer(opts: HttpOptions): FastifyInstance {
  const app = Fastify({
    bodyLimit: opts.bodyLimit,
    logger: opts.logger ?? false,
    return503OnClosing: true,
    genReqId: () => newId("req_"),
  });

  // Many clients (curl -d, fetch with a string body) post JSON without the JSON content type; every
  // API body here is JSON, so it is parsed as JSON whatever the declared type.
  app.removeContentTypeParser("text/plain");
  app.addContentTypeParser("*", { parseAs: "string" }, (_req, body, done) => {
    try {
      done(null, body === "" ? undefined : JSON.parse(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  return app;
}
