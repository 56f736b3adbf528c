// @ts-check
// Same-origin calls to Plinth's public API: the console is a client like any other.

/**
 * @typedef {{ id: string, status?: string, max_model_len?: number | null, embedding?: { embedding_only?: boolean } }} Model
 * @typedef {{ prompt_tokens: number, completion_tokens: number, total_tokens: number,
 *   prompt_tokens_details?: { cached_tokens?: number }, completion_tokens_details?: { reasoning_tokens?: number } }} Usage
 * @typedef {{ token: string, logprob: number, top_logprobs?: { token: string, logprob: number }[] }} TokenLogprob
 * @typedef {{ index: number, id?: string, type?: string, function?: { name?: string, arguments?: string } }} ToolCallDelta
 * @typedef {{ content?: string | null, reasoning_content?: string | null, tool_calls?: ToolCallDelta[] }} Delta
 * @typedef {{ choices?: { index: number, delta?: Delta, finish_reason?: string | null,
 *   logprobs?: { content?: TokenLogprob[] | null } | null }[], usage?: Usage | null,
 *   error?: { message: string }, error_code?: string, message?: string }} Chunk
 */

const API_KEY = "plinth.apiKey";
const ADMIN_KEY = "plinth.adminKey";

/** The API key the user entered (kept in this browser only), sent when the server needs one. */
export const apiKey = {
  get: () => localStorage.getItem(API_KEY) ?? "",
  /** @param {string} v */
  set: (v) => (v ? localStorage.setItem(API_KEY, v) : localStorage.removeItem(API_KEY)),
};

/** The admin key lives for the tab's session only. */
export const adminKey = {
  get: () => sessionStorage.getItem(ADMIN_KEY) ?? "",
  /** @param {string} v */
  set: (v) => (v ? sessionStorage.setItem(ADMIN_KEY, v) : sessionStorage.removeItem(ADMIN_KEY)),
};

/** An error answer from the server, with its status and the envelope's message. */
export class ApiError extends Error {
  /** @param {number} status @param {string} message @param {string | undefined} code */
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** @param {string} key @returns {Record<string, string>} */
const auth = (key) => (key ? { authorization: `Bearer ${key}` } : {});

/**
 * JSON request to the API.
 * @param {string} path
 * @param {{ method?: string, body?: unknown, admin?: boolean, signal?: AbortSignal }} [opts]
 * @returns {Promise<any>}
 */
export async function request(path, opts = {}) {
  /** @type {Record<string, string>} */
  const headers = auth(opts.admin ? adminKey.get() : apiKey.get());
  if (opts.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method: opts.method ?? (opts.body === undefined ? "GET" : "POST"),
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    signal: opts.signal,
  });
  if (!res.ok) throw await errorOf(res);
  const type = res.headers.get("content-type") ?? "";
  return type.includes("json") ? res.json() : res.text();
}

/** @param {Response} res */
async function errorOf(res) {
  const text = await res.text();
  try {
    const body = JSON.parse(text);
    // Databricks' envelope (serving endpoints) is flat; OpenAI's nests it under `error`.
    if (typeof body.error_code === "string") return new ApiError(res.status, body.message ?? text, body.error_code);
    const e = body.error;
    return new ApiError(res.status, e?.message ?? text, e?.code ?? undefined);
  } catch {
    return new ApiError(res.status, text || res.statusText, undefined);
  }
}

/** @returns {Promise<Model[]>} */
export async function listModels() {
  const r = await request("/v1/models");
  return r.data;
}

/**
 * POST a streamed chat request to `path` and hand each chunk to `onChunk` as it arrives. Resolves
 * with the response's headers when the stream ends; rejects with an AbortError when `signal` aborts
 * (the Stop button). `onOpen` sees the headers as soon as they arrive, so a stopped answer keeps them.
 * @param {string} path
 * @param {Record<string, unknown>} body the whole body, `stream` included
 * @param {(chunk: Chunk) => void} onChunk
 * @param {AbortSignal} signal
 * @param {(headers: Headers) => void} [onOpen]
 */
export async function streamChat(path, body, onChunk, signal, onOpen) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth(apiKey.get()) },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok || !res.body) throw await errorOf(res);
  onOpen?.(res.headers);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart())
        .join("\n");
      if (!data || data === "[DONE]") continue;
      /** @type {Chunk} */
      const chunk = JSON.parse(data);
      // An error after the stream began: OpenAI's envelope, or Databricks' ({error_code, message}).
      if (chunk.error) throw new ApiError(500, chunk.error.message, undefined);
      if (chunk.error_code) throw new ApiError(500, chunk.message ?? "The stream failed.", chunk.error_code);
      onChunk(chunk);
    }
  }
}
