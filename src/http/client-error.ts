import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "../core/errors.ts";
import { newId } from "../core/ids.ts";
import type { ErrorEnvelope } from "./error-envelope.ts";
import { toApiError } from "./to-api-error.ts";

/** Sockets already answered by `clientErrorHandler` (a broken parser reports every later chunk too). */
const answered = new WeakSet<Socket>();

/** A request answered here, below Fastify, so that no hook of its sees it. */
export type Refusal = { status: number; code: string; method: string; requestId: string };

/**
 * Where the answers written here are reported, so that metrics and the request log count them as
 * they count every other answer (a flood of malformed requests must not be invisible).
 */
export class RefusalFeed {
  private readonly listeners: Array<(r: Refusal) => void> = [];
  on(listener: (r: Refusal) => void): void {
    this.listeners.push(listener);
  }
  emit(r: Refusal): void {
    for (const l of this.listeners) l(r);
  }
}

/** The method of a request line for a report: a known method, or "other" (labels stay few). */
function methodOf(raw: string | undefined): string {
  return raw !== undefined && KNOWN_METHODS.has(raw) ? raw : "other";
}
const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"]);

/**
 * Node's `clientError`: a request so malformed that Node refused it before Fastify saw it (headers or
 * URL over the size limit, a body longer than its Content-Length so the rest parses as garbage, a
 * request that took too long to arrive). Answers with a minimal response in `envelope` and closes the
 * connection once the answer is sent.
 */
