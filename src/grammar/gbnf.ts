// GBNF text helpers: literal and character-class escaping, code-point sets, and a rule table that
// reuses rules with identical bodies.
//
// Facts about llama.cpp's GBNF dialect this file relies on (checked against the bundled build):
// - rule names are [a-zA-Z0-9-]+ (no underscores); a rule is one line unless the line break sits
//   inside parentheses;
// - literals "..." and classes [...] / [^...] accept \xHH, \uHHHH, \UHHHHHHHH, \n, \r, \t, \\, \",
//   \[ and \] escapes; `""` is a valid (empty) literal;
// - postfix operators ? * + {m} {m,} {m,n}; a bounded repetition is expanded into rules when the
//   grammar is parsed and the parser refuses one whose count times the repeated item's size
//   reaches 2000, so large counts are split into chunks here (see `repeat`);
// - left recursion is refused at parse time.

/** Largest count written as one `{m,n}` repetition; bigger counts are built from chunks. */
const REPEAT_CHUNK = 1000;

/** The largest Unicode code point. */
export const MAX_CODE_POINT = 0x10ffff;

/** A set of code points as sorted, disjoint, non-adjacent inclusive ranges. */
export type CodePointSet = ReadonlyArray<readonly [number, number]>;

export function cpSet(...ranges: Array<readonly [number, number] | number | string>): CodePointSet {
  const out: Array<[number, number]> = [];
  for (const r of ranges) {
    if (typeof r === "number") out.push([r, r]);
    else if (typeof r === "string") for (const ch of r) out.push([ch.codePointAt(0)!, ch.codePointAt(0)!]);
    else out.push([r[0], r[1]]);
  }
  return normalizeSet(out);
}

