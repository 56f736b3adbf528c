import { ServerResponse } from "node:http";
import { Socket as NetSocket, type Socket } from "node:net";
import { quoteRequestId } from "../core/errors.ts";
import { toApiError } from "./to-api-error.ts";

/** How long a write waits for a client that takes nothing, unless the server sets its own (--send-timeout). */
const SEND_TIMEOUT_MS = 30_000;

/**
 * A server-sent-events writer over a raw response. Writes wait for the socket to drain, so a slow
 * reader slows its own stream instead of growing an unbounded buffer: the events wait in the
 * request's Channel, which holds its generation once full (generation-service.ts).
 *
 * A client that has taken nothing for `sendTimeoutMs` while a write waits (it stopped reading, but
 * keeps the connection open) is treated as gone: the connection is closed, which cancels its
 * generation and frees its sequence exactly as a disconnect does (and counts as one, a 499).
 * Otherwise a few clients that never read could hold every sequence for as long as they like.
 */
export class SseWriter {
  /** Pings on a silent stream (see keepAlive): their interval and the one waiting. */
  private ping?: { ms: number; timer?: NodeJS.Timeout };
  /** A write waits for the socket to drain: a ping would only queue behind it. */
  private waiting = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly sendTimeoutMs = SEND_TIMEOUT_MS,
  ) {}

  /**
   * llama-server's `sse_ping_interval`: after `ms` with nothing written, an SSE comment line (`:`,
   * which clients skip) goes out, and again each `ms` the stream stays silent, so that clients and
   * proxies that drop a quiet connection (a long prompt, a queue) keep it.
   */
  keepAlive(ms: number): void {
    this.ping = { ms };
    this.armPing();
  }

  private armPing(): void {
    if (!this.ping) return;
    clearTimeout(this.ping.timer);
    if (this.closed) return;
    this.ping.timer = setTimeout(() => {
      if (!this.waiting) void this.write(":\n\n");
      else this.armPing();
    }, this.ping.ms);
  }

  open(headers: Record<string, string> = {}): void {
    // No `connection` header: Node answers the client's own (HTTP/1.1 keeps the connection unless
    // it asked to close); a fixed `keep-alive` overrode a client's `Connection: close`.
    this.res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
      ...headers,
    });
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  async data(payload: unknown): Promise<void> {
    await this.write(`data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`);
  }

  async event(name: string, payload: unknown): Promise<void> {
    await this.write(`event: ${name}\ndata: ${JSON.stringify(payload)}\n\n`);
  }

  end(): void {
    clearTimeout(this.ping?.timer);
    this.ping = undefined;
    if (!this.closed) this.res.end();
  }

  private write(chunk: string): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.armPing();
    const socket = this.framedSocket();
    if (socket) {
      if (socket.write(`${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n`)) return Promise.resolve();
      return this.drained(socket);
    }
    if (this.res.write(chunk)) return Promise.resolve();
    return this.drained(this.res);
  }

  /**
   * The socket to write an event to as one ready-framed chunk, when that is the same as what
   * `res.write` would send. `res.write` of a chunked body corks the socket, queues the size line, the
   * data and the line end as three writes and uncorks them on the next tick into one `writev`: about
   * 60 µs more CPU per event on the 2-core VM than one `write` of the framed chunk, paid for every
   * token of every stream (twice through a router in front of a Plinth). Taken only once Node has
   * sent the head (the first event goes through `res.write`), while the response is the socket's
   * current one (a pipelined response waits in Node's queue with no socket) and nothing of it waits
   * in Node's own buffer; otherwise, for a body that is not chunked (an HTTP/1.0 client) and for a
   * response that is not on a real socket, the event goes through `res.write`.
   */
  private framedSocket(): Socket | undefined {
    const res = this.res as ServerResponse & { chunkedEncoding?: boolean; outputSize?: number; _headerSent?: boolean };
    // A response whose write is not Node's own (light-my-request's inject() captures what is
    // written through it; an instrumentation may wrap it) keeps every event going through it.
    if (res.write !== ServerResponse.prototype.write) return undefined;
    const socket = res.socket as (Socket & { _httpMessage?: unknown }) | null;
    if (!(socket instanceof NetSocket) || socket.destroyed || socket._httpMessage !== res) return undefined;
    if (res.chunkedEncoding !== true || res._headerSent !== true || res.outputSize !== 0) return undefined;
    return socket;
  }

  private drained(target: ServerResponse | Socket): Promise<void> {
    this.waiting = true;
    return new Promise((resolve) => {
      // The drain comes once the socket has taken what waited in Node's buffer (about an event
      // past its high-water mark), so a client that reads, however slowly, meets it long before this.
      const stalled = setTimeout(() => this.res.destroy(), this.sendTimeoutMs);
      const done = () => {
        clearTimeout(stalled);
        target.off("drain", done);
        target.off("close", done);
        this.res.off("close", done);
        this.waiting = false;
        resolve();
      };
      target.on("drain", done);
      target.on("close", done);
      this.res.on("close", done);
    });
  }
}

/** What a stream that fails after it began ends with: the error, then whatever the dialect's streams always end with. */
export interface SseErrorEvent {
  event?: string;
  data: unknown;
  /** Data events written after the error (a dialect whose every stream ends with `data: [DONE]`). */
  after?: unknown[];
}

/**
 * Takes over the response for a stream. Once headers are sent an error can no longer change the
 * status, so it is reported as a final data event in the dialect's error shape.
 */
export async function respondWithSse(
  reply: { hijack(): void; raw: ServerResponse; server?: { sendTimeoutMs?: number } },
  signal: AbortSignal,
  write: (sse: SseWriter) => Promise<void>,
  errorEvent: (err: unknown) => SseErrorEvent,
  headers: Record<string, string> = {},
  requestId?: string,
  /** Ping a stream silent for this long (SseWriter.keepAlive). */
  pingMs?: number,
): Promise<void> {
  reply.hijack();
  const sse = new SseWriter(reply.raw, reply.server?.sendTimeoutMs);
  sse.open(headers);
  if (pingMs !== undefined) sse.keepAlive(pingMs);
  try {
    await write(sse);
  } catch (err) {
    if (!signal.aborted) {
      const ev = errorEvent(requestId === undefined ? err : quoteServerFailure(err, requestId));
      await (ev.event ? sse.event(ev.event, ev.data) : sse.data(ev.data));
      for (const data of ev.after ?? []) await sse.data(data);
    }
  } finally {
    sse.end();
  }
}

/** A server-side failure carries the request id in its message (see quoteRequestId); others stay as thrown. */
export function quoteServerFailure(err: unknown, requestId: string): unknown {
  const e = toApiError(err);
  return e.status >= 500 ? quoteRequestId(e, requestId) : err;
}
