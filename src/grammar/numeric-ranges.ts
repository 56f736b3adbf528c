// Exact numeric bounds as grammar: digit-range constructions for integer parts and a small
// automaton for decimal fraction digits.
//
// A bounded number is written without an exponent as sign, integer part I and optional fraction F.
// For each sign the bounds become bounds on the magnitude t = I.F, which split into
//   I strictly between the bounds' integer parts (any fraction),
//   I equal to the lower bound's integer part (F compared with the bound's fraction digits),
//   I equal to the upper bound's integer part (likewise).
//
// A bound reaches us as a double (the request is read with JSON.parse), while the client's
// validator compares the answer with the bound as written: as doubles (ajv, and Python for
// anything with a fraction or exponent) or exactly (Python's ints, decimal readers). Past 2^53 or
// 15 significant digits these differ: 9007199254740993 arrives as 9007199254740992. The answer
// is kept inside under every reading, in one of two ways.
//
// Short numbers (integers up to 2^53 − 1, non-integers of at most 15 significant digits) are
// compared with the bound's shortest decimal form S, the digits the client most likely wrote. A
// short number other than S never rounds to the bound's double (at most one decimal of 15
// significant digits rounds to a given double, and an integer below 2^53 is a double), so one
// above S lies above every number that rounds to that double, S and the double included, and
// rounds to a double above it (rounding is monotonic); likewise below.
//
// Where the bounds leave no short number (a bound past 10^15, or past 2^53 − 1 for integers),
// longer numbers are written: integers of any length up to the largest double, and non-integers
// below 2^53 with up to three fraction digits (doubles there are multiples of 1/8 or coarser).
// These are compared exactly with the bound moved one double inwards (nextUp of a lower bound,
// nextDown of an upper one), which lies beyond every number that rounds to the bound's double:
// whatever the client wrote and however it reads the answer, the answer is inside. An inclusive
// integer bound below 2^53 is kept as it is: no other integer rounds to it, and a fraction
// written there is read back as that same double.
// Bounds closer together than these margins are refused: nothing is certain to lie between them.

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
  let common = 0;
  while (lo[common] === hi[common]) common++;
  if (common > 0) return seq(literal(lo.slice(0, common)), sameLengthRange(lo.slice(common), hi.slice(common)));
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

/** Integers from 2^53 on are not all doubles. */
const TWO_53 = 2n ** 53n;
/** Fraction digits of a long non-integer (below 2^53, where doubles are multiples of 1/8 or coarser). */
const LONG_FRACTION_DIGITS = 3;
/** The largest magnitude written: the largest finite double. */
const MAX_LONG = BigInt(Number.MAX_VALUE);

/** The exact decimal value of |v| (v finite): a double is m·2^e, whose expansion ends. */
export function exactDecimal(v: number): Decimal {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(v));
  const bits = view.getBigUint64(0);
  const biased = Number((bits >> 52n) & 0x7ffn);
  if (biased === 0x7ff) throw new Error(`cannot expand ${v}`);
  const fraction = bits & ((1n << 52n) - 1n);
  const m = biased === 0 ? fraction : fraction | (1n << 52n);
  const e = biased === 0 ? -1074 : biased - 1075;
  if (e >= 0) return { int: m << BigInt(e), frac: "" };
  const k = BigInt(-e);
  const rest = m & ((1n << k) - 1n);
  const frac = (rest * 5n ** k).toString().padStart(-e, "0").replace(/0+$/, "");
  return { int: m >> k, frac: rest === 0n ? "" : frac };
}

/** The next double above v (`up`) or below it; ±Infinity past the largest. */
export function nextDouble(v: number, up: boolean): number {
  if (v === 0) return up ? Number.MIN_VALUE : -Number.MIN_VALUE;
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, v);
  const bits = view.getBigUint64(0);
  // The bit pattern of a double's magnitude grows with it: one step away from zero or towards it.
  view.setBigUint64(0, up === v > 0 ? bits + 1n : bits - 1n);
  return view.getFloat64(0);
}

