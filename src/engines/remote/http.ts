import http from "node:http";
import https from "node:https";
import { pipeline, type Readable } from "node:stream";
import zlib from "node:zlib";
import { TimeSlice } from "./time-slice.ts";

/**
 * A small HTTP client for upstream calls: keep-alive sockets per replica, a deadline for the
 * response head, and a body read as raw chunks (for SSE) or whole (for JSON). Built on node:http
 * rather than fetch so that a dead replica shows up as a socket error at once and an abort tears
 * the socket down without buffering.
 */

/** Why an upstream call failed, in terms the pool and the failover logic act on. */
export type FailureKind = "connect" | "timeout" | "status" | "protocol" | "aborted";

export class UpstreamFailure extends Error {
  /** An error body that is not passed on to the client (see plainMessage), for this server's log. */
  detail?: string;

  constructor(
    readonly kind: FailureKind,
    message: string,
    /** The upstream's HTTP status, for `status` failures. */
    readonly status?: number,
    /** The upstream's error body, parsed when it was JSON. */
    readonly body?: unknown,
    /** The upstream's Retry-After, in seconds, when it sent one. */
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = "UpstreamFailure";
  }

  /**
   * Whether another replica may do better: dead sockets, timeouts, overload and server errors, and
   * a replica that refuses the router itself (401/403: a wrong key in its entry; a 404 saying the
   * model is not there), which is the operator's setup, not the client's request.
   */
  get retryable(): boolean {
    if (this.kind === "aborted") return false;
    // Only a 4xx can blame the request; any other status where a 200 was due (a 204, a redirect,
    // a 1xx) is the replica's doing, never the client's 400.
    if (this.kind === "status") return this.status === 429 || ((!isClientStatus(this.status) && !this.contentFault) || this.misconfigured);
    return true;
  }

  /**
   * A server error that the request's content caused, as its message says: llama-server started
   * without --mmproj answers an image with a 500 "image input is not supported". Another replica
   * answers the same, and counting it as the replica's failure let any client eject healthy
   * replicas by sending images; it is the client's 400 instead. So is an embedding input longer
   * than llama-server's physical batch (a 500 "input (N tokens) is too large to process").
   */
  get contentFault(): boolean {
    return this.kind === "status" && this.status === 500 && (/\b(image|audio|video|multimodal) input is not supported\b/i.test(this.message) || isTooLargeInput(this.message));
  }

  /**
   * The replica refused the router's credentials, or says it does not serve the model. Any other
   * 404 (a route it lacks: completions on a chat-only server) is about the request, not the setup.
   */
  get misconfigured(): boolean {
    if (this.kind !== "status") return false;
    // A redirect: the entry's URL is not the API's (http for https, a path the server moved); the
    // router does not follow it, since the request and its key would go where nobody configured.
    if (this.status === 401 || this.status === 403 || (this.status !== undefined && this.status >= 300 && this.status < 400)) return true;
    return this.status === 404 && /model\b[^.]*\b(does not exist|not found|unknown|not served)|no such model|unknown model|model_not_found/i.test(this.message);
  }
}

const isClientStatus = (status: number | undefined) => status !== undefined && status >= 400 && status < 500;

/** llama-server's 500 for an input that does not fit one physical batch (embeddings need it whole). */
export const isTooLargeInput = (message: string) => /\binput \(\d+ tokens\) is too large to process\b/i.test(message);

export interface UpstreamResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The body as sent, or decompressed when the upstream (or a proxy before it) compressed it. */
  body: Readable;
}

const agents = new Map<string, http.Agent>();

function agentFor(url: URL): http.Agent {
  const key = url.origin;
  let agent = agents.get(key);
  if (!agent) {
    const Agent = url.protocol === "https:" ? https.Agent : http.Agent;
    agent = new Agent({ keepAlive: true, keepAliveMsecs: 10_000, maxSockets: 1024, maxFreeSockets: 64 });
    agents.set(key, agent);
  }
  return agent;
}

