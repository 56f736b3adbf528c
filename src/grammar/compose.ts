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

/**
 * A counter the template writes into each call next to its name (Kimi K2's
 * `functions.NAME:0<|tool_call_argument_begin|>`, Cohere2 MoE's `"tool_call_id": "0", "tool_name"`):
 * the model writes digits there, whatever the count, so it cannot be part of a fixed piece of the
 * layout. `beforeName`: the digits follow the call prefix and `separator` leads from them to the
 * name; otherwise `separator` follows the name and the digits lead to the params prefix.
 */
export interface CallIndex {
  at: "beforeName" | "afterName";
  separator: string;
}

export interface CallGrammarParts {
  /** Between the function name and its arguments, e.g. `", "arguments": `. */
  paramsPrefix: string;
  suffix: string;
  betweenCalls: string;
  prefix: string;
  /** Closes the group of calls (may be empty). */
  sectionSuffix: string;
  index?: CallIndex;
  /** An id after the arguments: `prefix` and 9 letters or digits, before the suffix (Mistral Nemo's). */
  callId?: { prefix: string };
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
    const index = parts.index;
    const named =
      index === undefined
        ? spell(t.name + parts.paramsPrefix)
        : index.at === "beforeName"
          ? `call-index ${spell(index.separator + t.name + parts.paramsPrefix)}`
          : `${spell(t.name + index.separator)} call-index ${spell(parts.paramsPrefix)}`;
    const id = parts.callId ? ` ${spell(parts.callId.prefix)} call-id` : "";
    return `${named} t${i}-root${id}${parts.suffix ? ` ${spell(parts.suffix)}` : ""}`;
  });
  const call = `call ::= ${alternatives.map((a) => `( ${a} )`).join(" | ")}`;
  const more = parallel ? ` ( ${spell(parts.betweenCalls + parts.prefix)} call )*` : "";
  const close = parts.sectionSuffix ? ` ${spell(parts.sectionSuffix)}` : "";
  const root = `root ::= call${more}${close}`;
  // A counter as llama.cpp's server lets the model write one (digits), bounded so it cannot run on.
  const index = parts.index ? ["call-index ::= [0-9]{1,9}"] : [];
  const id = parts.callId ? ["call-id ::= [A-Za-z0-9]{9}"] : [];
  return [root, call, ...index, ...id, ...rules].join("\n");
}

/** A content grammar that also lets the model start a tool call (the engine then switches grammars). */
export function orToolTrigger(contentGbnf: string, trigger: string, spell: Spell = literal): string {
  return [`root ::= c-root | ${spell(trigger)}`, prefixRules(contentGbnf, "c-")].join("\n");
}

/** A grammar for `header` followed by what `gbnf` allows. */
export function withHeader(gbnf: string, header: string): string {
  return [`root ::= ${literal(header)} h-root`, prefixRules(gbnf, "h-")].join("\n");
}

/**
 * The members of an object-like list in a fixed order (a schema's property order), the required
 * ones present, `separator` between two written ones: Gemma 4's `{k:v,…}` and LFM2's keyword
 * arguments `k=v, …` are both written so. Each member is an expression; `rule` names a body as a
 * rule of the caller's grammar and returns its name. Returns the expression of the whole list
 * (`""` when it may only be empty).
 */
export function orderedMembers(members: ReadonlyArray<{ expr: string; required: boolean }>, separator: string, rule: (body: string) => string): string {
  // tail[i]: the members from i on, after one already written (each with its separator);
  // head[i]: the members from i on, none written yet.
  const n = members.length;
  const sep = literal(separator);
  const tail: string[] = new Array(n + 1).fill('""');
  const head: string[] = new Array(n + 1).fill('""');
  for (let i = n - 1; i >= 0; i--) {
    const m = members[i];
    const next = tail[i + 1] === '""' ? "" : ` ${tail[i + 1]}`;
    tail[i] = rule(m.required ? `${sep} ${m.expr}${next}` : `(${sep} ${m.expr})?${next}`);
    head[i] = rule(m.required ? `${m.expr}${next}` : head[i + 1] === '""' ? `(${m.expr}${next})?` : `${m.expr}${next} | ${head[i + 1]}`);
  }
  return head[0];
}
