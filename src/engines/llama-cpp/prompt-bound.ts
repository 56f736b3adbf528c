import type { LlamaModel } from "node-llama-cpp";
import { ApiError } from "../../core/errors.ts";
import type { PromptInput } from "../../core/types.ts";

/**
 * A cheap lower bound on a prompt's token count, so a prompt that can never fit the context is
 * refused before it is tokenized: tokenizing runs on the event loop, and a 16 MiB prompt would hold
 * every other request for seconds. No token spells more bytes than the longest vocabulary entry, so
 * a text of B bytes needs at least B / longest tokens.
 */
export class PromptBound {
  /** The most UTF-8 bytes any vocabulary entry is written with (at least its text's bytes). */
  private readonly longest: number;

  constructor(model: LlamaModel) {
    const vocab = (model.fileInfo.metadata.tokenizer?.ggml?.tokens ?? []) as readonly string[];
    let longest = 1;
    for (const piece of vocab) longest = Math.max(longest, Buffer.byteLength(piece, "utf8"));
    this.longest = vocab.length > 0 ? longest : Number.POSITIVE_INFINITY;
  }

  /** The fewest tokens the prompt's own text can take (the template adds more). */
  minimumTokens(prompt: PromptInput): number {
    if (prompt.kind === "tokens") return prompt.tokens.length;
    if (!Number.isFinite(this.longest)) return 0;
    let bytes = 0;
    if (prompt.kind === "text") bytes = Buffer.byteLength(prompt.text, "utf8");
    else if (prompt.kind === "infill") bytes = Buffer.byteLength(prompt.prefix, "utf8") + Buffer.byteLength(prompt.suffix, "utf8");
    else
      for (const m of prompt.messages) {
        // Separately tokenized parts (each message) may each end in a partial token.
        bytes += Buffer.byteLength(m.content, "utf8");
        for (const c of m.toolCalls ?? []) bytes += Buffer.byteLength(c.arguments, "utf8");
      }
    return Math.floor(bytes / this.longest);
  }

  /** Refuses, before tokenizing, a prompt that cannot fit in `contextSize` tokens. */
  check(prompt: PromptInput, contextSize: number): void {
    this.refuse(this.minimumTokens(prompt), contextSize);
  }

  /** Refuses, before tokenizing, a templated text of `bytes` UTF-8 bytes that cannot fit. */
  checkText(bytes: number, contextSize: number): void {
    this.refuse(Number.isFinite(this.longest) ? Math.floor(bytes / this.longest) : 0, contextSize);
  }

  private refuse(least: number, contextSize: number): void {
    if (least >= contextSize)
      throw new ApiError(400, `This model's context is ${contextSize} tokens, but the prompt is at least ${least} tokens.`, {
        field: "prompt",
        code: "context_length_exceeded",
      });
  }
}
