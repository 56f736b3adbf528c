import type { LlamaModel, Token } from "node-llama-cpp";

/** What one token adds to a text: its characters, and its exact bytes. */
export interface Piece {
  text: string;
  bytes: number[];
}

/**
 * Where the next token lands: after the unfinished start of a character (0 to 3 bytes) and, for
 * SentencePiece vocabularies that add a leading space to the text, whether any text came before.
 */
export interface SpellState {
  readonly pending: readonly number[];
  readonly atStart: boolean;
}

const EMPTY_STATE: SpellState = Object.freeze({ pending: Object.freeze([]) as readonly number[], atStart: true });

/** SentencePiece's stand-in for a space. */
const SPACE_MARKER = "\u2581";

/** How far back a context is read for an unfinished character (UTF-8 needs at most 3 bytes of it). */
const LOOKBACK_TOKENS = 64;

/**
 * How the tokens of a model spell text, the same way for generated text and for log probability
 * reports, so that the reported tokens always spell the content exactly.
 *
 * The rules (for SentencePiece "llama", Unigram "t5", Gemma 4's "gemma4" (BPE over SentencePiece-style
 * pieces) and byte-level BPE "gpt2" vocabularies, whose pieces say exactly which bytes a token stands for):
 *
 *  - A token's bytes come from its vocabulary piece: SentencePiece's `▁` is a space and `<0xNN>` is
 *    the byte NN; byte-level BPE maps each code point of the piece back to its byte. Control tokens
 *    and the unknown token have no bytes. Anything else is rendered by llama.cpp.
 *  - A vocabulary that puts a space in front of the text it tokenizes (SentencePiece with
 *    add_space_prefix, as Llama 2 and Mistral have) loses it again on the first token of the text,
 *    but only there: a token after the prompt keeps its space (" Flor"), a prompt's first word does
 *    not ("Hello" in an echoed "Hello world"). "First" means nothing with bytes comes before it.
 *  - A character split over several tokens belongs to the token that completes it: the tokens before
 *    it have the text "" (their bytes are still exact), so the texts concatenate to the content and
 *    the bytes to its UTF-8. Bytes that cannot form a character become U+FFFD where a decoder finds
 *    them invalid. A character still unfinished when the output ends is not text at all (its bytes
 *    are only in `bytes`).
 *  - No clean-up of spaces: BPE tokenizers whose detokenizer "cleans" " ." into "." (GPT-2's) are
 *    spelled as the tokens say, as llama.cpp's server and OpenAI spell them.
 *
 * Other vocabularies (WordPiece, RWKV, ...) fall back to llama.cpp's detokenizer (see `exact`).
 */
export class TokenPieces {
  private static readonly shared = new WeakMap<LlamaModel, TokenPieces>();

  /** The spelling of `model`'s tokens, built once per model. */
  static of(model: LlamaModel): TokenPieces {
    let pieces = TokenPieces.shared.get(model);
    if (!pieces) {
      pieces = new TokenPieces(model);
    }
    return pieces;
  }

  /** Spelled from the vocabulary (true), or by llama.cpp token by token (false). */
  readonly exact: boolean;
  /** The first token of a text loses its leading space (SentencePiece's add_space_prefix). */
  readonly stripsLeadingSpace: boolean;
  /**
   * SentencePiece: the tokenizer reads a `▁` in the text as a space, so a text's `▁` comes back from
   * its tokens as " ".
   */
  readonly readsMarkerAsSpace: boolean;
  /**
   * WordPiece (BERT): llama.cpp's detokenizer writes a space before every word that is not a `##`
   * continuation, the first one included, so a text's tokens came back as " hello world".
   */
  readonly wordPiece: boolean;

  /**
   * Pieces spelled SentencePiece's way, `▁` for a space and `<0xNN>` for a byte: SentencePiece
   * ("llama"), Unigram ("t5") and Gemma 4's BPE ("gemma4"), which llama.cpp all read with the same
   * escapes. (llama.cpp's detokenizer, asked for one token, drops a Unigram piece's leading space.)
   */
  private readonly spaceMarker: boolean;
  private readonly raw = new Map<number, number[]>();
  private readonly startCache = new Map<number, Piece>();
  private readonly vocab: readonly string[] | undefined;
  private readonly family: string | undefined;
  // ignoreBOM keeps U+FEFF: by default a decoder drops it from the start of every decode, and each
  // token's bytes are a decode of their own, so a zero-width no-break space vanished from the text.
  private readonly utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

