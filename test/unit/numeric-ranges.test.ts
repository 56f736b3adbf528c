import assert from "../helpers/assert.ts";
import { before, describe, test } from "node:test";
import fc from "fast-check";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { jsonSchemaToGbnf, UnsupportedSchemaError } from "../../src/grammar/json-schema-to-gbnf.ts";
import { seededRandom } from "../../src/core/random.ts";

// Number bounds through the schema converter, checked the way clients check an answer: a bound
// arrives as the double JSON.parse makes of its text, and the answer must hold against that double
// (ajv), against the text as Python reads it (an integer literal exactly, anything else as a
// double) and, where the text has at most 15 significant digits or is an integer, against the text
// as an exact decimal. Every comparison here is exact, on BigInt fractions.

let llama: Llama;

before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

// ---- Exact rationals (n/d, d > 0).

type Rat = { n: bigint; d: bigint };

function cmp(a: Rat, b: Rat): number {
  const x = a.n * b.d - b.n * a.d;
  return x < 0n ? -1 : x > 0n ? 1 : 0;
}

/** A JSON number literal as an exact rational. */
function ratOfText(s: string): Rat {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(s);
  if (!m) throw new Error(`not a number literal: ${s}`);
  const digits = BigInt(m[2] + (m[3] ?? ""));
  const exp = Number(m[4] ?? 0) - (m[3] ?? "").length;
  const n = (m[1] ? -digits : digits) * (exp > 0 ? 10n ** BigInt(exp) : 1n);
  return { n, d: exp < 0 ? 10n ** BigInt(-exp) : 1n };
}

/** The exact value of a double: scaling by two is exact, so double it until it is an integer. */
function ratOfDouble(v: number): Rat {
  let d = 1n;
  while (!Number.isInteger(v)) {
    v *= 2;
    d *= 2n;
  }
  return { n: BigInt(v), d };
}

const isIntLiteral = (s: string) => /^-?\d+$/.test(s);
const significant = (s: string) => s.replace(/^-|[eE].*$/g, "").replace(".", "").replace(/^0+/, "").replace(/0+$/, "").length;

type Written = { key: "minimum" | "exclusiveMinimum" | "maximum" | "exclusiveMaximum"; text: string };

/** Every way a client may read answer `o` against bound `b`, each as [answer, bound]. */
function readings(o: string, b: Written): Array<[string, Rat, Rat]> {
  const d = JSON.parse(b.text) as number;
  const out: Array<[string, Rat, Rat]> = [
    ["ajv (doubles)", ratOfDouble(Number(o)), ratOfDouble(d)],
    ["python", isIntLiteral(o) ? ratOfText(o) : ratOfDouble(Number(o)), isIntLiteral(b.text) ? ratOfText(b.text) : ratOfDouble(d)],
  ];
  if (isIntLiteral(b.text) || significant(b.text) <= 15) out.push(["exact decimals", ratOfText(o), ratOfText(b.text)]);
  return out;
}

function holds(o: string, bounds: Written[]): string | null {
  for (const b of bounds) {
    for (const [how, x, bound] of readings(o, b)) {
      const c = cmp(x, bound);
      const ok = b.key === "minimum" ? c >= 0 : b.key === "exclusiveMinimum" ? c > 0 : b.key === "maximum" ? c <= 0 : c < 0;
      if (!ok) return `${o} breaks ${b.key} ${b.text} read as ${how}`;
    }
  }
  return null;
}

// ---- The grammar, as llama.cpp runs it and as a random walk over its rules.

type Node =
  | { kind: "alt"; options: Node[][] }
  | { kind: "text"; text: string }
  | { kind: "class"; ranges: Array<[number, number]> }
  | { kind: "rule"; name: string }
  | { kind: "repeat"; item: Node; min: number; max: number };

