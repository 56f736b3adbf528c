import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import { useTestServer } from "../helpers/server.ts";

// Grammar-heavy (and template-heavy) hostile bodies against the real engine: each answers a 4xx
// naming the field (or compiles) within a few seconds, while /health keeps answering. Schema
// grammars compile in a worker thread with a deadline; what llama.cpp then does on the event loop
// (loading the grammar, tokenizing the templated prompt) is bounded before it starts.

const s = useTestServer({ "ctx-size": "512" });

const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }]));
const rf = (schema: unknown) => ({ type: "json_schema", json_schema: { name: "x", strict: true, schema } });
const chat = { model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: 2 };

/** JSON text of a value nested `depth` arrays deep (written out: JSON.stringify would overflow). */
const deepArrayJson = (depth: number) => "[".repeat(depth) + "1" + "]".repeat(depth);
/** JSON text of a schema of objects nested `depth` deep. */
const deepObjectsJson = (depth: number) => '{"type":"object","required":["a"],"properties":{"a":'.repeat(depth) + '{"type":"string"}' + "}}".repeat(depth);
/** A request's JSON text with the JSON text `inner` where its string "DEEP" was. */
const withJson = (body: unknown, inner: string) => JSON.stringify(body).replace('"DEEP"', inner);

// [name, body, status, param, and for what the size bounds refuse before any compiling, a limit in ms]
const corpus: Array<[string, unknown, number, string | null, number?]> = [
  ["a backtracking pattern against an enum", { ...chat, response_format: rf({ type: "string", enum: ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"], pattern: "^(a+)+$" }) }, 400, "response_format.json_schema.schema"],
  // Nested counted repeats: one text reads many ways, and llama.cpp kept a parse stack for each (a
  // 60-token answer took 10 s and held every other request on the decode thread). As a DFA it would
  // need 9^6 states: refused. The same nesting two deep is a DFA and answers.
  ["repeats nested six deep", { ...chat, response_format: rf({ type: "string", pattern: "((((((a{2,9}){2,9}){2,9}){2,9}){2,9}){2,9})" }) }, 400, "response_format.json_schema.schema"],
  ["repeats nested two deep", { ...chat, response_format: rf({ type: "string", pattern: "^(a{2,9}){2,9}$" }) }, 200, null],
  ["maxLength of 100,000,000", { ...chat, response_format: rf({ type: "string", maxLength: 100_000_000 }) }, 400, "response_format.json_schema.schema"],
  ["a repetition of 99,999,999", { ...chat, response_format: rf({ type: "string", pattern: "^a{0,99999999}$" }) }, 400, "response_format.json_schema.schema"],
  ["100 properties under maxProperties 50", { ...chat, response_format: rf({ type: "object", properties: props(100), maxProperties: 50 }) }, 200, null],
  // Counting members makes a rule per (property, count): 1.2 MB of grammar, refused by load cost.
  ["200 properties under maxProperties 100", { ...chat, response_format: rf({ type: "object", properties: props(200), maxProperties: 100 }) }, 400, "response_format.json_schema.schema"],
  ["1,000 optional properties", { ...chat, response_format: rf({ type: "object", properties: props(1000) }) }, 200, null],
  // Optional properties chain in the grammar; llama.cpp's load walks such chains over and over, so
  // 5,000 of them would hold the event loop for seconds per request: refused by load cost.
  ["5,000 optional properties", { ...chat, response_format: rf({ type: "object", properties: props(5000) }) }, 400, "response_format.json_schema.schema"],
  ["5,000 required properties", { ...chat, response_format: rf({ type: "object", properties: props(5000), required: Object.keys(props(5000)) }) }, 200, null],
  [
    "nesting 2,000 deep",
    { ...chat, response_format: rf(Array.from({ length: 2000 }).reduce<Record<string, unknown>>((inner) => ({ type: "array", items: inner }), { type: "string" })) },
    400,
    "response_format.json_schema.schema",
  ],
  // So deep that the worker could not even be handed the schema (its structured clone overflowed the
  // stack) and the refusal came from the 5 s deadline: now refused by the size bounds at once.
  ["objects nested 5,000 deep", withJson({ ...chat, response_format: rf("DEEP") }, deepObjectsJson(5000)), 400, "response_format.json_schema.schema", 1000],
  [
    "a tool's parameters holding arrays nested 50,000 deep",
    withJson({ ...chat, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {}, x: "DEEP" } } }] }, deepArrayJson(50_000)),
    400,
    "tools[0].function.parameters",
    1000,
  ],
  ["a malformed $ref", { ...chat, response_format: rf({ $ref: "#/%E0%A4%A" }) }, 400, "response_format.json_schema.schema"],
  ["minItems of 3,000,000", { ...chat, response_format: rf({ type: "array", items: { type: "integer" }, minItems: 3_000_000 }) }, 400, "response_format.json_schema.schema"],
  // The template writes the tool into the prompt, which then cannot fit: refused naming the tools.
  [
    "a tool with 5,000 required parameters",
    { ...chat, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props(5000), required: Object.keys(props(5000)) }, strict: true } }] },
    400,
    "tools",
  ],
  [
    "a tool with 5,000 optional parameters",
    { ...chat, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props(5000) }, strict: true } }] },
    400,
    // Its definition alone is longer than the context, which is checked before any grammar is built.
    "tools",
  ],
  // The template writes the description into the prompt; its length is checked before tokenizing
  // (which would hold the event loop for seconds).
  [
    "a tool whose description is 4 MB",
    { ...chat, tools: [{ type: "function", function: { name: "f", description: "word ".repeat(800_000), parameters: { type: "object", properties: {} } } }] },
    400,
    "tools",
  ],
  // 600 bytes: the fixture's template gets node-llama-cpp's TypeScript description of the tools,
  // which writes an array of nine items as a tuple of nine copies of its item type; eight deep
  // that was 350 MB of prompt built on the event loop (8 s, 2.6 GB) before the context refused it.
  [
    "a tool of nine-item arrays nested eight deep",
    {
      ...chat,
      tools: [
        {
          type: "function",
          function: {
            name: "f",
            parameters: {
              type: "object",
              properties: { v: Array.from({ length: 8 }).reduce<Record<string, unknown>>((inner) => ({ type: "array", items: inner, minItems: 9, maxItems: 9 }), { type: "integer" }) },
            },
          },
        },
      ],
    },
    400,
    "tools[0].function.parameters",
    1000,
  ],
  // Thirty characters whose determinisation holds every request 2–3 s: refused by its step count.
  ["a regex whose automaton takes millions of steps (guided_regex)", { ...chat, guided_regex: "^((c|d|cd|dc|cdc)+){300}$" }, 400, "guided_regex", 1000],
  ["the same as structured_outputs.regex", { ...chat, structured_outputs: { regex: "^((c|d|cd|dc|cdc)+){300}$" } }, 400, "structured_outputs.regex", 1000],
  [
    "two tools whose grammars are each within bounds but not together",
    { ...chat, tools: [0, 1].map((i) => ({ type: "function", function: { name: `f${i}`, parameters: { type: "object", properties: props(1300) }, strict: true } })) },
    400,
    "tools",
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
    for (const [name, body, status, param, fastMs] of corpus) {
      const t0 = performance.now();
      const r = await s.http.postRaw("/v1/chat/completions", body);
      const took = performance.now() - t0;
      assert.equal(r.status, status, `${name}: ${r.text.slice(0, 300)}`);
      if (param) assert.equal(r.error?.param, param, name);
      assert.ok(took < (fastMs ?? 10_000), `${name} took ${Math.round(took)} ms`);
    }
  } finally {
    polling = false;
    await poller;
  }
  assert.ok(worst < 1000, `/health waited ${Math.round(worst)} ms at worst`);
});

