import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import fc from "fast-check";
import { z } from "zod";
import {
  getLlama,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  TokenBias,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import {
  compileJsonSchema,
  JSON_OBJECT_GBNF,
  jsonSchemaToGbnf,
  schemaCacheKey,
  SchemaLimitError,
  UnsupportedSchemaError,
} from "../../src/grammar/json-schema-to-gbnf.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";

let llama: Llama;

before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

async function compile(gbnf: string): Promise<LlamaGrammar> {
  return llama.createGrammar({ grammar: gbnf });
}

/**
 * Whether the grammar accepts exactly `text` (a complete match of the root rule). Uses
 * LlamaGrammar's internal `_testText` (llama.cpp's own grammar engine, fed code point by code point);
 * it is not in the public typings, so a library upgrade that drops it fails here loudly.
 */
async function matcher(schema: unknown, opts?: { maxWhitespace?: number }): Promise<(text: string) => boolean> {
  const grammar = await compile(jsonSchemaToGbnf(schema, opts));
  const internal = grammar as unknown as { _testText(text: string): boolean };
  assert.equal(typeof internal._testText, "function", "LlamaGrammar._testText is gone");
  return (text) => internal._testText(text);
}

async function assertAccepts(schema: unknown, yes: string[], no: string[]) {
  const accepts = await matcher(schema);
  for (const t of yes) assert.ok(accepts(t), `should accept ${JSON.stringify(t)} for ${JSON.stringify(schema)}`);
  for (const t of no) assert.ok(!accepts(t), `should reject ${JSON.stringify(t)} for ${JSON.stringify(schema)}`);
}

// ---------------------------------------------------------------------------------------------
// Format checkers for ajv (ajv-formats is not installed), written independently of the grammar.
// ---------------------------------------------------------------------------------------------

function isDate(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
}
const TIME = /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/i;
const isTime = (s: string) => TIME.test(s);
const isDateTime = (s: string) => {
  const i = s.search(/[Tt]/);
  return i === 10 && isDate(s.slice(0, 10)) && isTime(s.slice(11));
};
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const EMAIL = new RegExp(`^${ATEXT}+(?:\\.${ATEXT}+)*@${LABEL}(?:\\.${LABEL})+$`);
// RFC 3986 "URI" (without IP-literal hosts), transcribed from the RFC's ABNF.
const U_UNRES = "[A-Za-z0-9._~-]";
const U_PCT = "%[0-9A-Fa-f]{2}";
const U_SUB = "[!$&'()*+,;=]";
const U_PCHAR = `(?:${U_UNRES}|${U_PCT}|${U_SUB}|[:@])`;
const U_AUTH = `(?:(?:${U_UNRES}|${U_PCT}|${U_SUB}|:)*@)?(?:${U_UNRES}|${U_PCT}|${U_SUB})*(?::\\d*)?`;
const U_HIER = `(?://${U_AUTH}(?:/${U_PCHAR}*)*|/(?:${U_PCHAR}+(?:/${U_PCHAR}*)*)?|${U_PCHAR}+(?:/${U_PCHAR}*)*|)`;
const URI = new RegExp(`^[A-Za-z][A-Za-z0-9+.-]*:${U_HIER}(?:\\?(?:${U_PCHAR}|[/?])*)?(?:#(?:${U_PCHAR}|[/?])*)?$`);

function newAjv() {
  const ajv = new Ajv2020({ strict: false });
  ajv.addFormat("date", isDate);
  ajv.addFormat("time", isTime);
  ajv.addFormat("date-time", isDateTime);
  ajv.addFormat("uuid", UUID);
  ajv.addFormat("email", EMAIL);
  ajv.addFormat("uri", URI);
  return ajv;
}

// ---------------------------------------------------------------------------------------------
// Grammar text and exact acceptance
// ---------------------------------------------------------------------------------------------

describe("grammar text", () => {
  test("keywords no draft defines are annotations; a near miss of a known keyword is refused as a misspelling", () => {
    // zod's .meta(), pydantic's json_schema_extra, draft 4's id: nothing to enforce.
    const annotated = { type: "object", id: "w", properties: { w: { type: "number", units: "kg", errorMessage: "a weight" }, c: { enum: ["a", "b"], enumNames: ["A", "B"] } }, required: ["w", "c"] };
    const plain = { type: "object", properties: { w: { type: "number" }, c: { enum: ["a", "b"] } }, required: ["w", "c"] };
    assert.equal(compileJsonSchema(annotated, { strict: true }).gbnf, compileJsonSchema(plain, { strict: true }).gbnf);
    for (const [schema, path, meant] of [
      [{ type: "string", maxLenght: 3 }, "maxLenght", "maxLength"],
      [{ type: "object", properties: { a: { type: "string" } }, requried: ["a"] }, "requried", "required"],
      [{ type: "object", properties: { a: { type: "integer", Minimum: 3 } } }, "properties.a.Minimum", "minimum"],
    ] as const) {
      assert.throws(
        () => compileJsonSchema(schema, { strict: true }),
        (e: unknown) => e instanceof UnsupportedSchemaError && e.path === path && e.message.includes(`did you mean "${meant}"`),
        path,
      );
      // Not strict: relaxed and named, like any keyword that cannot be enforced.
      assert.deepEqual(compileJsonSchema(schema, { strict: false }).relaxed.map((r) => r.path), [path]);
    }
  });

  test("small schemas compile with llama.cpp", async () => {
    const schemas: unknown[] = [
      {},
      true,
      { type: "string" },
      { type: ["string", "null"], maxLength: 3 },
      { type: "integer", minimum: 0, maximum: 255 },
      { type: "number", exclusiveMinimum: 0, maximum: 1.5 },
      { enum: [1, "two", null, true, { a: [1] }] },
      { const: "fixed" },
      { type: "object", properties: { a: { type: "boolean" } } },
      { type: "array", prefixItems: [{ type: "string" }], items: { type: "number" }, maxItems: 5 },
      { $defs: { n: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/n" } } } } }, $ref: "#/$defs/n" },
      { type: "string", pattern: "^[a-z]+(-[a-z0-9]+)*$" },
      ...["date", "time", "date-time", "email", "uuid", "uri"].map((format) => ({ type: "string", format })),
    ];
    for (const s of schemas) await compile(jsonSchemaToGbnf(s));
    await compile(JSON_OBJECT_GBNF);
  });

  test("rule names start with a letter (digit-named properties)", async () => {
    const gbnf = jsonSchemaToGbnf({ type: "object", properties: { "15": { type: ["integer", "null"] }, "-": { type: "string", maxLength: 15 } } });
    for (const m of gbnf.matchAll(/^([^ ]+) ::=/gm)) assert.match(m[1], /^[a-zA-Z][a-zA-Z0-9-]*$/);
    await compile(gbnf);
  });

  test("whitespace is bounded and configurable", async () => {
    const s = { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false };
    const two = await matcher(s);
    assert.ok(two('{"a":1}'));
    assert.ok(two('{  "a" \n:\t 1  }'));
    assert.ok(!two('{   "a":1}'));
    assert.ok(!two(' {"a":1}'), "no leading whitespace");
    assert.ok(!two('{"a":1} '), "no trailing whitespace");
    const none = await matcher(s, { maxWhitespace: 0 });
    assert.ok(none('{"a":1}'));
    assert.ok(!none('{ "a":1}'));
    assert.match(jsonSchemaToGbnf(s), /^ws ::= \[ \\t\\n\]\{0,2\}$/m);
  });

  test("required and optional properties: declared order, commas for every subset", async () => {
    const s = {
      type: "object",
      properties: { a: { const: 1 }, b: { const: 2 }, c: { const: 3 }, d: { const: 4 } },
      required: ["b"],
      additionalProperties: false,
    };
    const accepts = await matcher(s);
    const names = ["a", "b", "c", "d"];
    const value = (n: string) => names.indexOf(n) + 1;
    for (let mask = 0; mask < 16; mask++) {
      const present = names.filter((_, i) => mask & (1 << i));
      const text = `{${present.map((n) => `"${n}":${value(n)}`).join(",")}}`;
      assert.equal(accepts(text), present.includes("b"), text);
      if (present.length >= 2) {
        const reversed = `{${[...present].reverse().map((n) => `"${n}":${value(n)}`).join(",")}}`;
        assert.ok(!accepts(reversed), reversed);
      }
      if (present.length > 0) {
        assert.ok(!accepts(text.replace("}", ",}")), "trailing comma");
        assert.ok(!accepts(text.replace("{", "{,")), "leading comma");
      }
    }
    const allOptional = await matcher({ ...s, required: [] });
    assert.ok(allOptional("{}"));
    assert.ok(allOptional('{ "c":3 , "d":4 }'));
    assert.ok(!allOptional('{"a":1,"a":1}'));
  });

  test("additionalProperties: absent (none generated), true, schema, false", async () => {
    const base = { type: "object", properties: { a: { type: "integer" } }, required: ["a"] };
    // Absent next to properties: no additional keys are generated (as llama.cpp and xgrammar do).
    await assertAccepts(base, ['{"a":1}', '{"a":-5}'], ['{"a":1,"x":true}', '{"a":1,"a":2}']);
    // Without properties, an object is free-form; required names that are not declared are allowed.
    await assertAccepts({ type: "object" }, ["{}", '{"x":1,"y":[true]}'], []);
    await assertAccepts({ type: "object", properties: {}, required: ["k"] }, ['{"k":[1]}'], ["{}", '{"k":1,"m":2}']);
    // minProperties beyond the declared names needs additional keys, so they are generated.
    await assertAccepts({ type: "object", properties: { a: { const: 1 } }, minProperties: 2 }, ['{"a":1,"x":2}'], ['{"a":1}']);
    await assertAccepts({ ...base, additionalProperties: true }, ['{"a":1,"x":true}', '{"a":1, "x":[1,{"y":null}], "z":"s"}', '{"a":-5}'], [
      '{"a":1,"a":2}', // an additional key is never a declared name
      '{"x":1,"a":1}', // additional properties come after the declared ones
      '{"a":"s"}',
      '{"a":1,"x\\u0041":1}', // additional keys are written without escapes
    ]);
    await assertAccepts({ ...base, additionalProperties: true }, ['{"a":1,"x":{}}'], ['{"x":1}']);
    await assertAccepts(base, [], ['{"a":1,"x":{}}']);
    await assertAccepts({ ...base, additionalProperties: { type: "boolean" } }, ['{"a":1,"x":true,"y":false}'], ['{"a":1,"x":1}']);
    await assertAccepts({ ...base, additionalProperties: false }, ['{"a":1}'], ['{"a":1,"x":true}']);
    // A key that shares a prefix with a declared name, or extends it, is a fine additional key.
    await assertAccepts({ type: "object", properties: { ab: { type: "null" } }, additionalProperties: true }, ['{"a":1}', '{"abc":1}', '{"ab":null,"b":2}', '{"":0}'], ['{"ab":1}']);
    // Names that exist on Object.prototype are ordinary names.
    await assertAccepts({ type: "object", properties: { constructor: { type: "null" } }, required: ["toString"], additionalProperties: true }, ['{"constructor":null,"toString":1}', '{"toString":1}'], ['{"constructor":null}', "{}"]);
    // Required but undeclared: present, with the additionalProperties schema.
    await assertAccepts({ type: "object", required: ["k"], additionalProperties: { type: "integer" } }, ['{"k":1}', '{"k":1,"m":2}'], ['{}', '{"k":"s"}']);
  });

  test("minProperties / maxProperties", async () => {
    const s = { type: "object", properties: { a: { const: 1 }, b: { const: 1 }, c: { const: 1 } }, additionalProperties: false, minProperties: 1, maxProperties: 2 };
    await assertAccepts(s, ['{"a":1}', '{"c":1}', '{"a":1,"c":1}', '{"b":1,"c":1}'], ["{}", '{"a":1,"b":1,"c":1}']);
    await assertAccepts({ type: "object", properties: { a: { const: 1 } }, required: ["a"], maxProperties: 2, additionalProperties: true }, ['{"a":1}', '{"a":1,"x":2}'], ['{"a":1,"x":2,"y":3}']);
    await assertAccepts({ type: "object", minProperties: 1, maxProperties: 1 }, ['{"x":2}'], ["{}", '{"x":2,"y":3}']);
    // pydantic's Dict[str, int] = Field(min_length=2): satisfiable, but only one generated key can be
    // counted. Not called unsatisfiable: refused as not enforceable when strict, relaxed otherwise.
    const dict = { type: "object", additionalProperties: { type: "integer" }, minProperties: 2, maxProperties: 4 };
    assert.throws(
      () => compileJsonSchema(dict, { strict: true }),
      (e: unknown) => e instanceof UnsupportedSchemaError && e.path === "minProperties" && !/no object satisfies/.test(e.message) && /only one/.test(e.message),
    );
    const relaxed = compileJsonSchema(dict, { strict: false });
    assert.deepEqual(relaxed.relaxed.map((r) => r.path), ["minProperties"]);
  });

  test("multipleOf whose multiples within the bounds all have more digits than an answer is written with: not enforceable, not unsatisfiable", () => {
    for (const schema of [{ type: "number", multipleOf: 0.01, minimum: 1e13 }, { type: "number", multipleOf: 0.01, maximum: -1e13 }]) {
      assert.throws(
        () => compileJsonSchema(schema, { strict: true }),
        (e: unknown) => e instanceof UnsupportedSchemaError && e.path === "multipleOf" && !/no number/.test(e.message),
        JSON.stringify(schema),
      );
      assert.deepEqual(compileJsonSchema(schema, { strict: false }).relaxed.map((r) => r.path), ["multipleOf"]);
    }
    // Bounds with no multiple between them are still unsatisfiable, strict or not.
    for (const strict of [true, false])
      assert.throws(() => compileJsonSchema({ type: "number", multipleOf: 0.01, minimum: 0.011, maximum: 0.019 }, { strict }), /no number that is a multiple of 0.01/);
  });

  test("integer ranges are exact (digit-range construction)", async () => {
    const cases: Array<[number | undefined, number | undefined]> = [[0, 255], [-10, 10], [1, undefined], [undefined, 100], [-1234, -17], [7, 7], [99, 1001], [-5, 0]];
    for (const [lo, hi] of cases) {
      const s: Record<string, unknown> = { type: "integer" };
      if (lo !== undefined) s.minimum = lo;
      if (hi !== undefined) s.maximum = hi;
      const accepts = await matcher(s);
      for (let x = -1300; x <= 1300; x += x > -30 && x < 300 ? 1 : 7) {
        assert.equal(accepts(String(x)), (lo === undefined || x >= lo) && (hi === undefined || x <= hi), `${x} in [${lo}, ${hi}]`);
      }
      for (const t of ["-0", "01", "1.0", "1e2", "", "-", "+1"]) assert.ok(!accepts(t), `${t} is not an integer literal`);
    }
    // Exclusive bounds (2020-12 numbers and draft-04 booleans), non-integer bounds, safe range.
    await assertAccepts({ type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 3 }, ["1", "2"], ["0", "3"]);
    await assertAccepts({ type: "integer", minimum: 0, exclusiveMinimum: true }, ["1"], ["0"]);
    await assertAccepts({ type: "integer", minimum: 0.5, maximum: 2.5 }, ["1", "2"], ["0", "3"]);
    await assertAccepts({ type: "integer" }, ["0", "-1", "9007199254740991", "-9007199254740991"], ["9007199254740992", "-0", "1e3"]);
  });

  test("number bounds are exact on decimals without exponent", async () => {
    const candidates = new Set<string>(["0.0", "-0.5", "2.25", "2.2500", "2.2501", "0.50", "0.4999999", "10", "1e2", "00.5", ".5", "1."]);
    for (let i = -300; i <= 300; i += 1) for (const d of [0, 1, 2, 3]) candidates.add((i / 100).toFixed(d));
    const bounds: Array<Record<string, number>> = [
      { minimum: 0.5, exclusiveMaximum: 2.25 },
      { exclusiveMinimum: -1.5, maximum: 0 },
      { minimum: 0 },
      { exclusiveMinimum: 0 },
      { maximum: -0.01 },
      { minimum: -2, maximum: -2 },
      { exclusiveMinimum: 1, exclusiveMaximum: 2 },
      { minimum: 0, maximum: 1 },
    ];
    for (const b of bounds) {
      const accepts = await matcher({ type: "number", ...b });
      for (const c of candidates) {
        if (/^-0(\.0*)?$/.test(c)) continue; // negative zero is never produced; either answer is fine
        const v = Number(c);
        const want = /^-?(0|[1-9]\d*)(\.\d+)?$/.test(c) &&
          (b.minimum === undefined || v >= b.minimum) && (b.maximum === undefined || v <= b.maximum) &&
          (b.exclusiveMinimum === undefined || v > b.exclusiveMinimum) && (b.exclusiveMaximum === undefined || v < b.exclusiveMaximum);
        assert.equal(accepts(c), want, `${c} with ${JSON.stringify(b)}`);
      }
    }
    await assertAccepts({ type: "number" }, ["0", "-1.5", "1e99", "3.14E-2", "9999999999999999"], ["1e100", "01", "1.", "NaN", "Infinity"]);
  });

  test("multipleOf is exact on decimals, with bounds, in allOf and next to enum", async () => {
    // Written independently of multiple-of.ts: a decimal literal as an integer and a scale.
    const scaled = (text: string): { n: bigint; scale: number } => {
      const [int, frac = ""] = text.replace("-", "").split(".");
      const n = BigInt(int + frac);
      return { n: text.startsWith("-") ? -n : n, scale: frac.length };
    };
    const isMultiple = (text: string, step: string): boolean => {
      const a = scaled(text);
      const b = scaled(step);
      const scale = Math.max(a.scale, b.scale);
      return (a.n * 10n ** BigInt(scale - a.scale)) % (b.n * 10n ** BigInt(scale - b.scale)) === 0n;
    };
    const candidates = new Set<string>(["-0", "00", "05", "1.", ".5", "1e2", "0.250", "1.000", "-0.0"]);
    for (let i = -240; i <= 240; i++) for (const d of [0, 1, 2, 3]) candidates.add((i / 20).toFixed(d));
    for (let i = -40; i <= 40; i++) candidates.add(String(i * 25)).add(String(i * 7)).add(String(i * 1000));
    const cases: Array<[string, Record<string, unknown>]> = [
      ["0.01", { type: "number" }],
      ["0.25", { type: "number", minimum: -3, maximum: 10 }],
      ["0.25", { type: "number", exclusiveMinimum: -3, exclusiveMaximum: 10 }],
      ["0.5", { type: "number", minimum: 0.3 }],
      ["5", { type: "integer" }],
      ["5", { type: "number", maximum: -10 }],
      ["7", { type: "integer", minimum: -30, maximum: 100 }],
      ["7", { type: "integer", exclusiveMinimum: 20 }],
      ["0.05", { type: "number", minimum: 0 }],
      ["2.5", { type: "integer" }],
      ["1000", { type: "integer", minimum: 0 }],
      ["0.3", { type: "number", minimum: -1.2, maximum: 11.7 }],
    ];
    for (const [step, bounds] of cases) {
      const schema = { ...bounds, multipleOf: Number(step) };
      const accepts = await matcher(schema);
      const integer = bounds.type === "integer";
      const fractionDigits = integer ? 0 : (step.split(".")[1] ?? "").length;
      const validate = new Ajv2020({ strict: false }).compile(schema);
      for (const c of candidates) {
        const want = /^-?(0|[1-9]\d*)(\.\d+)?$/.test(c) && !/^-0(\.0*)?$/.test(c) && (c.split(".")[1] ?? "").length <= fractionDigits &&
          isMultiple(c, step) && (!integer || !c.includes(".")) &&
          (bounds.minimum === undefined || Number(c) >= Number(bounds.minimum)) && (bounds.maximum === undefined || Number(c) <= Number(bounds.maximum)) &&
          (bounds.exclusiveMinimum === undefined || Number(c) > Number(bounds.exclusiveMinimum)) && (bounds.exclusiveMaximum === undefined || Number(c) < Number(bounds.exclusiveMaximum));
        assert.equal(accepts(c), want, `${c} with ${JSON.stringify(schema)}`);
        // Steps that are exact doubles: ajv's division agrees with the decimal reading.
        if (want && ["0.25", "0.5", "5", "7", "1000"].includes(step)) assert.ok(validate(JSON.parse(c)), `ajv accepts ${c} for ${JSON.stringify(schema)}`);
      }
    }
    // Ends of the range: a multiple as large as an integer may be, and 15 digits for decimals.
    await assertAccepts({ type: "integer", multipleOf: 5 }, ["9007199254740990", "-9007199254740990"], ["9007199254740995", "9007199254740991"]);
    await assertAccepts({ type: "number", multipleOf: 0.01 }, ["9999999999999.99", "-0.07"], ["99999999999999.99", "0.001"]);
    // Few multiples between the bounds are listed, whatever the step.
    await assertAccepts({ type: "number", multipleOf: 0.123456789, minimum: 0, maximum: 0.5 }, ["0", "0.123456789", "0.246913578", "0.370370367", "0.493827156"], ["0.5", "0.12345679"]);
    // allOf: the least common multiple; next to enum: the values that are multiples.
    await assertAccepts({ allOf: [{ type: "integer", multipleOf: 4 }, { multipleOf: 6 }] }, ["0", "12", "-36", "120"], ["4", "6", "18"]);
    await assertAccepts({ allOf: [{ type: "number", multipleOf: 0.1 }, { multipleOf: 0.15 }] }, ["0.3", "0.6", "-0.9"], ["0.1", "0.15", "0.45"]);
    await assertAccepts({ enum: [0.1, 0.2, 0.25, 0.3, 7, 7.05], multipleOf: 0.1 }, ["0.1", "0.2", "0.3", "7"], ["0.25", "7.05"]);
    // Too large an automaton: refused when strict; relaxed and listed otherwise, the bounds kept.
    const big = { type: "integer", multipleOf: 7919, minimum: 3 };
    assert.throws(() => jsonSchemaToGbnf(big), (e: unknown) => e instanceof UnsupportedSchemaError && e.path === "multipleOf" && /7919/.test(e.message));
    const loose = compileJsonSchema(big, { strict: false });
    assert.deepEqual(loose.relaxed.map((r) => r.path), ["multipleOf"]);
    const grammar = (await compile(loose.gbnf)) as unknown as { _testText(text: string): boolean };
    assert.deepEqual(["3", "8000", "2"].map((t) => grammar._testText(t)), [true, true, false]);
  });

  test("multipleOf: for random steps and bounds the grammar accepts exactly the multiples in range", async () => {
    const scaled = (text: string, scale: number): bigint => {
      const [int, frac = ""] = text.replace("-", "").split(".");
      const n = BigInt(int + frac.padEnd(scale, "0"));
      return text.startsWith("-") ? -n : n;
    };
    const decimal = (n: bigint, scale: number): string => {
      const m = n < 0n ? -n : n;
      const digits = m.toString().padStart(scale + 1, "0");
      const text = scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
      return (n < 0n ? "-" : "") + text;
    };
    const bound = fc.option(fc.tuple(fc.integer({ min: -3000, max: 3000 }), fc.boolean()), { nil: undefined });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 60 }), fc.integer({ min: 0, max: 3 }), fc.boolean(), bound, bound, async (k, e, integer, lo, hi) => {
        const step = decimal(BigInt(k), e);
        const schema: Record<string, unknown> = { type: integer ? "integer" : "number", multipleOf: Number(step) };
        // Bounds in thousandths.
        if (lo) schema[lo[1] ? "exclusiveMinimum" : "minimum"] = Number(decimal(BigInt(lo[0]), 3));
        if (hi) schema[hi[1] ? "exclusiveMaximum" : "maximum"] = Number(decimal(BigInt(hi[0]), 3));
        let accepts: (t: string) => boolean;
        try {
          accepts = await matcher(schema);
        } catch (err) {
          // Only an empty range may be refused here.
          assert.ok(err instanceof UnsupportedSchemaError && /no (integer|number)/.test(err.message), `${JSON.stringify(schema)}: ${err}`);
          return;
        }
        const fractionDigits = integer ? 0 : e;
        for (let i = -4000; i <= 4000; i += 13) {
          for (const text of [decimal(BigInt(i), 3), decimal(BigInt(i), 3).replace(/\.?0+$/, "")]) {
            if (text === "-0" || /^-0(\.0+)?$/.test(text)) continue;
            const v = scaled(text, 3);
            const frac = text.split(".")[1] ?? "";
            const want = frac.length <= fractionDigits && (v * 10n ** BigInt(e)) % (BigInt(k) * 1000n) === 0n &&
              (!lo || (lo[1] ? v > BigInt(lo[0]) : v >= BigInt(lo[0]))) && (!hi || (hi[1] ? v < BigInt(hi[0]) : v <= BigInt(hi[0])));
            assert.equal(accepts(text), want, `${text} with ${JSON.stringify(schema)}`);
          }
        }
      }),
      { numRuns: 30, seed: 20261205 },
    );
  });

  test("strings: length in code points, escapes, no raw control characters", async () => {
    await assertAccepts({ type: "string", minLength: 2, maxLength: 3 }, [
      '"ab"', '"abc"', '"\\u00e9b"', '"\\"\\\\"', '"😀x"', '"a\\nb"', '"\\/x"',
    ], ['"a"', '"abcd"', '"\\ud83d\\ude00"', '"a\nb"', '"a\\x"', '"\\u12"', "ab"]);
    await assertAccepts({ type: ["string", "null"], maxLength: 1 }, ['""', '"x"', "null"], ['"xy"', '"null"']);
  });

  test("lengths count code points, as ajv, pydantic and zod (4.6 and later) all count them", async () => {
    // A character past U+FFFF is one code point and two UTF-16 units; zod counts code points since
    // 4.6 (`.max(4)` takes three emoji), so an answer the grammar lets through passes zod's parse.
    const schema = z.object({ a: z.string().max(4), b: z.string().min(2).max(3) });
    const ok = await matcher(z.toJSONSchema(schema) as Record<string, unknown>);
    for (const [a, b] of [["😀😀😀😀", "😀x"], ["ab😀", "😀😀😀"], ["😀😀😀😀😀", "xy"], ["a", "😀"], ["", "a😀"]]) {
      const text = JSON.stringify({ a, b });
      assert.equal(ok(text), schema.safeParse({ a, b }).success, text);
    }
  });

  test("long strings and arrays are built from chunks below llama.cpp's repetition limit", async () => {
    const s = await matcher({ type: "string", minLength: 1500, maxLength: 5000 });
    for (const [n, ok] of [[1499, false], [1500, true], [3333, true], [5000, true], [5001, false]] as const) {
      assert.equal(s(`"${"x".repeat(n)}"`), ok, `length ${n}`);
    }
    const a = await matcher({ type: "array", items: { type: "null" }, minItems: 2001, maxItems: 3000 });
    for (const [n, ok] of [[2000, false], [2001, true], [3000, true], [3001, false]] as const) {
      assert.equal(a(`[${Array(n).fill("null").join(",")}]`), ok, `${n} items`);
    }
  });

  test("formats", async () => {
    const cases: Record<string, [string[], string[]]> = {
      date: [["2024-02-29", "2000-02-29", "2023-12-31", "0000-02-29", "2023-02-28"], ["2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-00-10", "2023-1-01", "2023-01-00"]],
      time: [["23:59:59Z", "00:00:00.123+05:30", "12:34:56-23:59"], ["24:00:00Z", "12:60:00Z", "12:00:00", "12:00:00+5:00", "12:00Z"]],
      "date-time": [["2024-02-29T12:00:00Z", "1999-12-31T23:59:59.999999999+01:00"], ["2024-02-29 12:00:00Z", "2024-02-30T12:00:00Z"]],
      uuid: [["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"], ["123e4567-e89b-12d3-a456-42661417400", "123e4567e89b12d3a456426614174000", "g23e4567-e89b-12d3-a456-426614174000"]],
      email: [["a@b.co", "first.last+tag@sub.example.org", "x_y@a-b.c"], ["a@b", "a..b@x.y", ".a@x.y", "a@-x.y", "a@x-.y", "@x.y", "a b@x.y"]],
      uri: [["https://example.com/a?b=c#d", "mailto:a@b.c", "urn:isbn:123", "a:/", "http://u:p@h:80/p%20q", "file:///etc/hosts"], ["a:", "a:?q", "1a:b", "a b:c", "http://x y", "a:%zz", "://x", "http://[::1]/"]],
    };
    for (const [format, [yes, no]] of Object.entries(cases)) {
      const checker = { date: isDate, time: isTime, "date-time": isDateTime, uuid: (s: string) => UUID.test(s), email: (s: string) => EMAIL.test(s), uri: (s: string) => URI.test(s) }[format]!;
      for (const y of yes) assert.ok(checker(y), `test checker accepts ${y}`);
      await assertAccepts({ type: "string", format }, yes.map((y) => JSON.stringify(y)), no.map((n) => JSON.stringify(n)));
    }
    // With maxLength, email and uri use a bounded subset (Pydantic's HttpUrl is uri + maxLength 2083).
    const q = (s: string) => JSON.stringify(s);
    await assertAccepts({ type: "string", format: "uri", minLength: 1, maxLength: 2083 }, [q("https://example.com/a/b:c@d"), q("a://b"), q(`http://${"h".repeat(1036)}/${"p".repeat(1035)}`)], [q("https://example.com:80/"), q("mailto:a@b.c"), q(`http://${"h".repeat(1037)}`)]);
    await assertAccepts({ type: "string", format: "uri", maxLength: 12 }, [q("ab://c/d"), q("abc://hhh/pp"), q("a://b")], [q("abcd://c"), q("ab://c/ddd"), q("ab://hhhh")]);
    await assertAccepts({ type: "string", format: "email", maxLength: 20 }, [q("a@b.c"), q("first+x@ab.cd")], [q("a.b@c.d"), q("a@b-c.d"), q("a@b.c.d"), q("abcdefghijklmnop@b.c")]);
    await assertAccepts({ type: "string", format: "date", minLength: 10, maxLength: 10 }, [q("2024-01-01")], []);
  });

  test("patterns match exactly what the regex fully matches", async () => {
    const cases: Array<[string, string[]]> = [
      ["^[A-Z]{2}-\\d{3}(-[a-z]+)?$", ["AB-123", "XY-000-abc"]],
      ["^(foo|ba[rz])+$", ["foo", "barbaz", "foobarfoo"]],
      ["[a-c]{1,3}x?", ["a", "abcx", "cx"]],
      ["^\\w+@\\s?\\.$", ["a_1@.", "Z@ ."]],
      ["^[^\"\\\\]{0,3}$", ["", "a\n", "é😀"]],
      ["^a.b$", ["aXb", "a\"b", "a\\b", "a\tb"]],
      ["^(?:\\+|-)?\\d+(\\.\\d*)?$", ["+1", "-2.", "3.14"]],
      ["^[\\w.-]+$", ["a.b-c_d"]],
      ["^\\x41\\u00e9\\u{1F600}[\\d\\s]$", ["Aé😀5", "Aé😀 "]],
      ["^(ab){2}c*$", ["abab", "ababccc"]],
      // Quantified parts that can match the empty string.
      ["^(a|)*$", ["", "aaa"]],
      ["^(a?b?)+c$", ["c", "abbac"]],
      ["^()*x(){2,}$", ["x"]],
      ["^([a-c]*\\s?){1,3}$", ["", "ab c", "a b c "]],
    ];
    const alphabet = ["a", "b", "c", "x", "A", "Z", "1", "5", "-", "_", ".", "+", "@", " ", "\"", "\\", "\n", "\t", "é", "😀", "foo", "bar", "AB-", "123"];
    let seed = 7;
    const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    for (const [pattern, positives] of cases) {
      const accepts = await matcher({ type: "string", pattern });
      const full = new RegExp(`^(?:${pattern})$`, "u");
      const candidates = [...positives];
      for (let i = 0; i < 150; i++) {
        let s = "";
        const n = Math.floor(rand() * 6);
        for (let j = 0; j < n; j++) s += alphabet[Math.floor(rand() * alphabet.length)];
        candidates.push(s);
      }
      for (const p of positives) assert.ok(full.test(p), `positive ${JSON.stringify(p)} matches ${pattern}`);
      for (const c of candidates) {
        assert.equal(accepts(JSON.stringify(c)), full.test(c), `${JSON.stringify(c)} against ${pattern}`);
      }
    }
  });

  test("arrays: items, minItems/maxItems, prefixItems", async () => {
    await assertAccepts({ type: "array", items: { type: "integer" }, minItems: 2, maxItems: 3 }, ["[1,2]", "[ 1 , 2 , 3 ]"], ["[]", "[1]", "[1,2,3,4]", "[1,]", '[1,"a"]']);
    await assertAccepts({ type: "array", prefixItems: [{ type: "string" }, { type: "boolean" }], items: false }, ["[]", '["a"]', '["a",true]'], ['["a",true,1]', "[true]"]);
    await assertAccepts({ type: "array", prefixItems: [{ type: "string" }, { type: "boolean" }], items: { type: "null" }, minItems: 3 }, ['["a",true,null]', '["a",true,null,null]'], ['["a",true]', '["a",true,1]']);
    await assertAccepts({ type: "array", items: [{ const: 1 }], additionalItems: { const: 2 } }, ["[1]", "[1,2,2]"], ["[2]", "[1,1]"]);
    await assertAccepts({ type: "array" }, ["[]", '[1,"a",[{}]]'], ["[,]"]);
  });

  test("prefixItems are a chain of rules: no rule nests or grows with the items, so text and work are linear", () => {
    /** Deepest parenthesis nesting of the array's rules (outside literals and classes), and the longest. */
    const shape = (gbnf: string) => {
      let depth = 0;
      let longest = 0;
      for (const line of gbnf.split("\n").filter((l) => l.startsWith("root-arr"))) {
        longest = Math.max(longest, line.length);
        let d = 0;
        for (let i = 0; i < line.length; i++) {
          const c = line[i];
          if (c === '"' || c === "[") {
            const close = c === '"' ? '"' : "]";
            for (i++; i < line.length && line[i] !== close; i++) if (line[i] === "\\") i++;
          } else if (c === "(") depth = Math.max(depth, ++d);
          else if (c === ")") d--;
        }
      }
      return { depth, longest };
    };
    const items = (n: number) => Array.from({ length: n }, (_, i) => [{ type: "string" }, { type: "integer" }, { type: "boolean" }, { const: i }][i % 4]);
    for (const min of ["none", "all"] as const) {
      const sizes: number[] = [];
      for (const n of [250, 1000, 4000]) {
        const gbnf = jsonSchemaToGbnf({ type: "array", prefixItems: items(n), minItems: min === "all" ? n : 0 });
        const { depth, longest } = shape(gbnf);
        // The nested construction had a group per item inside the previous one: 1,000 deep.
        assert.ok(depth <= 3, `${n} items (${min} required) nest ${depth} deep`);
        assert.ok(longest < 400, `${n} items (${min} required): a rule of ${longest} characters`);
        sizes.push(gbnf.length / n);
      }
      assert.ok(sizes[2] < sizes[0] * 1.5, `characters per item grew from ${sizes[0].toFixed(1)} to ${sizes[2].toFixed(1)}`);
    }
    // 20,000 required items (a 360 KB body) held the compile worker for 5 s; in-thread the nested
    // construction ran out of stack. Linear now, with room for a loaded machine.
    const t0 = performance.now();
    const big = compileJsonSchema({ type: "array", prefixItems: Array.from({ length: 20_000 }, () => ({ type: "string" })), minItems: 20_000 });
    const took = performance.now() - t0;
    assert.ok(took < 2500, `20,000 items took ${Math.round(took)} ms`);
    assert.ok(big.gbnf.length < 2_000_000);
    // A grammar too long to load within the bound is refused as soon as its text passes what the
    // bound allows (the parse alone costs that much), not once all of it is built and costed.
    assert.throws(
      () => compileJsonSchema({ type: "array", prefixItems: Array.from({ length: 20_000 }, () => ({ type: "string" })) }, { limits: { maxLoadCost: 1_000_000 } }),
      (e: unknown) => e instanceof SchemaLimitError && /too long to load \(more than 62500 characters to parse/.test(e.message),
    );
  });

  test("1,000 and more optional prefixItems load in llama.cpp and accept arrays up to their count", async () => {
    // llama.cpp's grammar parser refused the nested groups from 1,000 optional items on: a 500.
    for (const [item, value] of [[{ type: "string" }, '"a"'], [{ type: "integer" }, "7"], [{ type: "boolean" }, "true"], [{ const: 5 }, "5"]] as const) {
      const n = 1000;
      const accepts = await matcher({ type: "array", prefixItems: Array.from({ length: n }, () => item), items: false });
      const arr = (k: number) => `[${Array.from({ length: k }, () => value).join(",")}]`;
      for (const k of [0, 1, 2, 999, n]) assert.ok(accepts(arr(k)), `${JSON.stringify(item)}: ${k} items`);
      assert.ok(!accepts(arr(n + 1)), `${JSON.stringify(item)}: ${n + 1} items`);
      assert.ok(!accepts("[null]"));
    }
    // Required ones first, then optional ones, then the rest schema: every boundary holds.
    const accepts = await matcher({ type: "array", prefixItems: Array.from({ length: 1500 }, () => ({ type: "integer" })), items: { type: "null" }, minItems: 3, maxItems: 1502 });
    const ints = (k: number) => Array.from({ length: k }, () => "1");
    for (const ok of [ints(3), ints(4), ints(1500), [...ints(1500), "null"], [...ints(1500), "null", "null"]]) assert.ok(accepts(`[${ok.join(",")}]`), `${ok.length} items`);
    for (const no of [ints(2), [...ints(1499), "null"], [...ints(1500), "null", "null", "null"], [...ints(1500), "1"]]) assert.ok(!accepts(`[${no.join(",")}]`), `${no.length} items`);
  });

  test("prefixItems with minItems, maxItems and a rest schema accept exactly what a validator accepts (fast-check, llama.cpp's grammar engine)", async () => {
    const ajv = newAjv();
    const itemSchema = fc.constantFrom<unknown>({ type: "string", maxLength: 1 }, { type: "integer" }, { type: "boolean" }, { const: 2 }, { type: "null" }, {});
    const value = fc.constantFrom<unknown>("a", "", 1, 2, -3, true, false, null, "bb", 1.5);
    const schema = fc.record(
      {
        prefixItems: fc.array(itemSchema, { minLength: 1, maxLength: 6 }),
        items: fc.constantFrom<unknown>(false, { type: "integer" }, { type: "null" }, {}),
        minItems: fc.integer({ min: 0, max: 7 }),
        maxItems: fc.integer({ min: 0, max: 9 }),
      },
      { requiredKeys: ["prefixItems"] },
    );
    await fc.assert(
      fc.asyncProperty(schema, fc.array(fc.array(value, { maxLength: 9 }), { minLength: 1, maxLength: 12 }), async (props, candidates) => {
        const s = { type: "array", ...props };
        let accepts: (text: string) => boolean;
        try {
          accepts = await matcher(s);
        } catch (e) {
          // No array satisfies it (minItems past maxItems or past what `items: false` allows).
          if (e instanceof UnsupportedSchemaError) return candidates.every((c) => !ajv.validate(s, c));
          throw e;
        }
        return candidates.every((c) => accepts(JSON.stringify(c)) === ajv.validate(s, c));
      }),
      { numRuns: 150 },
    );
  });

  test("oneOf that provably admits one branch per value compiles: types, consts, a required discriminator (through $ref)", async () => {
    await assertAccepts({ oneOf: [{ type: "integer" }, { type: "string" }, { type: "null" }] }, ["1", '"a"', "null"], ["true"]);
    await assertAccepts({ oneOf: [{ const: 1 }, { enum: [2, 3] }] }, ["1", "3"], ["4"]);
    const cat = { type: "object", properties: { pet_type: { const: "cat" }, lives: { type: "integer" } }, required: ["pet_type", "lives"], additionalProperties: false };
    const dog = { type: "object", properties: { pet_type: { type: "string", enum: ["dog"] }, barks: { type: "boolean" } }, required: ["pet_type", "barks"], additionalProperties: false };
    await assertAccepts(
      { $defs: { Cat: cat, Dog: dog }, oneOf: [{ $ref: "#/$defs/Cat" }, { $ref: "#/$defs/Dog" }] },
      ['{"pet_type":"cat","lives":9}', '{"pet_type":"dog","barks":true}'],
      ['{"pet_type":"cat","barks":true}'],
    );
    // Long unions of values or of tagged objects are checked in one pass, not pair by pair.
    const t0 = performance.now();
    jsonSchemaToGbnf({ oneOf: Array.from({ length: 8000 }, (_, i) => ({ const: `v${i}`, title: `V ${i}` })) });
    assert.ok(performance.now() - t0 < 2000, `8,000 annotated values took ${Math.round(performance.now() - t0)} ms`);
    // Relaxed (not strict), an overlapping oneOf compiles as anyOf and says so.
    const relaxed = compileJsonSchema({ oneOf: [{ type: "number" }, { type: "integer" }] }, { strict: false });
    assert.deepEqual(relaxed.relaxed.map((r) => r.path), ["oneOf"]);
    // Closed objects that each require a key the other cannot have (zod's z.xor of strict objects).
    const onlyA = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false };
    const onlyB = { type: "object", properties: { b: { type: "integer" } }, required: ["b"], additionalProperties: false };
    await assertAccepts({ oneOf: [onlyA, onlyB] }, ['{"a":"x"}', '{"b":1}'], ['{"a":"x","b":1}', "{}"]);
    // A key both may have ({"a": "x"} matches both here): still refused.
    assert.throws(() => compileJsonSchema({ oneOf: [onlyA, { type: "object", properties: { a: {} }, required: ["a"] }] }), /branches 0 and 1 can match the same value/);
  });

  test("a prefix-factored enum matches exactly its values, for any set of values (fast-check, llama.cpp's grammar engine)", async () => {
    // A small alphabet, so that values share prefixes, are prefixes of one another, and need escapes.
    const char = fc.constantFrom("a", "b", '"', "\\", "\n", "é", "😀", " ");
    const text = fc.array(char, { maxLength: 5 }).map((cs) => cs.join(""));
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(text, { minLength: 1, maxLength: 12 }), fc.array(text, { maxLength: 8 }), async (values, others) => {
        const accepts = await matcher({ enum: values });
        for (const v of values) if (!accepts(JSON.stringify(v))) return false;
        for (const o of others) if (!values.includes(o) && accepts(JSON.stringify(o))) return false;
        return true;
      }),
      { numRuns: 60 },
    );
  });

  test("enum, const, anyOf, oneOf, type arrays", async () => {
    await assertAccepts({ enum: [1, "two", null, true, { a: [1] }] }, ["1", '"two"', "null", "true", '{"a":[1]}'], ["2", "false", '"1"']);
    await assertAccepts({ type: "string", enum: ["a", 1, "bb"], maxLength: 1 }, ['"a"'], ["1", '"bb"']);
    await assertAccepts({ const: { x: "é" } }, ['{"x":"é"}'], ['{"x":"e"}']);
    // Values that are prefixes of one another, share prefixes, or differ only by an escape: the
    // prefix-factored alternation matches exactly the values.
    const close = ["a", "ab", "abc", "abd", "b", "ba", 'q"x', "q\\x", "", 12, 123, 1.5];
    await assertAccepts({ enum: close }, close.map((v) => JSON.stringify(v)), ['"abcd"', '"c"', '"q"', "1", "124", '"ba "', '"a"b"']);
    // Branches that are only values are one enum, factored the same way.
    await assertAccepts({ anyOf: [{ const: "red" }, { const: "reed", title: "R" }, { enum: ["rest", "red"] }] }, ['"red"', '"reed"', '"rest"'], ['"re"', '"reds"']);
    // A wide enum is a trie, not 2,000 alternatives side by side (each an open grammar stack).
    const wide = Array.from({ length: 2000 }, (_, i) => `value-${i}-x`);
    const g = compileJsonSchema({ enum: wide }).gbnf;
    assert.ok(!g.includes('"\\"value-1999-x\\""'), "values are not listed whole");
    await assertAccepts({ enum: wide }, ['"value-0-x"', '"value-1999-x"', '"value-1000-x"'], ['"value-2000-x"', '"value-1-"', '"value--x"']);
    await assertAccepts({ anyOf: [{ type: "integer", minimum: 0, maximum: 9 }, { type: "string", maxLength: 1 }] }, ["5", '"x"'], ["10", '"xy"']);
    await assertAccepts({ oneOf: [{ type: "boolean" }, { type: "null" }] }, ["true", "null"], ["0"]);
    await assertAccepts({ type: ["integer", "null"], maximum: 3 }, ["3", "-7", "null"], ["4", "1.5"]);
    // Sibling keywords apply to every branch.
    await assertAccepts(
      { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, additionalProperties: false, anyOf: [{ required: ["a"] }, { required: ["b"] }] },
      ['{"a":1}', '{"b":1}', '{"a":1,"b":2}'],
      ["{}"],
    );
  });

  test("$ref: $defs, definitions, recursion, siblings; allOf merging", async () => {
    const tree = {
      $defs: { node: { type: "object", properties: { v: { type: "integer" }, kids: { type: "array", items: { $ref: "#/$defs/node" } } }, required: ["v"], additionalProperties: false } },
      $ref: "#/$defs/node",
    };
    await assertAccepts(tree, ['{"v":1}', '{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}'], ['{"v":1,"kids":[{}]}']);
    const gbnf = jsonSchemaToGbnf(tree);
    assert.equal(gbnf.match(/^ref-node ::=/gm)?.length, 1, "one rule per definition");
    await assertAccepts({ definitions: { c: { enum: ["red", "blue"] } }, type: "array", items: { $ref: "#/definitions/c" } }, ['["red","blue"]'], ['["green"]']);
    await assertAccepts({ type: "object", properties: { self: { $ref: "#" } }, additionalProperties: false }, ["{}", '{"self":{"self":{}}}'], ['{"self":1}']);
    await assertAccepts({ $defs: { s: { type: "string" } }, $ref: "#/$defs/s", maxLength: 2 }, ['"ab"'], ['"abc"']);
    await assertAccepts(
      { allOf: [{ type: "object", properties: { a: { type: "string", maxLength: 2 } }, required: ["a"] }, { properties: { b: { type: "boolean" } }, required: ["b"] }] },
      ['{"a":"x","b":true}'],
      ['{"a":"x"}', '{"a":"xyz","b":true}', '{"a":"x","b":true,"c":0}'],
    );
    await assertAccepts({ allOf: [{ $ref: "#/$defs/n" }], $defs: { n: { type: "integer", minimum: 1 } }, maximum: 3 }, ["1", "3"], ["0", "4"]);
  });

  test("a recursive $ref with keywords beside it, inside its own definition, is one rule rather than inlined without end", async () => {
    // Was a 400 "schemas nest (through references too) more than 512 deep", strict or not.
    const linked = (next: object) => ({
      $defs: { a: { type: "object", properties: { v: { type: "integer" }, next }, additionalProperties: false } },
      $ref: "#/$defs/a",
    });
    for (const next of [{ $ref: "#/$defs/a", maxProperties: 1 }, { allOf: [{ $ref: "#/$defs/a" }], maxProperties: 1 }]) {
      const schema = linked(next);
      assert.deepEqual(compileJsonSchema(schema, { strict: true }).relaxed, []);
      await assertAccepts(schema, ['{"v":1,"next":{"next":{"next":{}}}}', '{"v":1,"next":{"v":2}}'], ['{"v":1,"next":{"v":2,"next":{}}}', '{"next":{"x":1}}']);
    }
    const nullable = linked({ anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }], maxProperties: 1 });
    await assertAccepts(nullable, ['{"v":1,"next":null}', '{"next":{"next":{"v":2}}}'], ['{"v":1,"next":{"v":2,"next":null}}']);
    // Keywords merged into the definition at each level again (next's next gains maxProperties,
    // its next too, …) have no one rule: refused naming the reference, where it is first merged.
    const growing = linked({ allOf: [{ $ref: "#/$defs/a" }, { properties: { next: { maxProperties: 1 } } }] });
    assert.throws(
      () => compileJsonSchema(growing),
      (e: unknown) => e instanceof UnsupportedSchemaError && e.code === "unsupported" && e.path === "$defs.a.properties.next.allOf.0.$ref" && /recursive reference #\/\$defs\/a is merged with the keywords beside it/.test(e.message),
    );
    // Reached without consuming input, it is still refused as left recursion, not looped on.
    const left = { $defs: { a: { anyOf: [{ $ref: "#/$defs/a", maxProperties: 1 }, { type: "null" }] } }, $ref: "#/$defs/a" };
    assert.throws(() => compileJsonSchema(left), /recursive reference #\/\$defs\/a/);
  });

  test("merged parts: one part's items holds for every element, another part's prefix included", async () => {
    // Every element an integer 0–5, at most 3; the first 1, the second at least 3.
    await assertAccepts(
      { allOf: [{ type: "array", items: { type: "integer", minimum: 0, maximum: 5 }, maxItems: 3 }, { prefixItems: [{ const: 1 }, { minimum: 3 }] }] },
      ["[]", "[1]", "[1,3]", "[1,5,0]"],
      ["[1,2]", "[2]", '[1,"a"]', "[1,3,9]"],
    );
    // The second element a string where every element is an integer: no array has a second element
    // (an answer held to the prefix alone broke the items), so the array ends after the first.
    await assertAccepts(
      { allOf: [{ type: "array", items: { type: "integer" } }, { prefixItems: [{ const: 1 }, { type: "string" }] }] },
      ["[]", "[1]"],
      ['[1,"a"]', "[1,2]", "[2]"],
    );
    await assertAccepts({ type: "array", prefixItems: [{ type: "integer" }], items: { type: "boolean" }, allOf: [{ items: { type: "integer" } }] }, ["[]", "[5]"], ["[5,true]", "[true]"]);
    // items: false beside a prefix, through $ref and beside anyOf: no element at all.
    await assertAccepts({ $defs: { X: { items: false } }, $ref: "#/$defs/X", prefixItems: [{ const: 1 }] }, ["[]"], ["[1]"]);
    await assertAccepts({ items: false, anyOf: [{ prefixItems: [{ const: 1 }] }, { type: "boolean" }] }, ["[]", "true"], ["[1]"]);
    // A prefix from a $ref, items beside it: the items hold for the prefix's element too.
    await assertAccepts(
      { $defs: { X: { prefixItems: [{ minimum: 5 }] } }, $ref: "#/$defs/X", type: "array", items: { type: "integer" }, maxItems: 3 },
      ["[5]", "[5,1,2]", "[]"],
      ["[1]", '["a"]', "[5.5]", '[5,"b"]'],
    );
    // Two prefixes: each position holds both parts' schemas.
    await assertAccepts(
      { allOf: [{ type: "array", prefixItems: [{ type: "integer" }], items: { type: "integer", maximum: 3 }, maxItems: 3 }, { prefixItems: [{ minimum: 2 }, { minimum: 1 }] }] },
      ["[2]", "[2,1]", "[9,3,0]"],
      ["[1]", "[2,0]", "[2,4]"],
    );
  });

  test("empty schema and true allow any JSON value; json_object allows any object", async () => {
    for (const s of [{}, true, { description: "anything" }]) {
      await assertAccepts(s, ["1", '"s"', "null", '{"a":[1,{"b":false}]}', "[]", "-1.5e3"], ["", "undefined", "{a:1}"]);
    }
    const grammar = await compile(JSON_OBJECT_GBNF);
    const accepts = (t: string) => (grammar as unknown as { _testText(t: string): boolean })._testText(t);
    for (const t of ["{}", '{"a":1}', '{ "a" : {"b":[1,2,{"c":null}]}, "d":"e\\n" }', '{"a":1,"a":2}']) assert.ok(accepts(t), t);
    for (const t of ["[]", "1", '"s"', "{", '{"a":1,}', '{"a"   :1}']) assert.ok(!accepts(t), t);
  });

  test("UnsupportedSchemaError names the unsupported feature's path", () => {
    const cases: Array<[unknown, string]> = [
      [{ type: "object", properties: { address: { type: "string", pattern: "(?=a)b" } } }, "properties.address.pattern"],
      [{ type: "string", pattern: "(a)\\1" }, "pattern"],
      [{ type: "string", pattern: "\\bword" }, "pattern"],
      [{ type: "string", pattern: "a^b" }, "pattern"],
      [{ type: "string", pattern: "\\p{L}" }, "pattern"],
      [{ type: "string", format: "hostname" }, "format"],
      [{ type: "object", properties: { when: { type: "string", format: "idn-hostname" } } }, "properties.when.format"],
      [{ type: "string", format: "email", maxLength: 4 }, "maxLength"],
      [{ type: "string", format: "uri", minLength: 6, maxLength: 50 }, "minLength"],
      [{ type: "string", format: "date", maxLength: 9 }, "maxLength"],
      [{ type: "string", pattern: "^a{2}$", minLength: 3 }, "minLength"],
      // No date starts with "x" ("^2" is satisfiable: a pattern is a search, "2024-01-01" matches).
      [{ type: "string", format: "date", pattern: "^x" }, "pattern"],
      [{ not: { type: "string" } }, "not"],
      [{ if: { type: "string" }, then: { maxLength: 2 } }, "if"],
      [{ type: "object", dependentRequired: { a: ["b"] } }, "dependentRequired"],
      [{ type: "object", patternProperties: { "^x": {} } }, "patternProperties"],
      [{ type: "object", propertyNames: { maxLength: 3 } }, "propertyNames"],
      [{ type: "object", unevaluatedProperties: false }, "unevaluatedProperties"],
      [{ type: "array", contains: { type: "string" } }, "contains"],
      [{ type: "array", items: { type: "array", uniqueItems: true } }, "items.uniqueItems"],
      [{ type: "number", multipleOf: 0.123456789 }, "multipleOf"],
      [{ type: "number", multipleOf: 0 }, "multipleOf"],
      [{ type: "integer", multipleOf: -5 }, "multipleOf"],
      [{ type: "integer", multipleOf: "5" }, "multipleOf"],
      [{ type: "integer", multipleOf: 5, minimum: 1, maximum: 4 }, "multipleOf"],
      [{ enum: [1, 2], multipleOf: 0 }, "multipleOf"],
      [{ type: "object", properties: { x: { $ref: "https://example.com/s.json" } } }, "properties.x.$ref"],
      [{ $ref: "#/$defs/missing" }, "$ref"],
      [{ allOf: [{ type: "string" }, { type: "integer" }] }, "allOf.1.type"],
      [{ allOf: [{ anyOf: [{ type: "string" }] }, { anyOf: [{ type: "null" }] }] }, "allOf.1.anyOf"],
      [{ allOf: [{ properties: { a: {} }, additionalProperties: false }, { properties: { b: {} } }] }, "allOf.0.additionalProperties"],
      [{ $defs: { a: { anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }] } }, $ref: "#/$defs/a" }, "$defs.a.anyOf.0.$ref"],
      [{ type: "object", nullable: true }, "nullable"],
      [{ type: "object", propertyOrdering: ["a"] }, "propertyOrdering"],
      [{ type: "integer", minimum: 5, maximum: 1 }, "minimum"],
      [{ type: "object", properties: { a: {} }, required: ["b"], additionalProperties: false }, "required"],
      [{ type: "object", minProperties: 3 }, "minProperties"],
      [{ type: "array", items: false, minItems: 1 }, "minItems"],
      [{ enum: [] }, "enum"],
      [{ type: "string", enum: [1, 2] }, "enum"],
      [{ type: "string", enum: ["a"], format: "date" }, "format"],
      [{ type: "blob" }, "type"],
      [false, ""],
      // oneOf whose branches can both match a value ({"x": 0} here): a grammar cannot say "only one".
      [{ type: "object", properties: { x: { oneOf: [{ type: "integer", maximum: 5 }, { type: "number", minimum: 0 }] } } }, "properties.x.oneOf"],
      [{ oneOf: [{ type: "string" }, { type: "string", maxLength: 3 }] }, "oneOf"],
      [{ oneOf: [{ type: "object", properties: { k: { const: "a" } } }, { type: "object", properties: { k: { const: "b" } } }] }, "oneOf"],
      // A tag separates objects only: both branches also admit null.
      [{ oneOf: [{ type: ["object", "null"], properties: { k: { const: "a" } }, required: ["k"] }, { type: ["object", "null"], properties: { k: { const: "b" } }, required: ["k"] }] }, "oneOf"],
      // Equal values whatever their keys' order.
      [{ oneOf: [{ const: { a: 1, b: 2 } }, { const: { b: 2, a: 1 } }] }, "oneOf"],
    ];
    for (const [schema, path] of cases) {
      assert.throws(
        () => jsonSchemaToGbnf(schema),
        (e: unknown) => e instanceof UnsupportedSchemaError && e.path === path,
        `${JSON.stringify(schema)} should fail at ${path}`,
      );
    }
    // A pattern no string matches says so in a sentence (it read "satisfies pattern together").
    assert.throws(() => jsonSchemaToGbnf({ type: "string", pattern: "(?=a)b" }), (e: unknown) => e instanceof UnsupportedSchemaError && e.message.endsWith("no string satisfies pattern"));
    // Things that look alike but are fine.
    for (const ok of [
      { type: "array", uniqueItems: false },
      { type: "array", uniqueItems: true, maxItems: 1 },
      { type: "integer", multipleOf: 1 },
      { type: "string", pattern: "^a+$", maxLength: 5 },
      { type: "number", multipleOf: 1, maximum: 3 },
      { type: "object", nullable: false, "x-vendor": 1, title: "t", description: "d", default: {}, examples: [], $comment: "c", deprecated: true, readOnly: true, writeOnly: false },
      { $schema: "https://json-schema.org/draft/2020-12/schema", $id: "urn:x", type: "string", format: "date", minLength: 10, maxLength: 10 },
    ]) jsonSchemaToGbnf(ok);
  });

  test("schemaCacheKey is stable under key order and sensitive to content", () => {
    const a = { type: "object", properties: { x: { type: "string" }, y: { type: "integer" } }, required: ["x"] };
    const b = { required: ["x"], properties: { y: { type: "integer" }, x: { type: "string" } }, type: "object" };
    assert.equal(schemaCacheKey(a), schemaCacheKey(b));
    assert.match(schemaCacheKey(a), /^[0-9a-f]{64}$/);
    assert.notEqual(schemaCacheKey(a), schemaCacheKey({ ...a, required: ["y"] }));
    assert.notEqual(schemaCacheKey(a), schemaCacheKey(a, { maxWhitespace: 0 }));
    assert.notEqual(schemaCacheKey([1, 2]), schemaCacheKey([2, 1]));
  });

  test("a number beyond the float range (1e309 parses to Infinity) is refused with its path before any cache key is made", () => {
    // JSON.stringify writes Infinity as null, so without the refusal this schema shared a cache
    // key with one that has null there, and whether it compiled depended on earlier requests.
    for (const [schema, path] of [
      [JSON.parse('{"type":"number","minimum":1e309}'), "minimum"],
      [JSON.parse('{"enum":[1,-1e309]}'), "enum.1"],
      [JSON.parse('{"type":"object","properties":{"a":{"const":1e999}}}'), "properties.a.const"],
    ] as const) {
      assert.throws(() => schemaCacheKey(schema), (e: unknown) => e instanceof SchemaLimitError && e.path === path && /finite/.test(e.message));
      assert.throws(() => jsonSchemaToGbnf(schema), SchemaLimitError);
    }
    assert.notEqual(schemaCacheKey({ const: 1e308 }), schemaCacheKey({ const: null }));
  });
});

