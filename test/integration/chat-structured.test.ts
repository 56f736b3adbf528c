import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Ajv2020 } from "ajv/dist/2020.js";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { EXTRA_TOKENS, FIXTURE_TOKENS } from "../fixtures/models.ts";
import type { ChatBody } from "../helpers/requests.ts";
import { useTestServer } from "../helpers/server.ts";

const s = useTestServer({}, { think: true });

const ajv = new Ajv2020({ strict: false });
ajv.addFormat("date", /^\d{4}-\d{2}-\d{2}$/);
ajv.addFormat("uuid", /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/);

/** Bounded on purpose: every field has a finite shape, so answers finish well inside max_tokens. */
const ORDER = {
  type: "object",
  properties: {
    id: { type: "string", format: "uuid" },
    status: { enum: ["new", "paid", "shipped"] },
    quantity: { type: "integer", minimum: 1, maximum: 20 },
    gift: { type: "boolean" },
    note: { type: "string", maxLength: 10 },
    shipped_on: { type: "string", format: "date" },
    contact: { anyOf: [{ $ref: "#/$defs/email" }, { type: "null" }] },
    items: { type: "array", items: { $ref: "#/$defs/item" }, minItems: 1, maxItems: 2 },
  },
  required: ["id", "status", "quantity", "items", "contact"],
  additionalProperties: false,
  $defs: {
    email: { type: "string", maxLength: 8 },
    item: {
      type: "object",
      properties: { sku: { type: "string", pattern: "^[A-Z]{2}[0-9]{3}$" }, price: { type: "integer", minimum: 0, maximum: 999 } },
      required: ["sku", "price"],
      additionalProperties: false,
    },
  },
};
const validateOrder = ajv.compile(ORDER);
const chat = (extra: Partial<ChatBody>) =>
  s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "Give me the order as JSON." }],
    max_tokens: 400,
    temperature: 1,
    ...extra,
  });

test("json_schema (strict): every answer parses and validates, over many seeds at temperature 1", async () => {
  const optionalSeen = new Set<string>();
  for (let seed = 1; seed <= 10; seed++) {
    const r = await chat({ seed, response_format: { type: "json_schema", json_schema: { name: "order", schema: ORDER, strict: true } } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].finish_reason, "stop", r.json.choices[0].message.content!);
    const value = JSON.parse(r.json.choices[0].message.content!);
    assert.ok(validateOrder(value), `${r.json.choices[0].message.content}\n${JSON.stringify(validateOrder.errors)}`);
    for (const k of ["gift", "note", "shipped_on"]) if (k in value) optionalSeen.add(k);
  }
  // Optional properties are really optional: across seeds some appear (they are never forced).
  assert.ok(optionalSeen.size > 0);
});

test("json_object gives a JSON object", async () => {
  // The random model writes long strings; a bias toward closing keeps answers short.
  const closeBrace = await s.http.post("/tokenize", { model: "tiny", prompt: "}", add_special_tokens: false });
  const quote = await s.http.post("/tokenize", { model: "tiny", prompt: '"', add_special_tokens: false });
  let complete = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await chat({ seed, max_tokens: 200, response_format: { type: "json_object" }, logit_bias: { [closeBrace.json.tokens[0]]: 6, [quote.json.tokens[0]]: 4 } });
    const text = r.json.choices[0].message.content!;
    assert.ok(text.trimStart().startsWith("{"), text);
    if (r.json.choices[0].finish_reason === "stop") {
      complete++;
      const value = JSON.parse(text);
      assert.equal(typeof value, "object");
      assert.ok(value !== null && !Array.isArray(value));
    }
  }
  assert.ok(complete >= 3, `only ${complete} of 6 answers finished`);
});

