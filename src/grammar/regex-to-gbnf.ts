// A practical subset of ECMAScript regular expressions (what JSON Schema `pattern` uses, with the
// `u` flag) translated into GBNF for the *content* of a JSON string: every regex character becomes
// the JSON encoding of one code point (raw where JSON allows it, else its one canonical escape).
//
// Supported: literals, escapes (\d \D \w \W \s \S, \t \n \r \f \v \0, \xHH, \uHHHH, \u{H…}, escaped
// punctuation), ".", classes with ranges and negation (and \d \w \s inside), groups ( ), (?: ),
// (?<name> ), alternation, quantifiers ? * + {n} {n,} {n,m} (lazy forms too), "^" at the start and
// "$" at the end of a top-level alternative.
// Lookaheads (?=…) and (?!…) are supported at the start of a top-level alternative (right after
// "^", e.g. Pydantic's Decimal pattern `^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$`): there a lookahead is an
// intersection with (or a difference from) a regular language, which automaton.ts builds exactly.
// Refused: other lookarounds, backreferences, \b \B, \p{…}, anchors elsewhere, and anything else.
//
// Bounds (PatternLimits), checked before any work that grows with them: pattern length, group
// nesting depth (checked without recursion, so a pattern of 5,000 nested groups is refused, not a
// stack overflow), and every repetition count.
//
// The match is treated as anchored at both ends. JSON Schema patterns are unanchored searches, so
// a full match is a subset of what the pattern allows: every generated string is valid. A subset
// is not enough where a pattern is checked against other constraints (several patterns, lengths,
// enum values): there the `search` option reads it as JSON Schema does, with Σ* on each side that
// no `^` or `$` anchors.

import {
  ALL_CHARS,
  alt,
  charClass,
  cpSet,
  group,
  JSON_RAW_CHARS,
  literal,
  seq,
  setHas,
  setIntersect,
  setIsEmpty,
  setMinus,
  setUnion,
  type CodePointSet,
  type GrammarBuilder,
} from "./gbnf.ts";

export class PatternError extends Error {}

/** A pattern beyond PatternLimits (a hostile or absurd input rather than an unsupported one). */
export class PatternLimitError extends PatternError {}

export type PatternLimits = {
  /** Longest pattern, in UTF-16 units. */
  maxPatternLength: number;
  /** Deepest nesting of groups. */
  maxGroupDepth: number;
  /** Largest repetition count ({n,m}). */
  maxRepeat: number;
};

export const DEFAULT_PATTERN_LIMITS: PatternLimits = { maxPatternLength: 10_000, maxGroupDepth: 64, maxRepeat: 100_000 };

type Node =
  | { kind: "set"; set: CodePointSet }
  | { kind: "seq"; items: Node[] }
  | { kind: "alt"; alts: Node[] }
  | { kind: "rep"; node: Node; min: number; max: number | undefined }
  /** Only as a top-level alternative: `main` that is also in every `musts` and in no `mustNots`. */
  | { kind: "look"; main: Node; musts: Node[]; mustNots: Node[] };

export type RegexNode = Node;

/** Σ*: any string of code points. */
const ANY: Node = { kind: "rep", node: { kind: "set", set: ALL_CHARS }, min: 0, max: undefined };

const DIGIT = cpSet(["0".codePointAt(0)!, "9".codePointAt(0)!]);
const WORD = cpSet([0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a], "_");
const SPACE = cpSet([0x09, 0x0d], 0x20, 0xa0, 0x1680, [0x2000, 0x200a], 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff);
const LINE_TERMINATORS = cpSet(0x0a, 0x0d, 0x2028, 0x2029);
const SYNTAX_CHARS = "^$\\.*+?()[]{}|/-";

const not = (set: CodePointSet) => setMinus(ALL_CHARS, set);

class Parser {
  private pos = 0;
  constructor(
    private readonly src: string,
    private readonly limits: PatternLimits,
    private readonly search: boolean,
  ) {}

  parse(): Node {
    const node = this.alternatives(false);
    if (this.pos < this.src.length) throw new PatternError(`unexpected "${this.peek()}" at ${this.pos}`);
    return node;
  }

