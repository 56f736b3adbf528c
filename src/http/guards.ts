import { isIP } from "node:net";
import type { FastifyInstance } from "fastify";
import { ApiError } from "../core/errors.ts";

export interface GuardOptions {
  /** The listen address (its name is accepted in the Host header). */
  host: string;
  /** Extra names accepted in the Host header; "*" turns the check off. */
  allowedHosts: readonly string[];
  /** Origins allowed to call from a browser (CORS); "*" allows any. Empty: CORS off. */
  corsOrigins: readonly string[];
}

const CORS_METHODS = "GET, POST, PUT, DELETE, OPTIONS";
const CORS_MAX_AGE = "600";
const CORS_EXPOSE = [
  "retry-after",
  "retry-after-ms",
  "x-should-retry",
  "x-ratelimit-limit-requests",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-reset-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-tokens",
  "x-ratelimit-reset-tokens",
].join(", ");

/**
 * Browser-facing guards, before anything else runs:
 *
 * - **Host check** (DNS rebinding): a page on an attacker's name that resolves to this server's
 *   address sends that name as Host. Accepted: IP literals, `localhost` and `*.localhost`, the listen
 *   address's own name, and `allowedHosts`; anything else is a 403.
 * - **CORS**: off unless origins are configured. A preflight from an origin not allowed is a 403;
 *   an allowed origin gets its preflight answered and Access-Control-Allow-Origin on every answer.
 */
export function installGuards(app: FastifyInstance, opts: GuardOptions): void {
  const hostAllowed = hostPolicy(opts.host, opts.allowedHosts);
  const cors = corsPolicy(opts.corsOrigins);

  app.addHook("onRequest", async (request, reply) => {
    const host = request.headers.host;
    // HTTP/1.1 requires Host (RFC 9112 §3.2); HTTP/1.0 clients may leave it out.
    if (host === undefined && request.raw.httpVersionMajor === 1 && request.raw.httpVersionMinor >= 1) {
      throw new ApiError(400, "The request has no Host header, which HTTP/1.1 requires.", { code: "invalid_request" });
    }
    // One Host, well formed (RFC 9112 §3.2 asks for a 400 otherwise): Node keeps the first of several,
    // and `localhost:80.attacker.com` would read as localhost, while a proxy in front may read either.
    if (host !== undefined && (hostCount(request.raw.rawHeaders) > 1 || !HOST_SYNTAX.test(host))) {
      throw new ApiError(400, `The Host header '${truncate(host, 100)}' is malformed or given more than once.`, { code: "invalid_request" });
    }
    if (host !== undefined && !hostAllowed(host)) {
      const name = hostName(host);
      throw new ApiError(
        403,
        `The Host header '${truncate(host, 100)}' does not name this server; to serve it under that name, start it with --allowed-host ${truncate(name, 100)}.`,
        { code: "host_not_allowed" },
      );
    }
    const origin = request.headers.origin;
    const preflight = request.method === "OPTIONS" && request.headers["access-control-request-method"] !== undefined;
    if (preflight) {
      if (origin === undefined || !cors.allows(origin)) {
        throw new ApiError(
          403,
          cors.enabled
            ? `Cross-origin requests from '${truncate(String(origin), 100)}' are not allowed (see --cors-origin).`
            : "Cross-origin requests are not allowed: this server has no CORS policy (start it with --cors-origin <origin>).",
          { code: "cors_not_allowed" },
        );
      }
      const requested = request.headers["access-control-request-headers"];
      await reply
        .status(204)
        .headers({
          ...cors.headers(origin),
          "access-control-allow-methods": CORS_METHODS,
          "access-control-allow-headers": typeof requested === "string" ? truncate(requested, 1000) : "authorization, content-type",
          "access-control-max-age": CORS_MAX_AGE,
        })
        .send();
      return reply;
    }
    if (origin !== undefined && cors.allows(origin)) void reply.headers({ ...cors.headers(origin), "access-control-expose-headers": CORS_EXPOSE });
    else if (origin !== undefined && host !== undefined && crossSiteSimplePost(request.method, request.headers, origin, host)) {
      throw new ApiError(403, `Cross-origin requests from '${truncate(origin, 100)}' are not allowed (see --cors-origin).`, { code: "cors_not_allowed" });
    }
  });
}

/** Host [":" port] (RFC 3986): a registered name, an IPv4 address or a bracketed IPv6 one. */
const HOST_SYNTAX = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(:[0-9]{0,5})?$/;

function hostCount(raw: string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === "host") n++;
  return n;
}

/**
 * A POST a web page on another origin could send without a CORS preflight: no JSON Content-Type
 * (a body without one is already a 415), no key header. Bodies are JSON-only so that a page cannot
 * post here unasked, but a POST with no body at all still needs no preflight, and on an open server
 * it created a conversation or cancelled a response. Browsers name the page's origin; a page on this
 * server itself (the console) is same-origin, and clients that are not browsers send no Origin.
 */
function crossSiteSimplePost(method: string, headers: Record<string, string | string[] | undefined>, origin: string, host: string): boolean {
  if (method !== "POST") return false;
  if (headers.authorization !== undefined || headers["x-api-key"] !== undefined || headers["api-key"] !== undefined) return false;
  const type = headers["content-type"];
  if (typeof type === "string" && /json/i.test(type)) return false;
  try {
    return new URL(origin).host.toLowerCase() !== host.trim().toLowerCase();
  } catch {
    return true; // "null" (a sandboxed page, a file) or no URL at all
  }
}

/** The host name of a Host header: no port, no brackets, lower case, no trailing dot. */
export function hostName(host: string): string {
  let name = host.trim().toLowerCase();
  if (name.startsWith("[")) {
    const end = name.indexOf("]");
    name = end === -1 ? name.slice(1) : name.slice(1, end);
  } else {
    const colon = name.lastIndexOf(":");
    if (colon !== -1 && name.indexOf(":") === colon) name = name.slice(0, colon);
  }
  return name.endsWith(".") ? name.slice(0, -1) : name;
}

export function hostPolicy(listenHost: string, allowed: readonly string[]): (host: string) => boolean {
  if (allowed.includes("*")) return () => true;
  const names = new Set(allowed.map(hostName));
  const listen = hostName(listenHost);
  if (listen !== "" && isIP(listen) === 0) names.add(listen);
  return (host) => {
    const name = hostName(host);
    return isIP(name) !== 0 || name === "localhost" || name.endsWith(".localhost") || names.has(name);
  };
}

export function corsPolicy(origins: readonly string[]) {
  const any = origins.includes("*");
  const allowed = new Set(origins.map(normalOrigin));
  return {
    enabled: origins.length > 0,
    allows: (origin: string) => any || allowed.has(normalOrigin(origin)),
    headers: (origin: string): Record<string, string> =>
      any ? { "access-control-allow-origin": "*" } : { "access-control-allow-origin": origin, vary: "Origin" },
  };
}

function normalOrigin(origin: string): string {
  const o = origin.trim().toLowerCase();
  return o.endsWith("/") ? o.slice(0, -1) : o;
}

function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n)}…` : s;
}
