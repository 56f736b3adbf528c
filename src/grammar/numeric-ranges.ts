// Exact numeric bounds as grammar: digit-range constructions for integer parts and a small
// automaton for decimal fraction digits.
//
// A bounded number is written without an exponent as sign, integer part I and optional fraction F.
// For each sign the bounds become bounds on the magnitude t = I.F, which split into
//   I strictly between the bounds' integer parts (any fraction),
//   I equal to the lower bound's integer part (F compared with the bound's fraction digits),
//   I equal to the upper bound's integer part (likewise).
// Decimal comparisons agree with the doubles a validator compares as long as the output has at most
// 15 significant digits (every such decimal survives a round trip through a double, and rounding is
// monotonic), so bounded non-integers are limited to 15 significant digits.
//
// Magnitudes past that (non-integers from 10^15, integers past 2^53 − 1) are written only where
// the bounds leave nothing smaller ({minimum: 1e20}): as at most 15 significant digits followed by
// zeros (1230000000000000000000), below 10^308, so the same argument holds and no number is
// refused merely for being large.

import { alt, group, literal, seq, type GrammarBuilder } from "./gbnf.ts";

/** A bound on a value: `value` itself, exclusive when `strict`. */
export type Bound = { value: number; strict: boolean };

/** Decimal digits of a non-negative magnitude: integer part and fraction without trailing zeros. */
type Decimal = { int: bigint; frac: string };

type MagBound = Decimal & { strict: boolean };

/** Largest magnitude of a generated integer: every integer output is a safe integer. */
export const MAX_INTEGER_MAGNITUDE = BigInt(Number.MAX_SAFE_INTEGER);
/** Significant digits of a bounded non-integer number. */
const MAX_SIGNIFICANT = 15;
const MAX_DECIMAL_INT = 10n ** BigInt(MAX_SIGNIFICANT) - 1n;

/** The exact decimal expansion of |v| as JavaScript prints it (shortest round-trip form). */
export function toDecimal(v: number): Decimal {
  const m = /^-?(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(Math.abs(v)));
  if (!m) throw new Error(`cannot expand ${v}`);
  const digits = m[1] + (m[2] ?? "");
  const point = m[1].length + Number(m[3] ?? 0);
  let intPart: string;
  let fracPart: string;
  if (point <= 0) {
    intPart = "0";
    fracPart = "0".repeat(-point) + digits;
  } else if (point >= digits.length) {
    intPart = digits + "0".repeat(point - digits.length);
    fracPart = "";
  } else {
    intPart = digits.slice(0, point);
    fracPart = digits.slice(point);
  }
  return { int: BigInt(intPart), frac: fracPart.replace(/0+$/, "") };
}

function digitClass(a: number, b: number): string {
  return a === b ? literal(String(a)) : `[${a}-${b}]`;
}

function anyDigits(n: number): string {
  return n === 0 ? "" : n === 1 ? "[0-9]" : `[0-9]{${n}}`;
}

/** Digit strings of length lo.length between lo and hi (both the same length). */
function sameLengthRange(lo: string, hi: string): string {
  if (lo.length === 0) return "";
  if (lo === hi) return literal(lo);
  const a = Number(lo[0]);
  const b = Number(hi[0]);
  const restLo = lo.slice(1);
  const restHi = hi.slice(1);
  if (a === b) return seq(literal(lo[0]), sameLengthRange(restLo, restHi));
  const n = lo.length - 1;
  const loFull = /^0*$/.test(restLo);
  const hiFull = /^9*$/.test(restHi);
  const parts: string[] = [];
  if (!loFull) parts.push(seq(literal(lo[0]), sameLengthRange(restLo, "9".repeat(n))));
  const midLo = loFull ? a : a + 1;
  const midHi = hiFull ? b : b - 1;
  if (midLo <= midHi) parts.push(seq(digitClass(midLo, midHi), anyDigits(n)));
  if (!hiFull) parts.push(seq(literal(hi[0]), sameLengthRange("0".repeat(n), restHi)));
  return alt(...parts);
}

/**
 * Decimal integers (no leading zeros) in [a, b], a ≥ 0, one entry per digit count so that callers
 * can attach length-dependent suffixes.
 */
export function integerRangeByLength(a: bigint, b: bigint): Array<{ length: number; expr: string }> {
  const out: Array<{ length: number; expr: string }> = [];
  if (a > b) return out;
  const la = a.toString().length;
  const lb = b.toString().length;
  for (let len = la; len <= lb; len++) {
    const lo = len === la ? a : 10n ** BigInt(len - 1);
    const hi = len === lb ? b : 10n ** BigInt(len) - 1n;
    out.push({ length: len, expr: sameLengthRange(lo.toString(), hi.toString()) });
  }
  return out;
}

