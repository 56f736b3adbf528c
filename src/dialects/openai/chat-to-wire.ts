import type { FinishReason, GenerationEvent, TokenLogprob, Usage } from "../../core/types.ts";
import type { SseWriter } from "../../http/sse.ts";

export interface CompletionMeta {
  id: string;
  created: number;
  model: string;
  systemFingerprint: string;
  serviceTier?: string;
  n: number;
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
    token: e.token,
    logprob: e.logprob ?? 0,
    bytes: e.bytes,
    top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
  };
}

/** Collects the whole event stream into one chat.completion object. */
export async function renderChatCompletion(meta: CompletionMeta, events: AsyncIterable<GenerationEvent>, withLogprobs = false) {
  const text: string[] = Array.from({ length: meta.n }, () => "");
  const logprobs: TokenLogprob[][] = Array.from({ length: meta.n }, () => []);
  const reasoning: Array<string | undefined> = Array.from({ length: meta.n }, () => undefined);
  const reasoningLogprobs: TokenLogprob[][] = Array.from({ length: meta.n }, () => []);
  const toolCalls: Array<Array<{ id: string; type: "function"; function: { name: string; arguments: string } }>> = Array.from(
    { length: meta.n },
    () => [],
  );
  const finish: FinishReason[] = Array.from({ length: meta.n }, () => "stop");
  let usage: Usage | undefined;
  for await (const ev of events) {
    if (ev.type === "text") {
      text[ev.choice] += ev.text;
      if (ev.logprobs) logprobs[ev.choice].push(...ev.logprobs);
    } else if (ev.type === "tool-call") {
      toolCalls[ev.choice][ev.index] = { id: ev.id, type: "function", function: { name: ev.name, arguments: "" } };
    } else if (ev.type === "tool-call-arguments") {
      toolCalls[ev.choice][ev.index].function.arguments += ev.text;
    } else if (ev.type === "reasoning") {
      reasoning[ev.choice] = (reasoning[ev.choice] ?? "") + ev.text;
      if (ev.logprobs) reasoningLogprobs[ev.choice].push(...ev.logprobs);
    } else if (ev.type === "finish") finish[ev.choice] = ev.reason;
    else if (ev.type === "usage") usage = ev.usage;
  }
  return {
    id: meta.id,
    object: "chat.completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    ...(meta.serviceTier ? { service_tier: meta.serviceTier } : {}),
    choices: text.map((content, index) => ({
      index,
      message: {
        role: "assistant" as const,
        // OpenAI sends null rather than "" when the answer is only tool calls.
        content: content === "" && toolCalls[index].length > 0 ? null : content,
        refusal: null,
        ...(toolCalls[index].length > 0 ? { tool_calls: toolCalls[index] } : {}),
        // vLLM's and DeepSeek's field name, and the newer one vLLM and Ollama also send.
        ...(reasoning[index] !== undefined ? { reasoning_content: reasoning[index], reasoning: reasoning[index] } : {}),
      },
      logprobs: withLogprobs
        ? {
            content: logprobs[index].map(logprobToWire),
            ...(reasoning[index] !== undefined ? { reasoning_content: reasoningLogprobs[index].map(logprobToWire) } : {}),
            refusal: null,
          }
        : null,
      finish_reason: finish[index],
    })),
    usage: usage ? usageToWire(usage) : undefined,
  };
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
): Promise<void> {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({
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

  for (let i = 0; i < meta.n; i++) await sse.data(chunk([delta(i, { role: "assistant", content: "", refusal: null })]));
  for await (const ev of events) {
    if (sse.closed) return;
    if (ev.type === "text") await sse.data(chunk([delta(ev.choice, { content: ev.text }, null, chunkLogprobs(ev.logprobs, "content"))]));
    else if (ev.type === "tool-call")
      await sse.data(
        chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, id: ev.id, type: "function", function: { name: ev.name, arguments: "" } }] })]),
      );
    else if (ev.type === "tool-call-arguments")
      await sse.data(chunk([delta(ev.choice, { tool_calls: [{ index: ev.index, function: { arguments: ev.text } }] })]));
    else if (ev.type === "reasoning")
      await sse.data(
        chunk([delta(ev.choice, { reasoning_content: ev.text, reasoning: ev.text }, null, chunkLogprobs(ev.logprobs, "reasoning_content"))]),
      );
    else if (ev.type === "finish") await sse.data(chunk([delta(ev.choice, {}, ev.reason)]));
    else if (ev.type === "usage" && includeUsage) await sse.data(chunk([], { usage: usageToWire(ev.usage) }));
  }
  await sse.data("[DONE]");
}