test("a Lark grammar of many costly terminals is refused by one budget for the grammar, promptly", async () => {
  const definition =
    "start: " + Array.from({ length: 30 }, (_, i) => `T${i}`).join(" ") + "\n" + Array.from({ length: 30 }, (_, i) => `T${i}: /((e|f|ef|fe|efe${i})+){100}/`).join("\n");
  const body = { model: "tiny", input: "x", max_output_tokens: 2, tools: [{ type: "custom", name: "t", format: { type: "grammar", syntax: "lark", definition } }] };
  for (let i = 0; i < 2; i++) {
    const t0 = performance.now();
    const r = await s.http.postRaw("/v1/responses", body);
    const took = performance.now() - t0;
    assert.equal(r.status, 400, r.text.slice(0, 300));
    assert.equal(r.error?.param, "tools[0].format.definition");
    assert.match(r.error?.message ?? "", /construction steps/);
    // It took 8 s before the budget.
    assert.ok(took < 2000, `took ${Math.round(took)} ms`);
  }
});

test("many costly tool schemas take turns with other requests and stop at the bound they pass together", async () => {
  // 16 tools each within the limits alone (a string of up to ~98,500 characters, which llama.cpp
  // writes out as ~98,500 rules); together past the load-cost bound. They were queued all at once,
  // so every other schema waited 8 s or more behind them; and each took half a second to compile
  // until such a chain of rules was counted as one, so the request itself was refused after 3–5 s.
  const tools = Array.from({ length: 16 }, (_, i) => ({
    type: "function",
    function: { name: `t${i}`, parameters: { type: "object", properties: { a: { type: "string", maxLength: 98_500 + i } }, required: ["a"] } },
  }));
  const tc = performance.now();
  const costly = s.http.postRaw("/v1/chat/completions", { ...chat, tools, tool_choice: "required" }).then((r) => ({ r, took: performance.now() - tc }));
  await new Promise((r) => setTimeout(r, 300));
  const t0 = performance.now();
  const other = await s.http.postRaw("/v1/chat/completions", { ...chat, response_format: rf({ type: "object", properties: { n: { type: "integer", minimum: 3 } }, required: ["n"] }) });
  const otherTook = performance.now() - t0;
  assert.equal(other.status, 200, other.text.slice(0, 300));
  assert.ok(otherTook < 4000, `the other request waited ${Math.round(otherTook)} ms`);
  const { r: refused, took } = await costly;
  assert.equal(refused.status, 400, refused.text.slice(0, 300));
  assert.equal(refused.error?.param, "tools");
  // Refused by the bound they pass together, long before the time all of them may take.
  assert.match(refused.error?.message ?? "", /too large to enforce together: their grammars .*the first \d+ of them/);
  assert.ok(took < 2500, `refused after ${Math.round(took)} ms`);
});

