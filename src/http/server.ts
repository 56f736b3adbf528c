import Fastify, { type FastifyInstance, LogController } from "fastify";
import { newId } from "../core/ids.ts";
import { installBodyHandling } from "./body.ts";
import { answerExpectations, clientErrorHandler, frameworkErrorHandler, isValidRequestId, RefusalFeed, refuseConnect } from "./client-error.ts";
import type { ErrorEnvelope } from "./error-envelope.ts";
import { installGuards } from "./guards.ts";
import { MAX_PATH_SEGMENT } from "./path-segments.ts";

export interface HttpOptions {
  bodyLimit: number;
  /**
   * Fastify's (pino) logger: false (the default) logs nothing; options set the level and where lines
   * go. Fastify's own per-request lines are off: the request log (src/observability) writes one line
   * per request instead.
   */
  logger?: boolean | { level: string; stream?: NodeJS.WritableStream };
  /**
   * The envelope of errors that happen before any route (and so any dialect) is known: malformed
   * requests Node refuses, URLs the router cannot take apart.
   */
  envelope: ErrorEnvelope;
  /**
   * Envelopes of the path prefixes a dialect owns, for those same errors when the URL could still be
   * read (a path segment too long, a bad percent-encoding, headers too large after the request line).
   */
  envelopesByPrefix?: ReadonlyArray<readonly [prefix: string, envelope: ErrorEnvelope]>;
  /** The listen address: its name is accepted in the Host header (default 127.0.0.1). */
  host?: string;
  /** Other names accepted in the Host header; "*" turns the check off. */
  allowedHosts?: readonly string[];
  /** Origins allowed to call from a browser; "*" allows any; none (the default): CORS off. */
  corsOrigins?: readonly string[];
  /** How long the request line and headers may take (default 30 s). */
  headersTimeoutMs?: number;
  /** How long the whole body may take, after the headers (default 60 s). */
  bodyTimeoutMs?: number;
  /** How long an idle keep-alive connection is kept (default 65 s). */
  keepAliveTimeoutMs?: number;
  /** How long a stream waits for a client that takes nothing before closing it (default 30 s; see SseWriter). */
  sendTimeoutMs?: number;
  /** Open connections at most; further ones are closed as they arrive (default 512; 0: no limit). */
  maxConnections?: number;
}

declare module "fastify" {
  interface FastifyInstance {
    /** See HttpOptions.sendTimeoutMs. */
    sendTimeoutMs?: number;
    /** Answers written below Fastify (malformed requests, CONNECT, Expect), for metrics and the log. */
    refusals: RefusalFeed;
  }
}

export const HTTP_DEFAULTS = {
  headersTimeoutMs: 30_000,
  bodyTimeoutMs: 60_000,
  keepAliveTimeoutMs: 65_000,
  sendTimeoutMs: 30_000,
  maxConnections: 512,
};

/**
 * The envelope of the dialect whose prefix `url` falls under, else `fallback`. Only the path counts,
 * as the router reads it less its quirks: a query string (a 431 for a long one), doubled slashes
 * (`//serving-endpoints/…` from a base URL ending in '/') and a ';' parameter still name the prefix.
 */
export function envelopeForUrl(
  url: string | undefined,
  byPrefix: ReadonlyArray<readonly [prefix: string, envelope: ErrorEnvelope]>,
  fallback: ErrorEnvelope,
): ErrorEnvelope {
  if (url === undefined) return fallback;
  const path = url.split("?", 1)[0].replace(/\/{2,}/g, "/");
  for (const [prefix, envelope] of byPrefix) if (path.startsWith(prefix) && /^(?:$|[/;])/.test(path.slice(prefix.length))) return envelope;
  return fallback;
}

/** The most bytes of a refused body read and discarded so the client reads the answer. */
export function drainLimit(bodyLimit: number): number {
  return Math.min(Math.max(4 * bodyLimit, 1024 * 1024), 64 * 1024 * 1024);
}

/**
 * The bare HTTP server every dialect is mounted on: body limits, body parsing, request ids, timeouts,
 * the Host check and CORS. It knows no dialect; each dialect plugin installs its own error envelope
 * (see error-envelope.ts), and the assembly (src/app.ts) decides which envelope answers routes no
 * dialect owns and requests too broken to reach a route.
 */
