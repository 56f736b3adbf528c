import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { z } from "zod";
import type { ChatBody } from "../helpers/requests.ts";
import { useTestServer } from "../helpers/server.ts";

// Schemas that client libraries emit and that the converter once refused or enforced only in part,
// through the real server on the fixture model: every answer is checked with ajv (ajv-formats for
// `format`) and, where the schema came from zod, with zod's own parse.

const s = useTestServer();

const ajv = new Ajv2020({ strict: false });
addFormats.default(ajv);

type Format = { strict?: boolean };

function chat(schema: unknown, seed: number, format: Format = {}, extra: Partial<ChatBody> = {}) {
  return s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "JSON please." }],
    max_tokens: 300,
    temperature: 1,
    seed,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: schema as Record<string, unknown>, ...format } },
    ...extra,
  });
}

/** Answers for seeds 1..n; each must finish and validate (ajv, and zod when given). */
async function expectValid(schema: Record<string, unknown>, opts: { seeds?: number; format?: Format; zod?: z.ZodType; extra?: Partial<ChatBody> } = {}): Promise<unknown[]> {
  const validate = ajv.compile(schema);
  const values: unknown[] = [];
  for (let seed = 1; seed <= (opts.seeds ?? 6); seed++) {
    const r = await chat(schema, seed, opts.format, opts.extra);
    assert.equal(r.status, 200, r.text);
    const content = r.json.choices[0].message.content!;
    assert.equal(r.json.choices[0].finish_reason, "stop", content);
    const value = JSON.parse(content);
    assert.ok(validate(value), `${content}\n${JSON.stringify(validate.errors)}`);
    if (opts.zod) {
      const parsed = opts.zod.safeParse(value);
      assert.ok(parsed.success, `${content}\n${parsed.error?.message}`);
    }
    values.push(value);
  }
  return values;
}

test("z.string().startsWith().endsWith() (allOf of two patterns): both hold, strict or not", async () => {
  const zod = z.object({ s: z.string().startsWith("pre").endsWith("suf").max(12) }); // bounded, so answers end
  const schema = z.toJSONSchema(zod) as Record<string, unknown>;
  for (const strict of [true, false]) {
    const values = await expectValid(schema, { format: { strict }, zod, seeds: 4 });
    for (const v of values) assert.match((v as { s: string }).s, /^pre[^]*suf$/);
  }
  // Patterns that no string satisfies together are the schema's fault.
  const r = await chat({ type: "string", allOf: [{ pattern: "^a+$" }, { pattern: "^b+$" }] }, 1, { strict: true });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /no string satisfies/);
});

test("unanchored patterns are searches: zod's password rules, includes() and enum values that contain a match are enforced, not refused as unsatisfiable", async () => {
  // Each pattern read as a whole string left nothing ("[A-Z]" is one character, minLength 8), and
  // the request was a 400 "no string satisfies", strict or not.
  const zod = z.object({ password: z.string().min(8).max(12).regex(/[A-Z]/).regex(/[0-9]/), tag: z.string().startsWith("ab").includes("x").max(8) });
  const schema = z.toJSONSchema(zod) as Record<string, unknown>;
  for (const strict of [true, false]) await expectValid(schema, { format: { strict }, zod, seeds: 3 });
  await expectValid({ type: "string", minLength: 5, maxLength: 6, pattern: "\\d{3}" }, { format: { strict: true }, seeds: 2 });
  const values = await expectValid({ type: "string", enum: ["xay", "zz"], pattern: "a" }, { format: { strict: true }, seeds: 2 });
  for (const v of values) assert.equal(v, "xay");
  // Anchored patterns still read as written: no date starts with "x".
  const r = await chat({ type: "string", format: "date", pattern: "^x" }, 1, { strict: true });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /no string satisfies/);
});