  /**
   * Top-level alternatives, each `^`? lookahead* sequence `$`?. Inside a lookahead (`inLook`), an
   * alternative without `$` may be followed by anything (Σ* is appended); at the top level the
   * match is anchored anyway.
   */
  private alternatives(inLook: boolean): Node {
    const alts: Node[] = [];
    for (;;) {
      const startAnchored = this.peek() === "^";
      if (startAnchored) this.pos++;
      const musts: Node[] = [];
      const mustNots: Node[] = [];
      while (!inLook && (this.src.startsWith("(?=", this.pos) || this.src.startsWith("(?!", this.pos))) {
        const negative = this.src[this.pos + 2] === "!";
        this.pos += 3;
        const inner = this.alternatives(true);
        if (this.peek() !== ")") throw new PatternError("unbalanced parenthesis");
        this.pos++;
        (negative ? mustNots : musts).push(inner);
      }
      const items = this.sequence(true);
      let anchored = !inLook && !this.search;
      if (this.peek() === "$") {
        this.pos++;
        anchored = true;
        if (this.pos < this.src.length && this.peek() !== "|" && !(inLook && this.peek() === ")")) throw new PatternError(`"$" is supported only at the end`);
      }
      if (!anchored) items.push(ANY);
      // A search may start anywhere; with lookaheads the match keeps its start (a subset: the
      // lookahead and the match begin at the same place, which one Σ* in front cannot express).
      if (this.search && !inLook && !startAnchored && musts.length + mustNots.length === 0) items.unshift(ANY);
      const main: Node = { kind: "seq", items };
      alts.push(musts.length + mustNots.length > 0 ? { kind: "look", main, musts, mustNots } : main);
      if (this.peek() === "|") this.pos++;
      else break;
    }
    return alts.length === 1 ? alts[0] : { kind: "alt", alts };
  }

  private peek(): string | undefined {
    return this.src[this.pos];
  }

  private alternation(): Node {
    const alts: Node[] = [{ kind: "seq", items: this.sequence(false) }];
    while (this.peek() === "|") {
      this.pos++;
      alts.push({ kind: "seq", items: this.sequence(false) });
    }
    return alts.length === 1 ? alts[0] : { kind: "alt", alts };
  }

