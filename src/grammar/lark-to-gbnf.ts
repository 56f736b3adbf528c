// Lark grammars (as OpenAI documents them for custom tools: Lark's EBNF) → GBNF (llama.cpp).
//
// Contract: every string the GBNF accepts is in the language of the Lark grammar read as a
// scannerless context-free grammar (each terminal contributes one string of its own language).
// Where the conversion cannot keep that promise it throws GrammarConversionError naming the
// construct and its line:column; it never silently widens the language. It may narrow it (below).
//
// Supported:
// - rules (lowercase names, `?`/`!` modifiers, `_`-prefixed inlined rules) and terminals (UPPERCASE
//   names); `start` is the root; `:` definitions with `|` alternatives, continued on following
//   lines that begin with `|` (inside ( ) and [ ] line breaks are free);
// - string literals "..." with escapes (\n \t \r \f \v \0 \\ \" \' \xHH \uHHHH \UHHHHHHHH; an
//   unknown escape stands for the backslash and the character, as in Lark) and the `i` flag
//   (case-insensitive); literal ranges "a".."z";
// - regex terminals /.../flags through regex-to-gbnf.ts (its subset of regular expressions; a
//   regex must match the whole token). Flags: `i` (letters of both cases), `s` (`.` also matches
//   line breaks), `u` (no effect); `m`, `x`, `l` are refused. Python's `(?P<name>` groups are
//   read as named groups. Escapes like \d \w \s stand for their ASCII sets (Python's Unicode sets
//   are wider, so this only narrows);
// - grouping ( ), optional [ ] and `?`, `*`, `+`, repetition `~ n` and `~ n..m`;
// - `%import common.NAME`, `%import common.NAME -> ALIAS`, `%import common (A, B)`, for the
//   terminals in COMMON_LARK below;
// - `%ignore` (see IGNORED WHITESPACE); comments `//` and `#`; priorities `.n` (ignored: priorities
//   steer Lark's lexer, a grammar constraint has no lexer); aliases `-> name` (ignored: they only
//   name tree nodes);
// - direct left recursion (`sum: sum "+" term | term`) is rewritten into repetition
//   (`sum ::= term ("+" term)*`), which accepts the same strings. llama.cpp refuses left
//   recursion, and hangs on left recursion hidden behind a rule that can match the empty string,
//   so any other left recursion (indirect, or behind a nullable prefix) is refused here.
//
// IGNORED WHITESPACE: `%ignore X` allows X between tokens. The grammar allows, before every token
// of a rule (a terminal, or a literal/regex written in a rule) and at the end of the input, up to
// `maxIgnoredWhitespace` (default 4) characters from the set of whitespace characters (space, \t,
// \n, \r, \f, \v) that are each, alone, a match of an ignored terminal. With WS that is all six;
// WS_INLINE gives space and tab; NEWLINE gives \n (its \r\n form is not generated). Bounded so
// that generation cannot run away on blanks. Ignored terminals that match no single whitespace
// character (comments, for instance) are never generated: the output has no comments, which is
// still a valid input.
//
// Known narrowing: the grammar is scannerless, while Lark lexes first (longest match, contextual
// lexer). Two tokens written next to each other without whitespace (`WORD WORD` as "abc") are one
// string to Lark's lexer; for grammars whose adjacent tokens can merge like that, a generated
// string may lex differently in Lark than intended. Use explicit separators in such grammars.
//
// Refused (GrammarConversionError, with line:column): %declare, %override, %extend, imports other
// than common terminals, templates (`_separated{x, sep}`), rules used inside terminals, undefined
// names, duplicate definitions, recursive terminals, left recursion other than direct, regex
// features outside regex-to-gbnf.ts's subset (lookarounds, backreferences, \b, inline flags…),
// and anything syntactically wrong. Limits (LarkLimits) are checked before any expansion.

import { ALL_CHARS, alt, charClass, cpSet, group, GrammarBuilder, literal, seq, setIntersect, setIsEmpty, type CodePointSet } from "./gbnf.ts";
import { AutomatonLimitError, cachedDfa, type Dfa, dfaLengthRange, dfaToGbnf, langOfRegex, withAutomatonBudget } from "./automaton.ts";
import { compilePattern, hasLookahead, readsAmbiguously, parsePattern, PatternError, PatternLimitError } from "./regex-to-gbnf.ts";

/** A grammar that cannot be converted; `line`/`column` are 1-based (0 when not tied to a place). */
export class GrammarConversionError extends Error {
  readonly construct: string;
  readonly line: number;
  readonly column: number;
  constructor(construct: string, detail: string, where?: { line: number; column: number }) {
    const at = where && where.line > 0 ? ` at ${where.line}:${where.column}` : "";
    super(`${construct}${at}: ${detail}`);
    this.name = "GrammarConversionError";
    this.construct = construct;
    this.line = where?.line ?? 0;
    this.column = where?.column ?? 0;
  }
}

export type LarkLimits = {
  /** Longest grammar text, in UTF-16 units. */
  maxGrammarLength: number;
  /** Most rules and terminals together (imports included). */
  maxDefinitions: number;
  /** Largest count in `~ n..m` and in a regex quantifier {n,m}. */
  maxRepeat: number;
  /** Largest sum of all repetition counts (each bounded repetition costs llama.cpp about its count). */
  maxTotalRepeat: number;
  /** Deepest nesting of ( ) and [ ] in the grammar, and of groups in a regex. */
  maxNesting: number;
  /** Longest regex literal. */
  maxRegexLength: number;
  /** Longest GBNF produced. */
  maxOutputLength: number;
};

export const DEFAULT_LARK_LIMITS: LarkLimits = {
  maxGrammarLength: 100_000,
  maxDefinitions: 1_000,
  maxRepeat: 1_000,
  maxTotalRepeat: 20_000,
  maxNesting: 50,
  maxRegexLength: 2_000,
  maxOutputLength: 1_000_000,
};

export type LarkToGbnfOptions = {
  /** Most ignored whitespace characters before a token and at the end (default 4). */
  maxIgnoredWhitespace?: number;
  limits?: Partial<LarkLimits>;
};

/** The terminals `%import common.*` provides (Lark's common.lark; ESCAPED_STRING and C_COMMENT without lookbehind/lazy regexes). */
export const COMMON_LARK = String.raw`
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
ESCAPED_STRING: "\"" (/[^"\\\n]/ | /\\[^\n]/)* "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: "/*" (/[^*]/ | "*"+ /[^*\/]/)* "*"+ "/"
SQL_COMMENT: /--[^\n]*/
`;