test("a schema of 20,000 prefixItems (360 KB) is answered promptly and another client's small schema alongside it", async () => {
  // Its grammar was built in time growing with the square of the items: it held the one compile
  // worker for 5 s, and the other client's schema, queued behind it, was refused as out of time.
  const items = Array.from({ length: 20_000 }, () => ({ type: "string" }));
  for (const minItems of [20_000, 0]) {
    // A description of its own each time, so the compiler's cache does not answer.
    const schema = { type: "array", prefixItems: items, minItems, description: `run ${minItems} ${Math.random()}` };
    const th = performance.now();
    const hostile = s.http.postRaw("/v1/chat/completions", { ...chat, response_format: rf(schema) }).then((r) => ({ r, took: performance.now() - th }));
    await new Promise((r) => setTimeout(r, 300));
    const t0 = performance.now();
    const small = { type: "object", properties: { n: { type: "integer" }, [`q${Math.random().toString(36).slice(2, 8)}`]: { type: "boolean" } }, required: ["n"] };
    const other = await s.http.postRaw("/v1/chat/completions", { ...chat, response_format: rf(small) });
    const otherTook = performance.now() - t0;
    assert.equal(other.status, 200, other.text.slice(0, 300));
    // About 0.1 s here alone; the rest of the big one's compile at most (0.2-0.5 s on a loaded machine).
    assert.ok(otherTook < 2000, `the other request waited ${Math.round(otherTook)} ms`);
    const { r, took } = await hostile;
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.ok(took < 3000, `the 20,000 items took ${Math.round(took)} ms`);
  }
});

test("1,000 and more optional prefixItems are enforced (chat and responses), not a 500 from llama.cpp's grammar parser", async () => {
  const ajv = new Ajv2020({ strict: false });
  const cases: Array<[unknown, number]> = [[{ type: "string", maxLength: 3 }, 1000], [{ type: "integer" }, 1000], [{ type: "boolean" }, 1000], [{ const: 5 }, 1000], [{ type: "integer" }, 1500]];
  for (const [item, n] of cases) {
    const schema = { type: "array", prefixItems: Array.from({ length: n }, () => item), items: false };
    const validate = ajv.compile(schema);
    // The fixture model writes at random: an answer may run to max_tokens inside the array, so a
    // few seeds are tried; every answer that ends must be valid, and one must end.
    let ended = 0;
    for (let seed = 1; seed <= 4 && ended < 2; seed++) {
      const r = await s.http.postRaw("/v1/chat/completions", { ...chat, max_tokens: 200, temperature: 1, seed, response_format: rf(schema) });
      assert.equal(r.status, 200, `${JSON.stringify(item)} x ${n}: ${r.text.slice(0, 300)}`);
      const choice = (r.json as { choices: Array<{ finish_reason: string; message: { content: string } }> }).choices[0];
      if (choice.finish_reason === "stop") {
        ended++;
        assert.ok(validate(JSON.parse(choice.message.content)), `${choice.message.content}: ${JSON.stringify(validate.errors)}`);
      }
      const q = await s.http.postRaw("/v1/responses", { model: "tiny", input: "x", max_output_tokens: 200, temperature: 1, seed, text: { format: { type: "json_schema", name: "x", schema } } });
      assert.equal(q.status, 200, `${JSON.stringify(item)} x ${n} (responses): ${q.text.slice(0, 300)}`);
      const answer = q.json as { status: string; output: Array<{ type: string; content?: Array<{ text: string }> }> };
      if (answer.status === "completed") {
        ended++;
        const text = answer.output.find((o) => o.type === "message")!.content![0].text;
        assert.ok(validate(JSON.parse(text)), `${text}: ${JSON.stringify(validate.errors)}`);
      }
    }
    assert.ok(ended > 0, `${JSON.stringify(item)} x ${n}: no answer ended within max_tokens`);
  }
});
