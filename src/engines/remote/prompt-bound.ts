import type { GenerationRequest } from "../../core/types.ts";

/**
 * A cheap upper bound on a chat prompt's token count, so a request that surely fits the upstream's
 * context can skip the /tokenize round trip (a whole request on the upstream's event loop before
 * its first token).
 *
 * Why it holds: every token of a byte-level BPE vocabulary (GPT-2, Llama 3, Qwen) spells at least
 * one byte, and SentencePiece with byte fallback (Llama 2, Mistral, Gemma) spells a piece of at least
 * one character or a single byte, plus at most one leading "▁" per separately tokenized text; so a
 * text takes at most its UTF-8 byte count, plus one. The exception is normalisation: NFKC (used by
 * some SentencePiece models) can expand one character into up to 18 (U+FDFA), so every non-ASCII
 * character is counted as 18 × 4 bytes. The template's own text (role markers, BOS, a default system
 * line or date header) is covered by an allowance per message and per prompt; prompts whose
 * template text can be long (tools, schemas, thinking switches) are not bounded at all.
 */
export const TEMPLATE_TOKENS_PER_PROMPT = 256;
export const TEMPLATE_TOKENS_PER_MESSAGE = 16;
const NON_ASCII_WEIGHT = 18 * 4;

function textBound(text: string): number {
  let n = 1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // A surrogate pair is one character: count its high half only.
    if (c < 0x80) n += 1;
    else if (c < 0xdc00 || c > 0xdfff) n += NON_ASCII_WEIGHT;
  }
  return n;
}

/** The most tokens the prompt can render to, or undefined when no safe bound is known. */
export function chatPromptBound(req: GenerationRequest): number | undefined {
  if (req.prompt.kind !== "chat") return undefined;
  if (req.tools?.length || req.responseFormat || req.reasoning) return undefined;
  let total = TEMPLATE_TOKENS_PER_PROMPT;
  for (const m of req.prompt.messages) {
    if (m.parts) return undefined;
    total += TEMPLATE_TOKENS_PER_MESSAGE + textBound(m.content);
    if (m.name) total += textBound(m.name);
    for (const c of m.toolCalls ?? []) total += TEMPLATE_TOKENS_PER_MESSAGE + textBound(c.name) + textBound(c.arguments) + textBound(c.id);
    if (m.toolCallId) total += textBound(m.toolCallId);
  }
  return total;
}
