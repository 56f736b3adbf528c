// Typed requests to a running Plinth server over real HTTP (fetch). Bodies are the zod input types of
// the server's own wire schemas, so a test body that the schema would reject does not compile; answers
// are typed by the server's own renderers. Tests that send deliberately invalid bodies use `postRaw`.
import OpenAI from "openai";
import assert from "./assert.ts";
import type { z } from "zod";
import type { FinishReason } from "../../src/core/types.ts";
import type { chatCompletionRequest } from "../../src/dialects/openai/chat-protocol.ts";
import type { logprobToWire, renderChatCompletion, usageToWire } from "../../src/dialects/openai/chat-to-wire.ts";
import type { completionRequest } from "../../src/dialects/openai/completions-protocol.ts";
import type { renderCompletion } from "../../src/dialects/openai/completions-to-wire.ts";
import type { embeddingsRequest } from "../../src/dialects/openai/embeddings-protocol.ts";
import type { renderEmbeddings } from "../../src/dialects/openai/embeddings-to-wire.ts";
import type { openAIErrorBody } from "../../src/dialects/openai/errors.ts";
import type { modelToWire } from "../../src/dialects/openai/models.ts";
import type { detokenizeRequest, tokenizeRequest } from "../../src/dialects/openai/tokenize.ts";

// ---- Request bodies: what the server's schemas accept.

export type ChatBody = z.input<typeof chatCompletionRequest>;
export type ChatMessageBody = ChatBody["messages"][number];
export type CompletionBody = z.input<typeof completionRequest>;
export type EmbeddingsBody = z.input<typeof embeddingsRequest>;
export type TokenizeBody = z.input<typeof tokenizeRequest>;
export type DetokenizeBody = z.input<typeof detokenizeRequest>;

// ---- Response bodies: what the server's renderers return.

type RenderedChat = Awaited<ReturnType<typeof renderChatCompletion>>;
type RenderedChoice = RenderedChat["choices"][number];
type RenderedMessage = RenderedChoice["message"];
/** A function call as the answer writes it (custom tools' calls are `{type: "custom", custom}`). */
export type FunctionCallWire = Extract<NonNullable<RenderedMessage["tool_calls"]>[number], { type: "function" }>;
export type CustomCallWire = Extract<NonNullable<RenderedMessage["tool_calls"]>[number], { type: "custom" }>;
/**
 * chat.completion as the renderer writes it, its tool calls typed as function calls: only a request
 * with custom tools gets custom calls, and the tests that send them read them as `CustomCallWire`.
 */
export type ChatCompletion = Omit<RenderedChat, "choices"> & {
  choices: Array<Omit<RenderedChoice, "message"> & { message: Omit<RenderedMessage, "tool_calls"> & { tool_calls?: FunctionCallWire[] } }>;
};
export type TextCompletion = Awaited<ReturnType<typeof renderCompletion>>;
export type Embeddings = ReturnType<typeof renderEmbeddings>;
export type WireModel = ReturnType<typeof modelToWire>;
export type WireUsage = ReturnType<typeof usageToWire>;
export type WireLogprob = ReturnType<typeof logprobToWire>;
export type ErrorBody = ReturnType<typeof openAIErrorBody>;

/** /tokenize's answer (its route returns an untyped RouteResult, so this is spelled out). */
export interface TokenizeResult {
  tokens: number[];
  count: number;
  max_model_len: number;
  /** With return_token_strs: each token as the vocabulary writes it. */
  token_strs?: string[] | null;
}

/** /detokenize's answer. */
export interface DetokenizeResult {
  prompt: string;
}

/** One chat.completion.chunk as streamChatCompletion writes it (built inline there, so spelled out here). */
export interface ChatChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  system_fingerprint: string;
  service_tier?: string;
  choices: Array<{
    index: number;
    delta: {
      role?: "assistant";
      content?: string;
      refusal?: null;
      reasoning_content?: string;
      reasoning?: string;
      tool_calls?: Array<{ index: number; id?: string; type?: "function"; function: { name?: string; arguments: string } }>;
    };
    logprobs: { content: WireLogprob[]; reasoning_content?: WireLogprob[]; refusal: null } | null;
    finish_reason: FinishReason | null;
  }>;
  /** Present (null until the last chunk) only with stream_options.include_usage. */
  usage?: WireUsage | null;
}

// ---- Results.

/** A response read whole: status, headers and raw text for error assertions, and the parsed body. */
export interface HttpResult<T> {
  status: number;
  headers: Headers;
  text: string;
  /** The parsed body, typed as the route's success answer; on an error status read `error` instead. */
  json: T;
  /** The `error` object of OpenAI's error envelope when the body is one. */
  error: ErrorBody["error"] | undefined;
}

