import { isUtf8 } from "node:buffer";
import type { IncomingMessage } from "node:http";
import { type Readable, Transform, type TransformCallback } from "node:stream";
import zlib from "node:zlib";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError } from "../core/errors.ts";
import { JsonShapeGuard } from "./json-shape.ts";
import { refuseSeedBeyondInt64 } from "./seed-literal.ts";
import { formatPath } from "../core/field-path.ts";
import { droppedProtoPath, PROTO_BELOW, PROTO_HOLDERS } from "./proto-keys.ts";

export interface BodyOptions {
  /** Largest body accepted, after decompression. */
  bodyLimit: number;
  /** How long the whole body may take to arrive, counted from the end of the headers. */
  bodyTimeoutMs: number;
  /**
   * How many bytes of a refused body are read and thrown away before answering, so that a client
   * still sending reads the error instead of a broken pipe. A body beyond it is cut off (the
   * connection is closed after the answer).
   */
  drainLimit: number;
}

/** JSON media types: application/json and structured-syntax `+json` types. */
const PLUS_JSON = /^application\/[a-z0-9!#$&^_.-]+\+json(?:\s*;|$)/i;

const DECODERS: Record<string, () => Transform> = {
  gzip: () => zlib.createGunzip(),
  "x-gzip": () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
};

/** What a request's body stream is made of, for the drain after an early answer. */
interface BodyState {
  guard: BodyGuard;
  decoder?: Transform;
}
const bodies = new WeakMap<IncomingMessage, BodyState>();
/** Requests whose body took too long: answered and closed, never drained. */
const cutOff = new WeakSet<IncomingMessage>();

/**
 * Body handling for every route: JSON only (anything else is a 415, so a web page cannot post here
 * without a CORS preflight), Content-Encoding gzip/deflate/br decoded within the body limit, a
 * deadline for the whole body, and the drain that lets a client read an early error answer.
 */
export function installBodyHandling(app: FastifyInstance, opts: BodyOptions): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, parseJsonBody);
  app.addContentTypeParser(PLUS_JSON, { parseAs: "buffer" }, parseJsonBody);
  // Every other type (and a body with no type at all) is refused without reading it.
  app.addContentTypeParser("*", (request, _payload, done) => {
    const type = request.headers["content-type"];
    const what = type ? `Content-Type '${truncate(type, 100)}' is not accepted` : "The request has a body but no Content-Type";
    done(new ApiError(415, `${what}: send the body as JSON with 'Content-Type: application/json'.`, { code: "unsupported_media_type" }), undefined);
  });

  app.addHook("preHandler", async (request) => refuseDroppedProtoKeys(request));
  app.addHook("preParsing", async (request, _reply, payload) => {
    if (!hasBody(request)) return payload;
    const decoder = decoderFor(request.headers["content-encoding"]);
    const guard = new BodyGuard(opts.bodyTimeoutMs, () => cutOff.add(request.raw));
    bodies.set(request.raw, { guard, decoder });
    payload.pipe(guard);
    const shape = new JsonShapeGuard();
    if (!decoder) {
      guard.on("error", (err) => shape.destroy(err));
      // Fastify reads the received length from the stream it is given, for the body limit.
      Object.defineProperty(shape, "receivedEncodedLength", { get: () => guard.received });
      return guard.pipe(shape);
    }
    const encoding = String(request.headers["content-encoding"]).trim().toLowerCase();
    guard.on("error", (err) => decoder.destroy(err));
    decoder.prependListener("error", (err: Error & { statusCode?: number }) => {
      if (err instanceof ApiError) return;
      err.statusCode = 400;
      err.message = `The request body is not valid ${encoding} data (${err.message}).`;
    });
    decoder.on("error", (err) => shape.destroy(err));
    // Fastify compares this with Content-Length, and holds it to the body limit too.
    Object.defineProperty(shape, "receivedEncodedLength", { get: () => guard.received });
    return guard.pipe(decoder).pipe(shape);
  });

  app.addHook("onSend", async (request, reply, payload) => {
    const raw = request.raw;
    const state = bodies.get(raw);
    if (raw.complete && !state) return payload;
    const declared = Number(request.headers["content-length"]);
    if (cutOff.has(raw) || declared > opts.drainLimit) {
      // Not drained, but the body's streams still go: left piped from a socket that sends no more,
      // the guard's deadline would later fail them with no reader, an uncaught error that ended the
      // process (one request head declaring more than the drain cap did it).
      if (state) release(raw, state);
      void reply.header("connection", "close");
      return payload;
    }
    if (!(await drain(raw, state, opts.drainLimit, opts.bodyTimeoutMs))) void reply.header("connection", "close");
    return payload;
  });
}

