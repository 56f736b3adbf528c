import { createHash } from "node:crypto";
import type { EngineChunk } from "../../core/engine.ts";
import { ApiError, invalidField } from "../../core/errors.ts";
import { imagesIn } from "../../core/content-parts.ts";
import type { ContentPart, GenerationRequest, Message, TokenLogprob } from "../../core/types.ts";
import { isTooLargeInput, UpstreamFailure } from "./http.ts";

/**
 * The upstream's OpenAI-compatible HTTP, and only that: canonical requests become request bodies
 * for /v1/chat/completions and /v1/completions, and their SSE chunks become engine chunks. The
 * field names here are the upstream protocol's, not those of any dialect Plinth serves.
 */

export type UpstreamBody = Record<string, unknown>;

/**
 * Refuses what OpenAI-compatible HTTP cannot carry at all, and what the operator declared the
 * upstream lacks (`unsupported`, canonical field names), with a 400 naming the field.
 */
export function refuseInexpressible(req: GenerationRequest, unsupported: ReadonlySet<string>, name: string): void {
  const lacks = (field: string, present: boolean) => {
    if (present && unsupported.has(field)) throw invalidField(`{field} is not supported by the upstream serving '${name}'.`, field, "unsupported_parameter");
  };
  if (req.prompt.kind === "infill")
    throw invalidField("{field} (fill-in-the-middle) is not supported by remote upstreams.", "prompt.suffix", "unsupported_parameter");
  if (req.echo) throw invalidField("{field} is not supported for models served by a remote upstream.", "echo", "unsupported_parameter");
  req.tools?.forEach((t, i) => {
    if (t.input) throw invalidField("{field} is a free-text tool; remote upstreams take function tools only.", `tools[${i}]`, "unsupported_parameter");
  });
  if (typeof req.toolChoice === "object" && "allowed" in req.toolChoice)
    throw invalidField("{field} limits the tools to a subset, which remote upstreams do not support.", "toolChoice", "unsupported_parameter");
  const s = req.sampling;
  lacks("logitBias", s.logitBias.size > 0);
  lacks("topK", s.topK > 0);
  lacks("minP", s.minP > 0);
  lacks("repetitionPenalty", s.repetitionPenalty !== 1);
  lacks("seed", !s.seedDrawn);
  lacks("stop", req.stop.length > 0);
  lacks("logprobs", req.logprobs !== undefined);
  lacks("tools", (req.tools?.length ?? 0) > 0);
  lacks("responseFormat", req.responseFormat !== undefined);
  lacks("reasoning", req.reasoning !== undefined);
  lacks("reasoning.budgetTokens", req.reasoning?.budgetTokens !== undefined && !req.reasoning.fromEffort && !req.reasoning.budgetFromEffort);
  lacks("cacheKey", req.cacheKey !== undefined);
  if (req.prompt.kind === "chat" && unsupported.has("images")) {
    const first = imagesIn(req.prompt.messages).next();
    if (!first.done)
      throw invalidField(`{field} is an image; the upstream serving '${name}' reads text only.`, `prompt.messages[${first.value.message}].parts[${first.value.part}]`, "unsupported_content");
  }
}

/** Messages in the upstream protocol's shape. */
export function messagesToUpstream(messages: Message[]): UpstreamBody[] {
  return messages.map((m) => ({
    role: m.role,
    content: m.parts ? m.parts.map(partToUpstream) : m.role === "assistant" && m.content === "" && m.toolCalls?.length ? null : m.content,
    ...(m.name ? { name: m.name } : {}),
    ...(m.toolCalls?.length
      ? { tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }
      : {}),
    ...(m.toolCallId ? { tool_call_id: m.toolCallId } : {}),
  }));
}

/** A content part as OpenAI-compatible servers (vLLM, SGLang, llama-server) read it. */
function partToUpstream(p: ContentPart): UpstreamBody {
  if (p.type === "text") return { type: "text", text: p.text };
  return { type: "image_url", image_url: { url: p.url, ...(p.detail !== undefined ? { detail: p.detail } : {}) } };
}

