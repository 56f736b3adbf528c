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
async function expectValid(schema: Record<string, unknown>, opts: { seeds?: number; format?: Format; zod?: z.ZodType } = {}): Promise<unknown[]> {
  const validate = ajv.compile(schema);
  const values: unknown[] = [];
  for (let seed = 1; seed <= (opts.seeds ?? 6); seed++) {
    const r = await chat(schema, seed, opts.format);
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

test("z.email().max(n) (format, zod's email pattern and maxLength together) is enforced in strict mode, for long and short bounds", async () => {
  for (const max of [254, 40, 20]) {
    const zod = z.object({ e: z.email().max(max) });
    const schema = z.toJSONSchema(zod) as Record<string, unknown>;
    const values = await expectValid(schema, { format: { strict: true }, zod, seeds: 4 });
    for (const v of values) assert.ok((v as { e: string }).e.length <= max);
  }
});
