// Finite automata over code points, for what a regex-to-grammar translation alone cannot do:
// the intersection of a `pattern` with a `format` or with length bounds, lookaheads at the start
// of a pattern (a lookahead is an intersection or a difference of regular languages), and matching
// an enum value against a pattern in linear time (never with a backtracking JS RegExp).
//
// A language is a boolean combination (and / or / not) of regular expressions (RegexNode). Each
// regex becomes a Thompson NFA; the combination is run as the product of their subset
// constructions, built lazily from the start state, so only reachable states exist. States that
// cannot reach acceptance are trimmed before the DFA is written as GBNF (a grammar must never lead
// the model into a dead end). Every construction is bounded (NFA size, DFA states, transitions):
// beyond the bounds it throws AutomatonLimitError instead of running long. The bounds on sizes
// alone still let a small pattern cost seconds (`((c|d|cd|dc|cdc)+){300}` stays under them while
// each subset state holds thousands of NFA states), and one grammar may hold many patterns, so the
// steps taken are metered too: per construction, and per compile of a whole grammar or schema
// (withAutomatonBudget). A step count, not a clock, so a request gets the same answer on a busy
// machine as on an idle one, and whatever the cache holds.

import { ALL_CHARS, type CodePointSet, type GrammarBuilder } from "./gbnf.ts";
import { jsonEncodedChar, type RegexNode } from "./regex-to-gbnf.ts";

export class AutomatonLimitError extends Error {}

export type Lang =
  | { kind: "re"; node: RegexNode }
  | { kind: "and"; parts: Lang[] }
  | { kind: "or"; parts: Lang[] }
  | { kind: "not"; part: Lang };

export type AutomatonLimits = {
  /** Most NFA states over all regexes (a counted repetition copies its body). */
  maxNfaStates: number;
  /** Most DFA states built (before trimming). */
  maxDfaStates: number;
};

export const DEFAULT_AUTOMATON_LIMITS: AutomatonLimits = { maxNfaStates: 20_000, maxDfaStates: 4_000 };

/**
 * Most steps (NFA states visited in closures, edges and ranges compared, subset keys written) the
 * automata of one grammar or schema may take together: about 0.1 s of one core here (the heaviest
 * everyday pattern in the tests takes under 100,000).
 */
export const AUTOMATON_WORK_BUDGET = 2_000_000;

/** Steps spent against a budget; throws AutomatonLimitError past it. */
class WorkMeter {
  spent = 0;
  /** Cached constructions already charged to this meter: one grammar reusing a pattern pays once. */
  readonly charged = new Set<string>();
  constructor(readonly budget: number) {}
  charge(steps: number): void {
    this.spent += steps;
    if (this.spent > this.budget) {
      throw new AutomatonLimitError(`its automata need more than ${this.budget.toLocaleString("en-US")} construction steps, the most one request may use`);
    }
  }
}

let currentMeter: WorkMeter | undefined;

/**
 * Runs `compile` with one automaton budget for everything it builds (a Lark grammar's terminals, a
 * schema's patterns). Nested calls share the outermost budget. Construction is synchronous, so a
 * module-level meter is never seen by another request.
 */
export function withAutomatonBudget<T>(compile: () => T, budget: number = AUTOMATON_WORK_BUDGET): T {
  if (currentMeter) return compile();
  currentMeter = new WorkMeter(budget);
  try {
    return compile();
  } finally {
    currentMeter = undefined;
  }
}

/** The meter of the compile in progress, or a budget of its own for a construction outside one. */
function meter(): WorkMeter {
  return currentMeter ?? new WorkMeter(AUTOMATON_WORK_BUDGET);
}

/** Charges steps of an automaton built outside this module (multiple-of.ts) to the compile in progress. */
export function chargeAutomatonWork(steps: number): void {
  currentMeter?.charge(steps);
}

/** Any string: Σ*. */
export const ANY_STRING: RegexNode = { kind: "rep", node: { kind: "set", set: ALL_CHARS }, min: 0, max: undefined };

type Nfa = {
  eps: number[][];
  edges: Array<Array<{ set: CodePointSet; to: number }>>;
  start: number;
  accept: number;
};

class NfaBuilder {
  readonly eps: number[][] = [];
  readonly edges: Array<Array<{ set: CodePointSet; to: number }>> = [];
  constructor(private readonly maxStates: number) {}