  constructor(private readonly model: LlamaModel) {
    const ggml = model.fileInfo.metadata.tokenizer?.ggml;
    this.vocab = ggml?.tokens as readonly string[] | undefined;
    this.family = ggml?.model as string | undefined;
    this.spaceMarker = this.family === "llama" || this.family === "gemma4" || this.family === "t5";
    this.exact = this.vocab !== undefined && (this.spaceMarker || this.family === "gpt2");
    this.stripsLeadingSpace = this.exact && this.spaceMarker && this.detectLeadingSpaceStrip(ggml?.add_space_prefix);
    this.readsMarkerAsSpace = this.exact && this.spaceMarker;
    this.wordPiece = this.family === "bert";
    if (!TokenPieces.shared.has(model)) TokenPieces.shared.set(model, this);
  }

  /** The token as the first of a text (nothing with bytes before it). */
  get(token: number): Piece {
    let piece = this.startCache.get(token);
    if (!piece) {
      const { text, bytes } = this.spell(EMPTY_STATE, token);
      piece = { text, bytes };
      this.startCache.set(token, piece);
    }
    return piece;
  }

  /** The token as it continues a text that ended in `state`. */
  after(state: SpellState, token: number): Piece {
    if (state.atStart && state.pending.length === 0) return this.get(token);
    const { text, bytes } = this.spell(state, token);
    return { text, bytes };
  }

  /**
   * The text `tokens` spell from the start of a text, by the same rules as generated text, so an
   * echoed or detokenized prompt reads as its logprob tokens do ("Hello world" after BOS, not
   * " Hello world"). An unfinished character at the end is left out (`flush` false: the token that
   * completes it carries it, as in an echo followed by its completion) or read as U+FFFD (`flush`
   * true: nothing follows). Only for `exact` vocabularies.
   */
  textOf(tokens: readonly number[], flush: boolean): string {
    let state = EMPTY_STATE;
    let text = "";
    for (const token of tokens) {
      const piece = this.spell(state, token);
      text += piece.text;
      state = piece.state;
    }
    if (flush) text += this.unfinishedText(state);
    return text;
  }

  /** What a decoder reads for the unfinished character `state` holds when nothing follows: U+FFFD, or "" when none. */
  unfinishedText(state: SpellState): string {
    return state.pending.length > 0 ? this.utf8.decode(Uint8Array.from(state.pending)) : "";
  }

  /** The state after the tokens `at(0) .. at(length - 1)`, read from the end. */
  stateAfter(length: number, at: (index: number) => number): SpellState {
    const tail: number[][] = [];
    let collected = 0;
    let i = length - 1;
    for (; i >= 0 && collected < 3 && length - i <= LOOKBACK_TOKENS; i--) {
      const bytes = this.bytesOf(at(i));
      if (bytes.length > 0) {
        tail.unshift(bytes);
        collected += bytes.length;
      }
    }
    let atStart = collected === 0;
    // Only tokens without bytes so far: the text has begun if anything earlier has some.
    for (; atStart && i >= 0; i--) if (this.bytesOf(at(i)).length > 0) atStart = false;
    return { pending: unfinishedTail(tail.flat()), atStart };
  }

  /** The state after `tokens`. */
  stateAfterTokens(tokens: readonly number[]): SpellState {
    return this.stateAfter(tokens.length, (i) => tokens[i]);
  }

  /** What `token` adds after `state`, and the state after it. */
  spell(state: SpellState, token: number): Piece & { state: SpellState } {
    let bytes = this.bytesOf(token);
    if (state.atStart && this.stripsLeadingSpace && bytes[0] === 0x20) bytes = bytes.slice(1);
    const atStart = state.atStart && this.bytesOf(token).length === 0;
    if (state.pending.length === 0 && bytes.every((b) => b < 0x80)) {
      // The common case: whole ASCII.
      return { text: String.fromCharCode(...bytes), bytes, state: atStart === state.atStart ? state : { pending: [], atStart } };
    }
    const all = [...state.pending, ...bytes];
    const pending = unfinishedTail(all);
    const text = this.utf8.decode(Uint8Array.from(all.slice(0, all.length - pending.length)));
    return { text, bytes, state: { pending, atStart } };
  }

