import { collectGeneration } from "../../core/collect.ts";
import type { GenerationEvent, TokenLogprob } from "../../core/types.ts";
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
 * Builds legacy logprobs for one choice. Offsets advance by each token's own text, counted in
 * characters (code points, as Python's len() and OpenAI's and vLLM's offsets count), not UTF-16 units:
 * `text[offset:]` in a Python client starts at the token, past an emoji too.
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
      this.offset += codePoints(e.token);
    }
    return out;
  }
}

/** Characters in `s`: UTF-16 units less the second half of each surrogate pair. */
function codePoints(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff && i > 0 && s.charCodeAt(i - 1) >= 0xd800 && s.charCodeAt(i - 1) <= 0xdbff) n--;
  }
  return n;
}

const empty = (): LegacyLogprobs => ({ tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] });

/** The whole answer as one text_completion object (echoed prompts lead their choice's text). */
export async function renderCompletion(meta: CompletionMeta, events: AsyncIterable<GenerationEvent>, logprobs: number | undefined) {
  const { choices, usage } = await collectGeneration(events, meta.n);
  return {
    id: meta.id,
    object: "text_completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: choices.map((c, index) => {
      const builder = new LegacyLogprobBuilder((logprobs ?? 0) > 0);
      return {
        index,
        text: (c.prompt?.text ?? "") + c.text,
        logprobs: logprobs === undefined ? null : builder.build([...(c.prompt?.logprobs ?? []), ...c.logprobs]),
        finish_reason: c.finishReason,
      };
    }),
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