/**
 * The bound long numbers are compared with, inclusive: the bound itself for an inclusive integer
 * bound below 2^53, otherwise the next double inwards (see the file header).
 */
function inward(bound: Bound, lower: boolean): Bound {
  const exact = Number.isInteger(bound.value) && Math.abs(bound.value) < 2 ** 53;
  return { value: exact && !bound.strict ? bound.value : nextDouble(bound.value, lower), strict: false };
}

const ceilInt = (lo: MagBound): bigint => (lo.frac !== "" || lo.strict ? lo.int + 1n : lo.int);
const floorInt = (hi: MagBound): bigint => (hi.frac === "" && hi.strict ? hi.int - 1n : hi.int);

/**
 * Magnitudes within the bounds whose integer part lies in [intFrom, intTo], with up to
 * fracMax(integer part) fraction digits, or integers only where fracMax is null. Null when empty.
 */
function decimalRange(
  b: GrammarBuilder,
  lo: MagBound | undefined,
  hi: MagBound | undefined,
  intFrom: bigint,
  intTo: bigint,
  fracMax: ((i: bigint) => number) | null,
): string | null {
  // A bound whose integer part lies outside the range does not cut it (or empties it).
  if (lo && lo.int < intFrom) lo = undefined;
  if (hi && hi.int > intTo) hi = undefined;
  if (lo && lo.int > intTo) return null;
  if (hi && hi.int < intFrom) return null;
  if (fracMax === null) {
    const a = lo ? ceilInt(lo) : intFrom;
    const z = hi ? floorInt(hi) : intTo;
    return integerRange(a, z);
  }
  const parts: string[] = [];
  const edge = (i: bigint, l: MagBound | undefined, h: MagBound | undefined) => {
    const frac = boundedFraction(b, l, h, fracMax(i));
    if (frac !== null) parts.push(seq(literal(i.toString()), frac));
  };
  const anyFrac = (i: bigint): string => {
    const m = fracMax(i);
    return m === 0 ? "" : b.atom("frac-any", m === 1 ? '("." [0-9])?' : `("." [0-9]{1,${m}})?`);
  };
  const iLo = lo ? lo.int : intFrom;
  const iHi = hi ? hi.int : intTo;
  if (lo && hi && iLo === iHi) {
    edge(iLo, lo, hi);
  } else if (iLo <= iHi) {
    if (lo) edge(iLo, lo, undefined);
    const from = lo ? iLo + 1n : intFrom;
    const to = hi ? iHi - 1n : intTo;
    for (const { length, expr } of integerRangeByLength(from, to)) parts.push(seq(expr, anyFrac(10n ** BigInt(length - 1))));
    if (hi) edge(iHi, undefined, hi);
  }
  return parts.length === 0 ? null : alt(...parts);
}

/**
 * Short magnitudes (see the file header) within bounds given as shortest decimals: integers up to
 * 2^53 − 1, or non-integers of at most 15 significant digits (integer part below 10^15).
 */
function shortMagnitude(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, integer: boolean): string | null {
  if (integer) return decimalRange(b, lo, hi, 0n, MAX_INTEGER_MAGNITUDE, null);
  return decimalRange(b, lo, hi, 0n, MAX_DECIMAL_INT, (i) => MAX_SIGNIFICANT - (i === 0n ? 0 : i.toString().length));
}

/** Decimal integers in [a, b] (a ≥ 0) of any lengths, the lengths strictly between written once. */
function longIntegerRange(b: GrammarBuilder, a: bigint, z: bigint): string | null {
  if (a > z) return null;
  const la = a.toString().length;
  const lz = z.toString().length;
  if (lz - la < 2) return integerRange(a, z);
  return alt(
    integerRange(a, 10n ** BigInt(la) - 1n)!,
    seq("[1-9]", b.repeat("digits", "[0-9]", la, lz - 2)),
    integerRange(10n ** BigInt(lz - 1), z)!,
  );
}

