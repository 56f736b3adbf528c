import { collectGeneration } from "../../core/collect.ts";
import type { FinishReason, GenerationEvent, RunningUsage, Timings, TokenLogprob, Usage } from "../../core/types.ts";
import { chunkTimings, progressToWire, timingsToWire } from "./timings.ts";
import type { SseWriter } from "../../http/sse.ts";
import { JsonStringStream } from "../../core/json-string-stream.ts";
import { logprobTokenName, nullableBytes } from "../../core/logprob-token.ts";

export interface CompletionMeta {
  id: string;
  created: number;
  model: string;
  systemFingerprint: string;
  serviceTier?: string;
  n: number;
  /** The request's custom tools: their calls carry `custom: {name, input}`, not function arguments. */
  customTools?: ReadonlySet<string>;
}

/** A collected tool call as the wire has it: a function call, or a custom tool's raw input. */
function toolCallToWire(t: { id: string; name: string; arguments: string }, customTools: ReadonlySet<string> | undefined) {
  if (customTools?.has(t.name)) return { id: t.id, type: "custom" as const, custom: { name: t.name, input: JsonStringStream.decode(t.arguments) } };
  return { id: t.id, type: "function" as const, function: { name: t.name, arguments: t.arguments } };
}

export function usageToWire(u: Usage) {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.totalTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens },
  };
}

/** Chat Completions' logprobs entry: the token, its log probability, bytes and alternatives. */
export function logprobToWire(e: TokenLogprob) {
  return {
    token: logprobTokenName(e),
    logprob: e.logprob ?? 0,
    bytes: nullableBytes(e.bytes),
    top_logprobs: e.top.map((t) => ({ token: logprobTokenName(t), logprob: t.logprob, bytes: nullableBytes(t.bytes) })),
  };
}

/** The whole answer as one chat.completion object: the drained events, in OpenAI's field names. */
export async function renderChatCompletion(meta: CompletionMeta, events: AsyncIterable<GenerationEvent>, withLogprobs = false) {
  const { choices, usage, timings } = await collectGeneration(events, meta.n);
  return {
    id: meta.id,
    object: "chat.completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    ...(meta.serviceTier ? { service_tier: meta.serviceTier } : {}),
    choices: choices.map((c, index) => ({
      index,
      message: {
        role: "assistant" as const,
        // OpenAI sends null rather than "" when the answer is only tool calls.
        content: c.text === "" && c.toolCalls.length > 0 ? null : c.text,
        refusal: null,
        ...(c.toolCalls.length > 0
          ? { tool_calls: c.toolCalls.map((t) => toolCallToWire(t, meta.customTools)) }
          : {}),
        // vLLM's and DeepSeek's field name, and the newer one vLLM and Ollama also send.
        ...(c.reasoning !== undefined ? { reasoning_content: c.reasoning, reasoning: c.reasoning } : {}),
      },
      logprobs: withLogprobs
        ? {
            content: c.logprobs.map(logprobToWire),
            ...(c.reasoning !== undefined ? { reasoning_content: c.reasoningLogprobs.map(logprobToWire) } : {}),
            refusal: null,
          }
        : null,
      finish_reason: c.finishReason,
    })),
    usage: usage ? usageToWire(usage) : undefined,
    // llama-server's timings_per_token: the (first) choice's timings, only when asked for.
    ...(timings ? { timings: timingsToWire(timings) } : {}),
  };
}

/** How a vendor's stream differs from OpenAI's (see ChatCodec). */
export interface StreamShape {
  /** Usage rides on the chunk that carries the last finish_reason, instead of a chunk of its own. */
  usageOnFinishChunk?: boolean;
  /** Reshapes each chunk before it is sent. */
  chunkToWire?: (chunk: Record<string, unknown>) => unknown;
  /**
   * vLLM's continuous usage stats, with the prompt's tokens: every chunk of a choice carries its usage
   * so far (the events' `running` counts; the role chunk, before any, the prompt alone).
   */
  runningPrompt?: number;
}

/** A chunk's usage under vLLM's continuous usage stats: the choice's prompt and completion tokens so far. */
export function runningUsageToWire(u: RunningUsage) {
  return { prompt_tokens: u.promptTokens, completion_tokens: u.completionTokens, total_tokens: u.promptTokens + u.completionTokens };
}

/**
 * Streams chat.completion.chunk events the way OpenAI does: a role delta first, content deltas,
 * a final delta carrying finish_reason, then (with include_usage) a usage chunk with no choices.
 */