export function clientErrorHandler(envelopeFor: (url: string | undefined) => ErrorEnvelope, feed: RefusalFeed) {
  return (err: Error & { code?: string; rawPacket?: unknown }, socket: Socket): void => {
    if (err.code === "ECONNRESET" || socket.destroyed) return;
    if (answered.has(socket)) return;
    answered.add(socket);
    const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (socket.writable && !inFlight?.headersSent) {
      const e = clientError(err);
      const line = requestLine(err.rawPacket);
      const body = JSON.stringify(envelopeFor(line?.url).render(e));
      // Every answer names a request id, these too (what a client quotes when it reports one).
      const requestId = newId("req_");
      socket.end(
        `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status]}\r\nContent-Type: application/json\r\nX-Request-Id: ${requestId}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      feed.emit({ status: e.status, code: e.code ?? e.type, method: methodOf(line?.method), requestId });
      // Whatever the client still sends is read and ignored until it closes; give it a moment, no more.
      setTimeout(() => socket.destroy(), 2000).unref();
    } else {
      socket.destroy();
    }
  };
}

/** The method and URL of the request line at the start of what Node could not parse, when it is there. */
function requestLine(raw: unknown): { method: string; url: string } | undefined {
  if (!Buffer.isBuffer(raw)) return undefined;
  const m = /^([A-Z]{3,10}) (\/[^ \r\n]*)/.exec(raw.subarray(0, 4096).toString("latin1"));
  return m ? { method: m[1], url: m[2] } : undefined;
}

function clientError(err: Error & { code?: string }): ApiError {
  const opts = { code: "invalid_request" };
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return new ApiError(431, "The request line and headers are larger than this server accepts (16 KiB): shorten the URL or the headers.", {
        code: "request_header_fields_too_large",
      });
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new ApiError(408, "The request did not arrive in time.", { code: "request_timeout" });
    case "HPE_HEADERS_TIMEOUT":
    case "ERR_HTTP_HEADERS_TIMEOUT":
      return new ApiError(408, "The request headers did not arrive in time.", { code: "request_timeout" });
    case "HPE_INVALID_METHOD":
    case "HPE_INVALID_CONSTANT":
    case "HPE_INVALID_VERSION":
      return new ApiError(
        400,
        "The data received is not an HTTP request. If it followed a request body, the body was longer than its Content-Length header said.",
        opts,
      );
    case "HPE_INVALID_CONTENT_LENGTH":
    case "HPE_UNEXPECTED_CONTENT_LENGTH":
      return new ApiError(400, "The Content-Length header is not valid (or is sent together with Transfer-Encoding).", opts);
    case "HPE_INVALID_TRANSFER_ENCODING":
    case "HPE_INVALID_CHUNK_SIZE":
      return new ApiError(400, "The chunked request body is malformed.", opts);
    case "HPE_INVALID_HEADER_TOKEN":
    case "HPE_LF_EXPECTED":
    case "HPE_CR_EXPECTED":
      return new ApiError(400, "A request header is malformed.", opts);
  }
  const reason = (err as { reason?: string }).reason;
  return new ApiError(400, `The HTTP request is malformed${reason ? ` (${reason})` : ""}.`, opts);
}

/**
 * Fastify's `frameworkErrors`: a URL the router cannot take apart (a bad percent-encoding such as
 * `%ZZ`, a path segment over the length limit), answered in `envelope` like any other error.
 */
export function frameworkErrorHandler(envelopeFor: (url: string | undefined) => ErrorEnvelope, feed: RefusalFeed) {
  return (err: Error, request: FastifyRequest, reply: FastifyReply): void => {
    const e = toApiError(err);
    // No hook runs for these, neither onRequest nor onResponse: the request id is named here, and
    // the answer is reported as the ones written below Fastify are.
    void reply
      .status(e.status)
      .header("content-type", "application/json; charset=utf-8")
      .header("x-request-id", request.id)
      .send(envelopeFor(request.raw.url).render(e));
    feed.emit({ status: e.status, code: e.code ?? e.type, method: methodOf(request.method), requestId: String(request.id) });
  };
}

/**
 * A CONNECT request (a client that takes this server for a proxy): Node hands its socket to whoever
 * listens for `connect` and, with nobody listening, closes it without a word. A 405 in the envelope
 * of the route named (a proxy target such as `host:443` gets OpenAI's), then the connection closes.
 */
export function refuseConnect(server: Server, envelopeFor: (url: string | undefined) => ErrorEnvelope, feed: RefusalFeed): void {
  server.on("connect", (req: IncomingMessage, socket: Socket) => {
    const e = new ApiError(405, "CONNECT is not supported: this server is not a proxy.", { code: "method_not_allowed" });
    const body = JSON.stringify(envelopeFor(req.url?.startsWith("/") ? req.url : undefined).render(e));
    socket.on("error", () => {});
    const requestId = clientRequestId(req);
    socket.end(
      `HTTP/1.1 405 ${STATUS_CODES[405]}\r\nContent-Type: application/json\r\nX-Request-Id: ${requestId}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
    feed.emit({ status: 405, code: "method_not_allowed", method: "CONNECT", requestId });
    setTimeout(() => socket.destroy(), 2000).unref();
  });
}

/**
 * An `Expect` header other than `100-continue`: Node answers it with a bare 417 unless someone
 * listens. The same 417, in the envelope of the route asked for, naming the header.
 */
export function answerExpectations(server: Server, envelopeFor: (url: string | undefined) => ErrorEnvelope, feed: RefusalFeed): void {
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    const e = new ApiError(417, `The Expect header '${String(req.headers.expect).slice(0, 100)}' is not supported; only 100-continue is.`, {
      code: "expectation_failed",
    });
    const body = JSON.stringify(envelopeFor(req.url).render(e));
    const requestId = clientRequestId(req);
    res.writeHead(417, {
      "content-type": "application/json; charset=utf-8",
      "content-length": Buffer.byteLength(body),
      "x-request-id": requestId,
      connection: "close",
    });
    res.end(body);
    feed.emit({ status: 417, code: "expectation_failed", method: methodOf(req.method), requestId });
    // The body it meant to send is not read; the connection closes once the answer is out.
    req.resume();
  });
}

/** A request id a client may choose: up to 128 characters of letters, digits, '.', '_' and '-'. */
export function isValidRequestId(id: string): boolean {
  return /^[A-Za-z0-9._-]{1,128}$/.test(id);
}

/** The request id of a request whose headers were read: the client's own when valid, as for every other answer. */
function clientRequestId(req: IncomingMessage): string {
  const given = req.headers["x-request-id"];
  return typeof given === "string" && isValidRequestId(given) ? given : newId("req_");
}