// ---------------------------------------------------------------------------------------------
// Real generation with the tiny fixture model
// ---------------------------------------------------------------------------------------------

describe("generation under the grammar", () => {
  let model: LlamaModel;
  let context: LlamaContext;
  let sequence: LlamaContextSequence;
  let prompt: Token[];

  before(async () => {
    model = await llama.loadModel({ modelPath: await ensureFixtureModel() });
    // threads: always explicit; the library default is catastrophically slow on 2 cores.
    context = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
    sequence = context.getSequence();
    prompt = model.tokenize("Answer with JSON.");
  });

  after(async () => {
    await context?.dispose();
    await model?.dispose();
  });

  /**
   * One grammar-constrained sample. How generation ends: llama.cpp's grammar sampler allows an
   * end-of-generation (EOG) token only once the root rule can be complete, and then rejects every
   * token that would not continue a valid parse. Our grammars never allow anything after the root
   * rule's last character (no trailing whitespace), so at that point EOG is the only candidate and
   * is always sampled; with `yieldEogToken: false`, `sequence.evaluate` ends its iterator without
   * yielding it. Ending before `cap` therefore means the document is complete. (LlamaGrammar's
   * `stopGenerationTriggers` and `trimWhitespaceSuffix` are only honoured by LlamaChat /
   * LlamaChatSession and are not needed here.)
   */
  async function sample(grammar: LlamaGrammar, seed: number, cap: number, tokenBias?: TokenBias) {
    await sequence.clearHistory();
    const grammarEvaluationState = new LlamaGrammarEvaluationState({ model, grammar });
    const tokens: Token[] = [];
    let completed = true;
    for await (const token of sequence.evaluate(prompt, { temperature: 1, topK: 0, topP: 1, seed, grammarEvaluationState, tokenBias, yieldEogToken: false })) {
      tokens.push(token);
      if (tokens.length >= cap) {
        completed = false;
        break;
      }
    }
    return { text: model.detokenize(tokens), completed, tokens: tokens.length };
  }

  /** Boost closing quotes (and a few separators) so free-text strings end within the cap. */
  function closeStrings(extra = ""): TokenBias {
    const bias = new TokenBias(model.tokenizer);
    for (const ch of `"${extra}`) bias.set(ch, { logit: 6 });
    return bias;
  }

  type Case = { name: string; schema: unknown; samples?: number; cap?: number; bias?: () => TokenBias; check?: (values: unknown[]) => void };

  const optionalSeen = (values: unknown[], props: string[]) => {
    const present = values.map((v) => props.filter((p) => Object.prototype.hasOwnProperty.call(v, p)).length);
    assert.ok(present.some((n) => n < props.length), "some optional property is omitted in some sample");
    assert.ok(present.some((n) => n > 0), "some optional property is present in some sample");
  };

  const cases: Case[] = [
    {
      name: "nested object with optional properties",
      schema: {
        type: "object",
        properties: {
          name: { type: "string", minLength: 1, maxLength: 8 },
          age: { type: "integer", minimum: 0, maximum: 120 },
          active: { type: "boolean" },
          address: {
            type: "object",
            properties: { city: { type: "string", maxLength: 6 }, zip: { type: "string", pattern: "^[0-9]{5}$" } },
            required: ["city"],
            additionalProperties: false,
          },
        },
        required: ["name"],
        additionalProperties: false,
      },
      check: (values) => optionalSeen(values, ["age", "active", "address"]),
    },
    {
      name: "anyOf",
      schema: { type: "array", items: { anyOf: [{ type: "integer", minimum: 0, maximum: 9 }, { type: "string", maxLength: 3 }] }, minItems: 1, maxItems: 3 },
      bias: () => closeStrings(),
      check: (values) => {
        const kinds = new Set((values as unknown[][]).flat().map((x) => typeof x));
        assert.deepEqual([...kinds].sort(), ["number", "string"], "both anyOf branches appear");
      },
    },
    {
      name: "oneOf with disjoint branches and type arrays with null",
      schema: {
        type: "object",
        properties: {
          v: { oneOf: [{ type: "boolean" }, { type: "null" }, { type: "string", maxLength: 2 }] },
          n: { type: ["integer", "null"], minimum: -3, maximum: 3 },
          s: { type: ["string", "null"], maxLength: 4 },
        },
        required: ["v", "n", "s"],
        additionalProperties: false,
      },
    },
    {
      name: "$defs with a recursive reference",
      schema: {
        $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 99 }, kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["v"], additionalProperties: false } },
        $ref: "#/$defs/node",
      },
    },
    {
      name: "#/definitions references, enums and const",
      schema: {
        definitions: { color: { enum: ["red", "green", 7, null, true, { rgb: [1, 2, 3] }] } },
        type: "object",
        properties: { fg: { $ref: "#/definitions/color" }, bg: { $ref: "#/definitions/color" }, kind: { const: "swatch" } },
        required: ["fg", "bg", "kind"],
        additionalProperties: false,
      },
    },
    {
      name: "integer bounds",
      schema: {
        type: "object",
        properties: {
          byte: { type: "integer", minimum: 0, maximum: 255 },
          small: { type: "integer", minimum: -10, maximum: 10 },
          positive: { type: "integer", minimum: 1 },
          capped: { type: "integer", maximum: 100 },
          price: { type: "number", exclusiveMinimum: 0, maximum: 9.99 },
        },
        required: ["byte", "small", "positive", "capped", "price"],
        additionalProperties: false,
      },
    },
    {
      name: "string lengths and pattern",
      schema: {
        type: "object",
        properties: { code: { type: "string", minLength: 2, maxLength: 5 }, sku: { type: "string", pattern: "^[A-Z]{2}-\\d{3}(-[a-z]{1,3})?$" } },
        required: ["code", "sku"],
        additionalProperties: false,
      },
    },
    {
      name: "every supported format",
      schema: {
        type: "object",
        properties: {
          ...Object.fromEntries(["date", "time", "date-time", "uuid", "email", "uri"].map((f) => [f, { type: "string", format: f }])),
          website: { type: "string", format: "uri", minLength: 1, maxLength: 24 },
          contact: { type: "string", format: "email", maxLength: 16 },
        },
        required: ["date", "time", "date-time", "uuid", "email", "uri"],
        additionalProperties: false,
      },
      cap: 400,
      bias: () => closeStrings("@.:"),
    },
    {
      name: "arrays with minItems/maxItems and prefixItems",
      schema: {
        type: "object",
        properties: {
          list: { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, minItems: 2, maxItems: 4 },
          tuple: { type: "array", prefixItems: [{ type: "string", maxLength: 3 }, { type: "boolean" }], items: { type: "null" }, minItems: 1, maxItems: 4 },
        },
        required: ["list", "tuple"],
        additionalProperties: false,
      },
    },
    {
      name: "additionalProperties schema",
      schema: { type: "object", properties: { id: { type: "integer", minimum: 0, maximum: 9 } }, required: ["id"], additionalProperties: { type: "boolean" }, maxProperties: 3 },
      bias: () => closeStrings(),
    },
    {
      name: "json_object mode",
      schema: "json_object",
      bias: () => closeStrings("}]"),
      cap: 400,
      check: (values) => assert.ok(values.every((v) => typeof v === "object" && v !== null && !Array.isArray(v))),
    },
  ];

  for (const c of cases) {
    test(c.name, async () => {
      const gbnf = c.schema === "json_object" ? JSON_OBJECT_GBNF : jsonSchemaToGbnf(c.schema);
      const grammar = await compile(gbnf);
      const validate = c.schema === "json_object" ? (v: unknown) => typeof v === "object" : newAjv().compile(c.schema as object);
      const bias = c.bias?.();
      const values: unknown[] = [];
      for (let seed = 1; seed <= (c.samples ?? 10); seed++) {
        const r = await sample(grammar, seed, c.cap ?? 200, bias);
        assert.ok(r.completed, `seed ${seed}: did not complete within ${c.cap ?? 200} tokens: ${JSON.stringify(r.text)}`);
        let value: unknown;
        assert.doesNotThrow(() => (value = JSON.parse(r.text)), `seed ${seed}: not JSON: ${JSON.stringify(r.text)}`);
        assert.ok(validate(value), `seed ${seed}: ${r.text} fails the schema: ${JSON.stringify((validate as { errors?: unknown }).errors)}`);
        values.push(value);
      }
      c.check?.(values);
    });
  }

  test("whitespace bound: bounded fields give bounded output", async () => {
    const schema = { type: "object", properties: { a: { enum: ["x", "yy"] }, b: { type: "boolean" } }, required: ["a", "b"], additionalProperties: false };
    // {ws"a"ws:ws"yy"ws,ws"b"ws:wsfalsews} with at most 2 blanks at each of the 8 ws places.
    const longest = '{"a":"yy","b":false}'.length + 8 * 2;
    for (const maxWhitespace of [2, 0]) {
      const grammar = await compile(jsonSchemaToGbnf(schema, { maxWhitespace }));
      for (let seed = 1; seed <= 20; seed++) {
        const r = await sample(grammar, 100 + seed, 64);
        assert.ok(r.completed, r.text);
        assert.ok(r.text.length <= (maxWhitespace === 0 ? '{"a":"yy","b":false}'.length : longest), `${JSON.stringify(r.text)} is too long`);
        if (maxWhitespace === 0) assert.doesNotMatch(r.text, /\s/);
        JSON.parse(r.text);
      }
    }
  });

  test("measurements: grammar compile time, tokens per second with and without a grammar", async (t) => {
    const medium = cases.find((c) => c.name === "every supported format")!.schema;
    const mediumSchema = {
      type: "object",
      properties: {
        ...(cases[0].schema as { properties: object }).properties,
        ...(cases[5].schema as { properties: object }).properties,
        ...(medium as { properties: object }).properties,
      },
      additionalProperties: false,
    };
    let started = performance.now();
    const gbnf = jsonSchemaToGbnf(mediumSchema);
    const convertMs = performance.now() - started;
    started = performance.now();
    const grammar = await compile(gbnf);
    const compileMs = performance.now() - started;
    started = performance.now();
    new LlamaGrammarEvaluationState({ model, grammar });
    const stateMs = performance.now() - started;

    const tokPerSec = async (g: LlamaGrammar | undefined) => {
      let tokens = 0;
      const t0 = performance.now();
      for (let seed = 1; seed <= 3; seed++) {
        await sequence.clearHistory();
        const grammarEvaluationState = g ? new LlamaGrammarEvaluationState({ model, grammar: g }) : undefined;
        for await (const _ of sequence.evaluate(prompt, { temperature: 1, topK: 0, topP: 1, seed, grammarEvaluationState, yieldEogToken: false })) {
          if (++tokens % 150 === 0) break;
        }
      }
      return (tokens / (performance.now() - t0)) * 1000;
    };
    const free = await tokPerSec(undefined);
    const inString = await tokPerSec(await compile(jsonSchemaToGbnf({ type: "string" })));
    const structured = await tokPerSec(await compile(jsonSchemaToGbnf({ type: "array", items: { type: "integer", minimum: 0, maximum: 9 } })));
    t.diagnostic(`medium schema (${gbnf.split("\n").length - 1} rules, ${gbnf.length} chars): convert ${convertMs.toFixed(1)} ms, llama.createGrammar ${compileMs.toFixed(1)} ms, first evaluation state ${stateMs.toFixed(1)} ms`);
    t.diagnostic(`tok/s: free ${free.toFixed(0)}, grammar inside a free string ${inString.toFixed(0)}, grammar on structure (digit array) ${structured.toFixed(0)}`);
    assert.ok(compileMs < 1000);
  });
});