  state(): number {
    if (this.eps.length >= this.maxStates) throw new AutomatonLimitError(`the pattern needs more than ${this.maxStates} automaton states`);
    this.eps.push([]);
    this.edges.push([]);
    return this.eps.length - 1;
  }

  /** A fragment from `s` to a new end state; returns the end state. */
  build(n: RegexNode, s: number): number {
    switch (n.kind) {
      case "set": {
        const t = this.state();
        if (n.set.length > 0) this.edges[s].push({ set: n.set, to: t });
        return t;
      }
      case "seq": {
        let cur = s;
        for (const item of n.items) cur = this.build(item, cur);
        return cur;
      }
      case "alt": {
        const t = this.state();
        for (const a of n.alts) {
          const start = this.state();
          this.eps[s].push(start);
          this.eps[this.build(a, start)].push(t);
        }
        return t;
      }
      case "rep": {
        let cur = s;
        for (let i = 0; i < n.min; i++) cur = this.build(n.node, cur);
        if (n.max === undefined) {
          const loop = this.state();
          this.eps[cur].push(loop);
          const start = this.state();
          this.eps[loop].push(start);
          this.eps[this.build(n.node, start)].push(loop);
          return loop;
        }
        const t = this.state();
        this.eps[cur].push(t);
        for (let i = n.min; i < n.max; i++) {
          cur = this.build(n.node, cur);
          this.eps[cur].push(t);
        }
        return t;
      }
      case "look":
        throw new Error("lookaheads must be turned into a Lang first (langOfRegex)");
    }
  }
}

/** Upper estimate of NFA states for `n`, computed without building (saturates at Infinity). */
export function nfaSize(n: RegexNode): number {
  switch (n.kind) {
    case "set": return 1;
    case "seq": return n.items.reduce((a, i) => a + nfaSize(i), 0);
    case "alt": return n.alts.reduce((a, i) => a + nfaSize(i) + 1, 1);
    case "rep": return (Math.max(n.min, n.max ?? n.min + 1) + 1) * (nfaSize(n.node) + 2);
    case "look": return nfaSize(n.main) + [...n.musts, ...n.mustNots].reduce((a, i) => a + nfaSize(i), 0);
  }
}

/** The Lang of a parsed pattern (full match), with start-of-pattern lookaheads as and/not. */
export function langOfRegex(n: RegexNode): Lang {
  const hasLook = (x: RegexNode): boolean => x.kind === "look" || (x.kind === "alt" && x.alts.some(hasLook));
  if (!hasLook(n)) return { kind: "re", node: n };
  if (n.kind === "alt") return { kind: "or", parts: n.alts.map(langOfRegex) };
  if (n.kind !== "look") return { kind: "re", node: n };
  const parts: Lang[] = [{ kind: "re", node: n.main }, ...n.musts.map((m): Lang => ({ kind: "re", node: m }))];
  for (const m of n.mustNots) parts.push({ kind: "not", part: { kind: "re", node: m } });
  return { kind: "and", parts };
}

/** The subset construction of one NFA, built lazily: states are ids, transitions are disjoint. */
class SubsetDfa {
  private readonly ids = new Map<string, number>();
  private readonly sets: number[][] = [];
  private readonly trans: Array<Array<{ lo: number; hi: number; to: number }> | undefined> = [];
  readonly accept: boolean[] = [];

  constructor(
    private readonly nfa: Nfa,
    private readonly maxStates: number,
    private readonly work: WorkMeter,
  ) {}

  private closure(states: Iterable<number>): number[] {
    const seen = new Set<number>();
    const stack = [...states];
    let steps = stack.length;
    while (stack.length > 0) {
      const s = stack.pop()!;
      if (seen.has(s)) continue;
      seen.add(s);
      const eps = this.nfa.eps[s];
      steps += 1 + eps.length;
      for (const t of eps) if (!seen.has(t)) stack.push(t);
    }
    this.work.charge(steps + seen.size);
    return [...seen].sort((a, b) => a - b);
  }

  private idOf(set: number[]): number {
    this.work.charge(set.length);
    const key = set.join(",");
    let id = this.ids.get(key);
    if (id === undefined) {
      if (this.sets.length >= this.maxStates) throw new AutomatonLimitError(`the pattern needs more than ${this.maxStates} automaton states`);
      id = this.sets.length;
      this.ids.set(key, id);
      this.sets.push(set);
      this.trans.push(undefined);
      this.accept.push(set.includes(this.nfa.accept));
    }
    return id;
  }

