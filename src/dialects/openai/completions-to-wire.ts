import { collectGeneration } from "../../core/collect.ts";
import type { GenerationEvent, RunningUsage, Timings, TokenLogprob } from "../../core/types.ts";
import { chunkTimings, progressToWire, timingsToWire } from "./timings.ts";
import type { SseWriter } from "../../http/sse.ts";
import { type CompletionMeta, runningUsageToWire, usageToWire } from "./chat-to-wire.ts";

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
 *
 * Each `top_logprobs` map holds the `top` most likely tokens and, as OpenAI and vLLM do, the sampled
 * token too when it is not among them (so up to `top` + 1 keys; with `logprobs: 0` just the sampled
 * one). Keys are `mapKey`s, distinct where the tokens' texts are not.
 */
class LegacyLogprobBuilder {
  private offset = 0;

  constructor(private readonly top: number) {}

  build(entries: TokenLogprob[]): LegacyLogprobs {
    const out: LegacyLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const e of entries) {
      out.tokens.push(e.token);
      out.token_logprobs.push(e.logprob);
      out.top_logprobs.push(e.logprob === null ? null : this.map(e, e.logprob));
      out.text_offset.push(this.offset);
      this.offset += codePoints(e.token);
    }
    return out;
  }

  /**
   * Most likely first, and a key already there is kept: two tokens that still render alike (rare:
   * the same bytes under two ids) show the likelier one, never a less likely value under its key.
   */
  private map(e: TokenLogprob, logprob: number): Record<string, number> {
    const map: Record<string, number> = {};
    const put = (key: string, value: number) => {
      if (!Object.hasOwn(map, key)) map[key] = value;
    };
    const sampled = sampledKey(e);
    for (const t of e.top.slice(0, this.top)) put(isSampled(t, e, logprob) ? sampled : mapKey(t), t.logprob);
    put(sampled, logprob);
    return map;
  }
}

/**
 * A token as a `top_logprobs` key. Its text when that text is the token's own characters (or ends
 * with them: a token completing a character split over several carries the whole character, as in
 * `tokens`). A token whose text does not stand for its bytes (part of a character, whose text is "",
 * or bytes that form none) is written as OpenAI writes it, `bytes:\xe4`; a control token by its
 * vocabulary name (`<|im_end|>`). Without this, every partial-byte or control alternative had the key
 * "" and the last one's value overwrote the others'.
 */
function mapKey(t: { token: string; bytes: number[]; special?: string }): string {
  if (t.special !== undefined) return t.special;
  if (t.bytes.length === 0) return t.token;
  // An alternative whose own bytes are whole characters is named by them: after a token that began
  // a character, its text (read on from the pending bytes) starts with U+FFFD ("\ufffd arou").
  const own = wholeCharacters(t.bytes);
  if (own !== undefined) return own;
  if (t.token !== "" && endsWith(encoder.encode(t.token), t.bytes)) return t.token;
  return `bytes:${t.bytes.map((b) => `\\x${b.toString(16).padStart(2, "0")}`).join("")}`;
}

/**
 * The sampled token's key: its text in `tokens`, so that `top_logprobs[i][tokens[i]]` finds it, also
 * where that text carries more than the token's own characters (the U+FFFD of bytes an earlier token
 * left that form no character, "\ufffd at"). A token with no text there ("", part of a character)
 * or a control token keeps mapKey's name.
 */
function sampledKey(e: { token: string; bytes: number[]; special?: string }): string {
  return e.special === undefined && e.token !== "" && e.bytes.length > 0 ? e.token : mapKey(e);
}

/** Whether a top entry is the sampled token itself (the same bytes, name and log probability). */
function isSampled(t: { bytes: number[]; logprob: number; special?: string }, e: { bytes: number[]; special?: string }, logprob: number): boolean {
  return t.logprob === logprob && t.special === e.special && t.bytes.length === e.bytes.length && t.bytes.every((b, i) => b === e.bytes[i]);
}

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The bytes as text when they are whole UTF-8 characters, else undefined. */
function wholeCharacters(bytes: number[]): string | undefined {
  try {
    return strictDecoder.decode(Uint8Array.from(bytes));
  } catch {
    return undefined;
  }
}

function endsWith(whole: Uint8Array, tail: readonly number[]): boolean {
  if (tail.length > whole.length) return false;
  const from = whole.length - tail.length;
  return tail.every((b, i) => whole[from + i] === b);
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
  const { choices, usage, timings } = await collectGeneration(events, meta.n);
  return {
    id: meta.id,
    object: "text_completion" as const,
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: choices.map((c, index) => {
      const builder = new LegacyLogprobBuilder(logprobs ?? 0);
      return {
        index,
        text: (c.prompt?.text ?? "") + c.text,
        logprobs: logprobs === undefined ? null : builder.build([...(c.prompt?.logprobs ?? []), ...c.logprobs]),
        finish_reason: c.finishReason,
      };
    }),
    usage: usage ? usageToWire(usage) : undefined,
    // llama-server's timings_per_token: the first choice's timings, only when asked for.
    ...(timings ? { timings: timingsToWire(timings) } : {}),
  };
}

export async function streamCompletion(
  sse: SseWriter,
  meta: CompletionMeta,
  events: AsyncIterable<GenerationEvent>,
  logprobs: number | undefined,
  includeUsage: boolean,
): Promise<void> {
  const builders = Array.from({ length: meta.n }, () => new LegacyLogprobBuilder(logprobs ?? 0));
  const chunk = (choices: unknown[], extra?: Record<string, unknown>) => ({
    id: meta.id,
    object: "text_completion",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices,
    ...(includeUsage ? { usage: null } : {}),
    ...extra,
  });
  // vLLM's continuous usage stats (the request's runningUsage): a choice's chunks carry its usage so
  // far, its own prompt's tokens and its completion tokens; events carry no counts otherwise.
  // llama-server's timings_per_token: every chunk of a choice carries its timings so far.
  const at = (ev: { running?: RunningUsage; timings?: Timings }) =>
    ev.running || ev.timings ? { ...(ev.running ? { usage: runningUsageToWire(ev.running) } : {}), ...chunkTimings(ev) } : undefined;
  for await (const ev of events) {
    if (sse.closed) return;
    if (ev.type === "prompt" || ev.type === "text") {
      let wireLp: LegacyLogprobs | null = null;
      if (logprobs !== undefined) wireLp = ev.logprobs ? builders[ev.choice].build(ev.logprobs) : empty();
      await sse.data(chunk([{ index: ev.choice, text: ev.text, logprobs: wireLp, finish_reason: null }], at(ev)));
    } else if (ev.type === "finish") {
      // No token in it, so no log probabilities: null, as on chat's finish chunk (a client that keeps each
      // chunk's logprobs, as the AI SDK does, ended with an empty list).
      await sse.data(chunk([{ index: ev.choice, text: "", logprobs: null, finish_reason: ev.reason }], at(ev)));
    } else if (ev.type === "progress") {
      // llama-server's return_progress: the prompt's evaluation, before the choice's first text.
      await sse.data(chunk([{ index: ev.choice, text: "", logprobs: null, finish_reason: null }], { prompt_progress: progressToWire(ev), ...chunkTimings(ev) }));
    } else if (ev.type === "usage" && includeUsage) {
      await sse.data(chunk([], { usage: usageToWire(ev.usage), ...chunkTimings(ev) }));
    }
  }
  await sse.data("[DONE]");
}
