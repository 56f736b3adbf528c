// GBNF for the input of an OpenAI Responses API custom tool, from its `format`.
//
// - `{type: "text"}`: any text: any sequence of Unicode scalar values (every character but
//   surrogates, line breaks and control characters included), of any length; only the request's
//   output-token limit bounds it.
// - `{type: "grammar", syntax: "lark", definition}`: the Lark grammar, through lark-to-gbnf.ts.
// - `{type: "grammar", syntax: "regex", definition}`: the whole input matches the regex (anchored at
//   both ends; `^`/`$` at the ends are allowed and change nothing), in regex-to-gbnf.ts's subset of
//   regular expression syntax (OpenAI documents Rust's `regex` crate syntax; the common part of
//   both is what is accepted, anything else is refused).
//
// Anything that cannot be converted throws GrammarConversionError; the API layer reports it as a
// 400 naming `tools[i].format.definition`.

import { withAutomatonBudget } from "./automaton.ts";
import { ALL_CHARS, charClass, GrammarBuilder } from "./gbnf.ts";
import { checkRegexLimits, DEFAULT_LARK_LIMITS, GrammarConversionError, larkToGbnf, rawRegexExpr, type LarkToGbnfOptions } from "./lark-to-gbnf.ts";
import { PatternError } from "./regex-to-gbnf.ts";

export { GrammarConversionError } from "./lark-to-gbnf.ts";

export type CustomToolFormat =
  | { type: "text" }
  | { type: "grammar"; syntax: "lark" | "regex"; definition: string };

/** GBNF (with a `root` rule) for a custom tool's input. */
export function customToolGrammar(format: CustomToolFormat, options: LarkToGbnfOptions = {}): string {
  return withAutomatonBudget(() => customToolGrammarWithin(format, options));
}

function customToolGrammarWithin(format: CustomToolFormat, options: LarkToGbnfOptions): string {
  if (format.type === "text") return `root ::= ${charClass(ALL_CHARS)}*\n`;
  if (format.type !== "grammar") throw new GrammarConversionError(`format type ${JSON.stringify((format as { type: unknown }).type)}`, "expected text or grammar");
  if (typeof format.definition !== "string") throw new GrammarConversionError("definition", "must be a string");
  if (format.syntax === "lark") {
    refuseUngeneratable(format.definition, "lark");
    return larkToGbnf(format.definition, options);
  }
  if (format.syntax === "regex") return regexGrammar(format.definition, options);
  throw new GrammarConversionError(`syntax ${JSON.stringify(format.syntax)}`, "expected lark or regex");
}

/** GBNF for strings the regex matches in full. */
export function regexGrammar(pattern: string, options: LarkToGbnfOptions = {}): string {
  refuseUngeneratable(pattern, "regex");
  const limits = { ...DEFAULT_LARK_LIMITS, ...options.limits };
  const total = checkRegexLimits(pattern, limits);
  if (total > limits.maxTotalRepeat) throw new GrammarConversionError("regex", `repetition counts add up to more than ${limits.maxTotalRepeat}`);
  const b = new GrammarBuilder();
  try {
    const { expr } = withAutomatonBudget(() => rawRegexExpr(b, pattern, "re"));
    b.shared("root", () => expr);
  } catch (err) {
    if (err instanceof PatternError) throw new GrammarConversionError("regex", err.message);
    throw err;
  }
  return b.render();
}

/** NUL, written as itself or as a regex or Lark escape (\0, \x00, \u0000, \x{0}, \u{0}). */
const NUL = /\u0000|\\(?:0(?![0-7])|x0{2}|u0{4}|x\{0+\}|u\{0+\})/;
/** A surrogate half, written as itself (alone) or as an escape (\uD800-\uDFFF). */
const SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]|\\u[dD][89a-fA-F][0-9a-fA-F]{2}/;

/**
 * Refuses a definition that mentions a character no model output can contain: NUL, which llama.cpp's
 * grammar never sees (it reads a token's text up to its first NUL, so a grammar that requires one
 * matches no token and aborts the whole process), or a surrogate half, which no UTF-8 decodes to.
 * Refused wherever it appears (a class that also allows other characters would be harmless, but
 * telling the two apart is not worth a server that can be stopped by one request).
 */
function refuseUngeneratable(definition: string, syntax: string): void {
  if (NUL.test(definition)) throw new GrammarConversionError(syntax, "U+0000 (NUL) can never be generated; leave it out");
  if (SURROGATE.test(definition)) throw new GrammarConversionError(syntax, "a surrogate half can never be generated; leave it out");
}