  start(): number {
    return this.idOf(this.closure([this.nfa.start]));
  }

  /** Sorted disjoint ranges [lo, hi] with their target state. */
  transitions(id: number): Array<{ lo: number; hi: number; to: number }> {
    const cached = this.trans[id];
    if (cached) return cached;
    const edges: Array<{ set: CodePointSet; to: number }> = [];
    for (const s of this.sets[id]) for (const e of this.nfa.edges[s]) edges.push(e);
    const points = new Set<number>();
    let ranges = 0;
    for (const e of edges) for (const [a, b] of e.set) {
      points.add(a);
      points.add(b + 1);
      ranges++;
    }
    // Each interval between points is compared against every edge's ranges below.
    this.work.charge(this.sets[id].length + ranges * Math.max(1, points.size - 1));
    const sorted = [...points].sort((a, b) => a - b);
    const out: Array<{ lo: number; hi: number; to: number }> = [];
    const byTargets = new Map<string, number>();
    for (let k = 0; k + 1 < sorted.length; k++) {
      const lo = sorted[k];
      const hi = sorted[k + 1] - 1;
      const targets: number[] = [];
      for (const e of edges) if (e.set.some(([a, b]) => a <= lo && hi <= b)) targets.push(e.to);
      if (targets.length === 0) continue;
      const tkey = targets.sort((a, b) => a - b).join(",");
      let to = byTargets.get(tkey);
      if (to === undefined) {
        to = this.idOf(this.closure(targets));
        byTargets.set(tkey, to);
      }
      const last = out[out.length - 1];
      if (last && last.to === to && last.hi + 1 === lo) last.hi = hi;
      else out.push({ lo, hi, to });
    }
    this.trans[id] = out;
    return out;
  }

  /** The target of `cp` from `id`, or -1. */
  next(id: number, cp: number): number {
    for (const t of this.transitions(id)) if (t.lo <= cp && cp <= t.hi) return t.to;
    return -1;
  }
}

/** A product of subset constructions, one component per regex leaf of a Lang. */
class Product {
  private readonly comps: SubsetDfa[] = [];
  private readonly formula: (acc: boolean[]) => boolean;

  constructor(
    lang: Lang,
    private readonly limits: AutomatonLimits,
    readonly work: WorkMeter = meter(),
  ) {
    let budget = limits.maxNfaStates;
    const compileLeaf = (node: RegexNode): number => {
      if (nfaSize(node) > budget) throw new AutomatonLimitError(`the pattern needs more than ${limits.maxNfaStates} automaton states`);
      const nb = new NfaBuilder(budget);
      const start = nb.state();
      const accept = nb.build(node, start);
      budget -= nb.eps.length;
      work.charge(nb.eps.length);
      this.comps.push(new SubsetDfa({ eps: nb.eps, edges: nb.edges, start, accept }, limits.maxDfaStates, work));
      return this.comps.length - 1;
    };
    const compileLang = (l: Lang): ((acc: boolean[]) => boolean) => {
      switch (l.kind) {
        case "re": {
          const i = compileLeaf(l.node);
          return (acc) => acc[i];
        }
        case "and": {
          const fs = l.parts.map(compileLang);
          return (acc) => fs.every((f) => f(acc));
        }
        case "or": {
          const fs = l.parts.map(compileLang);
          return (acc) => fs.some((f) => f(acc));
        }
        case "not": {
          const f = compileLang(l.part);
          return (acc) => !f(acc);
        }
      }
    };
    this.formula = compileLang(lang);
  }

  start(): number[] {
    return this.comps.map((c) => c.start());
  }

  accepting(tuple: number[]): boolean {
    return this.formula(tuple.map((id, i) => id >= 0 && this.comps[i].accept[id]));
  }

