import type { LlamaModel, Token } from "node-llama-cpp";
import { type SpellState, TokenPieces } from "./token-pieces.ts";

/** The longest UTF-8 sequence is 4 bytes, so a character never spans more byte tokens than this. */
const MAX_SPLIT_TOKENS = 4;
const REPLACEMENT = "\uFFFD";

/**
 * Turns generated tokens into text one token at a time without ever splitting a UTF-8 character:
 * a token that ends inside a multi-byte character adds "" and the token that completes it adds the
 * whole character. Bytes that cannot form a character are emitted as U+FFFD.
 *
 * For SentencePiece and byte-level BPE vocabularies the text is spelled from the vocabulary (see
 * TokenPieces), exactly as log probabilities report each token, so the reported tokens concatenate
 * to the text. Other vocabularies are decoded by llama.cpp with the preceding tokens as context.
 * Either way a character still unfinished when the output ends is flushed as U+FFFD, once, as a
 * full decode reads it (and as /detokenize and an echo spell it): the bytes are not lost without a
 * mark.
 */
export class TokenTextDecoder {
  private pending: Token[] = [];
  private recent: Token[];
  private readonly pieces: TokenPieces;
  private state: SpellState;

  constructor(
    private readonly model: LlamaModel,
    /** Tokens just before the generated ones (the prompt): where the text continues from. */
    context: readonly Token[] = [],
  ) {
    this.pieces = TokenPieces.of(model);
    this.state = this.pieces.stateAfterTokens(context);
    this.recent = context.slice(-MAX_SPLIT_TOKENS);
  }

  push(token: Token): string {
    if (this.pieces.exact) {
      const { text, state } = this.pieces.spell(this.state, token);
      this.state = state;
      return text;
    }
    this.pending.push(token);
    const text = this.model.detokenize(this.pending, false, this.recent);
    if (text.endsWith(REPLACEMENT) && this.pending.length < MAX_SPLIT_TOKENS) return "";
    this.commit();
    return text;
  }

  flush(): string {
    if (this.pieces.exact) {
      const text = this.pieces.unfinishedText(this.state);
      this.state = { pending: [], atStart: this.state.atStart };
      return text;
    }
    if (this.pending.length === 0) return "";
    const text = this.model.detokenize(this.pending, false, this.recent);
    this.commit();
    return text;
  }

  private commit(): void {
    this.recent = [...this.recent, ...this.pending].slice(-MAX_SPLIT_TOKENS);
    this.pending = [];
  }
}