export interface CallOptions {
  method?: "GET" | "POST";
  body?: unknown;
  headers?: Record<string, string>;
  /** Ms until the response head must have arrived (connection, queueing and admission upstream). */
  headTimeoutMs: number;
  signal?: AbortSignal;
}

/**
 * A kept-alive socket the upstream had already closed (llama-server closes them after a few
 * seconds idle, or after an error answer): the request never reached it, so it is safe to send
 * again on another socket.
 */
class StaleSocket extends UpstreamFailure {}

/** Sends a request and resolves once the response head is in (any status); the body is left to read. */
export async function call(url: URL, opts: CallOptions): Promise<UpstreamResponse> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await callOnce(url, opts);
    } catch (err) {
      if (!(err instanceof StaleSocket) || attempt >= 3) throw err;
    }
  }
}

function callOnce(url: URL, opts: CallOptions): Promise<UpstreamResponse> {
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) return reject(new UpstreamFailure("aborted", "the request was cancelled"));
    const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    const mod = url.protocol === "https:" ? https : http;
    let settled = false;
    const req = mod.request(url, {
      method: opts.method ?? (payload ? "POST" : "GET"),
      agent: agentFor(url),
      headers: {
        accept: "application/json, text/event-stream",
        // A compressed stream arrives in bursts (each token waits for the compressor's block), so
        // the router asks for none; one that compresses all the same is decompressed (see decoded).
        "accept-encoding": "identity",
        ...(payload ? { "content-type": "application/json", "content-length": String(payload.length) } : {}),
        ...opts.headers,
      },
    });
    const fail = (err: UpstreamFailure) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      req.destroy();
      reject(err);
    };
    const onAbort = () => fail(new UpstreamFailure("aborted", "the request was cancelled"));
    const timer = setTimeout(
      () => fail(new UpstreamFailure("timeout", `no response from ${url.origin} within ${opts.headTimeoutMs} ms`)),
      opts.headTimeoutMs,
    );
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", (err) => {
      const code = (err as NodeJS.ErrnoException).code;
      const message = `cannot reach ${url.origin}: ${code ?? err.message}`;
      const stale = req.reusedSocket && (code === "ECONNRESET" || code === "EPIPE");
      fail(stale ? new StaleSocket("connect", message) : new UpstreamFailure("connect", message));
    });
    req.on("response", (res) => {
      if (settled) return void res.destroy();
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      let body: Readable;
      try {
        body = decoded(res);
      } catch (err) {
        res.destroy();
        return reject(err);
      }
      // Later aborts tear the body down; readers see the stream end with an error.
      if (opts.signal) {
        const onLateAbort = () => body.destroy(new UpstreamFailure("aborted", "the request was cancelled"));
        opts.signal.addEventListener("abort", onLateAbort, { once: true });
        body.once("close", () => opts.signal!.removeEventListener("abort", onLateAbort));
      }
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
    });
    req.end(payload);
  });
}

/**
 * The body with its content coding undone. The router asks for none, but a server or proxy may
 * compress regardless (an absent or ignored Accept-Encoding); gzip, deflate and brotli are read with
 * each flushed block passed on at once, so a compressed stream still streams. A coding Node cannot
 * read is the replica's protocol failure, named, rather than bytes parsed as garbage.
 */
function decoded(res: http.IncomingMessage): Readable {
  const codings = String(res.headers["content-encoding"] ?? "")
    .split(",")
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== "" && c !== "identity");
  if (codings.length === 0) return res;
  let body: Readable = res;
  // Codings are listed in the order they were applied, so they are undone from the last.
  for (const coding of codings.reverse()) {
    const flush = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH };
    const next =
      coding === "gzip" || coding === "x-gzip"
        ? zlib.createGunzip(flush)
        : coding === "deflate"
          ? zlib.createInflate(flush)
          : coding === "br"
            ? zlib.createBrotliDecompress({ flush: zlib.constants.BROTLI_OPERATION_FLUSH, finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH })
            : undefined;
    if (!next) throw new UpstreamFailure("protocol", `the upstream answered with a content coding the router cannot read: ${coding}`);
    // Any stage that fails or is torn down takes the others with it (a destroyed reader frees the socket).
    pipeline(body, next, () => {});
    body = next;
  }
  return body;
}

