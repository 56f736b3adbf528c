import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { RequestContext } from "../core/context.ts";
import type { GenerationService } from "../core/generation-service.ts";
import { requestKey } from "./access.ts";
import { abortOnDisconnect } from "./client-abort.ts";
import { internalId } from "./internal-id.ts";
import { respondWithSse, type SseErrorEvent, type SseWriter } from "./sse.ts";

/** What a route body needs besides the parsed request: the service, who is asking, and when to stop. */
export interface RouteEnv {
  service: GenerationService;
  ctx: RequestContext;
  /** Fires when the client goes away. */
  signal: AbortSignal;
}

/** A route body's answer: a JSON body, or a stream the HTTP layer opens and closes. */
export type RouteResult =
  | { kind: "json"; body: unknown; status?: number; headers?: Record<string, string> }
  | {
      kind: "sse";
      headers?: Record<string, string>;
      write: (sse: SseWriter) => Promise<void>;
      /** The final event for an error after the stream began, in the dialect's shape. */
      errorEvent: (err: unknown) => SseErrorEvent;
      /** A comment line goes out after this long without an event (llama-server's sse_ping_interval). */
      pingMs?: number;
    };

/** The route environment of an HTTP request. */
export function routeEnv(
  request: FastifyRequest,
  reply: FastifyReply,
  service: GenerationService,
  dialect: string,
  namespace?: string,
): RouteEnv {
  const ctx: RequestContext = {
    requestId: String(request.id),
    internalId: internalId(request),
    dialect,
    namespace,
    apiKey: requestKey(request),
    responseHeaders: {},
  };
  contexts.set(reply, ctx);
  return { service, ctx, signal: abortOnDisconnect(reply) };
}

/** Who is asking, for a route that runs no generation (a model list). */
export function requestContext(request: FastifyRequest, dialect: string): RequestContext {
  return { requestId: String(request.id), internalId: internalId(request), dialect, apiKey: requestKey(request) };
}

/** The request context of each reply, so that headers an engine set reach the response. */
const contexts = new WeakMap<FastifyReply, RequestContext>();

/** Sends a route body's answer. */
export async function sendResult(reply: FastifyReply, signal: AbortSignal, result: RouteResult): Promise<unknown> {
  const engineHeaders = contexts.get(reply)?.responseHeaders;
  if (result.kind === "json") {
    if (engineHeaders) void reply.headers(engineHeaders);
    if (result.headers) void reply.headers(result.headers);
    if (result.status) void reply.status(result.status);
    return result.body;
  }
  await respondWithSse(reply, signal, result.write, result.errorEvent, { ...engineHeaders, ...result.headers }, String(reply.request.id), result.pingMs);
  return reply;
}

/**
 * A POST route whose body is parsed (a zod schema's `parse`, say) and handed to a route body; the
 * environment's namespace is left for the route body to set from the request's own fields.
 */
export function postRoute<T>(
  scope: FastifyInstance,
  path: string,
  parse: (raw: unknown, request: FastifyRequest) => T,
  handler: (body: T, env: RouteEnv) => Promise<RouteResult>,
  opts: { service: GenerationService; dialect: string },
): void {
  scope.post(path, async (request, reply) => {
    const body = parse(request.body, request);
    const env = routeEnv(request, reply, opts.service, opts.dialect);
    return sendResult(reply, env.signal, await handler(body, env));
  });
}