test("allOf reaching one definition twice (a diamond of references) is merged, not refused as recursion; a real cycle still is", async () => {
  // A reference met a second time beside itself was taken for one back to itself: a 400
  // "recursive reference #/$defs/Short inside allOf", strict or not.
  const diamond = {
    $defs: { Short: { type: "string", maxLength: 4 }, Code: { allOf: [{ $ref: "#/$defs/Short" }], pattern: "^[a-z]+$" } },
    type: "object",
    properties: { c: { allOf: [{ $ref: "#/$defs/Code" }, { $ref: "#/$defs/Short" }] }, d: { allOf: [{ $ref: "#/$defs/Short" }, { $ref: "#/$defs/Short" }] } },
    required: ["c", "d"],
    additionalProperties: false,
  };
  for (const strict of [true, false]) await expectValid(diamond, { format: { strict }, seeds: 2 });
  // Thirty levels of two references to the next one: expanded once each, answered at once.
  const $defs: Record<string, unknown> = { D30: { type: "string", maxLength: 3 } };
  for (let i = 0; i < 30; i++) $defs[`D${i}`] = { allOf: [{ $ref: `#/$defs/D${i + 1}` }, { $ref: `#/$defs/D${i + 1}` }] };
  await expectValid({ $defs, $ref: "#/$defs/D0" }, { format: { strict: true }, seeds: 1 });
  const r = await chat({ $defs: { A: { allOf: [{ $ref: "#/$defs/B" }] }, B: { allOf: [{ $ref: "#/$defs/A" }] } }, $ref: "#/$defs/A" }, 1, { strict: true });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /recursive reference/);
});

test("pydantic v1's recursive model (a described field as allOf of one reference) is enforced, not refused as nested too deep", async () => {
  // Merging {title, description, allOf: [{$ref: Node}]} inlined Node inside itself without end:
  // a 400 "schemas nest (through references too) more than 512 deep", strict or not.
  const node = {
    title: "Node",
    type: "object",
    properties: { name: { title: "Name", type: "string", maxLength: 5 }, child: { title: "Child", description: "The next node", allOf: [{ $ref: "#/definitions/Node" }] } },
    required: ["name"],
    additionalProperties: false,
  };
  const schema = { ...node, definitions: { Node: node } };
  const validate = ajv.compile(schema);
  for (const strict of [true, false]) {
    let finished = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const r = await chat(schema, seed, { strict });
      assert.equal(r.status, 200, r.text);
      // The child is optional and may recur until max_tokens; every finished answer validates.
      if (r.json.choices[0].finish_reason !== "stop") continue;
      const content = r.json.choices[0].message.content!;
      assert.ok(validate(JSON.parse(content)), `${content}\n${JSON.stringify(validate.errors)}`);
      finished++;
    }
    assert.ok(finished > 0, "no answer finished");
  }
});

test("z.email().max(n) (format, zod's email pattern and maxLength together) is enforced in strict mode, for long and short bounds", async () => {
  for (const max of [254, 40, 20]) {
    const zod = z.object({ e: z.email().max(max) });
    const schema = z.toJSONSchema(zod) as Record<string, unknown>;
    const values = await expectValid(schema, { format: { strict: true }, zod, seeds: 4 });
    for (const v of values) assert.ok((v as { e: string }).e.length <= max);
  }
});

test("uniqueItems over enum values is enforced (each value once, in the enum's order), strict or not", async () => {
  const schema = {
    type: "object",
    properties: {
      t: { type: "array", items: { enum: ["a", "b"] }, uniqueItems: true, minItems: 2 },
      u: { type: "array", items: { enum: ["x", "y", "z", 1, null] }, uniqueItems: true, maxItems: 3 },
    },
    required: ["t", "u"],
    additionalProperties: false,
  };
  for (const strict of [false, true]) {
    const values = (await expectValid(schema, { format: { strict }, seeds: 5 })) as Array<{ t: string[] }>;
    for (const v of values) assert.deepEqual(v.t, ["a", "b"]);
    const r = await chat(schema, 1, { strict });
    assert.equal(r.headers.get("x-plinth-schema-relaxed"), null, "nothing was relaxed");
  }
});