/** Decimal integers in [a, b] (a ≥ 0) as one expression, or null when empty. */
export function integerRange(a: bigint, b: bigint): string | null {
  const parts = integerRangeByLength(a, b).map((p) => p.expr);
  return parts.length === 0 ? null : alt(...parts);
}

/**
 * The optional fraction part ("" or "." digits, at most maxLen digits) of a magnitude whose integer
 * part equals the bounds' integer parts, with the fraction digits F compared to the bounds' fraction
 * digits as decimals 0.F. Null when no fraction satisfies both.
 */
function boundedFraction(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, maxLen: number): string | null {
  // State: k digits read, and whether they still equal the bound's digits (so far).
  const accept = (k: number, loEq: boolean, hiEq: boolean): boolean =>
    (!loEq || (k >= lo!.frac.length && !lo!.strict)) && (!hiEq || k < hi!.frac.length || !hi!.strict);
  const memo = new Map<string, string | null>();
  const digits = (k: number, loEq: boolean, hiEq: boolean): string | null => {
    // Past the end of an inclusive lower bound's digits, every continuation is ≥ the bound.
    if (loEq && k >= lo!.frac.length && !lo!.strict) loEq = false;
    // Past the end of an exclusive upper bound's digits, no continuation is below it.
    if (hiEq && k >= hi!.frac.length && hi!.strict) return null;
    const key = `${k}:${loEq}:${hiEq}`;
    if (memo.has(key)) return memo.get(key)!;
    let result: string | null;
    if (k >= maxLen) result = null;
    else if (!loEq && !hiEq) result = maxLen - k === 1 ? "[0-9]" : `[0-9]{1,${maxLen - k}}`;
    else {
      const groups = new Map<string, number[]>();
      for (let d = 0; d <= 9; d++) {
        let nLo = false;
        let nHi = false;
        if (loEq) {
          const dl = Number(lo!.frac[k] ?? "0");
          if (d < dl) continue;
          nLo = d === dl;
        }
        if (hiEq) {
          const dh = Number(hi!.frac[k] ?? "0");
          if (d > dh) continue;
          nHi = d === dh;
        }
        const g = `${nLo}:${nHi}`;
        if (!groups.has(g)) groups.set(g, []);
        groups.get(g)!.push(d);
      }
      const parts: string[] = [];
      for (const [g, ds] of groups) {
        const [nLo, nHi] = g.split(":").map((s) => s === "true");
        const cls = digitClass(ds[0], ds[ds.length - 1]); // each group is a contiguous run
        const rest = digits(k + 1, nLo, nHi);
        const ok = accept(k + 1, nLo, nHi);
        if (rest === null) {
          if (ok) parts.push(cls);
        } else parts.push(seq(cls, ok ? `${group(rest)}?` : rest));
      }
      result = parts.length === 0 ? null : b.atom("frac", alt(...parts));
    }
    memo.set(key, result);
    return result;
  };
  const loEq0 = lo !== undefined;
  const hiEq0 = hi !== undefined;
  const tail = digits(0, loEq0, hiEq0);
  const empty = accept(0, loEq0, hiEq0);
  if (tail === null) return empty ? "" : null;
  const dotted = seq('"."', tail);
  return empty ? `${group(dotted)}?` : dotted;
}

/**
 * Magnitudes t = I[.F] ≥ 0 within optional bounds. `integer`: no fraction, I up to
 * MAX_INTEGER_MAGNITUDE; otherwise at most 15 significant digits. Null when empty.
 */
function magnitude(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, integer: boolean): string | null {
  const cap = integer ? MAX_INTEGER_MAGNITUDE : MAX_DECIMAL_INT;
  return smallMagnitude(b, lo, hi, integer, cap) ?? largeMagnitude(b, lo, hi, cap);
}

/** Largest magnitude written: 15 significant digits then zeros, below 10^308 (a finite double). */
const MAX_LARGE_LENGTH = 308;

/**
 * Integer magnitudes above `cap`, of at most 15 significant digits (P × 10^z, P < 10^15), within
 * the bounds: for each digit count L, P is a 15-digit range followed by L − 15 zeros. Only the
 * shortest and longest counts are partial ranges; those between are any 15 digits.
 */
