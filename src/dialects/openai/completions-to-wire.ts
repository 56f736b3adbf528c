import type { FinishReason, GenerationEvent, TokenLogprob } from "../../core/types.ts";
import type { SseWriter } from "../../http/sse.ts";
import { type CompletionMeta, usageToWire } from "./chat-to-wire.ts";

/** The legacy logprobs object: parallel arrays, alternatives as token → logprob maps. */
interface LegacyLogprobs {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
  text_offset: number[];
}

/**
 * Builds legacy logprobs for one choice. Offsets advance by each token's own text, so they index the
 * returned text exactly except inside characters split over byte tokens.
 */
class LegacyLogprobBuilder {
  private offset = 0;

  constructor(private readonly withTop: boolean) {}

  build(entries: TokenLogprob[]): LegacyLogprobs {
    const out: LegacyLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const e of entries) {
      out.tokens.push(e.token);
      out.token_logprobs.push(e.logprob);
      out.top_logprobs.push(e.logprob === null ? null : this.withTop ? Object.fromEntries(e.top.map((t) => [t.token, t.logprob])) : {});
      out.text_offset.push(this.offset);
      this.offset += e.token.length;
    }
    return out;
  }
}

const merge = (a: LegacyLogprobs, b: LegacyLogprobs): LegacyLogprobs => ({
  tokens: [...a.tokens, ...b.tokens],
  token_logprobs: [...a.token_logprobs, ...b.token_logprobs],
  top_logprobs: [...a.top_logprobs, ...b.top_logprobs],
  text_offset: [...a.text_offset, ...b.text_offset],
});

const empty = (): LegacyLogprobs => ({ tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] });

export async function renderCompletion(
  meta: CompletionMeta,
  events: AsyncIterable<GenerationEvent>,
  logprobs: number | undefined,
) {
  const text = Array.from({ length: meta.n }, () => "");
  const finish: FinishReason[] = Array.from({ length: meta.n }, () => "stop");
  const lp = Array.from({ length: meta.n }, () => empty());
  const builders = Array.from({ length: meta.n }, () => new LegacyLogprobBuilder((logprobs ?? 0) > 0));
  let usage;
  for await (const ev of events) {
    if (ev.type === "prompt" || ev.type === "text") {
      text[ev.choice] += ev.text;
      if (ev.logprobs) lp[ev.choice] = merge(lp[ev.choice], builders[ev.choice].build(ev.logprobs));
    } else if (ev.type === "finish") finish[ev.choice] = ev.reason;
    else if (ev.type === "usage") usage = ev.usage;
  }
  return {
    id: meta.id,
    object: "text_completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: text.map((t, index) => ({
      index,
      text: t,
      logprobs: logprobs === undefined ? null : lp[index],
      finish_reason: finish[index],
    })),
    usage: usage ? usageToWire(usage) : undefined,
  };
}

export async function streamCompletion(
  sse: SseWriter,
  meta: CompletionMeta,
  events: AsyncIterable<GenerationEvent>,
  logprobs: number | undefined,
  includeUsage: boolean,
): Promise<void> {
  const builders = Array.from({ length: meta.n }, () => new LegacyLogprobBuilder((logprobs ?? 0) > 0));
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({
    id: meta.id,
    object: "text_completion",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices,
    ...(includeUsage ? { usage: null } : {}),
    ...extra,
  });
  for await (const ev of events) {
    if (sse.closed) return;
    if (ev.type === "prompt" || ev.type === "text") {
      let wireLp: LegacyLogprobs | null = null;
      if (logprobs !== undefined) wireLp = ev.logprobs ? builders[ev.choice].build(ev.logprobs) : empty();
      await sse.data(chunk([{ index: ev.choice, text: ev.text, logprobs: wireLp, finish_reason: null }]));
    } else if (ev.type === "finish") {
      await sse.data(chunk([{ index: ev.choice, text: "", logprobs: logprobs === undefined ? null : empty(), finish_reason: ev.reason }]));
    } else if (ev.type === "usage" && includeUsage) {
      await sse.data(chunk([], { usage: usageToWire(ev.usage) }));
    }
  }
  await sse.data("[DONE]");
}