/** Sampling and the fields chat and completions share; fields at their neutral value are left out. */
function common(req: GenerationRequest, model: string, sampling: GenerationRequest["sampling"], maxTokens: number | undefined): UpstreamBody {
  const s = sampling;
  const body: UpstreamBody = {
    model,
    stream: true,
    stream_options: { include_usage: true },
    n: 1,
    temperature: s.temperature,
    // vLLM and SGLang take top_p in (0, 1]: a tiny one leaves the most likely token alone, as 0 asks.
    top_p: s.topP > 0 ? s.topP : 1e-9,
    // A seed the client did not give is left to the upstream, which may not take seeds at all.
    ...(s.seedDrawn ? {} : { seed: s.seed }),
  };
  if (maxTokens !== undefined) body.max_tokens = maxTokens;
  if (s.topK > 0) body.top_k = s.topK;
  if (s.minP > 0) body.min_p = s.minP;
  if (s.frequencyPenalty !== 0) body.frequency_penalty = s.frequencyPenalty;
  if (s.presencePenalty !== 0) body.presence_penalty = s.presencePenalty;
  if (s.repetitionPenalty !== 1) body.repetition_penalty = s.repetitionPenalty;
  if (s.logitBias.size > 0) body.logit_bias = Object.fromEntries([...s.logitBias].map(([k, v]) => [String(k), v]));
  if (req.stop.length > 0) body.stop = req.stop;
  // vLLM's and llama-server's name, which Plinth takes too.
  if (req.ignoreEos) body.ignore_eos = true;
  // The isolation namespace becomes the upstream's cache salt (vLLM, SGLang and Plinth keep prompt
  // caches apart by it); hashed so that the user names inside it do not travel upstream.
  if (req.isolationKey !== undefined) body.cache_salt = createHash("sha256").update(req.isolationKey).digest("hex").slice(0, 32);
  if (req.cachePrompt === false) body.cache_prompt = false;
  if (req.cacheKey !== undefined) body.prompt_cache_key = req.cacheKey;
  return body;
}

/** A request's tools in OpenAI's chat shape (also what an upstream's /tokenize takes with messages). */
export function toolsToUpstream(req: Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls">): UpstreamBody {
  if (!req.tools?.length) return {};
  const body: UpstreamBody = {};
  body.tools = req.tools.map((t) => ({
    type: "function",
    function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters, ...(t.strict ? { strict: true } : {}) },
  }));
  const choice = req.toolChoice;
  body.tool_choice = typeof choice === "object" && "name" in choice ? { type: "function", function: { name: choice.name } } : (choice ?? "auto");
  if (req.parallelToolCalls === false) body.parallel_tool_calls = false;
  return body;
}

export function chatBody(req: GenerationRequest, model: string, sampling: GenerationRequest["sampling"], maxTokens: number | undefined): UpstreamBody {
  if (req.prompt.kind !== "chat") throw new Error("chatBody needs a chat prompt");
  const body = common(req, model, sampling, maxTokens);
  body.messages = messagesToUpstream(req.prompt.messages);
  if (req.logprobs !== undefined) {
    body.logprobs = true;
    if (req.logprobs > 0) body.top_logprobs = req.logprobs;
  }
  Object.assign(body, toolsToUpstream(req));
  const rf = req.responseFormat;
  if (rf?.type === "json_object") body.response_format = { type: "json_object" };
  else if (rf?.type === "json_schema")
    body.response_format = { type: "json_schema", json_schema: { name: "response", schema: rf.schema, strict: rf.strict } };
  // vLLM's current name for a regex-held answer (Plinth takes it too); llama-server gets it as GBNF.
  else if (rf?.type === "regex") body.structured_outputs = { regex: rf.pattern };
  const r = req.reasoning;
  if (r?.fromEffort) {
    // Only an effort level was asked for: the upstream reads it its own way.
    body.reasoning_effort = r.effort;
  } else if (r) {
    // Thinking off travels as the template switch alone: vLLM takes only low/medium/high as
    // reasoning_effort and refuses a request that says "none" (Konan's default and SpAk's disabled
    // thinking were 400s through a vLLM upstream), while every upstream that thinks by its template
    // (vLLM, SGLang, llama-server, Plinth) reads enable_thinking.
    if (r.enabled !== undefined) body.chat_template_kwargs = { enable_thinking: r.enabled };
    if (r.effort !== undefined) body.reasoning_effort = r.effort;
    if (r.budgetTokens !== undefined && !r.budgetFromEffort) body.reasoning = { budget_tokens: r.budgetTokens };
  }
  return body;
}

