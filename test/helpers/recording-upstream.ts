import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A stand-in upstream for checking what a router sends: a small real HTTP server that speaks just
 * enough of OpenAI's API for a Plinth router to use it (GET /v1/models, /health, and streamed
 * POST /v1/chat/completions), and records every chat body it receives and every path it is asked
 * for. By default it has no /tokenize (404), as upstreams without one do; with `contextSize` it
 * reports that context as `max_model_len` and answers a vLLM-style /tokenize whose count is the
 * UTF-8 byte length of the messages' text (a stand-in tokenizer, never above the router's bound).
 * It is not a model: every answer is the same fixed text, ending with `finishReason` (a filtering
 * upstream's `content_filter`, say); with `hold`, no answer comes at all (a first token that is late).
 */
export interface RecordingUpstream {
  url: string;
  /** Parsed bodies of the chat requests it received, oldest first. */
  bodies: any[];
  /** Parsed bodies of the /tokenize requests it received, oldest first. */
  tokenizeBodies: any[];
  /** "METHOD /path" of every request it received, oldest first. */
  requests: string[];
  /** When (Date.now()) each chat request's connection closed, in order of closing. */
  chatClosedAt: number[];
  close(): Promise<void>;
}

export const RECORDED_ANSWER = "I see a picture.";

export async function recordingUpstream(
  model = "vision",
  opts: {
    contextSize?: number;
    /** The finish reason its answers end with ("stop" by default). */
    finishReason?: string;
    /** Send no text: the stream ends without output (with `finishReason`). */
    silent?: boolean;
    /** The usage its streams end with (prompt 42, completion 5 by default). */
    usage?: Record<string, unknown>;
    /** Answer chat requests with a head and then nothing (an upstream still prefilling) until the router closes them. */
    hold?: boolean;
  } = {},
): Promise<RecordingUpstream> {
  const state: RecordingUpstream = { url: "", bodies: [], tokenizeBodies: [], requests: [], chatClosedAt: [], close: async () => {} };
  const server = http.createServer((req, res) => {
    let raw = "";
    state.requests.push(`${req.method} ${req.url}`);
    req.on("data", (d: Buffer) => (raw += d.toString()));
    req.on("end", () => {
      if (req.method === "GET" && req.url === "/health") return void res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
      if (req.method === "GET" && req.url === "/v1/models") {
        const entry = { id: model, object: "model", owned_by: "test", ...(opts.contextSize ? { max_model_len: opts.contextSize } : {}) };
        return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [entry] }));
      }
      if (req.method === "POST" && req.url === "/tokenize" && opts.contextSize) {
        const body = JSON.parse(raw);
        state.tokenizeBodies.push(body);
        const text = body.messages ? body.messages.map((m: any) => (typeof m.content === "string" ? m.content : "")).join("") : String(body.prompt ?? "");
        const count = Buffer.byteLength(text);
        return void res
          .writeHead(200, { "content-type": "application/json" })
          .end(JSON.stringify({ count, max_model_len: opts.contextSize, tokens: Array.from({ length: count }, (_, i) => i) }));
      }
      if (req.method === "POST" && req.url === "/v1/chat/completions") {
        const body = JSON.parse(raw);
        state.bodies.push(body);
        res.on("close", () => state.chatClosedAt.push(Date.now()));
        if (opts.hold) return void res.writeHead(200, { "content-type": "text/event-stream" }).flushHeaders();
        const chunk = (delta: unknown, finish: string | null, usage?: unknown) =>
          `data: ${JSON.stringify({ id: "chatcmpl-rec", object: "chat.completion.chunk", created: 0, model, choices: usage ? [] : [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(chunk({ role: "assistant", content: "" }, null));
        if (!opts.silent) res.write(chunk({ content: RECORDED_ANSWER }, null));
        res.write(chunk({}, opts.finishReason ?? "stop"));
        res.write(chunk(undefined, null, opts.usage ?? { prompt_tokens: 42, completion_tokens: 5, total_tokens: 47 }));
        res.end("data: [DONE]\n\n");
        return;
      }
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"not found","type":"not_found_error"}}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}