function largeMagnitude(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, cap: bigint): string | null {
  let vmin = lo ? (lo.strict || lo.frac !== "" ? lo.int + 1n : lo.int) : 0n;
  if (vmin <= cap) vmin = cap + 1n;
  let vmax = hi ? (hi.strict && hi.frac === "" ? hi.int - 1n : hi.int) : 10n ** BigInt(MAX_LARGE_LENGTH) - 1n;
  if (vmax >= 10n ** BigInt(MAX_LARGE_LENGTH)) vmax = 10n ** BigInt(MAX_LARGE_LENGTH) - 1n;
  if (vmin > vmax) return null;
  const zeros = (z1: number, z2: number) => (z2 === 0 ? "" : b.repeat("zeros", '"0"', z1, z2));
  const lengthRange = (len: number): string | null => {
    const z = len - MAX_SIGNIFICANT;
    const scale = 10n ** BigInt(z);
    const from = vmin > 10n ** BigInt(len - 1) ? vmin : 10n ** BigInt(len - 1);
    const to = vmax < 10n ** BigInt(len) - 1n ? vmax : 10n ** BigInt(len) - 1n;
    const pMin = (from + scale - 1n) / scale;
    const pMax = to / scale;
    const digits = pMin <= pMax ? integerRange(pMin, pMax) : null;
    return digits === null ? null : seq(digits, zeros(z, z));
  };
  const l0 = vmin.toString().length;
  const l1 = vmax.toString().length;
  const parts: string[] = [];
  const first = lengthRange(l0);
  if (first !== null) parts.push(first);
  if (l1 - 1 >= l0 + 1) parts.push(seq("[1-9]", anyDigits(MAX_SIGNIFICANT - 1), zeros(l0 + 1 - MAX_SIGNIFICANT, l1 - 1 - MAX_SIGNIFICANT)));
  if (l1 > l0) {
    const last = lengthRange(l1);
    if (last !== null) parts.push(last);
  }
  return parts.length === 0 ? null : alt(...parts);
}

/** Magnitudes up to `cap` (with a fraction unless `integer`), as the file header describes. */
function smallMagnitude(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, integer: boolean, cap: bigint): string | null {
  if (hi && hi.int > cap) hi = undefined;
  if (lo && lo.int > cap) return null;
  const fracMax = (i: bigint | number): number => {
    if (integer) return 0;
    const len = typeof i === "number" ? i : i === 0n ? 0 : i.toString().length;
    return MAX_SIGNIFICANT - len;
  };
  if (integer) {
    // Inclusive integer bounds: a fraction in the bound (or strictness) moves it inwards.
    const a = lo ? (lo.frac !== "" || lo.strict ? lo.int + 1n : lo.int) : 0n;
    const z = hi ? (hi.frac === "" && hi.strict ? hi.int - 1n : hi.int) : cap;
    return integerRange(a, z < cap ? z : cap);
  }
  const parts: string[] = [];
  const edge = (i: bigint, l: MagBound | undefined, h: MagBound | undefined) => {
    const frac = boundedFraction(b, l, h, fracMax(i));
    if (frac !== null) parts.push(seq(literal(i.toString()), frac));
  };
  const anyFrac = (len: number): string => {
    const m = fracMax(len);
    return m === 0 ? "" : b.atom("frac-any", `("." [0-9]{1,${m}})?`);
  };
  const iLo = lo ? lo.int : 0n;
  const iHi = hi ? hi.int : cap;
  if (lo && hi && iLo === iHi) {
    edge(iLo, lo, hi);
  } else if (iLo <= iHi) {
    if (lo) edge(iLo, lo, undefined);
    const from = lo ? iLo + 1n : 0n;
    const to = hi ? iHi - 1n : cap;
    for (const { length, expr } of integerRangeByLength(from, to)) parts.push(seq(expr, anyFrac(length)));
    if (hi) edge(iHi, undefined, hi);
  }
  return parts.length === 0 ? null : alt(...parts);
}

function magBound(bound: Bound | undefined, negate: boolean): MagBound | undefined {
  if (!bound) return undefined;
  return { ...toDecimal(negate ? -bound.value : bound.value), strict: bound.strict };
}

/**
 * A JSON number (or integer) within the bounds, without exponent, or null when no number
 * satisfies them. Negative zero is never produced.
 */
export function boundedNumber(b: GrammarBuilder, lower: Bound | undefined, upper: Bound | undefined, integer: boolean): string | null {
  const alts: string[] = [];
  // Non-negative values: t = x.
  {
    const blocked = upper && (upper.value < 0 || (upper.value === 0 && upper.strict));
    const lo = lower && (lower.value > 0 || (lower.value === 0 && lower.strict)) ? magBound(lower, false) : undefined;
    const expr = blocked ? null : magnitude(b, lo, magBound(upper, false), integer);
    if (expr !== null) alts.push(expr);
  }
  // Negative values: x = -t with t > 0; x ≤ U ⟺ t ≥ -U and x ≥ L ⟺ t ≤ -L.
  {
    const blocked = lower !== undefined && lower.value >= 0;
    let lo: MagBound = { int: 0n, frac: "", strict: true };
    if (upper && upper.value < 0) lo = magBound(upper, true)!;
    const expr = blocked ? null : magnitude(b, lo, magBound(lower, true), integer);
    if (expr !== null) alts.push(seq('"-"', expr));
  }
  return alts.length === 0 ? null : alt(...alts);
}