function parseJsonBody(_request: FastifyRequest, body: string | Buffer, done: (err: Error | null, body?: unknown) => void): void {
  // JSON is UTF-8: bytes that are not would otherwise become U+FFFD without a word, and the model
  // would be asked something the client never wrote.
  if (typeof body !== "string" && !isUtf8(body))
    return done(new ApiError(400, "The request body is not valid UTF-8.", { code: "invalid_json" }));
  let text = typeof body === "string" ? body : body.toString("utf8");
  // A byte order mark is not JSON, but editors on Windows put one at the start of saved files
  // (`curl -d @request.json`); like most JSON readers, it is skipped rather than refused.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  // An empty body is "no body": the route's schema says what it needed.
  if (text.trim() === "") return done(null, undefined);
  try {
    // A "__proto__" key is an ordinary key, never an object's prototype: it is dropped, and the body
    // marked, so surfaces that refuse unknown fields refuse this one too (see refuseDroppedProtoKeys).
    let parsed: unknown;
    if (!text.includes('"__proto__"')) parsed = JSON.parse(text);
    else {
      let dropped = false;
      parsed = JSON.parse(text, function (this: object, key: string, value: unknown) {
        if (key === "__proto__") {
          dropped = true;
          PROTO_HOLDERS.add(this);
          PROTO_BELOW.add(this);
          return undefined;
        }
        // The reviver runs bottom-up: an object is revived after its own keys, so its parent learns here.
        if (value !== null && typeof value === "object" && PROTO_BELOW.has(value)) PROTO_BELOW.add(this);
        return value;
      });
      if (dropped && parsed !== null && typeof parsed === "object") Object.defineProperty(parsed, DROPPED_PROTO, { value: true });
    }
    // Valid UTF-8 can still spell half a character: a "\ud800" escape with no partner. Such a string
    // would reach the model as U+FFFD (a text the client never sent), so it is refused by name.
    if (SURROGATE_ESCAPE.test(text)) {
      const where = loneSurrogatePath(parsed);
      if (where !== undefined)
        return done(new ApiError(400, `${where || "The body"} contains an unpaired UTF-16 surrogate escape, which is no character.`, { param: where || null, code: "invalid_value" }));
    }
    const seedError = refuseSeedBeyondInt64(text, parsed);
    if (seedError) return done(seedError);
    done(null, parsed);
  } catch (err) {
    const message =
      err instanceof RangeError ? "it is nested too deeply" : (err as Error).message.replace(/^JSON\.parse: /, "");
    done(new ApiError(400, `The request body is not valid JSON: ${truncate(message, 200)}`, { code: "invalid_json" }));
  }
}

/** A \uD800–\uDFFF escape somewhere in the text (the only way JSON can carry a lone surrogate). */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The path (`messages[0].content`) of the first string or key holding a lone surrogate; undefined if none. */
function loneSurrogatePath(root: unknown): string | undefined {
  const stack: Array<{ value: unknown; path: string }> = [{ value: root, path: "" }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === "string") {
      if (LONE_SURROGATE.test(value)) return path;
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: `${path}[${i}]` });
    } else if (value !== null && typeof value === "object") {
      const keys = Object.keys(value);
      for (let i = keys.length - 1; i >= 0; i--) {
        const key = keys[i];
        const at = path ? `${path}.${key}` : key;
        if (LONE_SURROGATE.test(key)) return at.replace(LONE_SURROGATE, "\uFFFD");
        stack.push({ value: (value as Record<string, unknown>)[key], path: at });
      }
    }
  }
  return undefined;
}

