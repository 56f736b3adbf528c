import type { FastifyRequest } from "fastify";
import { z } from "zod";

// Routes that read nothing but their path (retrieve, delete, cancel a stored object). A query key
// or a body field there is a 400 naming it, as on the sibling routes that read some and refuse the
// rest: `DELETE /v1/responses/{id}?bogus=1` deleted, as if its client had not asked for something.

/** Accepted everywhere, as on a retrieve (the end user a request is for; it changes no answer). */
const QUERY = z.strictObject({ user: z.string().optional(), safety_identifier: z.string().optional() });
const BODY = z.strictObject({});

/** Throws the route's 400 for a query key other than `user`/`safety_identifier`, and (with `body`) for any body field. */
export function readsNothing(request: FastifyRequest, opts: { body: boolean }): void {
  QUERY.parse(request.query ?? {});
  if (opts.body) BODY.parse(request.body ?? {});
}