test("multipleOf from zod's .multipleOf() and .step(): strict, every answer a multiple within its bounds (zod's own parse)", async () => {
  const zod = z.object({
    qty: z.number().int().multipleOf(5).min(0).max(1000),
    price: z.number().step(0.01).nonnegative(),
    angle: z.number().multipleOf(0.25).gt(-180).lte(180),
    dozen: z.number().int().multipleOf(12),
  });
  const schema = z.toJSONSchema(zod) as Record<string, unknown>;
  // ajv divides as doubles unless told a precision (0.07 / 0.01 is 7.000000000000001).
  const validate = new Ajv2020({ strict: false, multipleOfPrecision: 9 }).compile(schema);
  for (let seed = 1; seed <= 6; seed++) {
    const r = await chat(schema, seed, { strict: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("x-plinth-schema-relaxed"), null);
    const content = r.json.choices[0].message.content!;
    assert.equal(r.json.choices[0].finish_reason, "stop", content);
    const value = JSON.parse(content);
    assert.ok(validate(value), `${content}\n${JSON.stringify(validate.errors)}`);
    const parsed = zod.safeParse(value);
    assert.ok(parsed.success, `${content}\n${parsed.error?.message}`);
    // As written: no more fraction digits than the step has.
    assert.doesNotMatch(content, /"qty":\s*-?\d+\./);
    assert.doesNotMatch(content, /"price":\s*\d+\.\d{3}/);
  }
  // A step whose automaton is too large is refused when strict, naming the keyword.
  const big = await chat({ type: "object", properties: { n: { type: "integer", multipleOf: 7919 } }, required: ["n"], additionalProperties: false }, 1, { strict: true });
  assert.equal(big.status, 400, big.text);
  assert.match(big.text, /properties\.n\.multipleOf/);
});

test("non-strict: a keyword the grammar cannot enforce is named in x-plinth-schema-relaxed (JSON and streamed, tools too); strict refuses it", async () => {
  const schema = {
    type: "object",
    properties: { n: { type: "integer", minimum: 0, multipleOf: 65537 }, "tag,é": { type: "string", maxLength: 3, format: "no-such-format" } },
    required: ["n"],
    additionalProperties: false,
  };
  const r = await chat(schema, 1);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get("x-plinth-schema-relaxed"), "properties.n.multipleOf, properties.tag%2C%C3%A9.format");
  const streamed = await chat(schema, 1, {}, { stream: true });
  assert.equal(streamed.status, 200);
  assert.equal(streamed.headers.get("x-plinth-schema-relaxed"), "properties.n.multipleOf, properties.tag%2C%C3%A9.format");
  const strict = await chat(schema, 1, { strict: true });
  assert.equal(strict.status, 400, strict.text);
  assert.match(strict.text, /multipleOf/);
  // A tool's argument schema: prefixed with the tool's name.
  const tool = await s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "Call it." }],
    max_tokens: 200,
    seed: 1,
    tools: [{ type: "function", function: { name: "pick", parameters: { type: "object", properties: { k: { type: "number", multipleOf: 0.123456789, minimum: 0 } }, required: ["k"] } } }],
    tool_choice: "required",
  });
  assert.equal(tool.status, 200, tool.text);
  assert.equal(tool.headers.get("x-plinth-schema-relaxed"), "pick:properties.k.multipleOf");
});

test("number bounds past 1e16 are met, not refused as unsatisfiable", async () => {
  const schema = {
    type: "object",
    properties: {
      a: { type: "number", minimum: 1e16 },
      b: { type: "number", minimum: 1e20, maximum: 1e22 },
      c: { type: "number", maximum: -1e18 },
      d: { type: "integer", exclusiveMinimum: 9007199254740991, maximum: 1e17 },
      e: { type: "number", exclusiveMinimum: 1.5e300 },
    },
    required: ["a", "b", "c", "d", "e"],
    additionalProperties: false,
  };
  // (Up to 309 digits, the largest double, a number where nothing bounds it above.)
  for (const strict of [true, false]) await expectValid(schema, { format: { strict }, seeds: 4, extra: { max_tokens: 2000 } });
  // Bounds that nothing meets are still the schema's fault.
  const r = await chat({ type: "number", minimum: 1e22, maximum: 1e20 }, 1, { strict: false });
  assert.equal(r.status, 400, r.text);
});

