import type { TokenLogprob } from "../../core/types.ts";
import type { TokenPieces } from "./token-pieces.ts";

/**
 * Spells the log-probability entries of an echoed text prompt so that they read along the text the
 * client sent, which is what the echo returns: legacy `text_offset` adds up the tokens' characters,
 * so a token spelled differently from the text moves every offset after it.
 *
 * Two things make a text prompt's tokens spell something other than its text:
 *  - special-token text the client typed (`<|im_start|>` in a conversation it templated itself) is
 *    read as that control token, which otherwise spells nothing; here it is written as the text
 *    that stood for it. A BOS added by the tokenizer is in no text and stays "".
 *  - a SentencePiece tokenizer that adds a space in front of its text does so again after each
 *    control token; that space is the tokenizer's, not the client's, so it is left out, as the one
 *    before the prompt's first word already is.
 *  - a SentencePiece tokenizer reads a `▁` the client typed as a space, so its token spells " "
 *    where the text has `▁`; it is written as the text has it.
 *
 * `tokens` are the prompt's token ids, one per entry. Entries are taken in order while they fit the
 * text; should one not (never expected), it and those after it are left as they were.
 */
export function spellAlongText(entries: TokenLogprob[], text: string, tokens: readonly number[], pieces: TokenPieces): TokenLogprob[] {
  const out = entries.slice();
  let at = 0;
  for (let i = 0; i < out.length; i++) {
    const e = out[i];
    const special = e.token === "" ? pieces.special(tokens[i]) : undefined;
    if (special !== undefined && text.startsWith(special, at)) {
      out[i] = { ...e, token: special };
      at += special.length;
    } else if (text.startsWith(e.token, at)) {
      at += e.token.length;
    } else if (pieces.readsMarkerAsSpace && e.token.includes(" ") && spacesReadAsMarkers(e.token, text, at)) {
      // Tried before the leading-space rule below, which a lone " " would pass by matching nothing.
      const spelled = text.slice(at, at + e.token.length);
      out[i] = { ...e, token: spelled, bytes: [...Buffer.from(spelled, "utf8")] };
      at += e.token.length;
    } else if (pieces.stripsLeadingSpace && e.token.startsWith(" ") && text.startsWith(e.token.slice(1), at)) {
      out[i] = { ...e, token: e.token.slice(1), bytes: e.bytes.slice(1) };
      at += e.token.length - 1;
    } else {
      break;
    }
  }
  return out;
}

/** Whether `token` reads as `text` from `at` where some of its spaces stand for the text's `▁`. */
function spacesReadAsMarkers(token: string, text: string, at: number): boolean {
  if (at + token.length > text.length) return false;
  for (let k = 0; k < token.length; k++) {
    const c = text[at + k];
    if (c !== token[k] && !(token[k] === " " && c === "\u2581")) return false;
  }
  return true;
}
