import { literal } from "./gbnf.ts";

/**
 * Renames every rule of a GBNF grammar with a prefix, so several grammars (one per tool's
 * arguments) can live in one. Names inside string literals and character classes are left alone.
 */
export function prefixRules(gbnf: string, prefix: string): string {
  const defined = new Set<string>();
  for (const m of gbnf.matchAll(/^([a-zA-Z0-9-]+)\s*::=/gm)) defined.add(m[1]);
  // One pass over literals, classes, comments and names (a grammar may be megabytes long).
  return gbnf.replace(/"(?:\\[^]|[^"\\])*"?|\[(?:\\[^]|[^\]\\])*\]?|#[^\n]*|[a-zA-Z0-9-]+/g, (token) => {
    const c = token[0];
    if (c === '"' || c === "[") return token;
    if (c === "#") return "";
    return defined.has(token) ? prefix + token : token;
  });
}

export interface CallGrammarParts {
  /** Between the function name and its arguments, e.g. `", "arguments": `. */
  paramsPrefix: string;
  suffix: string;
  betweenCalls: string;
  prefix: string;
  /** Closes the group of calls (may be empty). */
  sectionSuffix: string;
}

/**
 * How a piece of a call layout is written in GBNF: a string literal, or (for layouts whose markers
 * are control tokens) token references where those markers are.
 */
export type Spell = (text: string) => string;

/**
 * The grammar of tool calls as generated after the call prefix: one declared name, its
 * arguments as its schema allows, the suffix; with `parallel`, more calls may follow.
 */
export function toolCallGrammar(tools: Array<{ name: string; argsGbnf: string }>, parts: CallGrammarParts, parallel: boolean, spell: Spell = literal): string {
  const rules: string[] = [];
  const alternatives = tools.map((t, i) => {
    rules.push(prefixRules(t.argsGbnf, `t${i}-`));
    return `${spell(t.name + parts.paramsPrefix)} t${i}-root${parts.suffix ? ` ${spell(parts.suffix)}` : ""}`;
  });
  const call = `call ::= ${alternatives.map((a) => `( ${a} )`).join(" | ")}`;
  const more = parallel ? ` ( ${spell(parts.betweenCalls + parts.prefix)} call )*` : "";
  const close = parts.sectionSuffix ? ` ${spell(parts.sectionSuffix)}` : "";
  const root = `root ::= call${more}${close}`;
  return [root, call, ...rules].join("\n");
}

/** A content grammar that also lets the model start a tool call (the engine then switches grammars). */
export function orToolTrigger(contentGbnf: string, trigger: string, spell: Spell = literal): string {
  return [`root ::= c-root | ${spell(trigger)}`, prefixRules(contentGbnf, "c-")].join("\n");
}

/** A grammar for `header` followed by what `gbnf` allows. */
export function withHeader(gbnf: string, header: string): string {
  return [`root ::= ${literal(header)} h-root`, prefixRules(gbnf, "h-")].join("\n");
}