export function completionBody(req: GenerationRequest, model: string, sampling: GenerationRequest["sampling"], maxTokens: number | undefined): UpstreamBody {
  const body = common(req, model, sampling, maxTokens);
  if (req.prompt.kind === "text") body.prompt = req.prompt.text;
  else if (req.prompt.kind === "tokens") body.prompt = req.prompt.tokens;
  else throw new Error("completionBody needs a text or token prompt");
  if (req.logprobs !== undefined) body.logprobs = req.logprobs;
  if (req.tools?.length || req.responseFormat)
    throw invalidField("{field} needs a chat prompt when the model is served by a remote upstream.", req.tools?.length ? "tools" : "responseFormat");
  return body;
}

const encoder = new TextEncoder();

function logprobEntry(token: string, logprob: number | null, bytes: unknown, top: TokenLogprob["top"]): TokenLogprob {
  return { token, bytes: byteList(bytes, token), logprob, top };
}

/** An upstream's `bytes` for a token when they are bytes (integers 0–255), else the token's UTF-8. */
function byteList(bytes: unknown, token: string): number[] {
  if (Array.isArray(bytes) && bytes.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)) return bytes as number[];
  return [...encoder.encode(token)];
}

/** Chat logprobs entries ({token, logprob, bytes, top_logprobs}) in canonical form. */
function chatLogprobs(entries: unknown): TokenLogprob[] | undefined {
  if (!Array.isArray(entries)) return undefined;
  return entries.map((e: any) =>
    logprobEntry(
      String(e?.token ?? ""),
      typeof e?.logprob === "number" ? e.logprob : null,
      e?.bytes,
      Array.isArray(e?.top_logprobs)
        ? e.top_logprobs.map((t: any) => ({
            token: String(t?.token ?? ""),
            bytes: byteList(t?.bytes, String(t?.token ?? "")),
            logprob: Number(t?.logprob ?? 0),
          }))
        : [],
    ),
  );
}

/** Legacy completions logprobs (parallel arrays, alternatives as maps) in canonical form. */
function legacyLogprobs(lp: any): TokenLogprob[] | undefined {
  if (!lp || !Array.isArray(lp.tokens)) return undefined;
  return lp.tokens.map((raw: unknown, i: number) => {
    const top = lp.top_logprobs?.[i];
    const token = typeof raw === "string" ? raw : String(raw ?? "");
    return logprobEntry(
      token,
      typeof lp.token_logprobs?.[i] === "number" ? lp.token_logprobs[i] : null,
      undefined,
      top && typeof top === "object"
        ? Object.entries(top as Record<string, unknown>).map(([t, l]) => ({ token: t, bytes: [...encoder.encode(t)], logprob: Number(l) }))
        : [],
    );
  });
}

export interface StreamTotals {
  promptTokens?: number;
  completionTokens?: number;
  cachedTokens?: number;
  reasoningTokens?: number;
  finish?: "stop" | "length" | "tool_calls" | "content_filter" | "shortage";
}

/**
 * Turns the upstream's stream chunks (parsed JSON) into engine chunks, one chunk at a time; the
 * totals (usage, finish reason) are kept for the end of the stream.
 */
