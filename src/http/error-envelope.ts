import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError, type FieldNamer, quoteRequestId, withWireParam } from "../core/errors.ts";
import { allowedMethods } from "./allowed-methods.ts";
import { toApiError } from "./to-api-error.ts";

export interface ErrorEnvelope {
  /** The dialect's error body for an error. */
  render(err: ApiError): unknown;
  /** How the dialect spells canonical fields that reach the handler unnamed. */
  fieldNames: FieldNamer;
}

/**
 * The error code of each answer the not-found handler made. It sends its 404 or 405 itself, so no
 * error passes through the onError hook where metrics and the request log learn a refusal's code.
 */
const notFoundCodes = new WeakMap<FastifyRequest, string>();

/** The 404s of the not-found handler: a path no route has (not a resource a route did not find). */
const noRouteErrors = new WeakSet<ApiError>();

/** Whether this 404 says that no route has the path, for envelopes that word that apart. */
export function isNoRoute(err: ApiError): boolean {
  return noRouteErrors.has(err);
}

/** The code of the 404 or 405 the request was answered with for having no route; else undefined. */
export function notFoundCode(request: FastifyRequest): string | undefined {
  return notFoundCodes.get(request);
}

/**
 * Makes every error inside `scope` (a dialect plugin's encapsulated context) answer in that
 * dialect's envelope: thrown ApiErrors, validation failures, Fastify's own body errors, and, with
 * `notFound`, unknown routes under the plugin's prefix (a 405 with `Allow` where the path exists for
 * other methods).
 */
export function installErrorEnvelope(
  scope: FastifyInstance,
  scopeEnvelope: ErrorEnvelope,
  opts: { notFound: boolean; envelopeForUrl?: (url: string) => ErrorEnvelope },
): void {
  scope.setErrorHandler((err, request, reply) => {
    // At the root, a request no route took was refused by a hook (a missing key, a key's limit):
    // it answers in the envelope of the dialect whose prefix its path falls under, as its 404 does.
    const envelope = (request.routeOptions.url === undefined ? opts.envelopeForUrl?.(request.url) : undefined) ?? scopeEnvelope;
    const apiError = quoteRequestId(asWireError(err, envelope.fieldNames, request.body), String(request.id));
    // A 503 is the server saying it cannot take the request now (draining, overloaded, a model still
    // loading): a line at warn level with its code. During a drain every new request gets one, and a
    // stack trace each (thousands of lines a second) buried what the log was there to show.
    if (apiError.status === 503) request.log.warn({ code: apiError.code }, apiError.message);
    else if (apiError.status >= 500) request.log.error(err);
    void reply.status(apiError.status).headers(apiError.headers).send(envelope.render(apiError));
  });
  if (opts.notFound) {
    scope.setNotFoundHandler((request, reply) => {
      const path = shownPath(request.url);
      // A path that exists for other methods is a 405 naming them (RFC 9110), not an unknown route.
      // A route of this very method that sent the request here (a file the console does not have)
      // found nothing: a 404.
      const allow = allowedMethods(scope, request.url);
      const e =
        allow.length > 0 && !allow.includes(request.method)
          ? new ApiError(405, `${request.method} is not allowed on ${path}; it takes ${allow.join(", ")}.`, {
              code: "method_not_allowed",
              headers: { allow: allow.join(", ") },
            })
          : new ApiError(404, `No route for ${request.method} ${path}.`, { code: "not_found" });
      if (e.status === 404) noRouteErrors.add(e);
      if (e.code) notFoundCodes.set(request, e.code);
      void reply.status(e.status).headers(e.headers).send((opts.envelopeForUrl?.(request.url) ?? scopeEnvelope).render(e));
    });
  }
}

/**
 * The path a refusal names: without the query string (routes are found by the path alone, and a
 * query echoed back said the method was refused on that URL), percent-decoded as the router reads
 * it (`%2e%2e` is `..`; decodeURI leaves an encoded `/`, `?` or `#` as sent), cut at 200 characters.
 */
function shownPath(url: string): string {
  const raw = url.split("?", 1)[0];
  let path = raw;
  try {
    path = decodeURI(raw);
  } catch {
    // A malformed escape (`%ZZ`): named as it was sent.
  }
  return path.length > 200 ? `${path.slice(0, 200)}…` : path;
}

/**
 * Any thrown value as an ApiError whose canonical field, if any, has its wire name. `body` (the parsed
 * request body) lets a validation message say what was sent.
 */
export function asWireError(err: unknown, names: FieldNamer, body?: unknown): ApiError {
  return withWireParam(toApiError(err, body), names) as ApiError;
}
