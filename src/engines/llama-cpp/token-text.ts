import type { LlamaModel, Token } from "node-llama-cpp";

/** The longest UTF-8 sequence is 4 bytes, so a character never spans more byte tokens than this. */
const MAX_SPLIT_TOKENS = 4;
const REPLACEMENT = "\uFFFD";

/**
 * Turns generated tokens into text one token at a time without ever splitting a UTF-8 character:
 * a token that ends inside a multi-byte character is held until the character completes. A byte
 * sequence that never completes is emitted as U+FFFD, once, as a full decode would.
 */
export class TokenTextDecoder {
  private pending: Token[] = [];
  private recent: Token[];

  constructor(
    private readonly model: LlamaModel,
    /** Tokens just before the generated ones (for tokenizers whose pieces depend on a leading space). */
    context: readonly Token[] = [],
  ) {
    this.recent = context.slice(-MAX_SPLIT_TOKENS);
  }

  push(token: Token): string {
    this.pending.push(token);
    const text = this.model.detokenize(this.pending, false, this.recent);
    if (text.endsWith(REPLACEMENT) && this.pending.length < MAX_SPLIT_TOKENS) return "";
    this.commit();
    return text;
  }

  flush(): string {
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
