import Fastify, { type FastifyInstance } from "fastify";
import { ApiError } from "../core/errors.ts";
import type { ModelRegistry } from "../core/registry.ts";
import { registerChatRoutes } from "../dialects/openai/chat-routes.ts";
import { registerCompletionRoutes } from "../dialects/openai/completions-routes.ts";
import { registerEmbeddingsRoutes } from "../dialects/openai/embeddings-routes.ts";
import { openAIErrorBody } from "../dialects/openai/errors.ts";
import { registerModelRoutes } from "../dialects/openai/models-routes.ts";
import { registerTokenizeRoutes } from "../dialects/openai/tokenize-routes.ts";
import { toApiError } from "./to-api-error.ts";

export interface ServerOptions {
  bodyLimit: number;
  logger?: boolean;
}

/** Builds the HTTP app; listening and model loading are the caller's business. */
export function buildServer(registry: ModelRegistry, opts: ServerOptions): FastifyInstance {
  const app = Fastify({ bodyLimit: opts.bodyLimit, logger: opts.logger ?? false, return503OnClosing: true });

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

  app.setErrorHandler((err, request, reply) => {
    const apiError = toApiError(err);
    if (apiError.status >= 500) request.log.error(err);
    void reply.status(apiError.status).headers(apiError.headers).send(openAIErrorBody(apiError));
  });
  app.setNotFoundHandler((request, reply) => {
    const e = new ApiError(404, `No route for ${request.method} ${request.url}.`, { code: "not_found" });
    void reply.status(404).send(openAIErrorBody(e));
  });

  app.get("/health", async (_request, reply) => {
    const models = Object.fromEntries(registry.list().map((m) => [m.id, m.error ? `${m.status}: ${m.error}` : m.status]));
    if (registry.allReady) return { status: "ok", models };
    const failed = registry.list().some((m) => m.status === "failed");
    return reply.status(503).send({ status: failed ? "error" : "loading", models });
  });

  registerModelRoutes(app, registry);
  registerChatRoutes(app, registry);
  registerCompletionRoutes(app, registry);
  registerEmbeddingsRoutes(app, registry);
  registerTokenizeRoutes(app, registry);
  return app;
}