export class ChunkReader {
  readonly totals: StreamTotals = {};
  /** True once a chunk carried generated output (text, thinking, a tool call). */
  sawOutput = false;
  /** True once a chunk carried a choice at all (even an empty one, with only a finish reason). */
  private sawChoice = false;
  /**
   * The upstream's tool-call indices, by the order their calls started: the engine contract numbers
   * a choice's calls 0, 1, 2, …, and an upstream's own number (any integer it likes) must not become
   * the length of an array downstream.
   */
  private readonly calls = new Map<number, number>();
  /** Arguments of calls whose name has not come yet, by the upstream's index. */
  private readonly nameless = new Map<number, string>();
  /** The last tool call sent without an `index` (see looseIndex), by the key it has in `calls`. */
  private loose?: { key: number; id?: string; named: boolean };
  private looseCalls = 0;

  constructor(
    private readonly mode: "chat" | "completion",
    /** The model's name here, for refusals. */
    private readonly name = "this model",
  ) {}

  read(chunk: any): EngineChunk[] {
    if (chunk && typeof chunk === "object" && chunk.error !== undefined) {
      const message = typeof chunk.error?.message === "string" ? chunk.error.message : JSON.stringify(chunk.error);
      // vLLM reports a request it cannot take (a schema its guided decoding refuses, say) as an
      // error event after a 200. Before any output that is the client's 400, as if it had come as
      // the status: refusing it must not count against the replica.
      if (!this.sawOutput && isClientFault(chunk.error)) throw refusedByUpstream(400, chunk, message, this.name);
      throw new UpstreamStreamError(`the upstream ended its stream with an error: ${message}`);
    }
    if (!chunk || typeof chunk !== "object" || (chunk.choices !== undefined && !Array.isArray(chunk.choices)))
      throw new UpstreamStreamError("the upstream sent a stream chunk that is not a completion chunk");
    const out: EngineChunk[] = [];
    if (chunk.usage) this.usage(chunk.usage);
    const choice = chunk.choices?.[0];
    if (!choice) return out;
    // Each upstream request asks for one choice (n: 1): a choice numbered otherwise, or a second one,
    // is a replica that did not do what it was asked, and its text must not pass for this choice's.
    if (chunk.choices.length > 1 || (choice.index !== undefined && choice.index !== 0))
      throw new UpstreamStreamError(`the upstream sent ${chunk.choices.length > 1 ? `${chunk.choices.length} choices` : `choice ${JSON.stringify(choice.index)}`} where one choice (index 0) was asked for`);
    this.sawChoice = true;
    if (this.mode === "completion") {
      // The legacy parallel arrays (vLLM, Plinth), or chat's entries (llama-server sends those here too).
      const lp = legacyLogprobs(choice.logprobs) ?? chatLogprobs(choice.logprobs?.content);
      if (choice.text != null && typeof choice.text !== "string") throw new UpstreamStreamError("the upstream sent a choice whose text is not a string");
      if (typeof choice.text === "string" && (choice.text !== "" || lp?.length)) {
        out.push({ kind: "text", text: choice.text, tokens: lp?.length ?? 1, ...(lp ? { logprobs: lp } : {}) });
      }
    } else {
      const delta = choice.delta ?? {};
      // A delta is at least one token, and its log probabilities say how many; its parts (thinking
      // and text, text and a call) are not a token each, or a stream that used its whole budget would
      // be counted past it (and cut: see the remote engine's budget).
      let counted = false;
      const tokensOf = (lp: unknown[] | undefined) => {
        if (lp?.length) {
          counted = true;
          return lp.length;
        }
        if (counted) return 0;
        counted = true;
        return 1;
      };
      // Content as a list of text parts (OpenAI's array form, which some servers answer in) is its
      // text. A text field of any other type (an object, a number) is an upstream that does not
      // speak the protocol: failed over like any broken stream, not answered as an empty 200.
      for (const field of ["content", "reasoning_content", "reasoning", "refusal"] as const) {
        const value = delta[field];
        if (value == null || typeof value === "string") continue;
        if (Array.isArray(value) && value.every((p) => p?.type === "text" && typeof p.text === "string")) {
          delta[field] = value.map((p) => p.text).join("");
          continue;
        }
        throw new UpstreamStreamError(`the upstream sent a delta whose ${field} is not text`);
      }
      const reasoning = typeof delta.reasoning_content === "string" ? delta.reasoning_content : typeof delta.reasoning === "string" ? delta.reasoning : undefined;
      if (reasoning) {
        const lp = chatLogprobs(choice.logprobs?.reasoning_content);
        out.push({ kind: "text", channel: "reasoning", text: reasoning, tokens: tokensOf(lp), ...(lp ? { logprobs: lp } : {}) });
      }
      if (typeof delta.content === "string" && delta.content !== "") {
        const lp = chatLogprobs(choice.logprobs?.content);
        out.push({ kind: "text", text: delta.content, tokens: tokensOf(lp), ...(lp ? { logprobs: lp } : {}) });
      }
      // A model's refusal (OpenAI's `refusal` field, which some OpenAI-compatible servers pass on)
      // has no part of its own in the engine contract: it is what the model answered, so it is text.
      if (typeof delta.refusal === "string" && delta.refusal !== "") out.push({ kind: "text", text: delta.refusal, tokens: tokensOf(undefined) });
      if (Array.isArray(delta.tool_calls)) {
        let loose = 0;
        for (const call of delta.tool_calls) {
          const upstreamIndex = Number.isInteger(call?.index) ? call.index : this.looseIndex(call, loose++);
          let index = this.calls.get(upstreamIndex);
          // Arguments are a JSON text; a server that sends them as the JSON value itself is read as
          // that value's text (dropped, they became "", which is not JSON).
          const raw = call?.function?.arguments;
          const args = raw !== null && typeof raw === "object" ? JSON.stringify(raw) : raw;
          if (args != null && typeof args !== "string") throw new UpstreamStreamError("the upstream sent tool-call arguments that are not a JSON text");
          if (index === undefined) {
            const name = call?.function?.name;
            if (typeof name !== "string" || name === "") {
              // Arguments before the call's name (some servers split the first delta): kept until
              // the name comes, since a call is announced by its name.
              if (this.nameless.size >= 64 && !this.nameless.has(upstreamIndex)) throw new UpstreamStreamError("the upstream sent tool-call arguments without names");
              const held = (this.nameless.get(upstreamIndex) ?? "") + (typeof args === "string" ? args : "");
              if (held.length > 16 * 1024 * 1024) throw new UpstreamStreamError("the upstream sent tool-call arguments without a name");
              this.nameless.set(upstreamIndex, held);
              continue;
            }
            index = this.calls.size;
            this.calls.set(upstreamIndex, index);
            out.push({ kind: "tool-call", index, name });
            const early = this.nameless.get(upstreamIndex);
            this.nameless.delete(upstreamIndex);
            // Held from earlier deltas (the call had no name yet): their token, not this delta's.
            if (early) out.push({ kind: "tool-call-arguments", index, text: early, tokens: 1 });
          }
          if (typeof args === "string" && args !== "") out.push({ kind: "tool-call-arguments", index, text: args, tokens: tokensOf(undefined) });
        }
      }
    }
    if (out.length > 0) this.sawOutput = true;
    const reason = choice.finish_reason;
    if (typeof reason === "string") this.totals.finish = finishReasonOf(reason);
    return out;
  }