// ---------------------------------------------------------------------------------------------
// Syntax tree
// ---------------------------------------------------------------------------------------------

type Pos = { line: number; column: number };

type Expr =
  | { k: "lit"; text: string; ci: boolean; pos: Pos }
  | { k: "range"; from: number; to: number; pos: Pos }
  | { k: "regex"; source: string; flags: string; pos: Pos }
  | { k: "ref"; name: string; pos: Pos }
  | { k: "seq"; items: Expr[] }
  | { k: "alt"; alts: Expr[] }
  | { k: "rep"; e: Expr; min: number; max: number | undefined; pos: Pos };

type Def = { name: string; term: boolean; expr: Expr; pos: Pos };

type Directive =
  | { kind: "import"; names: Array<{ name: string; alias: string; pos: Pos }> }
  | { kind: "ignore"; expr: Expr; pos: Pos };

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

type Tok = { t: "name" | "string" | "regexp" | "op" | "number" | "directive" | "nl" | "eof"; v: string; flags: string; pos: Pos };

const TERM_NAME = /^_?[A-Z][_A-Z0-9]*$/;
const RULE_NAME = /^_?[a-z][_a-z0-9]*$/;

/** The match of a sticky regex at `at`, or null. */
function sticky(re: RegExp, src: string, at: number): string | null {
  re.lastIndex = at;
  const m = re.exec(src);
  return m ? m[0] : null;
}

/** Tokens of a grammar, produced on demand (a refusal early in a huge text costs little). */
class Tokens {
  private readonly list: Tok[] = [];
  private readonly gen: Generator<Tok>;
  constructor(src: string) {
    this.gen = lex(src);
  }
  at(i: number): Tok {
    while (this.list.length <= i) {
      const r = this.gen.next();
      if (r.done) break;
      this.list.push(r.value);
    }
    return this.list[Math.min(i, this.list.length - 1)];
  }
}

function* lex(src: string): Generator<Tok> {
  let last: Tok["t"] | "" = "";
  let i = 0;
  let line = 1;
  let lineStart = 0;
  const here = (at: number): Pos => ({ line, column: at - lineStart + 1 });
  const fail = (what: string, detail: string, at: number): never => {
    throw new GrammarConversionError(what, detail, here(at));
  };
  while (i < src.length) {
    const c = src[i];
    if (c === " " || c === "\t" || c === "\r" || c === "\f") {
      i++;
      continue;
    }
    if (c === "\n") {
      if (last !== "" && last !== "nl") yield { t: "nl", v: "\n", flags: "", pos: here(i) };
      last = "nl";
      i++;
      line++;
      lineStart = i;
      continue;
    }
    if (src.startsWith("//", i) || c === "#") {
      while (i < src.length && src[i] !== "\n") i++;
      continue;
    }
    const start = i;
    if (c === '"') {
      i++;
      while (i < src.length && src[i] !== '"') {
        if (src[i] === "\n") fail("string literal", "unterminated (line break inside)", start);
        i += src[i] === "\\" ? 2 : 1;
      }
      if (i >= src.length) fail("string literal", "unterminated", start);
      i++;
      let flags = "";
      if (src[i] === "i" && !/[_a-zA-Z0-9]/.test(src[i + 1] ?? "")) {
        flags = "i";
        i++;
      }
      last = "string";
      yield { t: "string", v: src.slice(start + 1, i - 1 - flags.length), flags, pos: here(start) };
      continue;
    }
    if (c === "/") {
      i++;
      while (i < src.length && src[i] !== "/") {
        if (src[i] === "\n") fail("regex literal", "unterminated (line break inside)", start);
        i += src[i] === "\\" ? 2 : 1;
      }
      if (i >= src.length) fail("regex literal", "unterminated", start);
      const body = src.slice(start + 1, i);
      i++;
      const m = sticky(/[a-zA-Z]*/y, src, i)!;
      i += m.length;
      last = "regexp";
      yield { t: "regexp", v: body, flags: m, pos: here(start) };
      continue;
    }
    if (c === "%") {
      const m = sticky(/%[a-zA-Z_]*/y, src, i)!;
      i += m.length;
      last = "directive";
      yield { t: "directive", v: m.slice(1), flags: "", pos: here(start) };
      continue;
    }
    const name = sticky(/[_a-zA-Z][_a-zA-Z0-9]*/y, src, i);
    if (name) {
      i += name.length;
      last = "name";
      yield { t: "name", v: name, flags: "", pos: here(start) };
      continue;
    }
    const num = sticky(/-?[0-9]+/y, src, i);
    if (num && !src.startsWith("->", i)) {
      i += num.length;
      last = "number";
      yield { t: "number", v: num, flags: "", pos: here(start) };
      continue;
    }
    const op = ["->", "..", ":", "|", "(", ")", "[", "]", "{", "}", "?", "*", "+", "~", ".", ",", "!"].find((o) => src.startsWith(o, i));
    if (op) {
      i += op.length;
      last = "op";
      yield { t: "op", v: op, flags: "", pos: here(start) };
      continue;
    }
    fail("character", `unexpected ${JSON.stringify(String.fromCodePoint(src.codePointAt(i)!))}`, start);
  }
  yield { t: "eof", v: "", flags: "", pos: here(i) };
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

function decodeString(raw: string, pos: Pos): string {
  let out = "";
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (c !== "\\") {
      out += c;
      continue;
    }
    const e = raw[++i];
    const hex = (n: number) => {
      const h = raw.slice(i + 1, i + 1 + n);
      if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) throw new GrammarConversionError("string literal", `bad \\${e} escape`, pos);
      i += n;
      const cp = parseInt(h, 16);
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw new GrammarConversionError("string literal", `escape \\${e}${h} is not a character`, pos);
      return String.fromCodePoint(cp);
    };
    switch (e) {
      case "n": out += "\n"; break;
      case "t": out += "\t"; break;
      case "r": out += "\r"; break;
      case "f": out += "\f"; break;
      case "v": out += "\v"; break;
      case "0": out += "\0"; break;
      case "\\": out += "\\"; break;
      case '"': out += '"'; break;
      case "'": out += "'"; break;
      case "x": out += hex(2); break;
      case "u": out += hex(4); break;
      case "U": out += hex(8); break;
      default: out += "\\" + e; // Lark keeps unknown escapes as written
    }
  }
  return out;
}