  private sequence(topLevel: boolean): Node[] {
    const items: Node[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === "|" || c === ")") break;
      if (c === "$" && topLevel) break;
      if (c === "^" || c === "$") throw new PatternError(`"${c}" is supported only at the start/end of the pattern`);
      items.push(this.quantified(this.atom()));
    }
    return items;
  }

  private quantified(node: Node): Node {
    const c = this.peek();
    let min: number;
    let max: number | undefined;
    if (c === "?") [min, max] = [0, 1];
    else if (c === "*") [min, max] = [0, undefined];
    else if (c === "+") [min, max] = [1, undefined];
    else if (c === "{") {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.src.slice(this.pos));
      if (!m) throw new PatternError(`bad quantifier at ${this.pos}`);
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === "" ? undefined : Number(m[3]);
      if (min > this.limits.maxRepeat || (max ?? 0) > this.limits.maxRepeat) {
        throw new PatternLimitError(`repetition count ${m[0]} is above the limit of ${this.limits.maxRepeat}`);
      }
      if (max !== undefined && max < min) throw new PatternError(`bad quantifier ${m[0]}`);
      this.pos += m[0].length - 1;
    } else return node;
    this.pos++;
    if (this.peek() === "?") this.pos++; // lazy: same language for a full match
    const next = this.peek();
    if (next !== undefined && "?*+{".includes(next)) throw new PatternError(`nested quantifier at ${this.pos}`);
    return { kind: "rep", node, min, max };
  }

  private atom(): Node {
    const c = this.src[this.pos];
    if (c === "(") {
      this.pos++;
      if (this.src.startsWith("?:", this.pos)) this.pos += 2;
      else if (this.src.startsWith("?<", this.pos) && !/^\?<[=!]/.test(this.src.slice(this.pos))) {
        const end = this.src.indexOf(">", this.pos);
        if (end < 0) throw new PatternError("bad group name");
        this.pos = end + 1;
      } else if (this.peek() === "?") throw new PatternError(`lookaround or group flag "(${this.src.slice(this.pos, this.pos + 3)}" is not supported here (lookaheads only at the start of the pattern)`);
      const inner = this.alternation();
      if (this.peek() !== ")") throw new PatternError("unbalanced parenthesis");
      this.pos++;
      return inner;
    }
    if (c === "[") return { kind: "set", set: this.charClassBody() };
    if (c === ".") {
      this.pos++;
      return { kind: "set", set: not(LINE_TERMINATORS) };
    }
    if (c === "\\") return { kind: "set", set: this.escape(false) };
    if (c === "*" || c === "+" || c === "?" || c === "{" || c === "}" || c === "]") throw new PatternError(`unexpected "${c}" at ${this.pos}`);
    const cp = this.src.codePointAt(this.pos)!;
    this.pos += cp > 0xffff ? 2 : 1;
    return { kind: "set", set: cpSet(cp) };
  }

  /** An escape starting at "\\"; inside a class, \b is a backspace and \- a hyphen. */
  private escape(inClass: boolean): CodePointSet {
    this.pos++;
    const c = this.src[this.pos];
    if (c === undefined) throw new PatternError("trailing backslash");
    this.pos++;
    switch (c) {
      case "d": return DIGIT;
      case "D": return not(DIGIT);
      case "w": return WORD;
      case "W": return not(WORD);
      case "s": return SPACE;
      case "S": return not(SPACE);
      case "t": return cpSet(0x09);
      case "n": return cpSet(0x0a);
      case "r": return cpSet(0x0d);
      case "f": return cpSet(0x0c);
      case "v": return cpSet(0x0b);
      case "0":
        if (/\d/.test(this.peek() ?? "")) throw new PatternError("octal escapes are not supported");
        return cpSet(0);
      case "x": {
        const m = /^[0-9a-fA-F]{2}/.exec(this.src.slice(this.pos));
        if (!m) throw new PatternError("bad \\x escape");
        this.pos += 2;
        return cpSet(parseInt(m[0], 16));
      }
      case "u": {
        const braced = /^\{([0-9a-fA-F]{1,6})\}/.exec(this.src.slice(this.pos));
        if (braced) {
          this.pos += braced[0].length;
          return cpSet(parseInt(braced[1], 16));
        }
        const m = /^[0-9a-fA-F]{4}/.exec(this.src.slice(this.pos));
        if (!m) throw new PatternError("bad \\u escape");
        this.pos += 4;
        let cp = parseInt(m[0], 16);
        const low = /^\\u(d[c-f][0-9a-f]{2})/i.exec(this.src.slice(this.pos));
        if (cp >= 0xd800 && cp <= 0xdbff && low) {
          this.pos += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (parseInt(low[1], 16) - 0xdc00);
        }
        if (cp >= 0xd800 && cp <= 0xdfff) throw new PatternError("lone surrogate escapes are not supported");
        return cpSet(cp);
      }
      case "b":
        if (inClass) return cpSet(0x08);
        throw new PatternError("word boundaries (\\b) are not supported");
      case "-":
        if (inClass) return cpSet("-");
        break;
    }
    if (/[1-9]/.test(c) || c === "k") throw new PatternError("backreferences are not supported");
    if (c === "B") throw new PatternError("word boundaries (\\B) are not supported");
    if (c === "p" || c === "P") throw new PatternError("Unicode property escapes are not supported");
    if (SYNTAX_CHARS.includes(c)) return cpSet(c);
    throw new PatternError(`escape "\\${c}" is not supported`);
  }

  private charClassBody(): CodePointSet {
    this.pos++; // [
    let negated = false;
    if (this.peek() === "^") {
      negated = true;
      this.pos++;
    }
    const parts: CodePointSet[] = [];
    let first = true;
    for (;;) {
      const c = this.peek();
      if (c === undefined) throw new PatternError("unterminated character class");
      if (c === "]" && !first) break;
      if (c === "]") throw new PatternError("empty character class");
      first = false;
      const start = this.classAtom();
      if (this.peek() === "-" && this.src[this.pos + 1] !== "]" && this.src[this.pos + 1] !== undefined) {
        this.pos++;
        const end = this.classAtom();
        const single = (s: CodePointSet) => (s.length === 1 && s[0][0] === s[0][1] ? s[0][0] : undefined);
        const a = single(start);
        const z = single(end);
        if (a === undefined || z === undefined) throw new PatternError("a class range needs single characters at both ends");
        if (z < a) throw new PatternError("class range out of order");
        parts.push(cpSet([a, z]));
      } else parts.push(start);
    }
    this.pos++; // ]
    const set = setIntersect(setUnion(...parts), ALL_CHARS);
    return negated ? setMinus(ALL_CHARS, set) : set;
  }

  private classAtom(): CodePointSet {
    if (this.peek() === "\\") return this.escape(true);
    const cp = this.src.codePointAt(this.pos)!;
    this.pos += cp > 0xffff ? 2 : 1;
    return cpSet(cp);
  }
}