  /**
   * The key of a tool-call delta sent without an `index` (OpenAI's streams always number calls;
   * some servers and proxies do not): such deltas were all read as call 0, so a second call was
   * merged into the first as one broken call. A delta starts a new call when it carries an id other
   * than the last call's, a name when the last call already has one, or is not the first call of
   * its chunk (several calls in one delta); arguments alone continue the last call. The keys are
   * negative, apart from any upstream's own numbers. `inChunk`: the calls of this chunk before it.
   */
  private looseIndex(call: any, inChunk: number): number {
    const id = typeof call?.id === "string" && call.id !== "" ? call.id : undefined;
    const name = call?.function?.name;
    const named = typeof name === "string" && name !== "";
    const last = this.loose;
    if (!last || inChunk > 0 || (id !== undefined && last.id !== undefined && id !== last.id) || (named && last.named)) {
      this.loose = { key: -1 - this.looseCalls++, id, named };
      return this.loose.key;
    }
    last.id ??= id;
    last.named ||= named;
    return last.key;
  }

  /** The upstream's counts, where they are counts: anything else is left out, as if not sent. */
  private usage(u: any): void {
    const prompt = tokenCount(u.prompt_tokens);
    if (prompt !== undefined) this.totals.promptTokens = prompt;
    const completion = tokenCount(u.completion_tokens);
    if (completion !== undefined) this.totals.completionTokens = completion;
    // DeepSeek-style upstreams count cache hits in prompt_cache_hit_tokens instead.
    const cached = tokenCount(u.prompt_tokens_details?.cached_tokens) ?? tokenCount(u.prompt_cache_hit_tokens);
    if (cached !== undefined) this.totals.cachedTokens = cached;
    const reasoning = tokenCount(u.completion_tokens_details?.reasoning_tokens);
    if (reasoning !== undefined) this.totals.reasoningTokens = reasoning;
  }

