// What loading a GBNF grammar costs llama.cpp, estimated before it is handed over.
//
// llama.cpp parses a grammar on the thread that asks for it: node-llama-cpp builds a LlamaGrammar
// (and each generation's grammar state) synchronously on the JavaScript thread. After parsing,
// llama.cpp checks every rule for left recursion by walking the rules it can start with, and that
// walk keeps no memory of rules already checked: a rule is walked again each time it is reached,
// from every rule that reaches it. A chain of k rules that may each start with the next costs
// about k²/2 rule visits. Measured on the bundled build (2-core VM), an object of 5,000 optional
// properties in the earlier grammar shape took 1.2 s of blocked event loop, per request.
//
// `grammarLoadCost` counts that walk exactly on the rule graph llama.cpp builds from the text
// (groups and repetitions become rules the way its parser rewrites them), plus the text's length for
// the parse itself. The unit is one grammar element visited; DEFAULT_MAX_LOAD_COST turns a measured
// per-unit time into a bound. Linear in the text: fine to run on every compiled schema.

/**
 * Most load-cost units a grammar may have: about 50 ms of llama.cpp work on a 2-core VM, where one
 * unit measured 1.6–1.9 ns (objects of 500–3,000 optional properties in the earlier shape).
 */
export const DEFAULT_MAX_LOAD_COST = 25_000_000;

/** Units per character of text: parsing measured 25–30 ns a character (5,000 required properties). */
const CHAR_COST = 16;

/** A rule as llama.cpp stores it, reduced to what its left-recursion check looks at. */
export interface GrammarRule {
  /** Each alternative: its elements in order, a rule id or -1 for a terminal. */
  alts: number[][];
  /** Elements stored for the rule (a literal's or class's characters count one each). */
  size: number;
  /**
   * Set on a bounded repetition's optional tail, `S{m,n}` with n − m ≥ 2: llama.cpp stores a chain of
   * n − m rules, each `S next | ε` (the last `S | ε`), and this one rule stands for all of them,
   * written `S self | ε` with `size` the size of one rule of the chain that has a next. A string of
   * maxLength 100,000 makes ~100,000 such rules; kept as one, the checks here stay linear in the text.
   */
  chain?: number;
}
type Rule = GrammarRule;

/** [a-zA-Z0-9_-], the characters of a rule name. */
function isNameChar(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 45 || c === 95;
}

class Parser {
  readonly rules: Rule[] = [];
  readonly ids = new Map<string, number>();
  private pos = 0;

  constructor(private readonly text: string) {}

  parse(): void {
    const t = this.text;
    for (;;) {
      this.space(true);
      if (this.pos >= t.length) return;
      const name = this.name();
      if (name === "") throw new Error(`expected a rule name at ${this.pos}`);
      this.space(false);
      if (!t.startsWith("::=", this.pos)) throw new Error(`expected ::= at ${this.pos}`);
      this.pos += 3;
      this.space(true);
      this.alternates(this.id(name), false);
    }
  }

  private id(name: string): number {
    let id = this.ids.get(name);
    if (id === undefined) {
      id = this.fresh();
      this.ids.set(name, id);
    }
    return id;
  }

  private fresh(): number {
    this.rules.push({ alts: [], size: 0 });
    return this.rules.length - 1;
  }

  private name(): string {
    const start = this.pos;
    while (this.pos < this.text.length && isNameChar(this.text.charCodeAt(this.pos))) this.pos++;
    return this.text.slice(start, this.pos);
  }