function normalizeSet(ranges: Array<readonly [number, number]>): CodePointSet {
  const sorted = ranges.filter(([a, b]) => a <= b).map(([a, b]) => [a, b] as [number, number]).sort((x, y) => x[0] - y[0]);
  const out: Array<[number, number]> = [];
  for (const [a, b] of sorted) {
    const last = out[out.length - 1];
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

export function setUnion(...sets: CodePointSet[]): CodePointSet {
  return normalizeSet(sets.flat());
}

/** Complement within [0, MAX_CODE_POINT]. */
export function setComplement(set: CodePointSet): CodePointSet {
  const out: Array<[number, number]> = [];
  let next = 0;
  for (const [a, b] of set) {
    if (a > next) out.push([next, a - 1]);
    next = b + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

export function setIntersect(a: CodePointSet, b: CodePointSet): CodePointSet {
  return setComplement(setUnion(setComplement(a), setComplement(b)));
}

export function setMinus(a: CodePointSet, b: CodePointSet): CodePointSet {
  return setIntersect(a, setComplement(b));
}

export function setHas(set: CodePointSet, cp: number): boolean {
  return set.some(([a, b]) => cp >= a && cp <= b);
}

export function setIsEmpty(set: CodePointSet): boolean {
  return set.length === 0;
}

/** Every code point that can appear in UTF-8 text (surrogates cannot). */
export const ALL_CHARS = setMinus(cpSet([0, MAX_CODE_POINT]), cpSet([0xd800, 0xdfff]));

/** Code points a JSON string may contain unescaped. */
export const JSON_RAW_CHARS = setMinus(ALL_CHARS, cpSet([0, 0x1f], '"', "\\"));

function escapeCodePoint(cp: number): string {
  if (cp === 0x0a) return "\\n";
  if (cp === 0x0d) return "\\r";
  if (cp === 0x09) return "\\t";
  if ((cp >= 0x30 && cp <= 0x39) || (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a)) return String.fromCodePoint(cp);
  if (cp <= 0xff) return `\\x${cp.toString(16).toUpperCase().padStart(2, "0")}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).toUpperCase().padStart(4, "0")}`;
  return `\\U${cp.toString(16).toUpperCase().padStart(8, "0")}`;
}

/** A GBNF string literal matching exactly `text`. */
export function literal(text: string): string {
  let out = '"';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (cp < 0x20 || cp === 0x7f) out += escapeCodePoint(cp);
    else out += ch;
  }
  return out + '"';
}

function renderRanges(set: CodePointSet): string {
  let out = "";
  for (const [a, b] of set) {
    if (a === b) out += escapeCodePoint(a);
    else if (b === a + 1) out += escapeCodePoint(a) + escapeCodePoint(b);
    else out += `${escapeCodePoint(a)}-${escapeCodePoint(b)}`;
  }
  return out;
}

/**
 * A GBNF character class matching exactly the code points of `set` (which must not be empty). The
 * negated form is used when it is shorter; it lists surrogates explicitly so it stays exact.
 */
export function charClass(set: CodePointSet): string {
  if (set.length === 0) throw new Error("empty character class");
  const negated = setComplement(set);
  if (set.length === 1 && set[0][0] === set[0][1]) return literal(String.fromCodePoint(set[0][0]));
  return negated.length < set.length ? `[^${renderRanges(negated)}]` : `[${renderRanges(set)}]`;
}

/** Is `expr` a single GBNF item (name, literal, class or one parenthesised group)? */
export function isAtomic(expr: string): boolean {
  if (/^[a-zA-Z0-9-]+$/.test(expr)) return true;
  if (/^"(?:[^"\\]|\\.)*"$/.test(expr)) return true;
  if (/^\[(?:[^\]\\]|\\.)*\]$/.test(expr)) return true;
  if (expr.startsWith("(") && expr.endsWith(")")) {
    // Parenthesised as a whole only if the opening paren closes at the very end.
    let depth = 0;
    for (let i = 0; i < expr.length; i++) {
      const c = expr[i];
      if (c === '"' || c === "[") {
        const close = c === '"' ? '"' : "]";
        for (i++; i < expr.length && expr[i] !== close; i++) if (expr[i] === "\\") i++;
        continue;
      }
      if (c === "(") depth++;
      else if (c === ")" && --depth === 0 && i !== expr.length - 1) return false;
    }
    return true;
  }
  return false;
}

/** Whether `expr` holds a group or a postfix operator (outside literals and classes). */
function generatesRules(expr: string): boolean {
  for (let i = 1; i < expr.length - 1; i++) {
    const c = expr[i];
    if (c === '"' || c === "[") {
      const close = c === '"' ? '"' : "]";
      for (i++; i < expr.length && expr[i] !== close; i++) if (expr[i] === "\\") i++;
      continue;
    }
    if (c === "(" || c === "*" || c === "+" || c === "?" || c === "{") return true;
  }
  return false;
}

/** A parenthesised group's inside (a rule body needs no parentheses); anything else as it is. */
function ungroup(expr: string): string {
  return expr.startsWith("(") && isAtomic(expr) ? expr.slice(1, -1) : expr;
}

/** `expr` wrapped in parentheses unless it already is one item. */
export function group(expr: string): string {
  return isAtomic(expr) ? expr : `(${expr})`;
}

/** Sequence of items; empty parts are dropped. An empty sequence is the empty literal. */
export function seq(...parts: string[]): string {
  const items = parts.filter((p) => p !== "" && p !== '""');
  if (items.length === 0) return '""';
  return items.map((p) => (hasTopLevelAlternation(p) ? `(${p})` : p)).join(" ");
}

/**
 * Alternatives between literal texts (an enum's values), with common prefixes factored out as a
 * trie: `"ab" ("c" | "d")` rather than `"abc" | "abd"`. The text matched is the same, but llama.cpp
 * follows one grammar stack per alternative that is still possible, for every candidate token of
 * every step: a flat list of 10,000 values kept 10,000 stacks alive at the start and slowed every
 * sequence on the model for seconds, where the trie keeps one per distinct next character.
 * `ruleFor` names a branching point's continuation as a rule, so parentheses never nest deeply
 * (llama.cpp's parser recurses into groups).
 */
export function literalAlternatives(texts: readonly string[], ruleFor: (expr: string) => string): string {
  interface Node {
    end: boolean;
    kids: Map<string, Node>;
  }
  const root: Node = { end: false, kids: new Map() };
  for (const text of new Set(texts)) {
    let node = root;
    for (const ch of text) {
      let kid = node.kids.get(ch);
      if (!kid) node.kids.set(ch, (kid = { end: false, kids: new Map() }));
      node = kid;
    }
    node.end = true;
  }
  // Post-order without recursion: a node's expression is built once all of its children's are.
  const exprOf = new Map<Node, string>();
  const stack: Array<{ node: Node; expanded: boolean }> = [{ node: root, expanded: false }];
  const follow = (ch: string, kid: Node): { run: string; node: Node } => {
    let run = ch;
    let node = kid;
    while (!node.end && node.kids.size === 1) {
      const [[next, only]] = node.kids;
      run += next;
      node = only;
    }
    return { run, node };
  };
  while (stack.length > 0) {
    const top = stack[stack.length - 1];
    if (!top.expanded) {
      top.expanded = true;
      for (const [ch, kid] of top.node.kids) {
        const { node } = follow(ch, kid);
        if (!exprOf.has(node)) stack.push({ node, expanded: false });
      }
      continue;
    }
    stack.pop();
    const parts = [...top.node.kids].map(([ch, kid]) => {
      const { run, node } = follow(ch, kid);
      return seq(literal(run), exprOf.get(node)!);
    });
    let expr: string;
    if (parts.length === 0) expr = '""';
    else if (parts.length === 1 && !top.node.end) expr = parts[0];
    else {
      const choice = parts.length === 1 ? parts[0] : ruleFor(alt(...parts));
      expr = top.node.end ? `${group(choice)}?` : choice;
    }
    exprOf.set(top.node, expr);
  }
  return exprOf.get(root)!;
}

/** Alternatives; duplicates are dropped. */
export function alt(...parts: string[]): string {
  const unique = [...new Set(parts)];
  if (unique.length === 0) throw new Error("no alternatives");
  return unique.join(" | ");
}

function hasTopLevelAlternation(expr: string): boolean {
  let depth = 0;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i];
    if (c === '"' || c === "[") {
      const close = c === '"' ? '"' : "]";
      for (i++; i < expr.length && expr[i] !== close; i++) if (expr[i] === "\\") i++;
      continue;
    }
    if (c === "(") depth++;
    else if (c === ")") depth--;
    else if (c === "|" && depth === 0) return true;
  }
  return false;
}