class LarkParser {
  private i = 0;
  private depth = 0;
  readonly defs = new Map<string, Def>();
  readonly directives: Directive[] = [];
  totalRepeat = 0;

  constructor(
    private readonly toks: Tokens,
    private readonly limits: LarkLimits,
  ) {}

  private peek(): Tok {
    if (this.depth > 0) while (this.toks.at(this.i).t === "nl") this.i++;
    return this.toks.at(this.i);
  }

  private next(): Tok {
    const t = this.peek();
    if (t.t !== "eof") this.i++;
    return t;
  }

  private isOp(v: string): boolean {
    const t = this.peek();
    return t.t === "op" && t.v === v;
  }

  private expectOp(v: string, what: string): Tok {
    const t = this.next();
    if (t.t !== "op" || t.v !== v) throw new GrammarConversionError(what, `expected "${v}", found ${describe(t)}`, t.pos);
    return t;
  }

  parse(): void {
    for (;;) {
      const t = this.peek();
      if (t.t === "eof") break;
      if (t.t === "nl") {
        this.i++;
        continue;
      }
      if (t.t === "directive") this.directive();
      else this.definition();
      const end = this.next();
      if (end.t !== "nl" && end.t !== "eof") throw new GrammarConversionError("definition", `unexpected ${describe(end)}`, end.pos);
    }
  }

  private definition(): void {
    let t = this.next();
    let modifier = "";
    if (t.t === "op" && (t.v === "?" || t.v === "!")) {
      modifier = t.v;
      t = this.next();
    }
    if (t.t !== "name") throw new GrammarConversionError("definition", `expected a rule or terminal name, found ${describe(t)}`, t.pos);
    const term = TERM_NAME.test(t.v);
    if (!term && !RULE_NAME.test(t.v)) throw new GrammarConversionError(`name ${t.v}`, "rule names are lowercase and terminal names uppercase", t.pos);
    if (term && modifier) throw new GrammarConversionError(`terminal ${t.v}`, `the "${modifier}" modifier is for rules`, t.pos);
    if (this.isOp("{")) throw new GrammarConversionError(`template ${t.v}{…}`, "templates are not supported", t.pos);
    if (this.isOp(".")) {
      this.i++;
      const p = this.next();
      if (p.t !== "number") throw new GrammarConversionError(`priority of ${t.v}`, `expected a number, found ${describe(p)}`, p.pos);
      // Priorities only steer Lark's lexer/parser choices; they do not change the language.
    }
    this.expectOp(":", `definition of ${t.v}`);
    const expr = this.expansions(true);
    this.addDef({ name: t.v, term, expr, pos: t.pos });
  }

  addDef(d: Def): void {
    if (this.defs.has(d.name)) throw new GrammarConversionError(`definition of ${d.name}`, `${d.name} is defined twice`, d.pos);
    if (this.defs.size >= this.limits.maxDefinitions) throw new GrammarConversionError("grammar", `more than ${this.limits.maxDefinitions} rules and terminals`, d.pos);
    this.defs.set(d.name, d);
  }

  private directive(): void {
    const d = this.next();
    switch (d.v) {
      case "import": {
        const mod = this.next();
        if (mod.t !== "name") throw new GrammarConversionError("%import", `expected a module name, found ${describe(mod)}`, mod.pos);
        const path = [mod.v];
        while (this.isOp(".")) {
          this.i++;
          const n = this.next();
          if (n.t !== "name") throw new GrammarConversionError("%import", `expected a name, found ${describe(n)}`, n.pos);
          path.push(n.v);
        }
        const names: Array<{ name: string; alias: string; pos: Pos }> = [];
        if (this.isOp("(")) {
          this.i++;
          for (;;) {
            const n = this.next();
            if (n.t !== "name") throw new GrammarConversionError("%import", `expected a name, found ${describe(n)}`, n.pos);
            names.push({ name: n.v, alias: n.v, pos: n.pos });
            if (this.isOp(",")) this.i++;
            else break;
          }
          this.expectOp(")", "%import");
          if (path.length !== 1) throw new GrammarConversionError(`%import ${path.join(".")}`, "only the module `common` can be imported", d.pos);
        } else {
          if (path.length !== 2) throw new GrammarConversionError(`%import ${path.join(".")}`, "expected %import common.NAME", d.pos);
          let alias = path[1];
          if (this.isOp("->")) {
            this.i++;
            const a = this.next();
            if (a.t !== "name") throw new GrammarConversionError("%import", `expected an alias name, found ${describe(a)}`, a.pos);
            alias = a.v;
          }
          names.push({ name: path[1], alias, pos: d.pos });
        }
        if (path[0] !== "common") throw new GrammarConversionError(`%import ${path.join(".")}`, "only the module `common` can be imported", d.pos);
        this.directives.push({ kind: "import", names });
        return;
      }
      case "ignore": {
        const expr = this.expansions(true);
        this.directives.push({ kind: "ignore", expr, pos: d.pos });
        return;
      }
      default:
        throw new GrammarConversionError(`%${d.v}`, "this directive is not supported", d.pos);
    }
  }

  private expansions(top: boolean): Expr {
    const alts = [this.alias()];
    for (;;) {
      if (this.isOp("|")) {
        this.i++;
        alts.push(this.alias());
        continue;
      }
      if (top && this.toks.at(this.i).t === "nl") {
        let j = this.i;
        while (this.toks.at(j).t === "nl") j++;
        if (this.toks.at(j).t === "op" && this.toks.at(j).v === "|") {
          this.i = j + 1;
          alts.push(this.alias());
          continue;
        }
      }
      break;
    }
    return alts.length === 1 ? alts[0] : { k: "alt", alts };
  }

  private alias(): Expr {
    const e = this.expansion();
    if (this.isOp("->")) {
      this.i++;
      const n = this.next();
      if (n.t !== "name") throw new GrammarConversionError("alias", `expected a name after "->", found ${describe(n)}`, n.pos);
    }
    return e;
  }

  private expansion(): Expr {
    const items: Expr[] = [];
    for (;;) {
      const t = this.peek();
      if (t.t === "string" || t.t === "regexp" || t.t === "name" || (t.t === "op" && (t.v === "(" || t.v === "["))) items.push(this.expr());
      else break;
    }
    return items.length === 1 ? items[0] : { k: "seq", items };
  }