/** JSON escapes of the code points that cannot appear raw in a JSON string. */
function escapeOf(cp: number): string {
  switch (cp) {
    case 0x22: return '\\"';
    case 0x5c: return "\\\\";
    case 0x08: return "\\b";
    case 0x09: return "\\t";
    case 0x0a: return "\\n";
    case 0x0c: return "\\f";
    case 0x0d: return "\\r";
    default: return `\\u${cp.toString(16).padStart(4, "0")}`;
  }
}

const CONTROLS = cpSet([0, 0x1f]);

/**
 * GBNF for the JSON encoding of one code point from `set`: a class of the raw ones plus the
 * canonical escape of each one that JSON requires escaped.
 */
export function jsonEncodedChar(b: GrammarBuilder, set: CodePointSet): string {
  const parts: string[] = [];
  const raw = setIntersect(set, JSON_RAW_CHARS);
  if (!setIsEmpty(raw)) parts.push(charClass(raw));
  if (setHas(set, 0x22)) parts.push(literal('\\"'));
  if (setHas(set, 0x5c)) parts.push(literal("\\\\"));
  if (setIsEmpty(setMinus(CONTROLS, set))) {
    parts.push(b.rule("escaped-control", `"\\\\" ([bfnrt] | "u00" [01] [0-9a-fA-F])`));
  } else {
    for (const [a, z] of setIntersect(set, CONTROLS)) for (let cp = a; cp <= z; cp++) parts.push(literal(escapeOf(cp)));
  }
  if (parts.length === 0) throw new PatternError("character class matches nothing");
  return parts.length === 1 ? parts[0] : b.rule("pattern-char", alt(...parts));
}

function lengthRange(n: Node): [number, number] {
  switch (n.kind) {
    case "set": return [1, 1];
    case "seq": return n.items.map(lengthRange).reduce(([a, b], [c, d]) => [a + c, b + d], [0, 0]);
    case "alt": {
      const rs = n.alts.map(lengthRange);
      return [Math.min(...rs.map((r) => r[0])), Math.max(...rs.map((r) => r[1]))];
    }
    case "rep": {
      const [a, b] = lengthRange(n.node);
      return [a * n.min, n.max === undefined ? (b === 0 ? 0 : Infinity) : b * n.max];
    }
    case "look":
      return lengthRange(n.main); // a superset of the lengths: the lookaheads only remove strings
  }
}

/** The same language without the empty string (null when nothing is left). */
function withoutEmpty(n: Node): Node | null {
  switch (n.kind) {
    case "set":
    case "look":
      return n;
    case "alt": {
      const alts = n.alts.map(withoutEmpty).filter((a): a is Node => a !== null);
      return alts.length === 0 ? null : alts.length === 1 ? alts[0] : { kind: "alt", alts };
    }
    case "seq": {
      if (n.items.length === 0) return null;
      const [head, ...rest] = n.items;
      if (lengthRange(head)[0] > 0) return n;
      // head matches "": either head is non-empty (anything may follow), or the rest is.
      const headNonEmpty = withoutEmpty(head);
      const restNonEmpty = withoutEmpty({ kind: "seq", items: rest });
      const alts: Node[] = [];
      if (headNonEmpty !== null) alts.push({ kind: "seq", items: [headNonEmpty, ...rest] });
      if (restNonEmpty !== null) alts.push(restNonEmpty);
      return alts.length === 0 ? null : alts.length === 1 ? alts[0] : { kind: "alt", alts };
    }
    case "rep": {
      if (n.max === 0 || lengthRange(n.node)[1] === 0) return null;
      if (lengthRange(n.node)[0] === 0) {
        const inner = withoutEmpty(n.node);
        return inner === null ? null : { kind: "rep", node: inner, min: 1, max: n.max };
      }
      return n.min === 0 ? { kind: "rep", node: n.node, min: 1, max: n.max } : n;
    }
  }
}

