import type { LlamaModel, Token, Tokenizer } from "node-llama-cpp";

// A chat prompt is tokenized a stretch at a time: each part of template text (to find its special
// tokens), then each run of text between special tokens (prompt-runs.ts); text after a marker's
// break with the "trimLeadingSpace" option, which costs two or three native calls and a detokenize.
// Every request of a conversation tokenizes the same template parts, the same system prompt and the
// same earlier turns again, on the event loop. A stretch's tokens depend only on its text and the
// two options, so the tokens of recent stretches are kept and reused; only new text reaches the
// native tokenizer. Bounded by entries and by characters, least recently used first out.

const MAX_ENTRIES = 4096;
/** Characters of kept text, all entries together (a long system prompt or document counts fully). */
const MAX_CHARS = 8 * 1024 * 1024;
/** A stretch longer than this is tokenized every time and not kept (one would crowd out the rest). */
const MAX_ENTRY_CHARS = 1024 * 1024;

export interface TokenizeMemoLimits {
  maxEntries?: number;
  maxChars?: number;
  maxEntryChars?: number;
}

/** A tokenizer for LlamaText.tokenize that remembers the tokens of the stretches it was given. */
export function memoTokenizer(model: LlamaModel, limits: TokenizeMemoLimits = {}): Tokenizer {
  const maxEntries = limits.maxEntries ?? MAX_ENTRIES;
  const maxChars = limits.maxChars ?? MAX_CHARS;
  const maxEntryChars = limits.maxEntryChars ?? MAX_ENTRY_CHARS;
  const kept = new Map<string, readonly Token[]>();
  let chars = 0;
  const base = model.tokenizer;

  const tokenize = (text: string, specialTokens?: boolean | "builtin", options?: "trimLeadingSpace"): Token[] => {
    // Builtin names ("BOS", "EOS", …) are a lookup already; empty text has no tokens.
    if (specialTokens === "builtin" || text.length === 0 || text.length > maxEntryChars)
      return base(text as never, specialTokens as never, options as never);
    const key = (specialTokens ? "s" : "t") + (options === "trimLeadingSpace" ? "1" : "0") + text;
    const hit = kept.get(key);
    if (hit !== undefined) {
      // Most recently used last.
      kept.delete(key);
      kept.set(key, hit);
      return hit.slice();
    }
    const tokens = base(text, specialTokens, options);
    kept.set(key, tokens.slice());
    chars += key.length;
    for (const [oldest] of kept) {
      if (kept.size <= maxEntries && chars <= maxChars) break;
      kept.delete(oldest);
      chars -= oldest.length;
    }
    return tokens;
  };
  return Object.assign(tokenize, {
    detokenize: base.detokenize,
    isSpecialToken: base.isSpecialToken,
    isEogToken: base.isEogToken,
  }) as Tokenizer;
}