  /** The token as the vocabulary writes it (`▁Hello`, `<0xE4>`), where the model file lists it. */
  piece(token: number): string | undefined {
    return this.vocab?.[token];
  }

  /**
   * A control token's name as the vocabulary spells it (`<|im_end|>`), for reports that must tell
   * such tokens apart although they add no text; undefined for any other token. The unknown token
   * (`<unk>`) is one too: llama.cpp spells it as it spells control tokens, as nothing in plain text.
   */
  special(token: number): string | undefined {
    if (this.bytesOf(token).length > 0 || !addsNoText(this.model.getTokenAttributes(token as Token))) return undefined;
    return this.vocab?.[token] ?? this.model.detokenize([token as Token], true);
  }

  /** The bytes the token stands for in the middle of a text. */
  bytesOf(token: number): number[] {
    let bytes = this.raw.get(token);
    if (!bytes) {
      bytes = this.computeBytes(token);
      this.raw.set(token, bytes);
    }
    return bytes;
  }

  private computeBytes(token: number): number[] {
    const raw = this.vocab?.[token];
    const attributes = this.model.getTokenAttributes(token as Token);
    if (addsNoText(attributes)) return [];
    if (raw !== undefined) {
      // SentencePiece byte-fallback pieces are spelled <0xNN>.
      const byte = attributes.byte ? /^<0x([0-9A-Fa-f]{2})>$/.exec(raw) : null;
      if (byte) return [parseInt(byte[1], 16)];
      if (this.spaceMarker && attributes.normal) return [...Buffer.from(raw.replaceAll(SPACE_MARKER, " "), "utf8")];
      // Byte-level BPE spells every byte as one printable code point.
      if (this.family === "gpt2" && attributes.normal) {
        const bytes = [...raw].map((ch) => UNICODE_TO_BYTE.get(ch));
        if (bytes.every((b) => b !== undefined)) return bytes as number[];
      }
    }
    return [...Buffer.from(this.model.detokenize([token as Token], false), "utf8")];
  }

  /** Whether llama.cpp drops the leading space of a text's first `▁word` piece. */
  private detectLeadingSpaceStrip(declared: unknown): boolean {
    const vocab = this.vocab ?? [];
    for (let id = 0; id < vocab.length; id++) {
      const piece = vocab[id];
      if (piece.length < 2 || !piece.startsWith(SPACE_MARKER) || piece[1] === SPACE_MARKER) continue;
      if (!this.model.getTokenAttributes(id as Token).normal) continue;
      return !this.model.detokenize([id as Token], false).startsWith(" ");
    }
    // No word piece to try: llama.cpp's default for SentencePiece is to add (and so strip) the space.
    return declared === undefined ? true : Boolean(declared);
  }
}

/** Control and unknown tokens: llama.cpp writes nothing for them in plain text, their name with special tokens shown. */
function addsNoText(attributes: { control: boolean; unknown: boolean }): boolean {
  return attributes.control || attributes.unknown;
}

/**
 * The unfinished character at the end of `bytes`: the bytes a streaming UTF-8 decoder would still
 * hold (a valid start of a character that needs more bytes), or none.
 */
export function unfinishedTail(bytes: readonly number[]): number[] {
  const n = bytes.length;
  for (let k = 1; k <= Math.min(3, n); k++) {
    const b = bytes[n - k];
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: the start is further back
    const needs = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xc2 && b <= 0xdf ? 2 : 1;
    if (needs <= k) return [];
    const candidate = bytes.slice(n - k);
    // Second-byte ranges (E0 A0.., ED ..9F, F0 90.., F4 ..8F) decide whether it can still complete.
    return new TextDecoder("utf-8").decode(Uint8Array.from(candidate), { stream: true }) === "" ? candidate : [];
  }
  return [];
}

/** The byte ↔ code point table byte-level BPE tokenizers (GPT-2 and descendants) use. */
const UNICODE_TO_BYTE: Map<string, number> = (() => {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const cp = printable.includes(b) ? b : 256 + extra++;
    map.set(String.fromCodePoint(cp), b);
  }
  return map;
})();