  private count(): number {
    const t = this.next();
    if (t.t !== "number" || t.v.startsWith("-")) throw new GrammarConversionError("repetition ~", `expected a count, found ${describe(t)}`, t.pos);
    const n = Number(t.v);
    if (n > this.limits.maxRepeat) throw new GrammarConversionError("repetition ~", `count ${t.v} is above the limit of ${this.limits.maxRepeat}`, t.pos);
    return n;
  }

  private expr(): Expr {
    const e = this.atom();
    const t = this.peek();
    if (t.t !== "op") return e;
    if (t.v === "?" || t.v === "*" || t.v === "+") {
      this.i++;
      return { k: "rep", e, min: t.v === "+" ? 1 : 0, max: t.v === "?" ? 1 : undefined, pos: t.pos };
    }
    if (t.v === "~") {
      this.i++;
      const min = this.count();
      let max = min;
      if (this.isOp("..")) {
        this.i++;
        max = this.count();
        if (max < min) throw new GrammarConversionError("repetition ~", `range ${min}..${max} is empty`, t.pos);
      }
      this.totalRepeat += max;
      if (this.totalRepeat > this.limits.maxTotalRepeat) throw new GrammarConversionError("repetition ~", `repetition counts add up to more than ${this.limits.maxTotalRepeat}`, t.pos);
      return { k: "rep", e, min, max, pos: t.pos };
    }
    return e;
  }

  private atom(): Expr {
    const t = this.next();
    if (t.t === "op" && (t.v === "(" || t.v === "[")) {
      if (++this.depth > this.limits.maxNesting) throw new GrammarConversionError(`"${t.v}"`, `nesting deeper than ${this.limits.maxNesting}`, t.pos);
      const inner = this.expansions(false);
      this.expectOp(t.v === "(" ? ")" : "]", `group opened at ${t.pos.line}:${t.pos.column}`);
      this.depth--;
      return t.v === "(" ? inner : { k: "rep", e: inner, min: 0, max: 1, pos: t.pos };
    }
    if (t.t === "string") {
      const text = decodeString(t.v, t.pos);
      if (this.isOp("..")) {
        this.i++;
        const to = this.next();
        if (to.t !== "string") throw new GrammarConversionError("literal range", `expected a string after "..", found ${describe(to)}`, to.pos);
        const a = [...text];
        const z = [...decodeString(to.v, to.pos)];
        if (a.length !== 1 || z.length !== 1) throw new GrammarConversionError("literal range", "both ends must be single characters", t.pos);
        const from = a[0].codePointAt(0)!;
        const end = z[0].codePointAt(0)!;
        if (end < from) throw new GrammarConversionError("literal range", "range out of order", t.pos);
        return { k: "range", from, to: end, pos: t.pos };
      }
      return { k: "lit", text, ci: t.flags === "i", pos: t.pos };
    }
    if (t.t === "regexp") return { k: "regex", source: t.v, flags: t.flags, pos: t.pos };
    if (t.t === "name") {
      if (this.isOp("{")) throw new GrammarConversionError(`template ${t.v}{…}`, "templates are not supported", t.pos);
      return { k: "ref", name: t.v, pos: t.pos };
    }
    throw new GrammarConversionError("expression", `unexpected ${describe(t)}`, t.pos);
  }
}

function describe(t: Tok): string {
  switch (t.t) {
    case "eof": return "end of grammar";
    case "nl": return "line break";
    case "string": return `string "${t.v}"`;
    case "regexp": return `regex /${t.v}/`;
    case "directive": return `%${t.v}`;
    default: return `"${t.v}"`;
  }
}

// ---------------------------------------------------------------------------------------------
// Regexes: Lark (Python) flags, and the regex converter's JSON-encoded output made raw
// ---------------------------------------------------------------------------------------------

const ASCII_LETTER = /^[a-zA-Z]$/;
const swapCase = (c: string) => (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase());

/**
 * The JavaScript (`u` mode) source for a Lark regex with its flags folded in: `s` turns `.` into
 * [\s\S], `i` gives ASCII letters both cases (outside classes `x` → [xX]; inside, letters and
 * letter ranges gain their other case). `(?P<name>` becomes `(?<name>`.
 */