/**
 * Long magnitudes (see the file header) within inclusive bounds given as exact decimals: past 10^15
 * (non-integers below 2^53 with up to three fraction digits, integers from 2^53), or for integers
 * past 2^53 − 1; never past the largest double.
 */
function longMagnitude(b: GrammarBuilder, lo: MagBound | undefined, hi: MagBound | undefined, integer: boolean): string | null {
  const parts: string[] = [];
  if (!integer) {
    const expr = decimalRange(b, lo, hi, MAX_DECIMAL_INT + 1n, TWO_53 - 1n, () => LONG_FRACTION_DIGITS);
    if (expr !== null) parts.push(expr);
  }
  const a = lo && ceilInt(lo) > TWO_53 ? ceilInt(lo) : TWO_53;
  const z = hi && floorInt(hi) < MAX_LONG ? floorInt(hi) : MAX_LONG;
  const ints = longIntegerRange(b, a, z);
  if (ints !== null) parts.push(ints);
  return parts.length === 0 ? null : alt(...parts);
}

/** Magnitude bounds for each sign: x = t ≥ 0, and x = −t with t > 0. */
type Side = { blocked: boolean; lo: MagBound | undefined; hi: MagBound | undefined };

function signSides(lower: Bound | undefined, upper: Bound | undefined, expand: (v: number) => Decimal): { pos: Side; neg: Side } {
  const mag = (bound: Bound | undefined): MagBound | undefined => (bound ? { ...expand(bound.value), strict: bound.strict } : undefined);
  return {
    // x ≥ 0: t = x.
    pos: {
      blocked: upper !== undefined && (upper.value < 0 || (upper.value === 0 && upper.strict)),
      lo: lower && (lower.value > 0 || (lower.value === 0 && lower.strict)) ? mag(lower) : undefined,
      hi: mag(upper),
    },
    // x < 0: x ≤ U ⟺ t ≥ −U and x ≥ L ⟺ t ≤ −L.
    neg: {
      blocked: lower !== undefined && lower.value >= 0,
      lo: upper && upper.value < 0 ? mag(upper) : { int: 0n, frac: "", strict: true },
      hi: mag(lower),
    },
  };
}

/**
 * A JSON number (or integer) within the bounds, without exponent, or null when no number is
 * certain to satisfy them (see the file header). Negative zero is never produced.
 */
export function boundedNumber(b: GrammarBuilder, lower: Bound | undefined, upper: Bound | undefined, integer: boolean): string | null {
  const short = signSides(lower, upper, toDecimal);
  const lowerLong = lower && inward(lower, true);
  const upperLong = upper && inward(upper, false);
  // Moved inwards past the largest double: nothing long is certain to fit.
  const noLong = lowerLong?.value === Infinity || upperLong?.value === -Infinity;
  const long = noLong ? undefined : signSides(lowerLong, upperLong, exactDecimal);
  const alts: string[] = [];
  for (const sign of ["pos", "neg"] as const) {
    const s = short[sign];
    const l = long?.[sign];
    // Long numbers only where the bounds leave no short one.
    const expr = (s.blocked ? null : shortMagnitude(b, s.lo, s.hi, integer)) ?? (!l || l.blocked ? null : longMagnitude(b, l.lo, l.hi, integer));
    if (expr !== null) alts.push(sign === "pos" ? expr : seq('"-"', expr));
  }
  return alts.length === 0 ? null : alt(...alts);
}

/**
 * Whether the bounds, read as the exact values of their doubles, hold any number (integer): when
 * they do and boundedNumber finds none, they lie closer together than a double can tell apart.
 */
export function boundsHoldAsDoubles(lower: Bound | undefined, upper: Bound | undefined, integer: boolean): boolean {
  if (!lower || !upper) return true;
  if (!integer) return lower.value < upper.value || (lower.value === upper.value && !lower.strict && !upper.strict);
  const a = lower.strict ? BigInt(Math.floor(lower.value)) + 1n : BigInt(Math.ceil(lower.value));
  const z = upper.strict ? BigInt(Math.ceil(upper.value)) - 1n : BigInt(Math.floor(upper.value));
  return a <= z;
}