export async function streamChatCompletion(
  sse: SseWriter,
  meta: CompletionMeta,
  events: AsyncIterable<GenerationEvent>,
  includeUsage: boolean,
  withLogprobs = false,
  shape: StreamShape = {},
): Promise<void> {
  const send = (c: Record<string, unknown>) => sse.data(shape.chunkToWire ? shape.chunkToWire(c) : c);
  /** usageOnFinishChunk: the last finish chunk, held back until the usage it will carry is known. */
  let held: Record<string, unknown> | undefined;
  const chunk = (choices: unknown[], extra?: Record<string, unknown>) => ({
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    ...(meta.serviceTier ? { service_tier: meta.serviceTier } : {}),
    choices,
    ...(includeUsage ? { usage: null } : {}),
    ...extra,
  });
  /** Logprobs of a chunk's tokens, under the field their text went to. */
  const chunkLogprobs = (lp: TokenLogprob[] | undefined, field: "content" | "reasoning_content") => {
    if (!withLogprobs || !lp) return null;
    const entries = lp.map(logprobToWire);
    return field === "content" ? { content: entries, refusal: null } : { content: [], reasoning_content: entries, refusal: null };
  };
  const delta = (index: number, d: Record<string, unknown>, finish: FinishReason | null = null, logprobs: unknown = null) => ({
    index,
    delta: d,
    logprobs,
    finish_reason: finish,
  });

  // The role chunk goes out before anyone knows whether the answer is text or tool calls, so it
  // carries content: null (OpenAI's role chunk of a tool-call answer), not "": clients that build the
  // message from deltas (the openai SDKs' stream helpers, LangChain) then end a tool-call-only answer
  // with content null, like the non-streamed reply, and a text answer with its text.
  const answered = new Array<boolean>(meta.n).fill(false);
  /** Custom tool calls by choice and index: their input text decoded as it arrives. */
  const customInputs = new Map<string, JsonStringStream>();
  // vLLM's continuous usage stats: a choice's chunks carry its usage so far (nothing when off).
  const roleUsage = shape.runningPrompt === undefined ? undefined : { usage: runningUsageToWire({ promptTokens: shape.runningPrompt, completionTokens: 0 }) };
  // llama-server's timings_per_token: every chunk of a choice carries its timings so far.
  const at = (ev: { running?: RunningUsage; timings?: Timings }) =>
    ev.running || ev.timings ? { ...(ev.running ? { usage: runningUsageToWire(ev.running) } : {}), ...chunkTimings(ev) } : undefined;
  for (let i = 0; i < meta.n; i++) await send(chunk([delta(i, { role: "assistant", content: null, refusal: null })], roleUsage));
  for await (const ev of events) {
    if (sse.closed) return;
    if (ev.type === "text") {
      if (ev.text !== "") answered[ev.choice] = true;
      await send(chunk([delta(ev.choice, { content: ev.text }, null, chunkLogprobs(ev.logprobs, "content"))], at(ev)));
    } else if (ev.type === "tool-call") {
      answered[ev.choice] = true;
      if (meta.customTools?.has(ev.name)) {
        // A custom tool's input streams as its raw text, decoded from the JSON string it travels in.
        customInputs.set(`${ev.choice}:${ev.index}`, new JsonStringStream());
        await send(chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, id: ev.id, type: "custom", custom: { name: ev.name, input: "" } }] })], at(ev)));
      } else {
        await send(
          chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, id: ev.id, type: "function", function: { name: ev.name, arguments: "" } }] })], at(ev)),
        );
      }
    } else if (ev.type === "tool-call-arguments") {
      const input = customInputs.get(`${ev.choice}:${ev.index}`);
      if (input) {
        const text = input.push(ev.text);
        if (text) await send(chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, custom: { input: text } }] })], at(ev)));
      } else await send(chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, function: { arguments: ev.text } }] })], at(ev)));
    } else if (ev.type === "reasoning") {
      await send(
        chunk([delta(ev.choice, { reasoning_content: ev.text, reasoning: ev.text }, null, chunkLogprobs(ev.logprobs, "reasoning_content"))], at(ev)),
      );
    } else if (ev.type === "finish") {
      // An answer with neither text nor calls (an immediate stop, thinking only) is "" when not
      // streamed: its last delta says so, and an accumulated message is "" too, not null.
      const last = chunk([delta(ev.choice, answered[ev.choice] ? {} : { content: "" }, ev.reason)], at(ev));
      if (shape.usageOnFinishChunk) {
        if (held) await send(held);
        held = last;
      } else await send(last);
    } else if (ev.type === "progress") {
      // llama-server's return_progress: the prompt's evaluation, before the choice's first output.
      await send(chunk([delta(ev.choice, {})], { prompt_progress: progressToWire(ev), ...chunkTimings(ev) }));
    } else if (ev.type === "usage" && shape.usageOnFinishChunk && held) {
      await send({ ...held, usage: usageToWire(ev.usage) });
      held = undefined;
    } else if (ev.type === "usage" && includeUsage) {
      await send(chunk([], { usage: usageToWire(ev.usage), ...chunkTimings(ev) }));
    }
  }
  if (held) await send(held);
  await sse.data("[DONE]");
}