test("vLLM's and llama-server's structured-output fields are honoured, or refused by name; never dropped", async () => {
  const SMALL = { type: "object", properties: { ok: { type: "boolean" }, n: { enum: [1, 2, 3] } }, required: ["ok", "n"], additionalProperties: false };
  const validSmall = ajv.compile(SMALL);
  const schemaFields: Array<[string, Record<string, unknown>]> = [
    ["guided_json (object)", { guided_json: SMALL }],
    ["guided_json (JSON text)", { guided_json: JSON.stringify(SMALL) }],
    ["structured_outputs.json", { structured_outputs: { json: SMALL } }],
    ["llama-server json_schema", { json_schema: SMALL }],
    ["llama-server json_object with a schema", { response_format: { type: "json_object", schema: SMALL } }],
  ];
  for (const [what, field] of schemaFields) {
    for (const seed of [1, 2]) {
      const r = await chat({ seed, max_tokens: 60, ...field } as Partial<ChatBody>);
      assert.equal(r.status, 200, `${what}: ${r.text}`);
      const value = JSON.parse(r.json.choices[0].message.content!);
      assert.ok(validSmall(value), `${what}: ${r.json.choices[0].message.content}`);
    }
  }
  const choices = ["yes", "no (maybe)", "a.b*"];
  for (const field of [{ guided_choice: choices }, { structured_outputs: { choice: choices } }]) {
    for (const seed of [1, 2, 3]) {
      const r = await chat({ seed, max_tokens: 20, ...field } as Partial<ChatBody>);
      assert.equal(r.status, 200, r.text);
      assert.ok(choices.includes(r.json.choices[0].message.content!), JSON.stringify(r.json.choices[0].message.content));
    }
  }
  // vLLM's two ways and SGLang's `regex`.
  for (const field of [{ guided_regex: "[0-9]{3}-[a-z]{2}" }, { structured_outputs: { regex: "[0-9]{3}-[a-z]{2}" } }, { regex: "[0-9]{3}-[a-z]{2}" }]) {
    const r = await chat({ seed: 4, max_tokens: 20, ...field } as Partial<ChatBody>);
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].message.content!, /^[0-9]{3}-[a-z]{2}$/);
  }
  // Streamed, the regex holds too.
  const streamed = await s.client.chat.completions.create({
    model: "tiny",
    messages: [{ role: "user", content: "Code?" }],
    max_tokens: 20,
    stream: true,
    guided_regex: "[A-Z]{4}",
  } as never);
  let text = "";
  for await (const c of streamed as unknown as AsyncIterable<any>) text += c.choices[0]?.delta?.content ?? "";
  assert.match(text, /^[A-Z]{4}$/);

  const refused: Array<[Record<string, unknown>, string]> = [
    [{ guided_grammar: 'root ::= "a"' }, "guided_grammar"],
    [{ ebnf: 'root ::= "Hello" | "Hi"' }, "ebnf"],
    [{ response_format: { type: "json_object", schema: SMALL, value: SMALL } }, "response_format.value"],
    // A misspelt key inside json_schema would leave the schema's strictness unsaid.
    [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: SMALL, strcit: true } } }, "response_format.json_schema.strcit"],
    [{ regex: "(a" }, "regex"],
    [{ regex: "a", guided_json: SMALL }, "regex"],
    [{ grammar: 'root ::= "a"' }, "grammar"],
    [{ structured_outputs: { grammar: "start: /a/" } }, "structured_outputs.grammar"],
    [{ guided_whitespace_pattern: " *" }, "guided_whitespace_pattern"],
    [{ guided_regex: "(a" }, "guided_regex"],
    [{ guided_json: "not json" }, "guided_json"],
    [{ guided_json: { type: "objectx" } }, "guided_json"],
    [{ guided_json: SMALL, response_format: { type: "json_object" } }, "guided_json"],
    [{ guided_choice: ["a"], guided_regex: "b" }, "guided_choice"],
    [{ structured_outputs: { json: SMALL, regex: "a" } }, "structured_outputs.regex"],
    [{ structured_outputs: { colour: "red" } }, "structured_outputs.colour"],
    [{ structured_outputs: { json: SMALL, disable_any_whitespace: true } }, "structured_outputs.disable_any_whitespace"],
    // Text no model output can hold: a NUL (llama.cpp's grammar never sees one, and a grammar that
    // requires it aborted the process) or a lone surrogate half.
    [{ guided_regex: "a\u0000b" }, "guided_regex"],
    [{ guided_regex: "a\\x00b" }, "guided_regex"],
    [{ guided_choice: ["a\u0000b", "c"] }, "guided_choice"],
    [{ guided_regex: "\ud800" }, "guided_regex"],
    [{ response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: { type: "string", pattern: "^[^\\s\\S]$" } } } }, "response_format.json_schema.schema"],
  ];
  for (const [field, param] of refused) {
    const r = await chat({ max_tokens: 4, ...field } as Partial<ChatBody>);
    assert.equal(r.status, 400, `${JSON.stringify(field)}: ${r.text}`);
    assert.equal((r.json as unknown as { error: { param: string } }).error.param, param, r.text);
  }
  assert.equal((await fetch(`${s.url}/health`)).status, 200, "the server is still up");
  // Text completions take no grammar here: refused by name rather than answered unconstrained.
  for (const [field, param] of [[{ guided_json: SMALL }, "guided_json"], [{ regex: "(yes|no)" }, "regex"], [{ ebnf: 'root ::= "a"' }, "ebnf"]] as const) {
    const completion = await s.http.post("/v1/completions", { model: "tiny", prompt: "a", ...field });
    assert.equal(completion.status, 400, completion.text);
    assert.equal((completion.json as unknown as { error: { param: string } }).error.param, param);
  }
  // text-generation-inference's response_format shapes: a schema as `value`, or a regex.
  for (const response_format of [{ type: "json_object", value: SMALL }, { type: "json", value: SMALL }]) {
    const r = await chat({ seed: 6, max_tokens: 60, response_format } as unknown as Partial<ChatBody>);
    assert.equal(r.status, 200, r.text);
    if (r.json.choices[0].finish_reason === "stop") {
      const v = JSON.parse(r.json.choices[0].message.content!);
      assert.equal(typeof v.ok, "boolean", r.json.choices[0].message.content!);
      assert.ok([1, 2, 3].includes(v.n));
    }
  }
  const tgiRegex = await chat({ seed: 7, max_tokens: 20, response_format: { type: "regex", value: "[0-9]{3}-[a-z]{2}" } } as unknown as Partial<ChatBody>);
  assert.equal(tgiRegex.status, 200, tgiRegex.text);
  assert.match(tgiRegex.json.choices[0].message.content!, /^[0-9]{3}-[a-z]{2}$/);
  // SGLang sends json_schema as JSON text; llama-server as an object: both hold the answer.
  for (const json_schema of [JSON.stringify(SMALL), SMALL]) {
    const r = await chat({ seed: 5, max_tokens: 60, json_schema } as Partial<ChatBody>);
    assert.equal(r.status, 200, r.text);
    if (r.json.choices[0].finish_reason === "stop") JSON.parse(r.json.choices[0].message.content!);
  }
});