/** The GBNF subset number grammars use, parsed to sample from. */
function parseGbnf(gbnf: string): Map<string, Node> {
  const rules = new Map<string, Node>();
  for (const line of gbnf.split("\n")) {
    const m = /^([a-zA-Z0-9-]+) ::= (.*)$/.exec(line);
    if (!m) continue;
    const text = m[2];
    let i = 0;
    const alternatives = (): Node => {
      const options: Node[][] = [[]];
      while (i < text.length && text[i] !== ")") {
        const c = text[i];
        if (c === " ") i++;
        else if (c === "|") {
          options.push([]);
          i++;
        } else if (c === "?" || c === "*" || c === "+" || c === "{") {
          const seq = options[options.length - 1];
          const item = seq.pop()!;
          let min = c === "+" ? 1 : 0;
          let max = c === "?" ? 1 : 4;
          if (c === "{") {
            const end = text.indexOf("}", i);
            const [a, b] = text.slice(i + 1, end).split(",");
            min = Number(a);
            max = b === undefined ? min : b === "" ? min + 4 : Number(b);
            i = end;
          }
          seq.push({ kind: "repeat", item, min, max });
          i++;
        } else options[options.length - 1].push(atom());
      }
      return { kind: "alt", options };
    };
    const atom = (): Node => {
      const c = text[i];
      if (c === "(") {
        i++;
        const inner = alternatives();
        i++; // ")"
        return inner;
      }
      if (c === '"') {
        let out = "";
        for (i++; text[i] !== '"'; i++) out += text[i] === "\\" ? text[++i] : text[i];
        i++;
        return { kind: "text", text: out };
      }
      if (c === "[") {
        const ranges: Array<[number, number]> = [];
        const char = (): number => {
          if (text[i] !== "\\") return text.charCodeAt(i++);
          const e = text[i + 1];
          i += 2;
          if (e === "x") {
            i += 2;
            return parseInt(text.slice(i - 2, i), 16);
          }
          return ({ n: 10, t: 9, r: 13 } as Record<string, number>)[e] ?? e.charCodeAt(0);
        };
        i++;
        if (text[i] === "^") throw new Error("negated classes are not sampled");
        while (text[i] !== "]") {
          const a = char();
          if (text[i] === "-" && text[i + 1] !== "]") {
            i++;
            ranges.push([a, char()]);
          } else ranges.push([a, a]);
        }
        i++;
        return { kind: "class", ranges };
      }
      const name = /^[a-zA-Z0-9-]+/.exec(text.slice(i))![0];
      i += name.length;
      return { kind: "rule", name };
    };
    rules.set(m[1], alternatives());
  }
  return rules;
}

/** A random text of the grammar: every choice uniform (repetitions too). */
function sampleGbnf(rules: Map<string, Node>, rng: () => number): string {
  const pick = (n: number) => Math.floor(rng() * n);
  const walk = (node: Node, depth: number): string => {
    if (depth > 2000) throw new Error("recursive grammar");
    switch (node.kind) {
      case "text":
        return node.text;
      case "class": {
        const [a, b] = node.ranges[pick(node.ranges.length)];
        return String.fromCharCode(a + pick(b - a + 1));
      }
      case "rule":
        return walk(rules.get(node.name)!, depth + 1);
      case "repeat": {
        let out = "";
        for (let k = node.min + pick(node.max - node.min + 1); k > 0; k--) out += walk(node.item, depth + 1);
        return out;
      }
      case "alt":
        return node.options[pick(node.options.length)].map((n) => walk(n, depth + 1)).join("");
    }
  };
  return walk(rules.get("root")!, 0);
}

/** A seeded generator, so a failing sample can be found again. */
const seeded = seededRandom;

type Compiled = { accepts: (text: string) => boolean; samples: (n: number, seed: number) => string[] };

async function compileBounds(type: "integer" | "number", bounds: Written[]): Promise<Compiled | UnsupportedSchemaError> {
  // The schema as the server sees it: its number texts read by JSON.parse.
  const schemaText = `{"type":"${type}"${bounds.map((b) => `,"${b.key}":${b.text}`).join("")}}`;
  let gbnf: string;
  try {
    gbnf = jsonSchemaToGbnf(JSON.parse(schemaText));
  } catch (e) {
    if (e instanceof UnsupportedSchemaError) return e;
    throw e;
  }
  const grammar = (await llama.createGrammar({ grammar: gbnf })) as unknown as { _testText(text: string): boolean };
  const rules = parseGbnf(gbnf);
  return {
    accepts: (text) => grammar._testText(text),
    samples: (n, seed) => {
      const rng = seeded(seed);
      return Array.from({ length: n }, () => sampleGbnf(rules, rng));
    },
  };
}

/** Samples of the grammar: each one accepted by llama.cpp (the walk is faithful) and in bounds. */
function checkSamples(c: Compiled, bounds: Written[], seed: number): string[] {
  const samples = c.samples(25, seed);
  for (const s of samples) {
    assert.ok(c.accepts(s), `llama.cpp accepts the sample ${s}`);
    const broken = holds(s, bounds);
    assert.equal(broken, null, broken ?? "");
  }
  return samples;
}