function singleChar(n: Node): number | undefined {
  return n.kind === "set" && n.set.length === 1 && n.set[0][0] === n.set[0][1] ? n.set[0][0] : undefined;
}

function emit(b: GrammarBuilder, n: Node, hint: string): string {
  switch (n.kind) {
    case "look": throw new Error("lookaheads are compiled through automaton.ts");
    case "set": return jsonEncodedChar(b, n.set);
    case "alt": return alt(...n.alts.map((a) => emit(b, a, hint)));
    case "rep": {
      const [lo, hi] = lengthRange(n.node);
      if (hi === 0 || n.max === 0) return '""';
      if (lo > 0) return b.repeat(hint, group(emit(b, n.node, hint)), n.min, n.max);
      // X can match "": X{n,m} is X{0,m}, and X? is X. GBNF cannot repeat something that may be
      // empty (llama.cpp sees left recursion), so repeat the non-empty part of X instead.
      if (n.max === 1) return emit(b, n.node, hint);
      const nonEmpty = withoutEmpty(n.node);
      return nonEmpty === null ? '""' : b.repeat(hint, group(emit(b, nonEmpty, hint)), 0, n.max);
    }
    case "seq": {
      // Runs of single characters become one literal of their JSON encoding.
      const out: string[] = [];
      let run = "";
      const flush = () => {
        if (run !== "") out.push(literal(run));
        run = "";
      };
      for (const item of n.items) {
        const cp = singleChar(item);
        if (cp !== undefined) run += setHas(JSON_RAW_CHARS, cp) ? String.fromCodePoint(cp) : escapeOf(cp);
        else {
          flush();
          out.push(emit(b, item, hint));
        }
      }
      flush();
      return seq(...out);
    }
  }
}

export type CompiledPattern = {
  /** GBNF for the JSON-encoded content of a matching string (without the quotes). */
  expr: string;
  /** Length range of matching strings, in code points. */
  minLength: number;
  maxLength: number;
};

/** Group nesting depth of a pattern, found without recursion (classes and escapes skipped). */
function groupDepth(src: string): number {
  let depth = 0;
  let max = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "\\") i++;
    else if (c === "[") {
      for (i++; i < src.length && src[i] !== "]"; i++) if (src[i] === "\\") i++;
    } else if (c === "(") max = Math.max(max, ++depth);
    else if (c === ")") depth--;
  }
  return max;
}

/**
 * Parse `pattern` into a regex tree (full-match semantics, or JSON Schema's search with `search`);
 * throws PatternError for anything outside the supported subset and PatternLimitError beyond
 * `limits`. Never runs the pattern.
 */
export function parsePattern(pattern: string, limits: PatternLimits = DEFAULT_PATTERN_LIMITS, search = false): RegexNode {
  if (pattern.length > limits.maxPatternLength) throw new PatternLimitError(`pattern is longer than ${limits.maxPatternLength} characters`);
  const depth = groupDepth(pattern);
  if (depth > limits.maxGroupDepth) throw new PatternLimitError(`pattern nests groups ${depth} deep (limit ${limits.maxGroupDepth})`);
  try {
    // Syntax check only (compiling a RegExp does not run it).
    new RegExp(pattern, "u");
  } catch (e) {
    throw new PatternError(`invalid regular expression: ${(e as Error).message}`);
  }
  return new Parser(pattern, limits, search).parse();
}

/** Whether the tree needs automaton.ts (it has lookaheads). */
export function hasLookahead(n: RegexNode): boolean {
  return n.kind === "look" || (n.kind === "alt" && n.alts.some(hasLookahead));
}