  /** Blanks and comments; newlines too inside groups (`nested`), as llama.cpp's parse_space. */
  private space(nested: boolean): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t[this.pos];
      if (c === " " || c === "\t" || ((c === "\n" || c === "\r") && nested)) this.pos++;
      else if (c === "#") {
        while (this.pos < t.length && t[this.pos] !== "\n" && t[this.pos] !== "\r") this.pos++;
      } else return;
    }
  }

  private alternates(rule: number, nested: boolean): void {
    const r = this.rules[rule];
    for (;;) {
      const seq: number[] = [];
      // The alternative's elements and the marker that ends it.
      r.size += this.sequence(seq, nested) + 1;
      r.alts.push(seq);
      if (this.text[this.pos] !== "|") break;
      this.pos++;
      this.space(true);
    }
  }

  /** Parses one alternative into `seq`; returns how many elements llama.cpp stores for it. */
  private sequence(seq: number[], nested: boolean): number {
    const t = this.text;
    let size = 0;
    // The last item, for a postfix operator: its elements and their stored size.
    let last: { elems: number[]; size: number } | undefined;
    const push = (elems: number[], n: number) => {
      seq.push(...elems);
      size += n;
      last = { elems, size: n };
    };
    while (this.pos < t.length) {
      const c = t[this.pos];
      if (c === '"') {
        const n = this.quoted('"');
        // An empty literal stores nothing (and is no element).
        if (n > 0) push([-1], n);
        else last = undefined;
      } else if (c === "[") push([-1], this.quoted("]"));
      else if (c === "<" || c === "!") {
        while (this.pos < t.length && t[this.pos] !== ">") this.pos++;
        this.pos++;
        push([-1], 1);
      } else if (c === ".") {
        this.pos++;
        push([-1], 1);
      } else if (isNameChar(c.charCodeAt(0))) push([this.id(this.name())], 1);
      else if (c === "(") {
        this.pos++;
        this.space(true);
        const sub = this.fresh();
        this.alternates(sub, true);
        if (t[this.pos] !== ")") throw new Error(`expected ) at ${this.pos}`);
        this.pos++;
        push([sub], 1);
      } else if (c === "*" || c === "+" || c === "?" || c === "{") {
        if (!last) throw new Error(`a repetition with nothing before it at ${this.pos}`);
        const [min, max] = this.repetition();
        // Rewritten as llama.cpp does: S{m,n} → S…S (m times) then a chain of optional S rules.
        seq.length -= last.elems.length;
        size -= last.size;
        for (let i = 0; i < min; i++) {
          seq.push(...last.elems);
          size += last.size;
        }
        const optional = max === undefined ? 1 : max - min;
        let next = -1;
        if (optional >= 2) {
          next = this.fresh();
          this.rules[next].alts.push([...last.elems, next], []);
          this.rules[next].size = last.size + 3;
          this.rules[next].chain = optional;
        } else for (let i = 0; i < optional; i++) {
          const rec = this.fresh();
          const alt = [...last.elems];
          if (max === undefined) alt.push(rec);
          else if (i > 0) alt.push(next);
          this.rules[rec].alts.push(alt, []);
          this.rules[rec].size = last.size + 2 + (alt.length > last.elems.length ? 1 : 0);
          next = rec;
        }
        if (optional > 0) {
          seq.push(next);
          size += 1;
        }
        last = undefined;
      } else break;
      this.space(nested);
    }
    return size;
  }

  /** Skips a literal or class opened at pos; returns its stored element count. */
  private quoted(close: string): number {
    const t = this.text;
    this.pos++;
    let n = 0;
    while (this.pos < t.length && t[this.pos] !== close) {
      if (t[this.pos] === "\\") {
        const kind = t[this.pos + 1];
        this.pos += kind === "x" ? 4 : kind === "u" ? 6 : kind === "U" ? 10 : 2;
      } else {
        const cp = t.codePointAt(this.pos)!;
        this.pos += cp > 0xffff ? 2 : 1;
      }
      n++;
    }
    this.pos++;
    return n;
  }

  private repetition(): [number, number | undefined] {
    const t = this.text;
    const c = t[this.pos++];
    if (c === "*") return [0, undefined];
    if (c === "+") return [1, undefined];
    if (c === "?") return [0, 1];
    this.space(true);
    const int = () => {
      const start = this.pos;
      while (this.pos < t.length && t[this.pos] >= "0" && t[this.pos] <= "9") this.pos++;
      return Number(t.slice(start, this.pos));
    };
    const min = int();
    this.space(true);
    let max: number | undefined = min;
    if (t[this.pos] === ",") {
      this.pos++;
      this.space(true);
      max = t[this.pos] >= "0" && t[this.pos] <= "9" ? int() : undefined;
      this.space(true);
    }
    this.pos++; // "}"
    return [min, max];
  }
}

/** The rules llama.cpp builds from `gbnf` (groups and repetitions included). Throws on bad text. */
export function parseGrammarRules(gbnf: string): GrammarRule[] {
  return parseGrammar(gbnf).rules;
}

/** A grammar as llama.cpp builds it: its rules, and the id of each named rule. */
export interface ParsedGrammar {
  rules: GrammarRule[];
  ids: ReadonlyMap<string, number>;
}