  /** What ends the choice: the upstream's counts, then its finish reason. */
  finish(): EngineChunk[] {
    if (this.nameless.size > 0) throw new UpstreamStreamError("the upstream ended a tool call that never had a name");
    // Every real answer has a choice (its finish reason comes in one): a stream of nothing but
    // [DONE], or of chunks without choices, is a broken replica, not an empty answer.
    if (!this.sawChoice) throw new UpstreamStreamError("the upstream's stream ended without any choice in it");
    const t = this.totals;
    const out: EngineChunk[] = [];
    // Cached tokens are part of the prompt: a broken upstream's larger count would reach the usage
    // (cached_tokens 50 of a 5-token prompt) and the ledger as it came.
    const cached = t.promptTokens !== undefined && t.cachedTokens !== undefined ? Math.min(t.cachedTokens, t.promptTokens) : t.cachedTokens;
    if (cached) out.push({ kind: "cached", tokens: cached });
    if (t.completionTokens !== undefined || t.promptTokens !== undefined)
      out.push({ kind: "usage", completionTokens: t.completionTokens, reasoningTokens: t.reasoningTokens, promptTokens: t.promptTokens });
    // The upstream could not finish the answer for lack of capacity: not a complete answer ending in
    // "stop", but a replica out of room, as one answering 503 is (another is tried while the client
    // has seen nothing); its counts go with it.
    if (t.finish === "shortage") throw new UpstreamShortage(out);
    out.push({ kind: "end", reason: t.finish ?? "stop" });
    return out;
  }
}

/**
 * A token count an upstream reported, when it is one: a whole number from 0 up to a billion (far past
 * any context). Counts go into the usage the client sees, the ledger and key budgets; a negative,
 * fractional or astronomic one from a broken upstream must not.
 */
export function tokenCount(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 1e9 ? v : undefined;
}

/**
 * A context length an upstream reported (its /v1/models, its /tokenize), when it is one: a whole
 * number of tokens up to 2^31. It is the model's `max_model_len` to clients and the bound of the
 * context check; 0.5 or 1e300 from a broken upstream must be neither.
 */
export function contextLength(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) && v > 0 && v <= 2 ** 31 ? v : undefined;
}

/** The upstream's stream was not what the protocol promises (bad JSON, an error event). */
export class UpstreamStreamError extends Error {}

/**
 * An upstream that gave an answer up for lack of capacity (DeepSeek's insufficient_system_resource,
 * vLLM's abort): failed over like a 503 while nothing reached the client; after output, the
 * shortage that dialects with a finish reason for it report (SpAk), with `usage`, the upstream's
 * counts for what it did.
 */
