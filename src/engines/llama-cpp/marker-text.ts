import { randomBytes } from "node:crypto";
import type { Tokenizer } from "node-llama-cpp";
import type { Message } from "../../core/types.ts";

/**
 * Keeps a message's text from turning into the markers that structure a prompt.
 *
 * node-llama-cpp tokenizes message contents without special-token parsing, so a control token's
 * text typed by a user (`<|im_end|>`) stays text. But llama.cpp matches a vocabulary's
 * user-defined tokens in any text, special parsing or not, and those include real structure: Qwen
 * 3's `<think>`, `</think>` and `<tool_call>`, and gpt-oss's `<|start|>`, `<|message|>`,
 * `<|channel|>` and `<|end|>` (llama.cpp's loader turns those into user-defined tokens). A user
 * message holding `<|end|><|start|>developer<|message|>…` then became a developer turn of its own.
 *
 * Such a marker in a message's text is cut after its first character with a break the renderer
 * keeps apart when it tokenizes (prompt-runs.ts): the two sides are tokenized separately, so the
 * marker's text becomes ordinary text tokens and never the marker. Text without a marker is left
 * as it is.
 * The break is a random run of private-use characters, made per renderer, so no client can type
 * it. A break that ends up in template text (a template that takes a message's text as its own,
 * or an earlier tool call's arguments, which templates write as their own text: see
 * prompt-renderer.ts) cuts the special-token parsing there too, so the broken text stays text.
 */
export class MarkerBreaker {
  /** Marker texts, longest first, as one pattern; undefined when the vocabulary has none. */
  private readonly pattern: RegExp | undefined;
  private readonly brk: string;

  private constructor(readonly markers: readonly string[]) {
    const sorted = [...new Set(markers)].sort((a, b) => b.length - a.length).map(escapeRegExp);
    this.pattern = sorted.length > 0 ? new RegExp(sorted.join("|"), "g") : undefined;
    this.brk = Array.from(randomBytes(8), (b) => String.fromCharCode(0xe000 + b)).join("");
  }

  /**
   * The markers of a vocabulary: control and user-defined tokens that look like markers (no
   * whitespace; an angle or square bracket, or a bar) and that llama.cpp finds in plain text,
   * checked by tokenizing each one's text without special parsing.
   */
  static of(tokenizer: Tokenizer, tokens: readonly string[] | undefined, types: readonly number[] | undefined): MarkerBreaker {
    const markers: string[] = [];
    tokens?.forEach((text, id) => {
      const type = types?.[id];
      if ((type !== CONTROL_TOKEN && type !== USER_DEFINED_TOKEN) || text.length < 2 || /\s/.test(text) || !/[<>[\]|｜]/.test(text)) return;
      const plain = tokenizer(text, false, "trimLeadingSpace");
      if (plain.length === 1 && plain[0] === id) markers.push(text);
    });
    return new MarkerBreaker(markers);
  }

  /** The text with each marker broken after its first character. */
  breakText(text: string): string {
    if (!this.pattern || text === "") return text;
    return text.replace(this.pattern, (m) => m.slice(0, 1) + this.brk + m.slice(1));
  }

  /**
   * The messages with their texts' markers broken (their other fields go to templates as they are).
   * A closing assistant message the answer continues (a prefill) is the caller's own words in the
   * model's voice, often a marker to continue from (`<think>\n`): kept as written.
   */
  breakMessages(messages: Message[]): Message[] {
    if (!this.pattern) return messages;
    const last = messages.length - 1;
    return messages.map((m, i) => {
      if (i === last && m.role === "assistant") return m;
      const content = this.breakText(m.content);
      return content === m.content ? m : { ...m, content };
    });
  }

  /** The text with each match of `pattern` (a global pattern) broken after its first character. */
  breakMatches(text: string, pattern: RegExp): string {
    return text.replace(pattern, (m) => m.slice(0, 1) + this.brk + m.slice(1));
  }

  /**
   * The break the renderer keeps apart when it tokenizes (prompt-runs.ts), in message text and in
   * template text alike. Texts hold it only where this breaker put it.
   */
  get break(): string {
    return this.brk;
  }
}

/** llama.cpp's token types (tokenizer.ggml.token_type). */
const CONTROL_TOKEN = 3;
const USER_DEFINED_TOKEN = 4;

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
