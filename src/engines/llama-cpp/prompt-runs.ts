import { type LlamaModel, type LlamaText, SpecialToken, SpecialTokensText, type Token, type Tokenizer } from "node-llama-cpp";

/**
 * A rendered chat prompt's tokens as llama.cpp tokenizes the rendered string (llama-vocab.cpp,
 * `tokenize` with special parsing, which llama-server does with a rendered template): the text is
 * cut at its special tokens (control, user-defined and unknown ones, longest first), and each run
 * of plain text between two of them is tokenized as one string. On a SentencePiece vocabulary with
 * `add_space_prefix` (Llama 2's, Mistral's) every such run starts with the space llama.cpp puts in
 * front of the first text and of the text after each special token (`is_prev_special`).
 *
 * node-llama-cpp's LlamaText.tokenize cuts the prompt at every switch between template text and a
 * message's text as well, and tokenizes each stretch on its own, all but the first with their
 * leading space trimmed. On SentencePiece that broke words at every message boundary: Llama 2's
 * `<s>[INST] Hi [/INST]` came out as `<s> ▁[ INST ] ▁ Hi ▁ ▁[ / INST ]` (11 tokens) where llama.cpp
 * and the model's own tokenizer give `<s> ▁[ INST ] ▁Hi ▁[ / INST ]` (9), so the model read token
 * sequences it never saw in training and `usage.prompt_tokens` was off.
 *
 * The one difference from llama-server is deliberate and kept: only the template's text is read
 * for special tokens. A message's text joins the run it falls in as plain text (a control token's
 * text typed by a user stays text), and the breaks that keep a vocabulary's user-defined markers
 * out of it (marker-text.ts) still cut the run there: the text after a break is tokenized apart,
 * without a leading space.
 *
 * Plinth keeps no per-message token ranges (a message too long for the context is named before
 * tokenizing, by its bytes: prompt-bound.ts; the prompt cache compares token prefixes), so a token
 * that now spans the end of the template's text and the start of a message (`▁Hi` after
 * `[INST] `) belongs to nobody in particular: it is simply the prompt's token there.
 */
export class RunTokenizer {
  /** Per token: its text when llama.cpp cuts it out of text as a special token, with its strip attributes; null when it does not. */
  private readonly specials = new Map<Token, Special | null>();

  constructor(
    private readonly model: LlamaModel,
    private readonly tokenizer: Tokenizer,
    /** The vocabulary's token texts (tokenizer.ggml.tokens), what llama.cpp matches in text. */
    private readonly vocab: readonly string[] | undefined,
  ) {}

  /**
   * The text's tokens. `brk` (a MarkerBreaker's break) cuts the text where a marker was broken:
   * the two sides are tokenized apart, and in template text neither side is read for a special
   * token the break went through.
   */
  tokenize(text: LlamaText, brk?: string): Token[] {
    const out: Token[] = [];
    // The plain text since the last special token (or the start).
    let run = "";
    // The last special token strips the whitespace after it (llama.cpp's rstrip attribute: Phi 3's).
    let stripNext = false;
    const add = (part: string) => {
      if (stripNext) {
        part = part.replace(LEADING_SPACE, "");
        if (part === "") return;
        stripNext = false;
      }
      run += part;
    };
    const flush = () => {
      if (run === "") return;
      let first = true;
      for (const piece of brk ? run.split(brk) : [run]) {
        if (piece === "") continue;
        // The run's first piece gets the space prefix llama.cpp gives text after a special token
        // or at the start; a piece after a break continues the text.
        for (const t of this.tokenizer(piece, false, first ? undefined : "trimLeadingSpace")) out.push(t);
        first = false;
      }
      run = "";
    };
    const special = (token: Token) => {
      const info = this.special(token);
      if (info?.lstrip) run = run.replace(TRAILING_SPACE, "");
      flush();
      out.push(token);
      stripNext = info?.rstrip ?? false;
    };
    for (const value of text.values) {
      if (value instanceof SpecialToken) for (const t of value.tokenize(this.tokenizer)) special(t);
      else if (value instanceof SpecialTokensText) {
        const pieces = brk ? value.value.split(brk) : [value.value];
        pieces.forEach((piece, k) => {
          // The break goes into the run, where flush cuts at it as it does in a message's text.
          if (k > 0) add(brk!);
          this.templateText(piece, add, special);
        });
      }
      else add(value);
    }
    flush();
    return out;
  }

  /**
   * Template text, cut at its special tokens as llama.cpp cuts it: llama.cpp tokenizes it with
   * special parsing, and each special token in the answer is found in the text from where the last
   * one ended (it cut the earliest occurrence of each, longest tokens first, so they come in order).
   */
  private templateText(text: string, add: (part: string) => void, special: (token: Token) => void): void {
    if (text === "") return;
    let at = 0;
    for (const token of this.tokenizer(text, true)) {
      const info = this.special(token);
      if (!info) continue;
      // Not there: a token the tokenizer made from text after all (a user-defined piece written
      // with "▁"); it stays in the run, which gives it back.
      const found = text.indexOf(info.text, at);
      if (found < 0) continue;
      add(text.slice(at, found));
      special(token);
      at = found + info.text.length;
    }
    add(text.slice(at));
  }

  private special(token: Token): Special | null {
    let info = this.specials.get(token);
    if (info !== undefined) return info;
    info = null;
    const attrs = this.model.getTokenAttributes(token);
    if (attrs.control || attrs.userDefined || attrs.unknown) {
      const text = this.vocab?.[token] ?? this.model.detokenize([token], true);
      if (text) info = { text, lstrip: attrs.lstrip, rstrip: attrs.rstrip };
    }
    this.specials.set(token, info);
    return info;
  }
}

interface Special {
  text: string;
  lstrip: boolean;
  rstrip: boolean;
}

// What llama.cpp strips next to a token with the lstrip or rstrip attribute (C's isspace).
const LEADING_SPACE = /^[ \t\n\v\f\r]+/;
const TRAILING_SPACE = /[ \t\n\v\f\r]+$/;