test("client.chat.completions.parse with a zod schema", async () => {
  const Answer = z.object({ verdict: z.enum(["yes", "no", "maybe"]), confidence: z.number().int().min(0).max(10), tags: z.array(z.enum(["a", "b"])).max(2) });
  const r = await s.client.chat.completions.parse({
    model: "tiny",
    messages: [{ role: "user", content: "Decide." }],
    response_format: zodResponseFormat(Answer, "answer"),
    max_tokens: 200,
    seed: 4,
  });
  const parsed = r.choices[0].message.parsed!;
  assert.ok(["yes", "no", "maybe"].includes(parsed.verdict));
  assert.ok(Number.isInteger(parsed.confidence) && parsed.confidence >= 0 && parsed.confidence <= 10);
});

test("whitespace is bounded: a schema of bounded fields cannot run on blanks", async () => {
  const schema = { type: "object", properties: { ok: { type: "boolean" }, level: { enum: [1, 2, 3] } }, required: ["ok", "level"], additionalProperties: false };
  const newline = await s.http.post("/tokenize", { model: "tiny", prompt: "\n", add_special_tokens: false });
  for (let seed = 1; seed <= 4; seed++) {
    // Push the model toward whitespace as hard as possible.
    const r = await chat({ seed, logit_bias: { [newline.json.tokens[0]]: 20 }, response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } } });
    const text = r.json.choices[0].message.content!;
    assert.equal(r.json.choices[0].finish_reason, "stop");
    assert.ok(text.length < 80, JSON.stringify(text));
    assert.deepEqual(Object.keys(JSON.parse(text)).sort(), ["level", "ok"]);
  }
});

test("a strict schema the server cannot enforce is refused; a non-strict one still gets JSON", async () => {
  const schema = { type: "object", properties: { n: { type: "number", multipleOf: 0.123456789 } } };
  const strict = await chat({ response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } } });
  assert.equal(strict.status, 400);
  assert.equal(strict.error?.param, "response_format.json_schema.schema");
  const loose = await chat({ max_tokens: 60, response_format: { type: "json_schema", json_schema: { name: "s", schema } } });
  assert.equal(loose.status, 200);
  assert.ok(loose.json.choices[0].message.content!.trimStart().startsWith("{"));
});