export class UpstreamShortage extends UpstreamFailure {
  constructor(readonly usage: EngineChunk[]) {
    super("status", "the upstream gave the answer up for lack of capacity", 503);
  }
}

/** A shortage after output had reached the client: the dialect's own form of "out of capacity". */
export function shortageMidAnswer(name: string): ApiError {
  return new ApiError(503, `The upstream serving '${name}' ran out of capacity before the answer was complete; retry later.`, {
    code: "upstream_overloaded",
    reason: "overloaded",
    headers: { "retry-after": "1" },
  });
}

/**
 * The canonical field an upstream's wire parameter stands for; undefined when there is none. A path
 * into a message, a tool's parameters or a token of the prompt keeps its place (the dialect names it
 * back in its own terms: `messages[1].tool_calls[0].function.arguments`, not just `messages`); the
 * router sends the messages in the client's order, so the indices are the client's.
 */
export function canonicalField(param: unknown): string | undefined {
  if (typeof param !== "string" || param === "") return undefined;
  const message = /^messages\[(\d+)\]\.(.+)$/.exec(param);
  if (message) return `prompt.messages[${message[1]}].${canonicalMessageField(message[2])}`;
  const tool = /^tools\[(\d+)\]\.function\.parameters(?:[.[].*)?$/.exec(param);
  if (tool) return `tools[${tool[1]}].parameters`;
  const toolPart = /^tools\[(\d+)\]\.function\.(name|description)$/.exec(param);
  if (toolPart) return `tools[${toolPart[1]}].${toolPart[2]}`;
  const token = /^prompt\[(\d+)\]$/.exec(param);
  if (token) return `prompt.tokens[${token[1]}]`;
  // The answer's schema or pattern, as the router sent it: the dialect names it its own way.
  if (/^response_format\.json_schema\.schema(?:[.[].*)?$/.test(param) || param === "response_format.schema") return "responseFormat.schema";
  if (param === "structured_outputs.regex" || param === "guided_regex") return "responseFormat.pattern";
  // Embeddings: the router sends every request's inputs as a list, so input[i] is the i-th input.
  const input = /^input((?:\[\d+\]){1,2})$/.exec(param);
  if (input) return `inputs${input[1]}`;
  // /detokenize: the id outside the vocabulary, as a local model names it.
  const id = /^tokens\[(\d+)\]$/.exec(param);
  if (id) return `tokens[${id[1]}]`;
  const root = param.split(/[.[]/)[0];
  const map: Record<string, string> = {
    messages: "prompt",
    prompt: "prompt",
    max_tokens: "maxTokens",
    max_completion_tokens: "maxTokens",
    logit_bias: "logitBias",
    logprobs: "logprobs",
    top_logprobs: "logprobs",
    response_format: "responseFormat",
    structured_outputs: "responseFormat",
    tool_choice: "toolChoice",
    tools: "tools",
    reasoning: "reasoning",
    reasoning_effort: "reasoning",
    chat_template_kwargs: "reasoning",
    top_p: "topP",
    top_k: "topK",
    min_p: "minP",
    frequency_penalty: "frequencyPenalty",
    presence_penalty: "presencePenalty",
    repetition_penalty: "repetitionPenalty",
    temperature: "temperature",
    seed: "seed",
    stop: "stop",
    n: "n",
  };
  return map[root];
}

/** Whether an upstream's 400 is about the prompt not fitting the model's context. */
export function isContextError(status: number, body: unknown, message: string): boolean {
  const code = (body as any)?.error?.code ?? (body as any)?.code;
  if (code === "context_length_exceeded") return true;
  if (status === 500 && isTooLargeInput(message)) return true;
  if (status !== 400 && status !== 413 && status !== 422) return false;
  return /context length|context window|maximum context|context size|too many tokens|exceeds the (?:available )?context|prompt is too long/i.test(message);
}

/** A 400 for a request the upstream refused as the client's fault, naming the field when it can. */
export function refusedByUpstream(status: number, body: unknown, message: string, name: string): ApiError {
  const field = canonicalField((body as any)?.error?.param ?? (body as any)?.param ?? validationLoc(body));
  if (isContextError(status, body, message))
    return new ApiError(400, `${field === "maxTokens" ? "{field} does not fit" : "The prompt does not fit"} the context of '${name}': ${message}`, {
      // An upstream that names the embedding input (a Plinth) is kept to it, not to the whole input.
      field: field === "maxTokens" || field?.startsWith("inputs[") ? field : "prompt",
      code: "context_length_exceeded",
    });
  // A body too large for the upstream keeps its status; any other refusal is the request's 400. The
  // upstream's own code (unsupported_parameter, invalid_value, …) is kept, so a client that acts on
  // codes reads what a straight request gives; upstream_rejected says only that one refused.
  const own = (body as any)?.error?.code ?? (body as any)?.code;
  return new ApiError(status === 413 ? 413 : 400, field ? `{field}: the upstream serving '${name}' refused it: ${message}` : `The upstream serving '${name}' refused the request: ${message}`, {
    field: field ?? null,
    code: typeof own === "string" && /^[a-z][a-z0-9_]{0,63}$/.test(own) ? own : "upstream_rejected",
  });
}

/** A path within an OpenAI chat message, in canonical terms (the inverse of the dialect's naming). */
function canonicalMessageField(field: string): string {
  const args = /^tool_calls\[(\d+)\]\.function\.arguments$/.exec(field);
  if (args) return `toolCalls[${args[1]}].arguments`;
  const part = /^content\[(\d+)\](.*)$/.exec(field);
  if (part) return `parts[${part[1]}]${part[2]}`;
  return field.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** The field of a FastAPI validation error (vLLM's and SGLang's 422): `detail[0].loc` after "body". */
function validationLoc(body: any): string | undefined {
  const loc = Array.isArray(body?.detail) ? body.detail[0]?.loc : undefined;
  if (!Array.isArray(loc)) return undefined;
  const path = loc[0] === "body" ? loc.slice(1) : loc;
  if (typeof path[0] !== "string") return undefined;
  // ["messages", 1, "content"] → "messages[1].content". pydantic puts the union member it tried in
  // the path ("ChatCompletionUserMessageParam", "function-after[…]"): skipped, not a field; anything
  // else odd ends the path where it is.
  let out = path[0];
  for (const part of path.slice(1)) {
    if (typeof part === "number" && Number.isInteger(part) && part >= 0) out += `[${part}]`;
    else if (typeof part === "string" && /^[a-z_][a-z0-9_]*$/.test(part)) out += `.${part}`;
    else if (typeof part === "string" && /^([A-Z]|[a-z-]+\[)/.test(part)) continue;
    else break;
  }
  return out;
}

/** An upstream error object that blames the request: a 4xx code (not 408 or 429) or a bad-request type. */
function isClientFault(error: any): boolean {
  const code = Number(error?.code ?? error?.status);
  if (Number.isInteger(code) && code >= 400 && code < 500) return code !== 408 && code !== 429;
  return /bad.?request|invalid_request|validation/i.test(String(error?.type ?? ""));
}

/**
 * An upstream's finish reason in canonical terms. `content_filter` (a filtering upstream removed
 * output) is passed on as itself, so each dialect can say so its own way; anything unknown (vLLM's
 * `abort`, the legacy `function_call`) reads as a plain stop.
 */
/**
 * An upstream's finish reason in canonical terms. DeepSeek-style upstreams end an answer they had to
 * give up for lack of capacity with `insufficient_system_resource`, vLLM one its engine aborted with
 * `abort`: neither is a finished answer.
 */
function finishReasonOf(reason: string): NonNullable<StreamTotals["finish"]> {
  if (reason === "insufficient_system_resource" || reason === "abort") return "shortage";
  return reason === "length" || reason === "tool_calls" || reason === "content_filter" ? reason : "stop";
}