// ---- Bound texts: integers and decimals from 10^0 to 10^30, either sign.

/** A decimal literal for n·10^-scale. */
function textOf(n: bigint, scale: number): string {
  const neg = n < 0n;
  let digits = (neg ? -n : n).toString().padStart(scale + 1, "0");
  if (scale > 0) digits = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`.replace(/\.?0+$/, "");
  return (neg ? "-" : "") + digits;
}

/** A lower and an upper bound n·10^-scale, close together at every magnitude (often closer than a double tells apart). */
const boundPair = fc
  .record({
    magnitude: fc.integer({ min: 0, max: 30 }),
    scale: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4 })),
    lead: fc.bigInt({ min: 1n, max: 10n ** 18n }),
    // The width as a power of ten below the magnitude times a small count (0: equal bounds).
    widthExp: fc.integer({ min: -20, max: 2 }),
    widthCount: fc.bigInt({ min: 0n, max: 12n }),
    negate: fc.boolean(),
    cross: fc.boolean(),
  })
  .map(({ magnitude, scale, lead, widthExp, widthCount, negate, cross }) => {
    // lo ≈ lead's digits placed at 10^magnitude, in units of 10^-scale.
    const unit = BigInt(magnitude + scale);
    const leadDigits = lead.toString();
    let lo = BigInt(leadDigits.slice(0, Number(unit) + 1) || "0") * 10n ** BigInt(Math.max(0, Number(unit) + 1 - leadDigits.length));
    const e = magnitude + widthExp + scale;
    let width = e >= 0 ? widthCount * 10n ** BigInt(e) : widthCount;
    if (cross) lo = -lo; // a range around zero (or a negative one)
    let hi = lo + width;
    if (negate) [lo, hi] = [-hi, -lo];
    return { lo: textOf(lo, scale), hi: textOf(hi, scale) };
  });

const keysOf = fc.record({ lowerKey: fc.constantFrom("minimum" as const, "exclusiveMinimum" as const), upperKey: fc.constantFrom("maximum" as const, "exclusiveMaximum" as const), sides: fc.oneof({ arbitrary: fc.constant("both"), weight: 8 }, fc.constant("lower"), fc.constant("upper")) });

/** The next double above (or below) v, from its bits (independent of the converter's own). */
function nextDouble(v: number, up: boolean): number {
  if (v === 0) return up ? Number.MIN_VALUE : -Number.MIN_VALUE;
  const a = new Float64Array([v]);
  const bits = new BigInt64Array(a.buffer);
  bits[0] += up === v > 0 ? 1n : -1n;
  return a[0];
}

/**
 * Whether the bounds plainly hold a member: a number of at most 15 significant digits (an integer)
 * that lies two doubles inside each bound. Then the converter must not refuse them.
 */
function plainMember(type: "integer" | "number", bounds: Written[]): boolean {
  let lo: Rat | undefined;
  let hi: Rat | undefined;
  for (const b of bounds) {
    const d = JSON.parse(b.text) as number;
    if (b.key.endsWith("inimum")) lo = ratOfDouble(nextDouble(nextDouble(d, true), true));
    else hi = ratOfDouble(nextDouble(nextDouble(d, false), false));
  }
  if (!lo || !hi) return true;
  // The midpoint, cut to an integer (and for numbers to 15 significant digits).
  const mid: Rat = { n: lo.n * hi.d + hi.n * lo.d, d: 2n * lo.d * hi.d };
  let m = mid.n / mid.d;
  if (type === "number" && m !== 0n) {
    const drop = (m < 0n ? -m : m).toString().length - 15;
    if (drop > 0) m = (m / 10n ** BigInt(drop)) * 10n ** BigInt(drop);
  }
  const member: Rat = { n: m, d: 1n };
  return cmp(member, lo) >= 0 && cmp(member, hi) <= 0;
}

describe("number bounds", () => {
  test("the audit's cases: members certain to satisfy the bounds as written, whichever way they are read", async () => {
    const cases: Array<{ type: "integer" | "number"; bounds: Written[]; yes: string[]; no: string[] }> = [
      {
        type: "integer",
        bounds: [{ key: "minimum", text: "12345678901234560000" }, { key: "maximum", text: "12345678901234567890" }],
        yes: ["12345678901234564000", "12345678901234563072", "12345678901234565120"],
        // Inside as written, but within a double of a bound (it could have been written a little further in).
        no: ["12345678901234560000", "12345678901234567890", "12345678901234567168"],
      },
      {
        type: "integer",
        bounds: [{ key: "exclusiveMinimum", text: "10000000000000000" }, { key: "exclusiveMaximum", text: "10000000000000004" }],
        yes: ["10000000000000002"],
        no: ["10000000000000000", "10000000000000001", "10000000000000003", "10000000000000004"],
      },
      {
        type: "number",
        bounds: [{ key: "minimum", text: "1000000000000000.2" }, { key: "maximum", text: "1000000000000000.7" }],
        yes: ["1000000000000000.5", "1000000000000000.4", "1000000000000000.625", "1000000000000000.375"],
        no: ["1000000000000000.2", "1000000000000000.25", "1000000000000000.7", "1000000000000000.75", "1000000000000000.8", "1000000000000001"],
      },
      {
        type: "integer",
        bounds: [{ key: "minimum", text: "9007199254740993" }, { key: "maximum", text: "9007199254740999" }],
        yes: ["9007199254740994", "9007199254740995", "9007199254740998"],
        no: ["9007199254741000", "9007199254740992", "9007199254740993", "9007199254740999"],
      },
    ];
    for (const [i, c] of cases.entries()) {
      const compiled = await compileBounds(c.type, c.bounds);
      assert.ok(!(compiled instanceof Error), `${JSON.stringify(c.bounds)}: ${compiled instanceof Error ? compiled.message : ""}`);
      for (const y of c.yes) {
        assert.equal(holds(y, c.bounds), null, `test's own check: ${y}`);
        assert.ok(compiled.accepts(y), `accepts ${y} for ${JSON.stringify(c.bounds)}`);
      }
      for (const n of c.no) assert.ok(!compiled.accepts(n), `rejects ${n} for ${JSON.stringify(c.bounds)}`);
      checkSamples(compiled, c.bounds, i + 1);
    }
  });

  test("bounds a double cannot tell apart are refused, saying so; bounds with no member at all say that", async () => {
    const same = await compileBounds("integer", [{ key: "minimum", text: "9007199254740993" }, { key: "maximum", text: "9007199254740993" }]);
    assert.ok(same instanceof UnsupportedSchemaError);
    assert.match(same.message, /no integer is certain to satisfy the bounds: they arrive as doubles/);
    const crossed = await compileBounds("number", [{ key: "minimum", text: "1e22" }, { key: "maximum", text: "1e20" }]);
    assert.ok(crossed instanceof UnsupportedSchemaError);
    assert.match(crossed.message, /minimum: no number satisfies the bounds$/);
  });

  test("unbounded above, past every finite double and 10^308: the longest answers still read as finite doubles", async () => {
    for (const text of ["1e308", "1.7976931348623157e308", "1.5e300"]) {
      const bounds: Written[] = [{ key: "exclusiveMinimum", text }];
      const c = await compileBounds("number", bounds);
      if (text.startsWith("1.79")) {
        assert.ok(c instanceof UnsupportedSchemaError, "nothing lies above the largest double");
        continue;
      }
      assert.ok(!(c instanceof Error), text);
      for (const s of checkSamples(c, bounds, 7)) assert.ok(Number.isFinite(Number(s)), s);
      assert.ok(!c.accepts(BigInt(Number.MAX_VALUE).toString() + "0"));
    }
  });

  test("every answer the grammar allows lies within the bounds, 10^0 to 10^30, either sign, inclusive or exclusive (fast-check)", async () => {
    let seed = 100;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("integer" as const, "number" as const), boundPair, keysOf, async (type, pair, keys) => {
        const bounds: Written[] = [];
        if (keys.sides !== "upper") bounds.push({ key: keys.lowerKey, text: pair.lo });
        if (keys.sides !== "lower") bounds.push({ key: keys.upperKey, text: pair.hi });
        const c = await compileBounds(type, bounds);
        if (c instanceof Error) {
          assert.ok(!plainMember(type, bounds), `refused although a member is plain: ${type} ${JSON.stringify(bounds)}: ${c.message}`);
          return;
        }
        checkSamples(c, bounds, seed++);
        if (type === "integer") for (const s of c.samples(10, seed++)) assert.match(s, /^-?\d+$/);
      }),
      { numRuns: 1000 },
    );
  });
});