  /** Transitions from `tuple` (component ids, -1 for dead): disjoint code point sets, each with the next tuple. */
  step(tuple: number[]): Array<{ set: CodePointSet; next: number[] }> {
    const lists = tuple.map((id, i) => (id < 0 ? [] : this.comps[i].transitions(id)));
    const points = new Set<number>();
    for (const l of lists) for (const t of l) {
      points.add(t.lo);
      points.add(t.hi + 1);
    }
    if (points.size === 0) return [];
    this.work.charge(points.size * lists.length);
    const sorted = [...points].sort((a, b) => a - b);
    const cursor = lists.map(() => 0);
    const byKey = new Map<string, { ranges: Array<[number, number]>; next: number[] }>();
    for (let k = 0; k + 1 < sorted.length; k++) {
      const lo = sorted[k];
      const hi = sorted[k + 1] - 1;
      let any = false;
      const next = lists.map((l, i) => {
        while (cursor[i] < l.length && l[cursor[i]].hi < lo) cursor[i]++;
        const t = l[cursor[i]];
        if (t && t.lo <= lo && hi <= t.hi) {
          any = true;
          return t.to;
        }
        return -1;
      });
      if (!any) continue;
      const key = next.join(",");
      const entry = byKey.get(key);
      if (entry) {
        const last = entry.ranges[entry.ranges.length - 1];
        if (last[1] + 1 === lo) last[1] = hi;
        else entry.ranges.push([lo, hi]);
      } else byKey.set(key, { ranges: [[lo, hi]], next });
    }
    return [...byKey.values()].map((v) => ({ set: v.ranges, next: v.next }));
  }

  /** Whether the language contains `text` (linear in its length). */
  matches(text: string): boolean {
    let tuple = this.start();
    for (const ch of text) {
      const cp = ch.codePointAt(0)!;
      tuple = tuple.map((id, i) => (id < 0 ? -1 : this.comps[i].next(id, cp)));
    }
    return this.accepting(tuple);
  }

  /** The reachable DFA, trimmed to states that can still reach acceptance. */
  dfa(): Dfa {
    const ids = new Map<string, number>();
    const tuples: number[][] = [];
    const add = (t: number[]): number => {
      const key = t.join(",");
      let id = ids.get(key);
      if (id === undefined) {
        if (tuples.length >= this.limits.maxDfaStates) throw new AutomatonLimitError(`the pattern needs more than ${this.limits.maxDfaStates} automaton states`);
        id = tuples.length;
        ids.set(key, id);
        tuples.push(t);
      }
      return id;
    };
    add(this.start());
    const trans: Array<Array<{ set: CodePointSet; to: number }>> = [];
    const accept: boolean[] = [];
    for (let i = 0; i < tuples.length; i++) {
      accept.push(this.accepting(tuples[i]));
      trans.push(this.step(tuples[i]).map(({ set, next }) => ({ set, to: add(next) })));
    }
    // Co-reachability: states from which an accepting state can be reached.
    const rev: number[][] = tuples.map(() => []);
    trans.forEach((ts, from) => ts.forEach((t) => rev[t.to].push(from)));
    const live = new Array<boolean>(tuples.length).fill(false);
    const stack: number[] = [];
    accept.forEach((a, i) => {
      if (a) {
        live[i] = true;
        stack.push(i);
      }
    });
    while (stack.length > 0) {
      const s = stack.pop()!;
      for (const p of rev[s]) if (!live[p]) {
        live[p] = true;
        stack.push(p);
      }
    }
    return {
      states: trans.map((ts, i) => ({ accept: accept[i], live: live[i], edges: ts.filter((t) => live[t.to]) })),
    };
  }
}

export type Dfa = { states: Array<{ accept: boolean; live: boolean; edges: Array<{ set: CodePointSet; to: number }> }> };

export function buildDfa(lang: Lang, limits: AutomatonLimits = DEFAULT_AUTOMATON_LIMITS): Dfa {
  return new Product(lang, limits).dfa();
}

/** Recently built DFAs by a caller's key (e.g. format + pattern + lengths), most recent last, with the steps each took. */
const dfaCache = new Map<string, { dfa: Dfa; steps: number }>();
const DFA_CACHE_SIZE = 64;

/**
 * buildDfa, memoised under `key` in a small bounded cache (a DFA is immutable once built). A hit is
 * charged the steps its construction took (once per compile), so whether a grammar fits its budget
 * never depends on what earlier requests left in the cache.
 */