export function createHttpServer(opts: HttpOptions): FastifyInstance {
  const headersTimeout = opts.headersTimeoutMs ?? HTTP_DEFAULTS.headersTimeoutMs;
  const bodyTimeout = opts.bodyTimeoutMs ?? HTTP_DEFAULTS.bodyTimeoutMs;
  const envelopeFor = (url: string | undefined) => envelopeForUrl(url, opts.envelopesByPrefix ?? [], opts.envelope);
  const refusals = new RefusalFeed();
  const app = Fastify({
    bodyLimit: opts.bodyLimit,
    logger: opts.logger ?? false,
    return503OnClosing: true,
    // A caller's x-request-id is kept when it is a plain token; otherwise the server makes one.
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && isValidRequestId(given) ? given : newId("req_");
    },
    // Plinth writes its own request log (observability/request-log.ts); Fastify's lines are off.
    logController: new LogController({ requestIdLogLabel: "request_id", disableRequestLogging: true }),
    // Node's own deadline for a whole request, a backstop behind the body deadline (which answers first).
    requestTimeout: headersTimeout + bodyTimeout + 1000,
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? HTTP_DEFAULTS.keepAliveTimeoutMs,
    http: {
      headersTimeout,
      // How often Node checks those deadlines (its default, 30 s, is coarser than a short setting).
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(headersTimeout / 4))),
      // Node answers a HTTP/1.1 request without Host with a bare 400 of its own; the guards answer
      // it in the envelope instead (guards.ts).
      requireHostHeader: false,
    },
    // Model ids can be long; a longer path segment is a 414 in the envelope.
    routerOptions: { maxParamLength: MAX_PATH_SEGMENT },
    clientErrorHandler: clientErrorHandler(envelopeFor, refusals),
    frameworkErrors: frameworkErrorHandler(envelopeFor, refusals),
  });
  // Read by every stream's writer (respondWithSse), in whichever plugin its route lives.
  app.decorate("sendTimeoutMs", opts.sendTimeoutMs ?? HTTP_DEFAULTS.sendTimeoutMs);
  app.decorate("refusals", refusals);
  answerExpectations(app.server, envelopeFor, refusals);
  refuseConnect(app.server, envelopeFor, refusals);
  const maxConnections = opts.maxConnections ?? HTTP_DEFAULTS.maxConnections;
  if (maxConnections > 0) makeRoomAtTheCap(app.server, maxConnections);

  // Every answer names its request, refusals and streams included (a raw header survives writeHead).
  app.addHook("onRequest", async (request, reply) => {
    reply.raw.setHeader("x-request-id", request.id);
  });
  installGuards(app, { host: opts.host ?? "127.0.0.1", allowedHosts: opts.allowedHosts ?? [], corsOrigins: opts.corsOrigins ?? [] });
  installBodyHandling(app, { bodyLimit: opts.bodyLimit, bodyTimeoutMs: bodyTimeout, drainLimit: drainLimit(opts.bodyLimit) });
  return app;
}

/**
 * Caps open connections, keeping one free below the cap (at the cap Node drops a new socket before
 * any handler sees it). To make that room, connections with no request in flight are closed one at
 * a time, oldest first: first those idle between requests (keep-alive; the client opens a new one
 * when it needs it), then those that have not sent a whole request head within HEAD_GRACE_MS (a
 * working client's head arrives within milliseconds). So clients that open connections and leave
 * them idle, or send a head a byte at a time (slowloris), cannot lock working clients out: 520 idle
 * sockets held the default cap of 512 for 65 s, and 600 connections that each sent half a head held
 * it for the 30 s head timeout, every new client (and /health) dropped meanwhile. Only what is
 * needed is closed: closing every idle socket at once reset keep-alive clients reusing one at that
 * moment. A connection with a request in flight is never closed here.
 */
function makeRoomAtTheCap(server: import("node:http").Server, max: number): void {
  server.maxConnections = max;
  let open = 0;
  // Connections with no request in flight, oldest first (a Map keeps insertion order; a socket is
  // re-added when it goes idle again): since when, and whether it ever sent a whole head.
  const resting = new Map<import("node:net").Socket, { since: number; served: boolean }>();
  let timer: NodeJS.Timeout | undefined;
  /** Closes one resting connection that may go (see above); false if none may yet. */
  const closeOne = (spare?: import("node:net").Socket): boolean => {
    const now = Date.now();
    let stale: import("node:net").Socket | undefined;
    let youngest = Infinity;
    for (const [socket, r] of resting) {
      if (socket === spare) continue;
      if (r.served) {
        stale = socket;
        break;
      }
      if (now - r.since >= HEAD_GRACE_MS) stale ??= socket;
      else youngest = Math.min(youngest, r.since);
    }
    if (stale) {
      resting.delete(stale);
      stale.destroy();
      return true;
    }
    // None may go yet: look again when the oldest head-less one has had its grace.
    if (youngest !== Infinity && !timer) {
      timer = setTimeout(makeRoom, HEAD_GRACE_MS - (now - youngest));
      timer.unref();
    }
    return false;
  };
  function makeRoom(spare?: import("node:net").Socket): void {
    timer = undefined;
    if (open >= max - 1) closeOne(spare);
  }
  server.on("connection", (socket) => {
    open++;
    resting.set(socket, { since: Date.now(), served: false });
    socket.once("close", () => {
      open--;
      resting.delete(socket);
    });
    makeRoom(socket);
  });
  server.on("request", (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => {
    const socket = req.socket;
    resting.delete(socket);
    res.once("finish", () => {
      if (socket.destroyed) return;
      resting.set(socket, { since: Date.now(), served: true });
      // At the cap the oldest idle connection goes now, this one if it is the only one: its client
      // sees the close with the answer and opens a new connection next time, where a new client
      // arriving later would be dropped.
      makeRoom();
    });
  });
  // Dropped anyway (a burst of new connections): make room for the clients' next tries.
  server.on("drop", () => {
    for (let i = 0; i < 16 && closeOne(); i++);
  });
}

/**
 * How long a new connection may take to send its first request head before it may be closed to make
 * room at the cap: far longer than a working client takes, far shorter than the head timeout a
 * slowloris client otherwise holds a connection for.
 */
const HEAD_GRACE_MS = 1_000;