/** Rule names the builder hands out only through `shared`. */
const SHARED_NAMES = new Set(["root", "ws", "value", "object", "array", "string", "char", "number", "integer", "boolean", "null", "member", "hex"]);

/** The grammar would exceed GrammarBuilder's bounds (rule count or text size). */
export class GrammarLimitError extends Error {}

export type GrammarLimits = {
  /** Most rules in one grammar. */
  maxRules: number;
  /** Most characters of rule bodies in one grammar. */
  maxGrammarChars: number;
};

export const DEFAULT_GRAMMAR_LIMITS: GrammarLimits = { maxRules: 50_000, maxGrammarChars: 4 * 1024 * 1024 };

/**
 * The rule table of one grammar. `rule` reuses an existing rule whose body is identical, so shared
 * shapes (a bounded string, an enum) are written once. Every operation is amortised constant time
 * in the number of rules (names are numbered per base, not searched), and the table refuses to grow
 * beyond its limits (GrammarLimitError).
 */
export class GrammarBuilder {
  private readonly bodies = new Map<string, string>();
  private readonly byBody = new Map<string, string>();
  private readonly taken = new Set<string>(SHARED_NAMES);
  /** Next suffix to try for each base name. */
  private readonly nextSuffix = new Map<string, number>();
  private chars = 0;

  constructor(
    private readonly limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
    /** The message a text past maxGrammarChars is refused with, when that bound stands for another. */
    private readonly tooLong?: string,
  ) {}

  /** Rules defined so far. */
  get size(): number {
    return this.bodies.size;
  }

  /** Reserve a fresh name from a hint, to be defined later with `define` (recursive rules). */
  reserve(hint: string): string {
    if (this.taken.size - SHARED_NAMES.size >= this.limits.maxRules) throw new GrammarLimitError(`the grammar needs more than ${this.limits.maxRules} rules`);
    let base = hint.replace(/[^a-zA-Z0-9-]+/g, "-").replace(/-+/g, "-").replace(/^-+|-+$/g, "").slice(0, 40).replace(/-+$/, "");
    // Names start with a letter, so they can never be confused with repetition counts ({0,15}).
    if (!/^[a-zA-Z]/.test(base)) base = `r-${base}`.replace(/-$/, "");
    let name = base;
    if (this.taken.has(name)) {
      let i = this.nextSuffix.get(base) ?? 2;
      while (this.taken.has(`${base}-${i}`)) i++;
      name = `${base}-${i}`;
      this.nextSuffix.set(base, i + 1);
    }
    this.taken.add(name);
    return name;
  }