export function cachedDfa(key: string, lang: () => Lang, limits: AutomatonLimits = DEFAULT_AUTOMATON_LIMITS): Dfa {
  const fullKey = `${limits.maxNfaStates}/${limits.maxDfaStates}/${key}`;
  const work = meter();
  const hit = dfaCache.get(fullKey);
  if (hit) {
    if (!work.charged.has(fullKey)) {
      work.charged.add(fullKey);
      work.charge(hit.steps);
    }
    dfaCache.delete(fullKey);
    dfaCache.set(fullKey, hit);
    return hit.dfa;
  }
  const before = work.spent;
  const dfa = new Product(lang(), limits, work).dfa();
  work.charged.add(fullKey);
  dfaCache.set(fullKey, { dfa, steps: work.spent - before });
  if (dfaCache.size > DFA_CACHE_SIZE) dfaCache.delete(dfaCache.keys().next().value!);
  return dfa;
}

/** A matcher for `lang` that runs in time linear in the text (times the automaton size). */
export function langMatcher(lang: Lang, limits: AutomatonLimits = DEFAULT_AUTOMATON_LIMITS): (text: string) => boolean {
  const p = new Product(lang, limits);
  return (text) => p.matches(text);
}

/** Length range of the strings of a trimmed DFA (max Infinity when it has a live cycle); null when empty. */
export function dfaLengthRange(dfa: Dfa): [number, number] | null {
  if (!dfa.states[0].live) return null;
  // Shortest by BFS; longest: Infinity on a live cycle, else longest path in the DAG.
  const dist = new Array<number>(dfa.states.length).fill(-1);
  dist[0] = 0;
  const queue = [0];
  let min = Infinity;
  for (let q = 0; q < queue.length; q++) {
    const s = queue[q];
    if (dfa.states[s].accept) min = Math.min(min, dist[s]);
    for (const e of dfa.states[s].edges) if (dist[e.to] < 0) {
      dist[e.to] = dist[s] + 1;
      queue.push(e.to);
    }
  }
  const longest = new Map<number, number>();
  const onPath = new Set<number>();
  let cyclic = false;
  // Iterative DFS for the longest path to an accepting end.
  const visit = (root: number) => {
    const stack: Array<{ s: number; i: number }> = [{ s: root, i: 0 }];
    onPath.add(root);
    while (stack.length > 0 && !cyclic) {
      const top = stack[stack.length - 1];
      const edges = dfa.states[top.s].edges;
      if (top.i < edges.length) {
        const to = edges[top.i++].to;
        if (onPath.has(to)) cyclic = true;
        else if (!longest.has(to)) {
          onPath.add(to);
          stack.push({ s: to, i: 0 });
        }
      } else {
        let best = dfa.states[top.s].accept ? 0 : -Infinity;
        for (const e of edges) best = Math.max(best, 1 + (longest.get(e.to) ?? -Infinity));
        longest.set(top.s, best);
        onPath.delete(top.s);
        stack.pop();
      }
    }
  };
  visit(0);
  return [min, cyclic ? Infinity : longest.get(0)!];
}

/**
 * GBNF for the JSON-encoded content of the strings of a trimmed DFA (or, with another `encode`, the
 * strings as they are): one rule per live state (right recursion, which llama.cpp runs without
 * growing its stacks). Null when the language is empty.
 */
export function dfaToGbnf(b: GrammarBuilder, dfa: Dfa, hint: string, encode: (b: GrammarBuilder, set: CodePointSet) => string = jsonEncodedChar): string | null {
  if (!dfa.states[0].live) return null;
  const names = new Map<number, string>();
  const bodies = new Map<number, string>();
  // A state with no edges is accepting (it is live): it stands for the empty string.
  const nameOf = (s: number): string => {
    if (dfa.states[s].edges.length === 0) return "";
    let n = names.get(s);
    if (n === undefined) {
      n = b.reserve(`${hint}-s`);
      names.set(s, n);
    }
    return n;
  };
  const rootName = nameOf(0);
  if (rootName === "") return '""';
  const todo = [0];
  while (todo.length > 0) {
    const s = todo.pop()!;
    if (bodies.has(s)) continue;
    const alts: string[] = [];
    for (const e of dfa.states[s].edges) {
      const next = nameOf(e.to);
      if (next !== "" && !bodies.has(e.to)) todo.push(e.to);
      alts.push(next === "" ? encode(b, e.set) : `${encode(b, e.set)} ${next}`);
    }
    if (dfa.states[s].accept) alts.push('""');
    bodies.set(s, alts.join(" | "));
    b.define(names.get(s)!, bodies.get(s)!);
  }
  return rootName;
}
