import type { FastifyReply } from "fastify";
import { clientClosed } from "../core/errors.ts";

/**
 * An AbortSignal that fires when the client goes away before the response is complete, so its
 * generation stops at the next token and its sequence goes back to the pool.
 */
export function abortOnDisconnect(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) controller.abort(clientClosed());
  });
  return controller.signal;
}