/** Marks (not enumerable, not serialised) a parsed body from which "__proto__" keys were dropped. */
const DROPPED_PROTO = Symbol("plinth.droppedProtoKeys");

/**
 * A body that had a "__proto__" key anywhere is refused naming where (`response_format.__proto__`),
 * on every route. The key is dropped as the body is parsed (it must never become a prototype), so a
 * strict nested object would otherwise be served without it (SpAk's `thinking: {"__proto__":
 * {"type": "disabled"}}` read as `{}`, thinking left on), and where keys are data (metadata, a
 * schema's properties) the entry would vanish. No client means one.
 */
export function refuseDroppedProtoKeys(request: FastifyRequest): void {
  const body = request.body as Record<symbol, unknown> | null | undefined;
  if (body === null || typeof body !== "object" || body[DROPPED_PROTO] !== true) return;
  const where = formatPath(droppedProtoPath(body) ?? ["__proto__"]);
  throw new ApiError(400, `Unrecognized key: '__proto__' (at ${where}) is not a field of this request; it cannot be taken as a key.`, {
    param: where,
    code: "unknown_field",
  });
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers["content-length"];
  return request.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

function decoderFor(header: string | string[] | undefined): Transform | undefined {
  if (header === undefined) return undefined;
  const encoding = String(header).trim().toLowerCase();
  if (encoding === "" || encoding === "identity") return undefined;
  const make = DECODERS[encoding];
  if (!make) {
    throw new ApiError(
      415,
      `Content-Encoding '${truncate(encoding, 60)}' is not supported: send the body uncompressed, or as gzip, deflate or br.`,
      { code: "unsupported_media_type" },
    );
  }
  return make();
}

/**
 * The first stage every body passes through: counts the bytes received and fails the body with a
 * 408 once it has taken longer than the deadline (a client trickling its body holds a connection).
 */
class BodyGuard extends Transform {
  received = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(timeoutMs: number, onTimeout: () => void) {
    super();
    this.timer = setTimeout(() => {
      onTimeout();
      this.destroy(
        new ApiError(408, `The request body did not arrive within ${timeoutMs / 1000} seconds.`, { code: "request_timeout" }),
      );
    }, timeoutMs);
    this.timer.unref();
    this.once("close", () => clearTimeout(this.timer));
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.received += chunk.length;
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    clearTimeout(this.timer);
    cb();
  }
}

/** Detaches a body's streams from its request and ends them quietly, their deadline with them. */
function release(raw: IncomingMessage, state: BodyState): void {
  raw.unpipe(state.guard);
  state.guard.destroy();
  state.decoder?.destroy();
  bodies.delete(raw);
}

/**
 * Reads what is left of a request body and throws it away, so a client still sending reaches the
 * end of its body and reads the answer. False when the body runs past `limit` bytes in all, takes
 * longer than `timeoutMs`, or the connection fails: then the connection is to be closed.
 */
function drain(raw: IncomingMessage, state: BodyState | undefined, limit: number, timeoutMs: number): Promise<boolean> {
  let received = state?.guard.received ?? 0;
  if (state) release(raw, state);
  if (raw.complete || raw.readableEnded) {
    raw.resume();
    return Promise.resolve(true);
  }
  if (raw.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    const finish = (ok: boolean) => {
      clearTimeout(timer);
      raw.off("data", onData);
      raw.off("end", onEnd);
      raw.off("error", onFail);
      raw.off("close", onFail);
      if (!ok) raw.pause();
      resolve(ok);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) finish(false);
    };
    const onEnd = () => finish(true);
    const onFail = () => finish(false);
    const timer = setTimeout(onFail, timeoutMs);
    raw.on("data", onData);
    raw.once("end", onEnd);
    raw.once("error", onFail);
    raw.once("close", onFail);
    (raw as Readable).resume();
  });
}

function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n)}…` : s;
}