/**
 * Reads a whole body as text, within a size cap and a time limit from now: a server that sends its
 * head and then drips the body (or never ends it) must not hold the request, and its replica's slot,
 * for good.
 */
export async function readText(res: UpstreamResponse, limit = 64 * 1024 * 1024, timeoutMs = 60_000): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  const timer = setTimeout(() => res.body.destroy(new UpstreamFailure("timeout", `the upstream's answer did not arrive whole within ${timeoutMs} ms`)), timeoutMs);
  try {
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) {
        res.body.destroy();
        throw new UpstreamFailure("protocol", `the upstream's answer is larger than ${limit} bytes`);
      }
      parts.push(chunk);
    }
  } catch (err) {
    if (err instanceof UpstreamFailure) throw err;
    throw new UpstreamFailure("connect", `the upstream connection broke: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(parts).toString("utf8");
}

/** Reads a JSON body; a 2xx answer that is not JSON is a protocol failure. */
export async function readJson(res: UpstreamResponse, timeoutMs?: number): Promise<unknown> {
  const text = await readText(res, undefined, timeoutMs);
  try {
    return JSON.parse(text);
  } catch {
    throw new UpstreamFailure("protocol", `the upstream answered ${res.status} with a body that is not JSON`);
  }
}

/** The failure a non-2xx answer stands for, with the upstream's error body when it sent one. */
export async function statusFailure(res: UpstreamResponse, origin: string): Promise<UpstreamFailure> {
  let body: unknown;
  let text = "";
  try {
    // An error's body comes right after its head; one that does not is left out of the message.
    text = await readText(res, 1024 * 1024, 5_000);
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const retryAfter = retryAfterSeconds(res.headers["retry-after"]);
  const said = upstreamMessage(body) ?? plainMessage(text, String(res.headers["content-type"] ?? ""));
  const failure = new UpstreamFailure(
    "status",
    `${origin} answered ${res.status}: ${said ?? describeBody(text, String(res.headers["content-type"] ?? ""))}`,
    res.status,
    body,
    retryAfter,
  );
  if (said === undefined && text !== "") failure.detail = text.slice(0, 2000);
  return failure;
}

/**
 * An upstream's Retry-After as the seconds passed on to the client, within reason (at most an hour)
 * whatever it wrote: delay-seconds, or an HTTP date (RFC 9110 allows both; a date read as a number
 * was lost, and the client told to retry after 1 s).
 */
export function retryAfterSeconds(value: string | string[] | undefined, now = Date.now()): number | undefined {
  if (typeof value !== "string" || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? Math.min(Math.ceil(seconds), 3600) : undefined;
  const at = Date.parse(value);
  // A date already past: retry now.
  return Number.isFinite(at) ? Math.min(Math.max(0, Math.ceil((at - now) / 1000)), 3600) : undefined;
}

/**
 * A body that is not an error object is passed on to the client only when it reads as a message:
 * short, one line, plain text. Anything else (a proxy's HTML page, a framework's traceback) can hold
 * the upstream's internals — paths, settings, keys — and is described instead; its text stays in
 * the failure's `detail` for this server's log.
 */
function plainMessage(text: string, contentType: string): string | undefined {
  const t = text.trim();
  if (t === "" || t.length > 200 || /[\r\n<>]/.test(t)) return undefined;
  return contentType === "" || /^text\/plain\b/i.test(contentType) ? t : undefined;
}

function describeBody(text: string, contentType: string): string {
  if (text === "") return "(no body)";
  const type = contentType.split(";")[0].trim() || "untyped";
  return `a ${type} body of ${Buffer.byteLength(text)} bytes that is not an error message`;
}

/** The human message of an OpenAI-style (or FastAPI-style) error body. */
export function upstreamMessage(body: unknown): string | undefined {
  if (!body || typeof body !== "object") return undefined;
  const b = body as Record<string, any>;
  if (typeof b.error?.message === "string") return b.error.message;
  if (typeof b.message === "string") return b.message;
  if (typeof b.error === "string") return b.error;
  if (typeof b.detail === "string") return b.detail;
  if (Array.isArray(b.detail) && typeof b.detail[0]?.msg === "string") return b.detail[0].msg;
  return undefined;
}

/**
 * The `data:` payloads of a server-sent-events body, in order, until `[DONE]` or the end. Until the
 * caller says output has `started`, each read may take `firstMs` (an upstream that queues a request
 * sends its head and role chunk at once, then nothing until the request's turn); after that, each
 * must arrive within `idleMs`.
 */
export async function* sseData(res: UpstreamResponse, timeouts: { firstMs: number; idleMs: number; started: () => boolean }): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const lines = new LineEndings();
  // What was read since the last complete event, kept as pieces and joined only once an event ends
  // in them: one event that arrives over many reads then costs one copy, not a copy (and a rescan of
  // everything so far) per read, which is what let one endless event hold the thread for minutes.
  let pieces: string[] = [];
  let pending = 0;
  // Whether what is pending ends in a line break: an event's blank line can straddle two reads.
  let endsInBreak = false;
  let complete = false;
  // The time limits run from the last event with data, not from the last read: an upstream that
  // drips bytes without ever completing an event is stalled all the same.
  let lastEvent = performance.now();
  const body = res.body as Readable;
  const iterator = (body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  // One timer for the whole stream rather than a timer, a promise and a race per read (a read is a
  // token on a live stream: that was a tenth of the router's time per token). While a read is
  // awaited it watches the deadline and, when it passes, destroys the body with the failure, which
  // ends the awaited read with it; between reads (the caller still busy with an event) it only
  // re-arms.
  const stalled = (first: boolean) =>
    first
      ? new UpstreamFailure("timeout", `no data from the upstream within ${timeouts.firstMs} ms`)
      : new UpstreamFailure("timeout", `the upstream stream stalled for ${timeouts.idleMs} ms`);
  let deadline = Infinity;
  let waiting = false;
  let failure: UpstreamFailure | undefined;
  let timer: NodeJS.Timeout | undefined;
  let timerAt = Infinity;
  const arm = () => {
    clearTimeout(timer);
    timerAt = deadline;
    timer = setTimeout(watch, Math.max(0, deadline - performance.now()));
  };
  const watch = () => {
    timer = undefined;
    timerAt = Infinity;
    if (!waiting) return;
    if (deadline > performance.now()) {
      arm();
      return;
    }
    failure = stalled(!timeouts.started());
    body.destroy(failure);
  };
  try {
    for (;;) {
      const first = !timeouts.started();
      const ms = first ? timeouts.firstMs : timeouts.idleMs;
      deadline = lastEvent + ms;
      if (deadline <= performance.now()) throw stalled(first);
      // A read with nothing buffered resolves from a socket event: the thread has been back to the
      // event loop, which restarts the remote streams' time slice.
      const fromLoop = body.readableLength === 0;
      waiting = true;
      // The timer may fire early (the deadline moved on since it was set; it then re-arms), never late.
      if (timer === undefined || deadline < timerAt) arm();
      let step: IteratorResult<Buffer>;
      try {
        step = await iterator.next();
      } catch (err) {
        if (failure) throw failure;
        if (err instanceof UpstreamFailure) throw err;
        throw new UpstreamFailure("connect", `the upstream connection broke: ${(err as Error).message}`);
      } finally {
        waiting = false;
      }
      if (fromLoop) TimeSlice.wokeFromLoop();
      if (step.done) break;
      const text = lines.normalize(decoder.decode(step.value, { stream: true }));
      if (text === "") continue;
      const ends = (endsInBreak && text.charCodeAt(0) === LF) || text.includes("\n\n");
      endsInBreak = text.charCodeAt(text.length - 1) === LF;
      pieces.push(text);
      pending += text.length;
      if (!ends) {
        if (pending > MAX_EVENT_CHARS) throw oversized();
        continue;
      }
      const buffer = pieces.length === 1 ? text : pieces.join("");
      let at = 0;
      let end: number;
      while ((end = buffer.indexOf("\n\n", at)) >= 0) {
        const data = eventData(buffer.slice(at, end));
        at = end + 2;
        if (data === undefined) continue;
        if (data === "[DONE]") {
          complete = true;
          return;
        }
        yield data;
        // Counted from when the caller asks for the next one: a client slow to take what was sent
        // is not the upstream stalling.
        lastEvent = performance.now();
      }
      const rest = buffer.slice(at);
      pieces = rest === "" ? [] : [rest];
      pending = rest.length;
      endsInBreak = rest.charCodeAt(rest.length - 1) === LF;
      if (pending > MAX_EVENT_CHARS) throw oversized();
    }
    if (pieces.join("").trim() !== "") throw new UpstreamFailure("protocol", "the upstream stream ended inside an event");
    throw new UpstreamFailure("protocol", "the upstream stream ended without [DONE]");
  } finally {
    clearTimeout(timer);
    // A stream read to its [DONE] is left to end by itself (only the body's last chunk is still
    // to come), so its keep-alive socket goes back to the agent for the next request; destroying
    // it would make every request pay a new connection to the upstream before it is sent.
    if (complete) void drain(res, iterator);
    else res.body.destroy();
  }
}

/**
 * An event's data: its `data` lines joined by line breaks, each without the one space that may follow
 * the colon (a bare `data` line is an empty one); undefined for an event with none (comments, `event:`
 * or `id:` alone, keep-alive blank lines).
 */
function eventData(event: string): string | undefined {
  let data: string | undefined;
  for (const line of event.split("\n")) {
    let value: string;
    if (line.startsWith("data:")) value = line.charCodeAt(5) === SPACE ? line.slice(6) : line.slice(5);
    else if (line === "data") value = "";
    else continue;
    data = data === undefined ? value : `${data}\n${value}`;
  }
  return data === "" ? undefined : data;
}

/**
 * SSE lets a server end its lines with CRLF, LF or a lone CR, even mixed in one stream; this turns
 * them all into LF as the text arrives, so the reader looks for one kind of blank line. A CR at the
 * end of one read may be the first half of a CRLF that the next read completes.
 */
export class LineEndings {
  private crPending = false;

  normalize(text: string): string {
    if (this.crPending && text.charCodeAt(0) === LF) text = text.slice(1);
    this.crPending = text.charCodeAt(text.length - 1) === CR;
    return text.includes("\r") ? text.replace(/\r\n?/g, "\n") : text;
  }
}

const LF = 10;
const CR = 13;
const SPACE = 32;

/** Reads what is left of a finished body (through its iterator); one that does not end soon is torn down. */
async function drain(res: UpstreamResponse, iterator: AsyncIterator<Buffer>): Promise<void> {
  const timer = setTimeout(() => res.body.destroy(), 5_000);
  try {
    while (!(await iterator.next()).done);
  } catch {
    // A body that breaks after [DONE] lost nothing; its socket is gone either way.
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The longest event an upstream may send, in characters: far above any chunk of an OpenAI-style
 * stream (a token's text, its log probabilities, a tool call's arguments), low enough that a broken
 * or hostile upstream cannot fill the router's memory with one event that never ends.
 */
const MAX_EVENT_CHARS = 16 * 1024 * 1024;

function oversized(): UpstreamFailure {
  return new UpstreamFailure("protocol", `the upstream sent an event longer than ${MAX_EVENT_CHARS} characters`);
}
