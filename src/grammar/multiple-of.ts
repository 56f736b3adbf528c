// JSON Schema `multipleOf` as an automaton over the characters of a JSON number.
//
// The step is read as the decimal its shortest form spells, p / 10^d (0.01 is 1/100, 2.5 is
// 25/10), and so are the values: 0.07 is a multiple of 0.01, as zod, pydantic and OpenAI's strict
// mode read it. (A validator that divides as doubles, ajv without `multipleOfPrecision` for one,
// refuses 0.07 there because 0.07 / 0.01 is 7.000000000000001 as a double; no grammar can help a
// reading under which few decimal multiples of 0.01 exist.)
//
// A number written with at most d fraction digits is a multiple exactly when its digits, read as
// the integer N = x · 10^d (missing fraction digits are zeros), are divisible by p. Two automata
// read the number side by side: one carries N's remainder mod p from digit to digit, the other
// compares N with the bounds as the digits arrive (lengths first, then the digits where the
// lengths are equal). Each is minimized before their product is built, and the product after:
// divisibility by 1000 needs four states (how many zeros the number ends with), not a thousand
// remainders times every length.
//
// Every answer must read back as the number written, so the magnitude is capped as for other
// numbers (numeric-ranges.ts): integers up to 2^53 − 1, and non-integers of at most 15 digits in
// all (|N| < 10^15). Bounds of more than 15 significant digits are moved one double inwards and
// compared exactly, as there.
//
// Where that automaton is too large (a step such as 0.123456789 has too many remainders) but the
// bounds leave few multiples, the multiples are listed instead, each in its shortest form.

import { charClass, type CodePointSet } from "./gbnf.ts";
import { AutomatonLimitError, chargeAutomatonWork, type Dfa } from "./automaton.ts";
import { exactDecimal, nextDouble, toDecimal, type Bound } from "./numeric-ranges.ts";

/** Multiples between the bounds at most this many are listed when the automaton is too large. */
const LITERAL_MULTIPLES = 256;
const SAFE_INTEGER = BigInt(Number.MAX_SAFE_INTEGER);
const SHORT_NON_INTEGER = 10n ** 15n - 1n;

/** A step as p / 10^d, from its shortest decimal form. */
export function stepFraction(step: number): { p: bigint; d: number } {
  const dec = toDecimal(step);
  const d = dec.frac.length;
  return { p: dec.int * 10n ** BigInt(d) + BigInt(dec.frac === "" ? "0" : dec.frac), d };
}

/** Whether `value` is a multiple of `step` (> 0), both read as the decimals their shortest forms spell. */
export function isDecimalMultiple(value: number, step: number): boolean {
  const v = stepFraction(Math.abs(value));
  const s = stepFraction(step);
  const d = Math.max(v.d, s.d);
  const scaledValue = v.p * 10n ** BigInt(d - v.d);
  const scaledStep = s.p * 10n ** BigInt(d - s.d);
  return scaledStep !== 0n && scaledValue % scaledStep === 0n;
}