test("a schema whose required references never end is a 400 in both modes, not an answer cut at max_tokens", async () => {
  const N = { type: "object", properties: { n: { $ref: "#/$defs/N" } }, required: ["n"], additionalProperties: false };
  for (const strict of [true, false]) {
    const r = await chat({ $defs: { N }, $ref: "#/$defs/N" }, 1, { strict });
    assert.equal(r.status, 400, r.text);
    assert.match(r.text, /no value satisfies the schema: every value of #\/\$defs\/N contains another one/);
    // Reachable only through an optional property: a model that wrote it could never finish.
    const optional = await chat({ type: "object", properties: { x: { $ref: "#/$defs/N" } }, $defs: { N } }, 1, { strict });
    assert.equal(optional.status, 400, optional.text);
    assert.match(optional.text, /\$defs\.N: no finite value satisfies it/);
  }
  // Recursion with a way out (an optional property, an array that may be empty) still works.
  const tree = { $defs: { T: { type: "object", properties: { c: { type: "array", items: { $ref: "#/$defs/T" }, maxItems: 2 } }, required: ["c"], additionalProperties: false } }, $ref: "#/$defs/T" };
  await expectValid(tree, { seeds: 2, format: { strict: true }, extra: { max_tokens: 2000 } });
});

/** Sign of a − b for plain decimal literals (no exponent), exactly. */
function compareDecimals(a: string, b: string): number {
  const parse = (t: string) => {
    const [int, frac = ""] = t.replace(/^-/, "").split(".");
    return { neg: t.startsWith("-"), int, frac };
  };
  const x = parse(a);
  const y = parse(b);
  const scale = Math.max(x.frac.length, y.frac.length);
  const big = (p: ReturnType<typeof parse>) => (p.neg ? -1n : 1n) * BigInt(p.int + p.frac.padEnd(scale, "0"));
  const d = big(x) - big(y);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

test("bounds past 2^53 or 15 significant digits hold as written: the answer is inside as doubles (ajv) and exactly (as Python reads integers); bounds a double cannot tell apart are refused saying so", async () => {
  // Each property's bounds as the client writes them: the server (and ajv's caller) read them with
  // JSON.parse, which rounds 9007199254740993 to 9007199254740992, so the request is sent as text.
  const cases: Array<{ type: string; bounds: Record<string, string> }> = [
    { type: "integer", bounds: { minimum: "12345678901234560000", maximum: "12345678901234567890" } },
    { type: "integer", bounds: { exclusiveMinimum: "10000000000000000", exclusiveMaximum: "10000000000000004" } },
    { type: "number", bounds: { minimum: "1000000000000000.2", maximum: "1000000000000000.7" } },
    { type: "integer", bounds: { minimum: "9007199254740993", maximum: "9007199254740999" } },
  ];
  const send = (property: string, strict: boolean, seed: number) => {
    const schemaText = `{"type":"object","properties":{"x":${property}},"required":["x"],"additionalProperties":false}`;
    const body = JSON.stringify({
      model: "tiny",
      messages: [{ role: "user", content: "JSON please." }],
      max_tokens: 100,
      temperature: 1,
      seed,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: "SCHEMA", strict } },
    }).replace('"SCHEMA"', schemaText);
    return { schemaText, response: s.http.postRaw("/v1/chat/completions", body) };
  };
  for (const c of cases) {
    const property = `{"type":"${c.type}",${Object.entries(c.bounds).map(([k, v]) => `"${k}":${v}`).join(",")}}`;
    for (const strict of [true, false]) {
      for (const seed of [1, 2]) {
        const { schemaText, response } = send(property, strict, seed);
        const r = await response;
        assert.equal(r.status, 200, `${property}: ${r.text}`);
        const content = (r.json as { choices: Array<{ message: { content: string } }> }).choices[0].message.content;
        assert.ok(ajv.validate(JSON.parse(schemaText), JSON.parse(content)), `${content} against ${property} (ajv)`);
        // The answer's number exactly as written, against each bound exactly as written.
        const x = /"x"\s*:\s*(-?[0-9.]+)/.exec(content)![1];
        if (c.type === "integer") assert.match(x, /^-?\d+$/);
        for (const [key, bound] of Object.entries(c.bounds)) {
          const d = compareDecimals(x, bound);
          const ok = key === "minimum" ? d >= 0 : key === "maximum" ? d <= 0 : key === "exclusiveMinimum" ? d > 0 : d < 0;
          assert.ok(ok, `${x} breaks ${key} ${bound} read exactly`);
        }
      }
    }
  }
  // Bounds closer than a double at 2^53 (both arrive as 9007199254740992): nothing is certain.
  const { response } = send('{"type":"integer","minimum":9007199254740993,"maximum":9007199254740993}', false, 1);
  const r = await response;
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /no integer is certain to satisfy the bounds: they arrive as doubles/);
});
