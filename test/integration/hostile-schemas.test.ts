import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";

// Grammar-heavy hostile bodies against the real engine: each answers a 4xx naming the field (or
// compiles) within a few seconds, while /health keeps answering — schema grammars compile in a
// worker thread with a deadline, never on the event loop.

const s = useTestServer({ "ctx-size": "512" });

const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }]));
const rf = (schema: unknown) => ({ type: "json_schema", json_schema: { name: "x", strict: true, schema } });
const chat = { model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: 2 };

const corpus: Array<[string, unknown, number, string | null]> = [
  ["a backtracking pattern against an enum", { ...chat, response_format: rf({ type: "string", enum: ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"], pattern: "^(a+)+$" }) }, 400, "response_format.json_schema.schema"],
  ["maxLength of 100,000,000", { ...chat, response_format: rf({ type: "string", maxLength: 100_000_000 }) }, 400, "response_format.json_schema.schema"],
  ["a repetition of 99,999,999", { ...chat, response_format: rf({ type: "string", pattern: "^a{0,99999999}$" }) }, 400, "response_format.json_schema.schema"],
  ["200 properties under maxProperties 100", { ...chat, response_format: rf({ type: "object", properties: props(200), maxProperties: 100 }) }, 200, null],
  ["2,000 optional properties", { ...chat, response_format: rf({ type: "object", properties: props(2000) }) }, 200, null],
  [
    "nesting 2,000 deep",
    { ...chat, response_format: rf(Array.from({ length: 2000 }).reduce<Record<string, unknown>>((inner) => ({ type: "array", items: inner }), { type: "string" })) },
    400,
    "response_format.json_schema.schema",
  ],
  ["a malformed $ref", { ...chat, response_format: rf({ $ref: "#/%E0%A4%A" }) }, 400, "response_format.json_schema.schema"],
  ["minItems of 3,000,000", { ...chat, response_format: rf({ type: "array", items: { type: "integer" }, minItems: 3_000_000 }) }, 400, "response_format.json_schema.schema"],
  // Its grammar compiles, but the template writes the tool into the prompt, which then cannot fit.
  [
    "a tool with 5,000 parameters",
    { ...chat, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props(5000) }, strict: true } }] },
    400,
    "messages",
  ],
];

test("grammar-heavy bodies answer promptly and never stall /health", async () => {
  let worst = 0;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const t0 = performance.now();
      await fetch(`${s.url}/health`);
      worst = Math.max(worst, performance.now() - t0);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  try {
    for (const [name, body, status, param] of corpus) {
      const t0 = performance.now();
      const r = await s.http.postRaw("/v1/chat/completions", body);
      const took = performance.now() - t0;
      assert.equal(r.status, status, `${name}: ${r.text.slice(0, 300)}`);
      if (param) assert.equal(r.error?.param, param, name);
      assert.ok(took < 10_000, `${name} took ${Math.round(took)} ms`);
    }
  } finally {
    polling = false;
    await poller;
  }
  assert.ok(worst < 1000, `/health waited ${Math.round(worst)} ms at worst`);
});