/** The least common multiple of two steps (> 0), as a number; undefined when it is not a finite double. */
export function commonMultiple(a: number, b: number): number | undefined {
  const x = stepFraction(a);
  const y = stepFraction(b);
  const d = Math.max(x.d, y.d);
  const px = x.p * 10n ** BigInt(d - x.d);
  const py = y.p * 10n ** BigInt(d - y.d);
  const lcm = (px / gcd(px, py)) * py;
  const text = d === 0 ? lcm.toString() : `${lcm / 10n ** BigInt(d)}.${(lcm % 10n ** BigInt(d)).toString().padStart(d, "0")}`;
  const value = Number(text);
  return Number.isFinite(value) && stepFraction(value).p * 10n ** BigInt(d) === lcm * 10n ** BigInt(stepFraction(value).d) ? value : undefined;
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

function floorDiv(a: bigint, b: bigint): bigint {
  const q = a / b;
  return a % b !== 0n && a < 0n ? q - 1n : q;
}

const ceilDiv = (a: bigint, b: bigint): bigint => -floorDiv(-a, b);

/** A bound on N = x · 10^d, inclusive: the least (lower) or greatest (upper) N allowed. */
function scaledBound(bound: Bound, d: number, lower: boolean): bigint {
  let { value, strict } = bound;
  const shortest = toDecimal(value);
  const digits = (shortest.int === 0n ? "" : shortest.int.toString()) + shortest.frac;
  const short = Number.isInteger(value) ? Math.abs(value) <= Number.MAX_SAFE_INTEGER : digits.replace(/^0+/, "").length <= 15;
  // A longer bound stands for every decimal that rounds to its double: the next double inwards
  // lies beyond all of them, and whatever lies beyond that reads back beyond the bound.
  if (!short) {
    value = nextDouble(value, lower);
    strict = false;
  }
  const dec = short ? shortest : exactDecimal(value);
  const f = dec.frac.length;
  const magnitude = (dec.int * 10n ** BigInt(f) + BigInt(dec.frac === "" ? "0" : dec.frac)) * 10n ** BigInt(d);
  const num = value < 0 ? -magnitude : magnitude;
  const den = 10n ** BigInt(f);
  const exact = num % den === 0n;
  if (lower) return ceilDiv(num, den) + (strict && exact ? 1n : 0n);
  return floorDiv(num, den) - (strict && exact ? 1n : 0n);
}

/** N written as the decimal N / 10^d, fraction without trailing zeros. */
function written(n: bigint, d: number): string {
  const sign = n < 0n ? "-" : "";
  const m = n < 0n ? -n : n;
  if (d === 0) return sign + m.toString();
  const unit = 10n ** BigInt(d);
  const frac = (m % unit).toString().padStart(d, "0").replace(/0+$/, "");
  return sign + (m / unit).toString() + (frac === "" ? "" : `.${frac}`);
}

type Ord = -1 | 0 | 1;
const cmpDigit = (a: string, b: string): Ord => (a < b ? -1 : a > b ? 1 : 0);

/** Magnitudes in [lo, hi] with at most d fraction digits whose N is divisible by p. */
type Branch = { intLo: string; fracLo: string; intHi: string; fracHi: string };

function branchOf(lo: bigint, hi: bigint, d: number): Branch {
  const unit = 10n ** BigInt(d);
  return {
    intLo: (lo / unit).toString(),
    fracLo: d === 0 ? "" : (lo % unit).toString().padStart(d, "0"),
    intHi: (hi / unit).toString(),
    fracHi: d === 0 ? "" : (hi % unit).toString().padStart(d, "0"),
  };
}

/**
 * A reading state: in the integer part (`len` digits, `lo`/`hi` the comparison of the digits so
 * far with the bounds' integer parts at the same positions, `zero` when the part is "0"), or in the
 * fraction (`j` digits, `lo`/`hi` the comparison of the whole magnitude with the bounds so far).
 */
type State =
  | { at: "start" }
  | { at: "minus" }
  | { at: "int"; branch: number; len: number; lo: Ord; hi: Ord; zero: boolean }
  | { at: "point"; branch: number; lo: Ord; hi: Ord }
  | { at: "frac"; branch: number; j: number; lo: Ord; hi: Ord };

const keyOf = (s: State): string =>
  s.at === "start" || s.at === "minus" ? s.at : `${s.at} ${s.branch} ${s.at === "int" ? `${s.len} ${s.zero}` : s.at === "frac" ? s.j : ""} ${s.lo} ${s.hi}`;

/** A transition table over ALPHABET (-1: no transition) with the accepting states; state 0 starts. */
type Table = { next: number[][]; accept: boolean[] };

/** The reachable part of an automaton given by functions on states, breadth first. */
function explore<S>(start: S, key: (s: S) => string, step: (s: S, ch: string) => S | null, accepts: (s: S) => boolean, limit: number, tooMany: () => Error): Table {
  const ids = new Map<string, number>();
  const states: S[] = [];
  const add = (s: S): number => {
    const k = key(s);
    let id = ids.get(k);
    if (id === undefined) {
      if (states.length >= limit) throw tooMany();
      id = states.length;
      ids.set(k, id);
      states.push(s);
    }
    return id;
  };
  add(start);
  const next: number[][] = [];
  for (let i = 0; i < states.length; i++) {
    chargeAutomatonWork(ALPHABET.length);
    next.push([...ALPHABET].map((ch) => {
      const t = step(states[i], ch);
      return t === null ? -1 : add(t);
    }));
  }
  return { next, accept: states.map(accepts) };
}

/** Literal strings as a trie automaton. */
function literalsDfa(texts: string[]): Dfa {
  const nodes: Array<{ accept: boolean; next: Map<string, number> }> = [{ accept: false, next: new Map() }];
  for (const t of texts) {
    let at = 0;
    for (const ch of t) {
      let to = nodes[at].next.get(ch);
      if (to === undefined) {
        to = nodes.length;
        nodes.push({ accept: false, next: new Map() });
        nodes[at].next.set(ch, to);
      }
      at = to;
    }
    nodes[at].accept = true;
  }
  chargeAutomatonWork(nodes.length);
  return {
    states: nodes.map((n) => ({
      accept: n.accept,
      live: true,
      edges: [...n.next].map(([ch, to]) => ({ set: [[ch.codePointAt(0)!, ch.codePointAt(0)!]] as CodePointSet, to })),
    })),
  };
}

const ALPHABET = "-.0123456789";

/**
 * The numbers (as JSON writes them, without exponent) that are multiples of `step` within the
 * bounds, integers only when `integer`; null when there are none. Throws AutomatonLimitError when
 * the automaton would need more than `maxStates` states.
 */
export function multiplesDfa(step: number, lower: Bound | undefined, upper: Bound | undefined, integer: boolean, maxStates: number): Dfa | null {
  let { p, d } = stepFraction(step);
  if (integer && d > 0) {
    // An integer x is a multiple of p / 10^d when x · 10^d is divisible by p.
    p /= gcd(p, 10n ** BigInt(d));
    d = 0;
  }
  const cap = d === 0 ? SAFE_INTEGER : SHORT_NON_INTEGER;
  let lowN = lower ? scaledBound(lower, d, true) : -cap;
  let highN = upper ? scaledBound(upper, d, false) : cap;
  // No multiple at all between the bounds as given (an absent bound is no limit): unsatisfiable.
  if (lower && upper && ceilDiv(lowN, p) > floorDiv(highN, p)) return null;
  if (lowN < -cap) lowN = -cap;
  if (highN > cap) highN = cap;
  const kLo = ceilDiv(lowN, p);
  const kHi = floorDiv(highN, p);
  // Multiples there are, but only past the digits an answer is written with (2^53 for integers,
  // 15 significant digits otherwise): not enforceable, which is not the same as unsatisfiable.
  if (kLo > kHi)
    throw new AutomatonLimitError(`multipleOf ${step}: every multiple within these bounds has more digits than an answer is written with (${d === 0 ? "integers up to 2^53" : "15 significant digits"})`);
  try {
    return generalDfa(step, p, d, kLo, kHi, maxStates);
  } catch (e) {
    if (!(e instanceof AutomatonLimitError) || kHi - kLo >= BigInt(LITERAL_MULTIPLES)) throw e;
    const texts: string[] = [];
    for (let k = kLo; k <= kHi; k++) texts.push(written(k * p, d));
    return literalsDfa(texts);
  }
}

/** The automaton of multiples k · p / 10^d for k in [kLo, kHi], written as in multiplesDfa. */
function generalDfa(step: number, p: bigint, d: number, kLo: bigint, kHi: bigint, maxStates: number): Dfa | null {
  const rawLimit = maxStates * RAW_STATES_PER_STATE;
  const tooMany = () => new AutomatonLimitError(`multipleOf ${step} within these bounds needs more than ${maxStates} automaton states`);
  // The remainders mod p's part prime to 10 are all told apart by some continuation: past the
  // state limit they can never fit.
  let coprime = p;
  while (coprime % 2n === 0n) coprime /= 2n;
  while (coprime % 5n === 0n) coprime /= 5n;
  if (coprime > BigInt(maxStates) || p * BigInt(d + 1) > BigInt(rawLimit)) throw tooMany();
  const bounds = minimize(boundsTable(kLo * p, kHi * p, d, rawLimit, tooMany));
  const remainders = minimize(remainderTable(Number(p), d, rawLimit, tooMany));
  // The product is about as large as this when the remainders do not depend on the bounds (p
  // prime to 10): refused before it is built.
  if (bounds.accept.length * remainders.accept.length > rawLimit) throw tooMany();
  // Both side by side.
  const both = minimize(explore<[number, number]>(
    [0, 0],
    ([a, b]) => `${a} ${b}`,
    ([a, b], ch) => {
      const k = ALPHABET.indexOf(ch);
      const x = bounds.next[a][k];
      const y = remainders.next[b][k];
      return x < 0 || y < 0 ? null : [x, y];
    },
    ([a, b]) => bounds.accept[a] && remainders.accept[b],
    rawLimit,
    tooMany,
  ));
  if (both.accept.length > maxStates) throw tooMany();
  return toDfa(both);
}

/**
 * Numbers (no exponent, no leading zeros, no "-0", at most d fraction digits; integers when d is
 * 0) whose N = x · 10^d lies in [lowest, highest].
 */
function boundsTable(lowest: bigint, highest: bigint, d: number, limit: number, tooMany: () => Error): Table {
  // Branch 0: magnitudes of numbers ≥ 0; branch 1: of negative numbers (written after "-").
  const branches: Array<Branch | undefined> = [
    highest >= 0n ? branchOf(lowest > 0n ? lowest : 0n, highest, d) : undefined,
    lowest < 0n ? branchOf(highest < 0n ? -highest : 1n, -lowest, d) : undefined,
  ];
  // How the integer part read so far compares with a bound's integer part, once it has ended.
  const intOrd = (len: number, prefix: Ord, bound: string): Ord => (len < bound.length ? -1 : len > bound.length ? 1 : prefix);
  const all = (digits: string, from: number, c: string): boolean => [...digits.slice(from)].every((x) => x === c);
  // A comparison that no later digit can change is settled early (an equal prefix of a lower
  // bound whose remaining digits are zeros is as good as above it), so fewer states are built.
  const settleLo = (o: Ord, b: Branch, i: number): Ord => (o === 0 && all(b.intLo, i, "0") && all(b.fracLo, 0, "0") ? 1 : o);
  const settleHi = (o: Ord, b: Branch, i: number): Ord => (o === 0 && all(b.intHi, i, "9") && all(b.fracHi, 0, "9") ? -1 : o);

  const step = (s: State, ch: string): State | null => {
    const digit = ch >= "0" && ch <= "9";
    switch (s.at) {
      case "start":
      case "minus": {
        if (s.at === "start" && ch === "-") return branches[1] ? { at: "minus" } : null;
        const branch = s.at === "minus" ? 1 : 0;
        const b = branches[branch];
        if (!b || !digit) return null;
        return { at: "int", branch, len: 1, lo: settleLo(cmpDigit(ch, b.intLo[0]), b, 1), hi: settleHi(cmpDigit(ch, b.intHi[0]), b, 1), zero: ch === "0" };
      }
      case "int": {
        const b = branches[s.branch]!;
        if (digit) {
          if (s.zero || s.len >= b.intHi.length) return null; // no leading zeros; longer is above the bound
          const i = s.len;
          const lo: Ord = i < b.intLo.length ? settleLo(s.lo === 0 ? cmpDigit(ch, b.intLo[i]) : s.lo, b, i + 1) : 1;
          const hi: Ord = settleHi(s.hi === 0 ? cmpDigit(ch, b.intHi[i]) : s.hi, b, i + 1);
          if (i + 1 === b.intHi.length && hi > 0) return null;
          return { at: "int", branch: s.branch, len: i + 1, lo, hi, zero: false };
        }
        if (ch !== "." || d === 0) return null;
        const lo = intOrd(s.len, s.lo, b.intLo);
        const hi = intOrd(s.len, s.hi, b.intHi);
        if (lo < 0 || hi > 0) return null;
        return { at: "point", branch: s.branch, lo, hi };
      }
      case "point":
      case "frac": {
        const b = branches[s.branch]!;
        const j = s.at === "point" ? 0 : s.j;
        if (!digit || j >= d) return null;
        const lo: Ord = s.lo === 0 ? cmpDigit(ch, b.fracLo[j]) : s.lo;
        const hi: Ord = s.hi === 0 ? cmpDigit(ch, b.fracHi[j]) : s.hi;
        if (lo < 0 || hi > 0) return null;
        return { at: "frac", branch: s.branch, j: j + 1, lo, hi };
      }
    }
  };

  const accepts = (s: State): boolean => {
    if (s.at === "int") {
      const b = branches[s.branch]!;
      const lo = intOrd(s.len, s.lo, b.intLo);
      const hi = intOrd(s.len, s.hi, b.intHi);
      return lo >= 0 && hi <= 0 && (lo > 0 || all(b.fracLo, 0, "0"));
    }
    if (s.at === "frac") return s.lo > 0 || all(branches[s.branch]!.fracLo, s.j, "0");
    return false;
  };
  return explore<State>({ at: "start" }, keyOf, step, accepts, limit, tooMany);
}

/**
 * Digit strings (sign and point read through) whose N = x · 10^d is divisible by p. The state is
 * N's remainder as if the digits read so far were followed by zeros up to d fraction digits, so a
 * number is accepted where it ends exactly when that remainder is 0.
 */
function remainderTable(p: number, d: number, limit: number, tooMany: () => Error): Table {
  type R = { frac: number; r: number }; // frac: fraction digits read, -1 in the integer part
  const tens = [1 % p];
  for (let i = 1; i <= d; i++) tens.push((tens[i - 1] * 10) % p);
  return explore<R>(
    { frac: -1, r: 0 },
    (s) => `${s.frac} ${s.r}`,
    (s, ch) => {
      if (ch === "-") return s;
      if (ch === ".") return s.frac < 0 ? { frac: 0, r: s.r } : null;
      const c = ch.charCodeAt(0) - 48;
      if (s.frac < 0) return { frac: -1, r: (s.r * 10 + c * tens[d]) % p };
      if (s.frac >= d) return null;
      return { frac: s.frac + 1, r: (s.r + c * tens[d - s.frac - 1]) % p };
    },
    (s) => s.r === 0,
    limit,
    tooMany,
  );
}

/** States built before minimization, per state allowed after it. */
const RAW_STATES_PER_STATE = 8;

/**
 * The minimal automaton of a complete-or-partial transition table (Moore's partition refinement):
 * states that accept the same continuations become one. State 0 stays the start.
 */
function minimize(t: Table): Table {
  const { next: table, accept } = trimmed(t);
  const n = table.length;
  let cls: number[] = accept.map((a) => (a ? 1 : 0));
  let count = new Set(cls).size;
  for (;;) {
    chargeAutomatonWork(n * ALPHABET.length);
    const ids = new Map<string, number>();
    const next = table.map((row, i) => {
      const key = `${cls[i]}:${row.map((t) => (t < 0 ? -1 : cls[t])).join(",")}`;
      let id = ids.get(key);
      if (id === undefined) {
        id = ids.size;
        ids.set(key, id);
      }
      return id;
    });
    const stable = ids.size === count;
    cls = next;
    count = ids.size;
    if (stable) break;
  }
  // Renumber so that the start's class is 0.
  const order = new Map<number, number>([[cls[0], 0]]);
  for (const c of cls) if (!order.has(c)) order.set(c, order.size);
  const outTable: number[][] = Array.from({ length: order.size }, () => []);
  const outAccept: boolean[] = new Array<boolean>(order.size).fill(false);
  for (let i = 0; i < n; i++) {
    const c = order.get(cls[i])!;
    outTable[c] = table[i].map((t) => (t < 0 ? -1 : order.get(cls[t])!));
    outAccept[c] = accept[i];
  }
  return { next: outTable, accept: outAccept };
}

/** The states from which an accepting state can be reached. */
function liveStates({ next: table, accept }: Table): boolean[] {
  const rev: number[][] = table.map(() => []);
  table.forEach((row, from) => row.forEach((to) => to >= 0 && rev[to].push(from)));
  const live = accept.slice();
  const stack = accept.flatMap((a, i) => (a ? [i] : []));
  while (stack.length > 0) for (const from of rev[stack.pop()!]) if (!live[from]) {
    live[from] = true;
    stack.push(from);
  }
  return live;
}

/** The table with transitions into dead states removed (dead states then differ in nothing). */
function trimmed(t: Table): Table {
  const live = liveStates(t);
  return { next: t.next.map((row) => row.map((to) => (to >= 0 && live[to] ? to : -1))), accept: t.accept };
}

/** A transition table over ALPHABET as a trimmed Dfa (only states that can still reach acceptance); null when empty. */
function toDfa(t: Table): Dfa | null {
  const { next: table, accept } = t;
  const live = liveStates(t);
  if (!live[0]) return null;
  return {
    states: table.map((row, i) => {
      const edges: Array<{ set: Array<[number, number]>; to: number }> = [];
      row.forEach((to, k) => {
        if (to < 0 || !live[to]) return;
        const cp = ALPHABET.codePointAt(k)!;
        const same = edges.find((e) => e.to === to);
        if (!same) edges.push({ set: [[cp, cp]], to });
        else {
          const last = same.set[same.set.length - 1];
          if (last[1] + 1 === cp) last[1] = cp;
          else same.set.push([cp, cp]);
        }
      });
      return { accept: accept[i], live: live[i], edges };
    }),
  };
}

/** GBNF character class for a set of plain characters (digits, sign, point: none needs escaping). */
export const plainChars = (_b: unknown, set: CodePointSet): string => charClass(set);
