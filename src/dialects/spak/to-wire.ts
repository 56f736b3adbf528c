import { collectGeneration } from "../../core/collect.ts";
import { ApiError } from "../../core/errors.ts";
import { logprobTokenName, nullableBytes } from "../../core/logprob-token.ts";
import type { GenerationEvent, TokenLogprob, Usage } from "../../core/types.ts";
import type { SseWriter } from "../../http/sse.ts";

/** SpAk's finish reasons: OpenAI's, plus the one for a generation the server could not give resources to. */
export type SpakFinishReason = "stop" | "length" | "tool_calls" | "content_filter" | "insufficient_system_resource";

export interface SpakMeta {
  id: string;
  created: number;
  model: string;
  systemFingerprint: string;
  /** Thinking mode: `reasoning_content` is a string (possibly empty), else null. */
  thinking: boolean;
  withLogprobs: boolean;
  /** What the generation had used when it was stopped (see StartedGeneration.spent). */
  spent: () => Usage;
}

/** A log probability reported for a token outside what was kept (and OpenAI's value for it too). */
export const LOGPROB_FLOOR = -9999.0;

export function spakUsage(u: Usage) {
  const hit = Math.min(u.cachedTokens, u.promptTokens);
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.totalTokens,
    prompt_cache_hit_tokens: hit,
    prompt_cache_miss_tokens: u.promptTokens - hit,
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens },
  };
}
export type SpakUsage = ReturnType<typeof spakUsage>;

/**
 * Usage of a request the server stopped before it finished: what it had generated (and cached) by
 * then, and its prompt once a choice had started, as the ledger books it. A request that timed out
 * waiting for a sequence evaluated nothing and reports 0 prompt tokens.
 */
function interruptedUsage(meta: SpakMeta): Usage {
  return meta.spent();
}

export function spakLogprob(e: TokenLogprob) {
  return {
    token: logprobTokenName(e),
    // 003-46: a token outside the 20 most likely reports the floor, whatever its own value.
    logprob: e.logprob === null || !Number.isFinite(e.logprob) || e.outsideTop20 ? LOGPROB_FLOOR : Math.max(LOGPROB_FLOOR, e.logprob),
    bytes: nullableBytes(e.bytes),
    top_logprobs: e.top.map((t) => ({ token: logprobTokenName(t), logprob: Math.max(LOGPROB_FLOOR, t.logprob), bytes: nullableBytes(t.bytes) })),
  };
}
export type SpakLogprob = ReturnType<typeof spakLogprob>;

/** An error that means the server lacked the capacity to run (or finish) the request, not that it failed. */
export function isResourceShortage(err: unknown): err is ApiError {
  return err instanceof ApiError && (err.reason === "overloaded" || err.reason === "shutdown");
}

/**
 * Passes the events through, noting which choices finished; a resource shortage ends the stream
 * quietly (recorded in `state`) so the answer can report it as a finish reason.
 */
async function* guarded(events: AsyncIterable<GenerationEvent>, state: { finished: Set<number>; interrupted: boolean }) {
  try {
    for await (const ev of events) {
      if (ev.type === "finish") state.finished.add(ev.choice);
      yield ev;
    }
  } catch (err) {
    if (!isResourceShortage(err)) throw err;
    state.interrupted = true;
  }
}

export async function renderSpakCompletion(meta: SpakMeta, events: AsyncIterable<GenerationEvent>) {
  const state = { finished: new Set<number>(), interrupted: false };
  const { choices, usage } = await collectGeneration(guarded(events, state), 1);
  return {
    id: meta.id,
    object: "chat.completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: choices.map((c, index) => ({
      index,
      message: {
        role: "assistant" as const,
        content: c.text === "" && c.toolCalls.length > 0 ? null : c.text,
        reasoning_content: meta.thinking ? (c.reasoning ?? "") : null,
        ...(c.toolCalls.length > 0
          ? { tool_calls: c.toolCalls.map((t) => ({ id: t.id, type: "function" as const, function: { name: t.name, arguments: t.arguments } })) }
          : {}),
      },
      logprobs: meta.withLogprobs
        ? { content: c.logprobs.map(spakLogprob), reasoning_content: meta.thinking ? c.reasoningLogprobs.map(spakLogprob) : null }
        : null,
      finish_reason: (state.interrupted && !state.finished.has(index) ? "insufficient_system_resource" : c.finishReason) as SpakFinishReason,
    })),
    usage: spakUsage(usage ?? interruptedUsage(meta)),
  };
}
export type SpakCompletion = Awaited<ReturnType<typeof renderSpakCompletion>>;

/** The chunk with `choices: []` that carries a stream's usage (include_usage), as spent so far. */
export function spakUsageChunk(meta: SpakMeta) {
  return {
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: [],
    usage: spakUsage(interruptedUsage(meta)),
  };
}

/**
 * chat.completion.chunk events: a role delta, reasoning_content and content deltas, tool-call
 * deltas, a final delta with finish_reason; with include_usage, every chunk has `usage: null` and one
 * more chunk with `choices: []` carries the usage, right before `data: [DONE]`.
 */
export async function streamSpakCompletion(sse: SseWriter, meta: SpakMeta, events: AsyncIterable<GenerationEvent>, includeUsage: boolean) {
  const chunk = (choices: unknown[], usage: SpakUsage | null = null) => ({
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices,
    ...(includeUsage ? { usage } : {}),
  });
  const lp = (entries: TokenLogprob[] | undefined, field: "content" | "reasoning_content") => {
    if (!meta.withLogprobs || !entries) return null;
    const list = entries.map(spakLogprob);
    return field === "content" ? { content: list, reasoning_content: null } : { content: null, reasoning_content: list };
  };
  const delta = (index: number, d: Record<string, unknown>, finish: SpakFinishReason | null = null, logprobs: unknown = null) => ({
    index,
    delta: d,
    logprobs,
    finish_reason: finish,
  });

  const state = { finished: new Set<number>(), interrupted: false };
  let usage: Usage | undefined;
  await sse.data(chunk([delta(0, { role: "assistant", content: "", ...(meta.thinking ? { reasoning_content: "" } : {}) })]));
  for await (const ev of guarded(events, state)) {
    if (sse.closed) return;
    if (ev.type === "text") await sse.data(chunk([delta(ev.choice, { content: ev.text }, null, lp(ev.logprobs, "content"))]));
    else if (ev.type === "reasoning")
      await sse.data(chunk([delta(ev.choice, { reasoning_content: ev.text }, null, lp(ev.logprobs, "reasoning_content"))]));
    else if (ev.type === "tool-call")
      await sse.data(
        chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, id: ev.id, type: "function", function: { name: ev.name, arguments: "" } }] })]),
      );
    else if (ev.type === "tool-call-arguments")
      await sse.data(chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, function: { arguments: ev.text } }] })]));
    else if (ev.type === "finish") await sse.data(chunk([delta(ev.choice, {}, ev.reason)]));
    else if (ev.type === "usage") usage = ev.usage;
  }
  if (state.interrupted && !state.finished.has(0)) await sse.data(chunk([delta(0, {}, "insufficient_system_resource")]));
  if (includeUsage) await sse.data(chunk([], spakUsage(usage ?? interruptedUsage(meta))));
  await sse.data("[DONE]");
}