/** Thrown by the helpers that return a body directly (as the openai client throws) on a non-2xx status. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly text: string,
    readonly error: ErrorBody["error"] | undefined,
  ) {
    super(`HTTP ${status}: ${text}`);
  }
}

/** A streamed chat completion, read to its end. */
export interface ChatStream {
  status: number;
  headers: Headers;
  /** The raw event-stream text. */
  text: string;
  /** Every chunk, in order (data events other than [DONE] and error events). */
  chunks: ChatChunk[];
  /** Error events sent after the stream began. */
  errors: Array<ErrorBody["error"]>;
  /** Whether the last event was `data: [DONE]`. */
  done: boolean;
  /** delta.content of choice 0, joined. */
  content: string;
  /** Each piece of delta.content of choice 0, in order. */
  pieces: string[];
  /** delta.reasoning_content of choice 0, joined. */
  reasoning: string;
  /** The last finish_reason of choice 0. */
  finishReason: FinishReason | null;
  /** The usage chunk's usage (with stream_options.include_usage). */
  usage: WireUsage | undefined;
}

// ---- Sending.

/** Plinth's typed routes: path → request body and success answer. */
export interface Routes {
  "/v1/chat/completions": { body: ChatBody; answer: ChatCompletion };
  /** SageMaker's route (vLLM's): a chat body here; it also takes completions and embeddings bodies. */
  "/invocations": { body: ChatBody; answer: ChatCompletion };
  "/v1/completions": { body: CompletionBody; answer: TextCompletion };
  "/v1/embeddings": { body: EmbeddingsBody; answer: Embeddings };
  "/tokenize": { body: TokenizeBody; answer: TokenizeResult };
  "/detokenize": { body: DetokenizeBody; answer: DetokenizeResult };
}