/**
 * Whether a grammar written from the tree as it stands can be in many places of itself at once, in
 * a way that multiplies under repetition. llama.cpp's sampler keeps one parse stack per place: for
 * `(a{2,9}){2,9}` nested a few deep, hundreds of thousands, and every token of every model on the
 * decode thread waits for them (a 60-token answer took 10 s). Such a tree is compiled as a DFA
 * instead (automaton.ts), which is in one place only.
 *
 * The test: inside a repeat, a part that repeats a variable number of times (or a repeat whose body
 * can be empty) where the character that would continue it could also begin what follows it:
 * `(\w+\s?)+` (a word character continues the word or starts the next one), `(a{2,9}){2,9}`. A
 * repeat whose iterations are told apart by their first character, `(x d{1,1000}){1,5}` or
 * `(\d{1,3}\.){3}`, is read one way and stays as written (its DFA could be large: it counts).
 */
export function readsAmbiguously(n: Node): boolean {
  return ambiguousIn(n, EMPTY_SET, false);
}

const EMPTY_SET: CodePointSet = cpSet();

function nullable(n: Node): boolean {
  switch (n.kind) {
    case "set": return false;
    case "seq": return n.items.every(nullable);
    case "alt": return n.alts.some(nullable);
    case "rep": return n.min === 0 || nullable(n.node);
    case "look": return nullable(n.main);
  }
}

/** The characters a match of `n` can begin with. */
function firstChars(n: Node): CodePointSet {
  switch (n.kind) {
    case "set": return n.set;
    case "seq": {
      const parts: CodePointSet[] = [];
      for (const item of n.items) {
        parts.push(firstChars(item));
        if (!nullable(item)) break;
      }
      return setUnion(EMPTY_SET, ...parts);
    }
    case "alt": return setUnion(EMPTY_SET, ...n.alts.map(firstChars));
    case "rep": return firstChars(n.node);
    case "look": return firstChars(n.main);
  }
}

/** `follow`: the characters that may come right after `n`; `inRepeat`: `n` is inside a repeat that iterates. */
function ambiguousIn(n: Node, follow: CodePointSet, inRepeat: boolean): boolean {
  switch (n.kind) {
    case "set":
      return false;
    case "look":
      return [n.main, ...n.musts, ...n.mustNots].some((x) => ambiguousIn(x, follow, inRepeat));
    case "alt":
      return n.alts.some((a) => ambiguousIn(a, follow, inRepeat));
    case "seq": {
      // What follows each item: the first characters of the items after it, up to one that cannot be empty.
      let after = follow;
      for (let i = n.items.length - 1; i >= 0; i--) {
        const item = n.items[i];
        if (ambiguousIn(item, after, inRepeat)) return true;
        after = nullable(item) ? setUnion(firstChars(item), after) : firstChars(item);
      }
      return false;
    }
    case "rep": {
      const iterates = n.max === undefined || n.max > 1;
      const variable = n.max === undefined || n.max > n.min;
      const first = firstChars(n.node);
      if (inRepeat && variable && !setIsEmpty(setIntersect(first, follow))) return true;
      if (iterates && (inRepeat || variable) && nullable(n.node)) return true;
      return ambiguousIn(n.node, iterates ? setUnion(first, follow) : follow, inRepeat || iterates);
    }
  }
}

/** Length range of the strings a regex tree matches (a superset where lookaheads are involved). */
export function regexLengthRange(n: RegexNode): [number, number] {
  return lengthRange(n);
}

/** GBNF for the JSON-encoded content of strings a lookahead-free tree matches. */
export function emitRegex(b: GrammarBuilder, n: RegexNode, hint: string): string {
  if (hasLookahead(n)) throw new Error("emitRegex: lookaheads need automaton.ts");
  return emit(b, n, hint);
}

/**
 * Compile a lookahead-free `pattern`; throws PatternError for anything outside the supported
 * subset (patterns with lookaheads go through automaton.ts, see json-schema-to-gbnf.ts).
 */
export function compilePattern(b: GrammarBuilder, pattern: string, hint: string, limits: PatternLimits = DEFAULT_PATTERN_LIMITS): CompiledPattern {
  const ast = parsePattern(pattern, limits);
  if (hasLookahead(ast)) throw new PatternError("lookaheads need the automaton path");
  const [minLength, maxLength] = lengthRange(ast);
  return { expr: emit(b, ast, hint), minLength, maxLength };
}