test("with thinking on, the constraint starts after the reasoning ends", async () => {
  const schema = { type: "object", properties: { answer: { enum: ["left", "right"] } }, required: ["answer"], additionalProperties: false };
  for (let seed = 1; seed <= 3; seed++) {
    const r = await s.http.post("/v1/chat/completions", {
      model: "think",
      messages: [{ role: "user", content: "Left or right?" }],
      max_tokens: 120,
      seed,
      reasoning: { budget_tokens: 12 },
      response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
    });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.ok(m.reasoning_content!.length > 0);
    assert.ok(["left", "right"].includes(JSON.parse(m.content!).answer), m.content!);
  }
});

test("structured output with tools: the model may call a tool or answer in the schema", async () => {
  const schema = { type: "object", properties: { answer: { enum: ["x", "y"] } }, required: ["answer"], additionalProperties: false };
  const tools = [{ type: "function" as const, function: { name: "lookup", parameters: { type: "object", properties: { q: { enum: ["a", "b"] } }, required: ["q"], additionalProperties: false }, strict: true } }];
  const body: ChatBody = {
    model: "think",
    messages: [{ role: "user", content: "Answer or look it up." }],
    reasoning_effort: "none",
    max_tokens: 100,
    // Fixed: the call's opening can also be spelled from plain pieces, which a random draw may do
    // even with the special token banned.
    seed: 3,
    tools,
    parallel_tool_calls: false,
    response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
  };
  const called = await s.http.post("/v1/chat/completions", { ...body, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 } });
  assert.equal(called.json.choices[0].finish_reason, "tool_calls", called.text);
  assert.deepEqual(Object.keys(JSON.parse(called.json.choices[0].message.tool_calls![0].function.arguments)), ["q"]);
  const answered = await s.http.post("/v1/chat/completions", { ...body, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: -100 } });
  assert.equal(answered.json.choices[0].finish_reason, "stop", answered.text);
  assert.ok(["x", "y"].includes(JSON.parse(answered.json.choices[0].message.content!).answer));
});

test("streaming a constrained answer yields the same JSON as the non-streamed one", async () => {
  const schema = { type: "object", properties: { k: { enum: ["p", "q", "r"] }, n: { type: "integer", minimum: 0, maximum: 99 } }, required: ["k", "n"], additionalProperties: false };
  const params = { model: "tiny", messages: [{ role: "user" as const, content: "JSON please" }], max_tokens: 60, temperature: 0, response_format: { type: "json_schema" as const, json_schema: { name: "s", schema, strict: true } } };
  const whole = await s.client.chat.completions.create(params);
  const stream = await s.client.chat.completions.create({ ...params, stream: true });
  let text = "";
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? "";
  assert.equal(text, whole.choices[0].message.content);
  JSON.parse(text);
  void FIXTURE_TOKENS;
});

test("banning end-of-turn with logit_bias under a grammar cannot break the engine", async () => {
  const schema = { type: "object", properties: { k: { enum: ["a", "b"] } }, required: ["k"], additionalProperties: false };
  const r = await chat({
    max_tokens: 40,
    logit_bias: { [FIXTURE_TOKENS.imEnd]: -100, [FIXTURE_TOKENS.endOfSequence]: -100 },
    response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
  });
  assert.equal(r.status, 200, r.text);
  assert.ok(["a", "b"].includes(JSON.parse(r.json.choices[0].message.content!).k));
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 200);
});

test("logprobs under a schema are over what the grammar allows: greedy picks the top one, forced tokens are certain", async () => {
  const schema = { type: "object", properties: { status: { enum: ["new", "paid", "shipped"] } }, required: ["status"], additionalProperties: false };
  const r = await chat({
    response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
    max_tokens: 60,
  });
  assert.equal(r.status, 200, r.text);
  const content = r.json.choices[0].message.content!;
  assert.ok(["new", "paid", "shipped"].includes(JSON.parse(content).status), content);
  const entries = r.json.choices[0].logprobs!.content;
  assert.equal(entries.map((e) => e.token).join(""), content);
  for (const e of entries) {
    assert.equal(e.token, e.top_logprobs[0].token, JSON.stringify(e));
    for (const t of e.top_logprobs) assert.ok(t.logprob > -9999, "an impossible token listed as an alternative");
  }
  // The opening brace is all the grammar allows first (as a piece, or as the raw byte token, which
  // the model all but never picks).
  assert.equal(entries[0].token, "{");
  assert.ok(entries[0].logprob > -1e-6, String(entries[0].logprob));
  for (const t of entries[0].top_logprobs) assert.equal(t.token, "{", JSON.stringify(entries[0]));
});
