import type { FastifyRequest } from "fastify";

/**
 * A server-made id unique to each HTTP request, the key every per-request map is kept under (the
 * tenancy layer's tracked requests, metrics, traces, the request log). The request id (`request.id`)
 * cannot be: it is the client's own `x-request-id` whenever that is a plain token, and two requests
 * may send the same one, by accident (a retried call) or to act on another's state (another key's
 * lease, model list or ledger row). The request id stays what is echoed, logged and booked.
 */
const ids = new WeakMap<FastifyRequest, string>();
let next = 0;

export function internalId(request: FastifyRequest): string {
  let id = ids.get(request);
  if (id === undefined) {
    // A counter is enough: unique within the process, which is all the maps it keys live in.
    id = `r${++next}`;
    ids.set(request, id);
  }
  return id;
}