function toJsSource(source: string, flags: string, pos: Pos): string {
  for (const f of flags) {
    if (!"isu".includes(f)) throw new GrammarConversionError(`regex flag "${f}"`, "only the flags i, s and u are supported", pos);
  }
  const ci = flags.includes("i");
  const dotAll = flags.includes("s");
  let out = "";
  let i = 0;
  // Copies an escape sequence whole (hex digits and names inside it are not letters to fold).
  const escape = (): string => {
    const m = /^\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|[pPk]\{[^}]*\}|k<[^>]*>|c[a-zA-Z]|[\s\S])/.exec(source.slice(i));
    const s = m ? m[0] : "\\";
    i += s.length;
    return s;
  };
  while (i < source.length) {
    const c = source[i];
    if (c === "\\") {
      out += escape();
    } else if (c === "[") {
      // Character class: copy it, collecting the other case of letters and letter ranges.
      let cls = "[";
      let extra = "";
      i++;
      if (source[i] === "^") {
        cls += "^";
        i++;
      }
      let first = true;
      while (i < source.length && (source[i] !== "]" || first)) {
        first = false;
        if (source[i] === "\\") {
          cls += escape();
          continue;
        }
        const a = source[i];
        if (source[i + 1] === "-" && source[i + 2] !== undefined && source[i + 2] !== "]" && source[i + 2] !== "\\") {
          const z = source[i + 2];
          cls += `${a}-${z}`;
          i += 3;
          if (ci && ((/[a-z]/.test(a) && /[a-z]/.test(z)) || (/[A-Z]/.test(a) && /[A-Z]/.test(z)))) extra += `${swapCase(a)}-${swapCase(z)}`;
          continue;
        }
        cls += a;
        if (ci && ASCII_LETTER.test(a)) extra += swapCase(a);
        i++;
      }
      if (i >= source.length) return source; // unterminated: let the regex converter report it
      out += cls + extra + "]";
      i++;
    } else if (source.startsWith("(?P<", i) || (source.startsWith("(?<", i) && !/^\(\?<[=!]/.test(source.slice(i)))) {
      // A named group: its name is copied as written (Python's `(?P<` spelled the JavaScript way).
      const end = source.indexOf(">", i);
      const stop = end < 0 ? source.length : end + 1;
      out += "(?<" + source.slice(source.indexOf("<", i) + 1, stop);
      i = stop;
    } else if (c === "." && dotAll) {
      out += "[\\s\\S]";
      i++;
    } else if (ci && ASCII_LETTER.test(c)) {
      out += `[${c}${swapCase(c)}]`;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/**
 * Checks a regex against the limits without parsing it (length, group depth, quantifier counts);
 * returns the sum of its quantifier counts.
 */
export function checkRegexLimits(source: string, limits: LarkLimits, pos: Pos = { line: 0, column: 0 }): number {
  const what = `regex /${source.length > 40 ? source.slice(0, 40) + "…" : source}/`;
  if (source.length > limits.maxRegexLength) throw new GrammarConversionError(what, `longer than ${limits.maxRegexLength} characters`, pos);
  let depth = 0;
  let total = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") i++;
    else if (c === "[") {
      for (i++; i < source.length && source[i] !== "]"; i++) if (source[i] === "\\") i++;
    } else if (c === "(") {
      if (++depth > limits.maxNesting) throw new GrammarConversionError(what, `groups nested deeper than ${limits.maxNesting}`, pos);
    } else if (c === ")") depth--;
    else if (c === "{") {
      const m = /^\{(\d+)(?:,(\d*))?\}/.exec(source.slice(i));
      if (m) {
        for (const n of [m[1], m[2]]) {
          if (n !== undefined && n !== "" && (n.length > 9 || Number(n) > limits.maxRepeat)) {
            throw new GrammarConversionError(what, `quantifier ${m[0]} is above the limit of ${limits.maxRepeat}`, pos);
          }
        }
        total += Number(m[2] || m[1]);
      }
    }
  }
  return total;
}

/** Body of the regex converter's rule for "any control character, JSON-escaped". */
const ESCAPED_CONTROL_BODY = `"\\\\" ([bfnrt] | "u00" [01] [0-9a-fA-F])`;

function unescapeGbnfLiteral(body: string): string {
  return body.replace(/\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)/g, (_, e: string) => {
    switch (e[0]) {
      case "n": return "\n";
      case "r": return "\r";
      case "t": return "\t";
      case "x": case "u": case "U": return e.length > 1 ? String.fromCodePoint(parseInt(e.slice(1), 16)) : e;
      default: return e;
    }
  });
}

/**
 * compilePattern's grammar, or for a pattern it would write ambiguously its DFA's, which llama.cpp
 * reads one way only (see readsAmbiguously). One too large for an automaton is refused.
 */
function compileReadOneWay(b: GrammarBuilder, pattern: string, hint: string): { expr: string; minLength: number } {
  const ast = parsePattern(pattern);
  if (hasLookahead(ast) || !readsAmbiguously(ast)) return compilePattern(b, pattern, hint);
  let dfa: Dfa;
  try {
    dfa = cachedDfa(`regex:${pattern}`, () => langOfRegex(ast));
  } catch (e) {
    if (e instanceof AutomatonLimitError) throw new PatternLimitError(`${e.message} (its grammar as written would read a text in many ways at once)`);
    throw e;
  }
  const range = dfaLengthRange(dfa);
  if (range === null) throw new PatternError("no string matches the pattern");
  return { expr: dfaToGbnf(b, dfa, hint)!, minLength: range[0] };
}

/**
 * GBNF for the raw text a regex matches in full. regex-to-gbnf.ts writes GBNF for the JSON-encoded
 * form of the match (it serves JSON Schema string patterns): its classes hold only characters JSON
 * keeps raw, and its literals are JSON-encoded text. Compiled into a private builder, its rules
 * are copied here with every literal JSON-decoded and its "escaped control" rule replaced by the
 * control characters themselves, which gives the same structure over the raw characters.
 */
export function rawRegexExpr(b: GrammarBuilder, pattern: string, hint: string): { expr: string; minLength: number } {
  const sub = new GrammarBuilder();
  const compiled = compileReadOneWay(sub, pattern, hint);
  sub.shared("root", () => compiled.expr);
  const rules = sub
    .render()
    .trimEnd()
    .split("\n")
    .map((line) => {
      const m = /^([a-zA-Z0-9-]+) ::= (.*)$/.exec(line);
      if (!m) throw new Error(`regex converter output not understood: ${line}`);
      return { name: m[1], body: m[2] };
    });
  const rename = new Map<string, string>();
  for (const r of rules) if (r.name !== "root") rename.set(r.name, b.reserve(`${hint}-${r.name}`));
  const translate = (body: string): string => {
    if (body === ESCAPED_CONTROL_BODY) return charClass(cpSet([0, 0x1f]));
    let out = "";
    let i = 0;
    while (i < body.length) {
      const c = body[i];
      if (c === '"' || c === "[") {
        const close = c === '"' ? '"' : "]";
        let j = i + 1;
        while (j < body.length && body[j] !== close) j += body[j] === "\\" ? 2 : 1;
        const token = body.slice(i, j + 1);
        if (c === "[") out += token;
        else {
          const jsonText = unescapeGbnfLiteral(token.slice(1, -1));
          let raw: string;
          try {
            raw = JSON.parse(`"${jsonText}"`) as string;
          } catch {
            throw new Error(`regex converter output not understood: ${body}`);
          }
          out += raw === "" ? '""' : literal(raw);
        }
        i = j + 1;
        continue;
      }
      const ident = /^[a-zA-Z0-9-]+/.exec(body.slice(i));
      if (ident) {
        out += rename.get(ident[0]) ?? ident[0];
        i += ident[0].length;
        continue;
      }
      out += c;
      i++;
    }
    return out;
  };
  let root = "";
  for (const r of rules) {
    if (r.name === "root") root = translate(r.body);
    else b.define(rename.get(r.name)!, translate(r.body));
  }
  return { expr: root, minLength: compiled.minLength };
}

// ---------------------------------------------------------------------------------------------
// Conversion
// ---------------------------------------------------------------------------------------------

const WHITESPACE = [" ", "\t", "\n", "\r", "\f", "\v"];

let commonDefs: Map<string, Def> | undefined;

function common(): Map<string, Def> {
  if (!commonDefs) {
    const p = new LarkParser(new Tokens(COMMON_LARK), DEFAULT_LARK_LIMITS);
    p.parse();
    commonDefs = p.defs;
  }
  return commonDefs;
}

function mapRefs(e: Expr, f: (name: string) => string): Expr {
  switch (e.k) {
    case "ref": return { ...e, name: f(e.name) };
    case "seq": return { k: "seq", items: e.items.map((x) => mapRefs(x, f)) };
    case "alt": return { k: "alt", alts: e.alts.map((x) => mapRefs(x, f)) };
    case "rep": return { ...e, e: mapRefs(e.e, f) };
    default: return e;
  }
}

function forEachRef(e: Expr, f: (ref: Extract<Expr, { k: "ref" }>) => void): void {
  switch (e.k) {
    case "ref": f(e); break;
    case "seq": e.items.forEach((x) => forEachRef(x, f)); break;
    case "alt": e.alts.forEach((x) => forEachRef(x, f)); break;
    case "rep": forEachRef(e.e, f); break;
  }
}

class Converter {
  private readonly b = new GrammarBuilder();
  private readonly names = new Map<string, string>();
  private readonly regexCache = new Map<string, { expr: string; js: RegExp | null; nullable: boolean }>();
  private readonly nullableDefs = new Set<string>();
  private ws = "";

  constructor(
    private readonly defs: Map<string, Def>,
    private readonly ignores: Array<{ expr: Expr; pos: Pos }>,
    private readonly limits: LarkLimits,
    private readonly maxWs: number,
    private totalRepeat: number,
  ) {}

  convert(): string {
    const start = this.defs.get("start");
    if (!start || start.term) throw new GrammarConversionError("rule start", "the grammar has no `start` rule");
    // Every name used must exist; terminals may not use rules; terminals may not recurse.
    for (const d of this.defs.values()) {
      forEachRef(d.expr, (r) => {
        const target = this.defs.get(r.name);
        if (!target) throw new GrammarConversionError(`${TERM_NAME.test(r.name) ? "terminal" : "rule"} ${r.name}`, "used but not defined", r.pos);
        if (d.term && !target.term) throw new GrammarConversionError(`rule ${r.name}`, `used inside terminal ${d.name} (terminals cannot contain rules)`, r.pos);
      });
    }
    for (const ig of this.ignores) forEachRef(ig.expr, (r) => {
      if (!this.defs.has(r.name)) throw new GrammarConversionError(`%ignore ${r.name}`, "used but not defined", r.pos);
      if (!this.defs.get(r.name)!.term) throw new GrammarConversionError(`%ignore ${r.name}`, "only terminals can be ignored", r.pos);
    });
    this.checkTerminalCycles();
    // Regexes first: their limits and support are checked before anything is expanded.
    for (const d of this.defs.values()) this.visitRegexes(d.expr);
    for (const ig of this.ignores) this.visitRegexes(ig.expr);
    this.computeNullable();

    this.ws = this.ignoredWhitespace();
    const reachable = this.reachable();
    const bodies = new Map<string, Expr>();
    for (const name of reachable) {
      const d = this.defs.get(name)!;
      bodies.set(name, d.term ? d.expr : this.removeDirectLeftRecursion(d));
    }
    this.fixNullableRepetitions(bodies, reachable);
    this.checkLeftRecursion(bodies);

    for (const name of reachable) this.names.set(name, this.b.reserve(this.defs.get(name)!.term ? name : name.replace(/^_+/, "")));
    const root = this.b.shared("root", () => seq(this.names.get("start")!, this.ws));
    void root;
    for (const name of reachable) {
      const d = this.defs.get(name)!;
      this.b.define(this.names.get(name)!, this.emit(bodies.get(name)!, d.term, this.names.get(name)!));
    }
    const out = this.b.render();
    if (out.length > this.limits.maxOutputLength) throw new GrammarConversionError("grammar", `the GBNF would be longer than ${this.limits.maxOutputLength} characters`);
    return out;
  }

  private checkTerminalCycles(): void {
    const state = new Map<string, 1 | 2>();
    const visit = (name: string, path: string[]): void => {
      const d = this.defs.get(name)!;
      if (!d.term) return;
      if (state.get(name) === 2) return;
      if (state.get(name) === 1) throw new GrammarConversionError(`terminal ${name}`, `recursive terminal (${[...path, name].join(" → ")}); only rules may recurse`, d.pos);
      state.set(name, 1);
      forEachRef(d.expr, (r) => visit(r.name, [...path, name]));
      state.set(name, 2);
    };
    for (const name of this.defs.keys()) visit(name, []);
  }

  private visitRegexes(e: Expr): void {
    switch (e.k) {
      case "regex": this.regex(e); break;
      case "seq": e.items.forEach((x) => this.visitRegexes(x)); break;
      case "alt": e.alts.forEach((x) => this.visitRegexes(x)); break;
      case "rep": this.visitRegexes(e.e); break;
    }
  }

  private regex(e: Extract<Expr, { k: "regex" }>): { expr: string; js: RegExp | null; nullable: boolean } {
    const key = `${e.flags}/${e.source}`;
    const hit = this.regexCache.get(key);
    if (hit) return hit;
    const what = `regex /${e.source.length > 40 ? e.source.slice(0, 40) + "…" : e.source}/${e.flags}`;
    this.totalRepeat += checkRegexLimits(e.source, this.limits, e.pos);
    if (this.totalRepeat > this.limits.maxTotalRepeat) throw new GrammarConversionError(what, `repetition counts add up to more than ${this.limits.maxTotalRepeat}`, e.pos);
    const js = toJsSource(e.source, e.flags, e.pos);
    let compiled: { expr: string; minLength: number };
    try {
      compiled = rawRegexExpr(this.b, js, "re");
    } catch (err) {
      if (err instanceof PatternError) throw new GrammarConversionError(what, err.message, e.pos);
      throw err;
    }
    let re: RegExp | null = null;
    try {
      re = new RegExp(`^(?:${js})$`, "u");
    } catch {
      re = null;
    }
    const out = { expr: compiled.expr, js: re, nullable: compiled.minLength === 0 };
    this.regexCache.set(key, out);
    return out;
  }

  /** Whether `e` matches the one-character string `c` (for %ignore). */
  private matchesChar(e: Expr, c: string): boolean {
    switch (e.k) {
      case "lit": return e.ci ? e.text.toLowerCase() === c.toLowerCase() && [...e.text].length === 1 : e.text === c;
      case "range": return c.codePointAt(0)! >= e.from && c.codePointAt(0)! <= e.to;
      case "regex": return this.regex(e).js?.test(c) ?? false;
      case "ref": return this.matchesChar(this.defs.get(e.name)!.expr, c);
      case "alt": return e.alts.some((a) => this.matchesChar(a, c));
      case "rep": return (e.max === undefined || e.max >= 1) && (e.min <= 1 || this.nullable(e.e)) && this.matchesChar(e.e, c);
      case "seq": return e.items.some((x, i) => this.matchesChar(x, c) && e.items.every((y, j) => j === i || this.nullable(y)));
    }
  }

  private nullable(e: Expr): boolean {
    switch (e.k) {
      case "lit": return e.text === "";
      case "range": return false;
      case "regex": return this.regex(e).nullable;
      case "ref": return this.nullableDefs.has(e.name);
      case "alt": return e.alts.some((a) => this.nullable(a));
      case "seq": return e.items.every((x) => this.nullable(x));
      case "rep": return e.min === 0 || this.nullable(e.e);
    }
  }

  /** Which definitions can match the empty string (least fixpoint). */
  private computeNullable(): void {
    for (let changed = true; changed; ) {
      changed = false;
      for (const d of this.defs.values()) {
        if (!this.nullableDefs.has(d.name) && this.nullable(d.expr)) {
          this.nullableDefs.add(d.name);
          changed = true;
        }
      }
    }
  }

  private ignoredWhitespace(): string {
    if (this.ignores.length === 0) return "";
    const chars = WHITESPACE.filter((c) => this.ignores.some((ig) => this.matchesChar(ig.expr, c)));
    if (chars.length === 0 || this.maxWs === 0) return "";
    const set: CodePointSet = cpSet(...chars.map((c) => c.codePointAt(0)!));
    return this.b.shared("ws", () => (this.maxWs === 1 ? `${charClass(set)}?` : `${charClass(set)}{0,${this.maxWs}}`));
  }

  private reachable(): string[] {
    const seen = new Set<string>();
    const order: string[] = [];
    const visit = (name: string) => {
      if (seen.has(name)) return;
      seen.add(name);
      order.push(name);
      forEachRef(this.defs.get(name)!.expr, (r) => visit(r.name));
    };
    visit("start");
    return order;
  }

  /**
   * `a: a X | a Y | B | C` → `a: (B | C) (X | Y)*` (same strings). Alternatives that are just `a`
   * are dropped (they add nothing).
   */
  private removeDirectLeftRecursion(d: Def): Expr {
    const alts = d.expr.k === "alt" ? d.expr.alts : [d.expr];
    const isSelf = (e: Expr) => e.k === "ref" && e.name === d.name;
    const tails: Expr[] = [];
    const bases: Expr[] = [];
    for (const a of alts) {
      if (isSelf(a)) continue;
      if (a.k === "seq" && a.items.length > 0 && isSelf(a.items[0])) tails.push(a.items.length === 2 ? a.items[1] : { k: "seq", items: a.items.slice(1) });
      else bases.push(a);
    }
    if (tails.length === 0 && bases.length === alts.length) return d.expr;
    if (bases.length === 0) throw new GrammarConversionError(`rule ${d.name}`, "left recursion without a non-recursive alternative (it matches nothing finite)", d.pos);
    const base: Expr = bases.length === 1 ? bases[0] : { k: "alt", alts: bases };
    if (tails.length === 0) return base;
    const tail: Expr = tails.length === 1 ? tails[0] : { k: "alt", alts: tails };
    return { k: "seq", items: [base, { k: "rep", e: tail, min: 0, max: undefined, pos: d.pos }] };
  }

  /**
   * llama.cpp sees left recursion in a repetition of something that can be empty, and refuses it
   * (or loops). E{m,n} with E nullable is the same language as E'{0,n} with E' = E without the empty
   * string, so every such repetition is rewritten; E' may need non-empty variants of rules
   * (`name__ne`), which are added to `bodies` and `order`.
   */
  private fixNullableRepetitions(bodies: Map<string, Expr>, order: string[]): void {
    const derived = new Map<string, string | null>();
    const pending: string[] = [];
    const nonEmpty = (e: Expr): Expr | null => {
      switch (e.k) {
        case "lit": return e.text === "" ? null : e;
        case "range": return e;
        case "regex":
          if (!this.nullable(e)) return e;
          throw new GrammarConversionError(`regex /${e.source}/`, "a regex that can match the empty string, inside a repetition of something that can be empty, is not supported", e.pos);
        case "ref": {
          if (!this.nullable(e)) return e;
          let name = derived.get(e.name);
          if (name === null) return null;
          if (name === undefined) {
            name = `${e.name}__ne`;
            derived.set(e.name, name);
            const d = this.defs.get(e.name)!;
            // Placeholder first: a recursive rule refers to its own non-empty variant.
            this.defs.set(name, { name, term: d.term, expr: { k: "seq", items: [] }, pos: d.pos });
            const body = nonEmpty(bodies.get(e.name) ?? d.expr);
            if (body === null) {
              derived.set(e.name, null);
              this.defs.delete(name);
              return null;
            }
            this.defs.get(name)!.expr = body;
            bodies.set(name, body);
            order.push(name);
            pending.push(name);
          }
          return { k: "ref", name, pos: e.pos };
        }
        case "alt": {
          const alts = e.alts.map(nonEmpty).filter((x): x is Expr => x !== null);
          return alts.length === 0 ? null : alts.length === 1 ? alts[0] : { k: "alt", alts };
        }
        case "seq": {
          if (e.items.length === 0) return null;
          const [head, ...rest] = e.items;
          if (!this.nullable(head)) return e;
          const alts: Expr[] = [];
          const h = nonEmpty(head);
          if (h !== null) alts.push({ k: "seq", items: [h, ...rest] });
          const r = nonEmpty({ k: "seq", items: rest });
          if (r !== null) alts.push(r);
          return alts.length === 0 ? null : alts.length === 1 ? alts[0] : { k: "alt", alts };
        }
        case "rep": {
          if (e.max === 0) return null;
          if (!this.nullable(e.e)) return { ...e, min: Math.max(e.min, 1) };
          const inner = nonEmpty(e.e);
          return inner === null ? null : { ...e, e: inner, min: 1 };
        }
      }
    };
    const fix = (e: Expr): Expr => {
      switch (e.k) {
        case "seq": return { k: "seq", items: e.items.map(fix) };
        case "alt": return { k: "alt", alts: e.alts.map(fix) };
        case "rep": {
          const inner = fix(e.e);
          if (!this.nullable(inner)) return { ...e, e: inner };
          if (e.max === 1) return inner;
          const ne = nonEmpty(inner);
          return ne === null ? { k: "lit", text: "", ci: false, pos: e.pos } : { ...e, e: fix(ne), min: 0 };
        }
        default: return e;
      }
    };
    for (const name of [...bodies.keys()]) bodies.set(name, fix(bodies.get(name)!));
    while (pending.length > 0) {
      const name = pending.pop()!;
      const body = fix(bodies.get(name)!);
      bodies.set(name, body);
      this.defs.get(name)!.expr = body;
    }
  }

  /** Refuses any remaining left recursion (llama.cpp refuses it, or hangs when it hides behind an empty match). */
  private checkLeftRecursion(bodies: Map<string, Expr>): void {
    const left = (e: Expr, out: Set<string>): void => {
      switch (e.k) {
        case "ref": if (!this.defs.get(e.name)!.term) out.add(e.name); break;
        case "alt": e.alts.forEach((a) => left(a, out)); break;
        case "rep": left(e.e, out); break;
        case "seq":
          for (const x of e.items) {
            left(x, out);
            if (!this.nullable(x)) break;
          }
          break;
      }
    };
    const edges = new Map<string, Set<string>>();
    for (const [name, body] of bodies) {
      if (this.defs.get(name)!.term) continue;
      const s = new Set<string>();
      left(body, s);
      edges.set(name, s);
    }
    const state = new Map<string, 1 | 2>();
    const visit = (name: string, path: string[]): void => {
      if (state.get(name) === 2) return;
      if (state.get(name) === 1) {
        const cycle = [...path.slice(path.indexOf(name)), name];
        const d = this.defs.get(name)!;
        const how = cycle.length === 2 ? "left recursion that cannot be rewritten (behind a part that can be empty, or inside a repetition)" : "indirect left recursion";
        throw new GrammarConversionError(`rule ${name}`, `${how} (${cycle.join(" → ")}); only direct left recursion (\`${name}: ${name} …\`) is rewritten`, d.pos);
      }
      state.set(name, 1);
      for (const n of edges.get(name) ?? []) visit(n, [...path, name]);
      state.set(name, 2);
    };
    for (const name of edges.keys()) visit(name, []);
  }

  private emit(e: Expr, term: boolean, hint: string): string {
    const token = (x: string) => (term ? x : seq(this.ws, x));
    switch (e.k) {
      case "lit": {
        if (!e.ci) return token(e.text === "" ? '""' : literal(e.text));
        const parts: string[] = [];
        let run = "";
        for (const ch of e.text) {
          const variants = new Set([ch, ch.toLowerCase(), ch.toUpperCase()].filter((v) => [...v].length === 1));
          if (variants.size === 1) {
            run += ch;
            continue;
          }
          if (run) parts.push(literal(run));
          run = "";
          parts.push(charClass(cpSet(...[...variants].map((v) => v.codePointAt(0)!))));
        }
        if (run) parts.push(literal(run));
        return token(seq(...parts));
      }
      case "range": {
        const set = setIntersect(cpSet([e.from, e.to]), ALL_CHARS);
        if (setIsEmpty(set)) throw new GrammarConversionError("literal range", "matches no character", e.pos);
        return token(charClass(set));
      }
      case "regex": return token(group(this.regex(e).expr));
      case "ref": {
        const name = this.names.get(e.name)!;
        return this.defs.get(e.name)!.term && !term ? seq(this.ws, name) : name;
      }
      case "seq": return seq(...e.items.map((x) => this.emit(x, term, hint)));
      case "alt": return alt(...e.alts.map((x) => this.emit(x, term, hint)));
      case "rep": {
        if (e.max === 0) return '""';
        const inner = this.emit(e.e, term, hint);
        if (inner === '""') return '""';
        return this.b.repeat(hint, group(inner), e.min, e.max);
      }
    }
  }
}

/**
 * Converts a Lark grammar (OpenAI custom tools' `syntax: "lark"`) to GBNF with a `root` rule.
 * Throws GrammarConversionError for anything it cannot convert (see the top of this file).
 */
export function larkToGbnf(definition: string, options: LarkToGbnfOptions = {}): string {
  const limits = { ...DEFAULT_LARK_LIMITS, ...options.limits };
  if (definition.length > limits.maxGrammarLength) throw new GrammarConversionError("grammar", `longer than ${limits.maxGrammarLength} characters`);
  const maxWs = options.maxIgnoredWhitespace ?? 4;
  if (!Number.isInteger(maxWs) || maxWs < 0 || maxWs > 64) throw new RangeError("maxIgnoredWhitespace must be an integer from 0 to 64");
  const parser = new LarkParser(new Tokens(definition), limits);
  parser.parse();
  const ignores: Array<{ expr: Expr; pos: Pos }> = [];
  const imported = new Map<string, string>(); // common name → name in this grammar
  const importCommon = (name: string, alias: string, pos: Pos): void => {
    const d = common().get(name);
    if (!d || name.startsWith("_")) throw new GrammarConversionError(`%import common.${name}`, "not one of the common terminals provided", pos);
    const internal = (n: string): string => {
      const existing = imported.get(n);
      if (existing) return existing;
      const local = `__COMMON_${n.replace(/^_+/, "")}`;
      imported.set(n, local);
      const dep = common().get(n)!;
      parser.addDef({ name: local, term: true, expr: mapRefs(dep.expr, internal), pos });
      return local;
    };
    if (parser.defs.has(alias)) throw new GrammarConversionError(`%import common.${name}`, `${alias} is defined twice`, pos);
    parser.addDef({ name: alias, term: true, expr: mapRefs(d.expr, internal), pos });
  };
  for (const dir of parser.directives) {
    if (dir.kind === "import") for (const n of dir.names) importCommon(n.name, n.alias, n.pos);
    else ignores.push({ expr: dir.expr, pos: dir.pos });
  }
  return withAutomatonBudget(() => new Converter(parser.defs, ignores, limits, maxWs, parser.totalRepeat).convert());
}