  define(name: string, body: string): void {
    if (this.bodies.has(name)) throw new Error(`rule ${name} defined twice`);
    this.chars += name.length + body.length + 5;
    if (this.chars > this.limits.maxGrammarChars) {
      throw new GrammarLimitError(this.tooLong ?? `the grammar would be longer than ${this.limits.maxGrammarChars} characters`);
    }
    this.bodies.set(name, body);
    if (!this.byBody.has(body)) this.byBody.set(body, name);
  }

  /** A rule with this body (an existing one when the body is already defined). */
  rule(hint: string, body: string): string {
    const existing = this.byBody.get(body);
    if (existing !== undefined) return existing;
    const name = this.reserve(hint);
    this.define(name, body);
    return name;
  }

  /** A single item for `expr`: the expression itself when atomic, else a rule. */
  atom(hint: string, expr: string): string {
    return isAtomic(expr) ? expr : this.rule(hint, expr);
  }

  /** A rule with a fixed, well-known name, defined on first use. */
  shared(name: string, body: () => string): string {
    if (!SHARED_NAMES.has(name)) throw new Error(`${name} is not a shared rule name`);
    if (!this.bodies.has(name)) {
      this.bodies.set(name, "");
      this.bodies.set(name, body());
    }
    return name;
  }

  /**
   * `item` repeated between `min` and `max` times (`max` undefined: unbounded). Counts of
   * REPEAT_CHUNK and more are built from chunk rules so llama.cpp's repetition limit is never hit:
   * a fixed count n = q·K + r is `chunk{q} item{r}`; an optional count up to v = q·K + r is
   * T_q where T_0 = item{0,r} and T_j = chunk T_{j-1} | item{0,K-1} (lengths [K, jK+r] and [0, K-1]).
   */
  repeat(hint: string, item: string, min: number, max: number | undefined): string {
    if (max !== undefined && max < min) throw new Error("repeat: max < min");
    // llama.cpp multiplies a repeated group's own generated rules (one per operator or group inside
    // it) by the count, against the same limit: `("d" "d"{0,999}){0,3}` is refused at load. Such a
    // group is repeated through a rule of its own, which counts as one.
    const sym = isAtomic(item) && !(item.startsWith("(") && generatesRules(item)) ? item : this.rule(hint, ungroup(item));
    const fixed = (n: number): string => {
      if (n === 0) return "";
      if (n === 1) return sym;
      if (n < REPEAT_CHUNK) return `${sym}{${n}}`;
      const chunk = this.rule(`${hint}-chunk`, `${sym}{${REPEAT_CHUNK}}`);
      const q = Math.floor(n / REPEAT_CHUNK);
      return seq(q === 1 ? chunk : `${chunk}{${q}}`, fixed(n % REPEAT_CHUNK));
    };
    const upTo = (v: number): string => {
      if (v === 0) return "";
      if (v === 1) return `${sym}?`;
      if (v < REPEAT_CHUNK) return `${sym}{0,${v}}`;
      const chunk = this.rule(`${hint}-chunk`, `${sym}{${REPEAT_CHUNK}}`);
      const q = Math.floor(v / REPEAT_CHUNK);
      const r = v % REPEAT_CHUNK;
      let t = this.rule(`${hint}-upto`, r === 0 ? '""' : r === 1 ? `${sym}?` : `${sym}{0,${r}}`);
      for (let j = 1; j <= q; j++) t = this.rule(`${hint}-upto`, `${chunk} ${t} | ${sym}{0,${REPEAT_CHUNK - 1}}`);
      return t;
    };
    if (max === undefined) {
      if (min === 0) return `${sym}*`;
      if (min === 1) return `${sym}+`;
      return seq(fixed(min - 1), `${sym}+`);
    }
    return seq(fixed(min), upTo(max - min));
  }

  render(): string {
    const lines: string[] = [];
    const root = this.bodies.get("root");
    if (root === undefined) throw new Error("grammar has no root rule");
    lines.push(`root ::= ${root}`);
    for (const [name, body] of this.bodies) if (name !== "root") lines.push(`${name} ::= ${body}`);
    return lines.join("\n") + "\n";
  }
}