/** The same, with the id of each named rule (groups and repetitions have none). */
export function parseGrammar(gbnf: string): ParsedGrammar {
  const parser = new Parser(gbnf);
  parser.parse();
  return { rules: parser.rules, ids: parser.ids };
}

/**
 * Elements llama.cpp's left-recursion check visits over `rules`: it starts from every rule in
 * turn and, without remembering rules it has checked, walks into each alternative's leading
 * references (past those with an empty alternative). Counted here with one pass per rule.
 */
export function leftRecursionWalk(rules: readonly GrammarRule[]): number {
  // llama.cpp takes a rule to be possibly empty when one of its alternatives is empty as written,
  // not by following references.
  const nullable = rules.map((r) => r.alts.some((a) => a.length === 0));
  // The rules each rule's check walks into: leading references, past possibly empty ones. For a
  // chain, those of one repeated item; `through[r]`: every element of that item may be empty, so each
  // rule of the chain walks on into the next one.
  const through = new Uint8Array(rules.length);
  const leading = rules.map((r, id) => {
    const out: number[] = [];
    for (const alt of r.alts) {
      const end = r.chain === undefined ? alt.length : alt.length - 1; // a chain's self-reference
      let i = 0;
      for (; i < end; i++) {
        const e = alt[i];
        if (e === -1) break;
        out.push(e);
        if (!nullable[e]) break;
      }
      if (r.chain !== undefined && end > 0 && i === end) through[id] = 1;
    }
    return out;
  });
  // What the rules a chain stands for add to the count, beyond `walk` (the one others refer to).
  let chainExtra = 0;
  // walk[r]: elements visited checking r = its size plus the walks of its leading rules. The leading
  // graph has no cycle in a grammar llama.cpp accepts; a cycle (left recursion) counts once.
  const walk = new Array<number>(rules.length).fill(-1);
  const IN_PROGRESS = -2;
  for (let root = 0; root < rules.length; root++) {
    if (walk[root] >= 0) continue;
    const stack: Array<[number, number]> = [[root, 0]];
    walk[root] = IN_PROGRESS;
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      const [id, i] = top;
      if (i < leading[id].length) {
        top[1]++;
        const child = leading[id][i];
        if (walk[child] === -1) {
          walk[child] = IN_PROGRESS;
          stack.push([child, 0]);
        }
        continue;
      }
      let total = rules[id].size;
      for (const child of leading[id]) total += walk[child] === IN_PROGRESS ? 0 : walk[child];
      const k = rules[id].chain;
      if (k === undefined) walk[id] = total;
      else {
        // Rule i of the chain (0 = the last, without a next, one element smaller) walks the item's
        // leading rules, and the rule after it when the item may be empty.
        const first = total - 1;
        if (through[id]) {
          walk[id] = first + (k - 1) * total;
          chainExtra += (k - 1) * first + total * ((k - 1) * (k - 2)) / 2;
        } else {
          walk[id] = total;
          chainExtra += first + (k - 2) * total;
        }
      }
      stack.pop();
    }
  }
  let sum = chainExtra;
  for (const w of walk) sum += w;
  return sum;
}

/**
 * The longest grammar text whose load cost can stay within `maxLoadCost`: the parse alone costs
 * CHAR_COST a character. A builder stopping there refuses a grammar as soon as it is known to be
 * too costly, rather than after building megabytes of it (48,000 array items took 1.5 s to refuse).
 */
export function maxCharsWithin(maxLoadCost: number): number {
  return Math.floor(maxLoadCost / CHAR_COST);
}

/**
 * The units of work llama.cpp spends loading `gbnf`: CHAR_COST per character for the parse, plus
 * every element its left-recursion check visits (see the file header). Infinity when the count
 * overflows. Throws on text that is not a grammar llama.cpp would parse.
 */
export function grammarLoadCost(gbnf: string, parsed?: ParsedGrammar): number {
  const cost = CHAR_COST * gbnf.length + leftRecursionWalk(parsed?.rules ?? parseGrammarRules(gbnf));
  return Number.isFinite(cost) ? cost : Infinity;
}

/**
 * grammarLoadCost for grammars this server generated, which parse; should one not, its length alone
 * is counted and llama.cpp's own parser reports the error as before.
 */
export function estimateLoadCost(gbnf: string): number {
  try {
    return grammarLoadCost(gbnf);
  } catch {
    return CHAR_COST * gbnf.length;
  }
}
