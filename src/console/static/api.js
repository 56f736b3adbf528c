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

/**
 * An error answer from the server, with its status and the envelope's message; status 0 when there
 * was no answer to have one (the server unreachable, the stream cut off or garbled).
 */
export class ApiError extends Error {
  /** @param {number} status @param {string} message @param {string | undefined} code */
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
    /** @type {number | undefined} a 429's Retry-After, in seconds */
    this.retryAfter = undefined;
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
  const res = await reach(path, {
    method: opts.method ?? (opts.body === undefined ? "GET" : "POST"),
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    signal: opts.signal,
  });
  if (!res.ok) throw await errorOf(res);
  const type = res.headers.get("content-type") ?? "";
  return type.includes("json") ? res.json() : res.text();
}

/**
 * fetch, with its bare "Failed to fetch" (server down, restarting, network gone) said in words. A
 * Stop (AbortError) passes through as it is.
 * @param {string} path @param {RequestInit} init
 */
async function reach(path, init) {
  try {
    // A header the browser will not send (a key with a character outside Latin-1) fails fetch
    // with the same TypeError as a network error: told apart here, before anything is sent.
    new Headers(init.headers);
  } catch (err) {
    throw new ApiError(0, `The request could not be sent: a header has a character HTTP headers cannot carry (${/** @type {Error} */ (err).message}). Check the API key for stray characters.`, undefined);
  }
  try {
    return await fetch(path, init);
  } catch (err) {
    if (/** @type {Error} */ (err).name === "AbortError") throw err;
    throw new ApiError(0, `The server did not answer (${/** @type {Error} */ (err).message}): it may be down or restarting.`, undefined);
  }
}

/** Longest error text shown as it came, when it is not the server's JSON envelope (a proxy's page, say). */
const MAX_PLAIN_ERROR = 300;

/** @param {Response} res */
async function errorOf(res) {
  const text = await res.text();
  const error = envelopeError(res, text);
  // A rate limit that passes says when (Retry-After, whole seconds); the message alone does not.
  const retry = res.status === 429 ? Number(res.headers.get("retry-after")) : NaN;
  if (retry > 0) {
    error.message += ` Try again in ${retry} s.`;
    error.retryAfter = retry;
  }
  return error;
}

/** @param {Response} res @param {string} text */
function envelopeError(res, text) {
  const statusLine = `The server answered ${res.status}${res.statusText ? ` ${res.statusText}` : ""}.`;
  try {
    const body = JSON.parse(text);
    // Databricks' envelope (serving endpoints) is flat; OpenAI's nests it under `error`.
    if (typeof body.error_code === "string") return new ApiError(res.status, body.message ?? text, body.error_code);
    const e = body.error;
    return new ApiError(res.status, typeof e?.message === "string" ? e.message : text, e?.code ?? undefined);
  } catch {
    // Not JSON: a proxy's error page (HTML markup is no message) or plain text, kept short.
    const plain = (res.headers.get("content-type") ?? "").includes("html") ? "" : text.trim().slice(0, MAX_PLAIN_ERROR);
    return new ApiError(res.status, plain ? `${statusLine} ${plain}` : statusLine, undefined);
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
  const res = await reach(path, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth(apiKey.get()) },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok || !res.body) {
    const err = await errorOf(res);
    // The chat goes with the API key: say where to change it.
    if (err.status === 401) err.message += " Set the key with the API key button.";
    throw err;
  }
  onOpen?.(res.headers);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  // Every stream of Plinth's ends with [DONE]: one that stops without it was cut off (a proxy's
  // timeout, a server that went away), and its answer is not whole, though it may look so.
  let finished = false;
  for (;;) {
    let read;
    try {
      read = await reader.read();
    } catch (err) {
      if (/** @type {Error} */ (err).name === "AbortError") throw err;
      throw new ApiError(0, `The connection to the server was lost before the answer ended (${/** @type {Error} */ (err).message}).`, undefined);
    }
    if (read.done) break;
    buffer += read.value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart())
        .join("\n");
      if (data === "[DONE]") finished = true;
      if (!data || data === "[DONE]") continue;
      /** @type {Chunk} */
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch (err) {
        throw new ApiError(0, `The server sent an event that is not JSON (${/** @type {Error} */ (err).message}).`, undefined);
      }
      // An error after the stream began: OpenAI's envelope, or Databricks' ({error_code, message}).
      if (chunk.error) throw new ApiError(500, chunk.error.message ?? "The stream failed.", undefined);
      if (chunk.error_code) throw new ApiError(500, chunk.message ?? "The stream failed.", chunk.error_code);
      onChunk(chunk);
    }
  }
  if (!finished) throw new ApiError(0, "The answer was cut off: the stream ended before the server finished it.", undefined);
}