/** The `error` object of an OpenAI error envelope, or undefined for any other value. */
function errorOf(json: unknown): ErrorBody["error"] | undefined {
  if (typeof json !== "object" || json === null || !("error" in json)) return undefined;
  const e = json.error;
  return typeof e === "object" && e !== null ? (e as ErrorBody["error"]) : undefined;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export interface PlinthHttp {
  /** POSTs a typed body to one of Plinth's routes; the answer is typed by the route's renderer. */
  post<P extends keyof Routes>(path: P, body: Routes[P]["body"]): Promise<HttpResult<Routes[P]["answer"]>>;
  /** POSTs anything (a deliberately invalid body, or raw text) and reads the answer whole. */
  postRaw(path: string, body: unknown): Promise<HttpResult<unknown>>;
  /** POSTs a typed body and returns the unread Response: for tests that hold a stream open or abort it. */
  send<P extends keyof Routes>(path: P, body: Routes[P]["body"], signal?: AbortSignal): Promise<Response>;
  /** A non-streamed chat completion; throws HttpError unless the status is 2xx. */
  chat(body: ChatBody): Promise<ChatCompletion>;
  /** A streamed chat completion (stream: true is set), read to its end; throws HttpError unless 2xx. */
  chatStream(body: ChatBody): Promise<ChatStream>;
  /** A non-streamed text completion; throws HttpError unless 2xx. */
  complete(body: CompletionBody): Promise<TextCompletion>;
  /** An embeddings request; throws HttpError unless 2xx. */
  embed(body: EmbeddingsBody): Promise<Embeddings>;
  /** /tokenize; throws HttpError unless 2xx. */
  tokenize(body: TokenizeBody): Promise<TokenizeResult>;
  /** /detokenize; throws HttpError unless 2xx. */
  detokenize(body: DetokenizeBody): Promise<DetokenizeResult>;
}

/** Typed requests to the server at `baseUrl` (scheme, host and port, no path). */
export function plinthHttp(baseUrl: string): PlinthHttp {
  const send = (path: string, body: unknown, signal?: AbortSignal) =>
    fetch(`${baseUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
      signal,
    });

  async function postRaw(path: string, body: unknown): Promise<HttpResult<unknown>> {
    const res = await send(path, body);
    const text = await res.text();
    const json = parse(text);
    return { status: res.status, headers: res.headers, text, json, error: errorOf(json) };
  }

  // The one place a parsed body meets its static type: the server's renderer produced it.
  const post = <P extends keyof Routes>(path: P, body: Routes[P]["body"]) =>
    postRaw(path, body) as Promise<HttpResult<Routes[P]["answer"]>>;

  async function ok<P extends keyof Routes>(path: P, body: Routes[P]["body"]): Promise<Routes[P]["answer"]> {
    const r = await post(path, body);
    if (r.status < 200 || r.status > 299) throw new HttpError(r.status, r.text, r.error);
    return r.json;
  }

  async function chatStream(body: ChatBody): Promise<ChatStream> {
    const res = await send("/v1/chat/completions", { ...body, stream: true });
    const text = await res.text();
    if (res.status < 200 || res.status > 299) throw new HttpError(res.status, text, errorOf(parse(text)));
    const out: ChatStream = {
      status: res.status,
      headers: res.headers,
      text,
      chunks: [],
      errors: [],
      done: false,
      content: "",
      pieces: [],
      reasoning: "",
      finishReason: null,
      usage: undefined,
    };
    const events = text.split("\n\n").filter((e) => e.trim() !== "");
    for (const [i, event] of events.entries()) {
      const data = event
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => line.slice("data: ".length))
        .join("\n");
      if (data === "[DONE]") {
        out.done = i === events.length - 1;
        continue;
      }
      const json = parse(data);
      const error = errorOf(json);
      if (error) {
        out.errors.push(error);
        continue;
      }
      const chunk = json as ChatChunk;
      out.chunks.push(chunk);
      if (chunk.usage) out.usage = chunk.usage;
      for (const choice of chunk.choices) {
        if (choice.index !== 0) continue;
        if (choice.delta.content) {
          out.content += choice.delta.content;
          out.pieces.push(choice.delta.content);
        }
        if (choice.delta.reasoning_content) out.reasoning += choice.delta.reasoning_content;
        if (choice.finish_reason) out.finishReason = choice.finish_reason;
      }
    }
    return out;
  }

  return {
    post,
    postRaw,
    send,
    chat: (body) => ok("/v1/chat/completions", body),
    chatStream,
    complete: (body) => ok("/v1/completions", body),
    embed: (body) => ok("/v1/embeddings", body),
    tokenize: (body) => ok("/tokenize", body),
    detokenize: (body) => ok("/detokenize", body),
  };
}

// ---- The official client and Plinth's extensions.
//
// The openai client sends body fields its types do not list as they are, and hands back every field
// the server sent; only its types are OpenAI's. Tests that check the client itself copes with Plinth
// (its stream accumulator, its errors, its base64 decoding) go through it; these spell the vendor
// fields for it, checked against the server's schema, in place of scattered `as any`.

/** Plinth's vendor chat fields that the openai client's parameter types do not list. */
export type ChatExtensions = Pick<ChatBody, "top_k" | "min_p" | "repetition_penalty" | "reasoning" | "chat_template_kwargs" | "cache_salt" | "cache_prompt">;
/** Parameters for `client.chat.completions.create(…)` without streaming, with Plinth's vendor fields. */
export type ClientChatParams = OpenAI.Chat.ChatCompletionCreateParamsNonStreaming & ChatExtensions;
/** Parameters for `client.chat.completions.create({ stream: true, … })` or `.stream(…)`, with Plinth's vendor fields. */
export type ClientChatStreamParams = OpenAI.Chat.ChatCompletionCreateParamsStreaming & ChatExtensions;

/** A chunk the client yielded, typed as the server wrote it (with reasoning deltas and reasoning logprobs). */
export function plinthChunk(c: OpenAI.Chat.ChatCompletionChunk): ChatChunk {
  return c as unknown as ChatChunk;
}

/** A model the client listed, typed as the server wrote it (with max_model_len, status and embedding). */
export function plinthModel(m: OpenAI.Models.Model): WireModel {
  return m as unknown as WireModel;
}

/** A tool call's function, as the client types it: a union with custom tool calls, which Plinth never sends. */
export function functionOf(call: OpenAI.Chat.ChatCompletionMessageToolCall) {
  if (call.type !== "function") throw new Error(`not a function call: ${JSON.stringify(call)}`);
  return call.function;
}

/** An `assert.rejects` check: the openai client threw its APIError with this status and error.param. */
export function clientError(status: number, param: string) {
  return (e: unknown) => e instanceof OpenAI.APIError && e.status === status && errorOf({ error: e.error })?.param === param;
}

/** The float vectors of an embeddings answer (throws on a base64 one). */
export function floatVectors(r: Embeddings): number[][] {
  return r.data.map((d) => {
    if (typeof d.embedding === "string") throw new Error(`embedding ${d.index} is base64, not floats`);
    return d.embedding;
  });
}

/** A stream's JSON chunks and their raw text (byte sizes matter to some tests), after checking it ended with [DONE]. */
export async function streamedChunks(url: string, body: Record<string, unknown>): Promise<{ chunks: Array<Record<string, any>>; raw: string[] }> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const raw = (await res.text()).split("\n\n").filter(Boolean).map((e) => e.slice("data: ".length));
  assert.equal(raw.at(-1), "[DONE]");
  return { chunks: raw.slice(0, -1).map((d) => JSON.parse(d)), raw: raw.slice(0, -1) };
}
