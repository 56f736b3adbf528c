import type { FastifyInstance } from "fastify";

/** The methods a route can be declared for here (HEAD comes with every GET). */
const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

/**
 * The methods some route answers at `url` (a request's URL, query string included), in a fixed
 * order; empty when no route has the path at all. The not-found handler asks this to tell a wrong
 * method (405, with these as `Allow`) from an unknown path (404). The router is one for the whole
 * server, so any scope finds every dialect's routes.
 */
export function allowedMethods(scope: FastifyInstance, url: string): string[] {
  return METHODS.filter((method) => scope.findRoute({ method, url }) !== null);
}
