import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import OpenAI from "openai";
import { dbx, waitForEndpoint } from "../helpers/databricks.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { sseData, sseEvents } from "../helpers/scripted-app.ts";

// The Databricks dialect's checklist (SPEC 4.2): the Responses API, Embeddings and Completions,
// against the real server: "tiny" and "think" (generative) and "bert" (embeddings) as pay-per-token
// endpoints, and "pt", a provisioned-throughput endpoint over tiny. A small context keeps the
// context-overflow checks cheap.
let s: TestServer;
before(async () => {
  s = await startTestServer({ "ctx-size": "1024" }, { think: true, bert: true });
  const r = await dbx(s, "POST", "/api/2.0/serving-endpoints", { name: "pt", config: { served_entities: [{ name: "tiny-pt", entity_name: "tiny" }] } });
  assert.equal(r.status, 200, r.text);
  await waitForEndpoint(s, "pt");
});
after(() => s.close());

const resp = (body: Record<string, unknown>) => dbx(s, "POST", "/serving-endpoints/responses", { model: "tiny", max_output_tokens: 4, ...body });
const invoke = (name: string, body: Record<string, unknown>) => dbx(s, "POST", `/serving-endpoints/${name}/invocations`, body);
const THINK = { model: "think", reasoning: { effort: "low" } };

function refused(r: { status: number; json: any; text: string }, word: string) {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE", r.text);
  assert.ok(r.json.message.includes(word), `message should name ${word}: ${r.json.message}`);
}

const fn = (name: string, extra: Record<string, unknown> = {}) => ({ type: "function", function: { name, description: `does ${name}`, ...extra } });

test("001-08 a Responses request without model is rejected", async () => {
  refused(await dbx(s, "POST", "/serving-endpoints/responses", { input: "hi" }), "model");
  refused(await invoke("tiny", { input: "hi" }), "model");
});

test("001-09 a Responses request without input is rejected", async () => {
  refused(await dbx(s, "POST", "/serving-endpoints/responses", { model: "tiny" }), "input");
});

test("001-10 input as a plain string is accepted", async () => {
  const r = await resp({ input: "hello" });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.object, "response");
});

test("001-11 input as user/assistant messages with string or content-block content is accepted", async () => {
  const r = await resp({
    input: [
      { role: "user", content: "hi" },
      { role: "assistant", content: [{ type: "output_text", text: "hello" }] },
      { role: "user", content: [{ type: "input_text", text: "more" }] },
    ],
  });
  assert.equal(r.status, 200, r.text);
});

test("001-12 an input message with role system or developer is rejected (system text goes in instructions)", async () => {
  for (const role of ["system", "developer"]) refused(await resp({ input: [{ role, content: "x" }, { role: "user", content: "hi" }] }), "instructions");
  assert.equal((await resp({ input: "hi", instructions: "be terse" })).status, 200);
});

for (const [id, key, values] of [
  ["001-13", "background", [true, false, null]],
  ["001-14", "store", [true, false, null]],
  ["001-15", "conversation", ["conv_1", { id: "conv_1" }, null]],
  ["001-16", "service_tier", ["auto", "default", null]],
] as const) {
  test(`${id} a request with ${key} returns HTTP 400, whatever its value`, async () => {
    for (const value of values) refused(await resp({ input: "hi", [key]: value }), key);
    refused(await invoke("tiny", { model: "tiny", input: "hi", [key]: values[1] }), key);
  });
}

test("001-17 with stream omitted the answer is one JSON object with object: response", async () => {
  const r = await resp({ input: "hi" });
  assert.ok(r.headers.get("content-type")?.startsWith("application/json"));
  assert.equal(r.json.object, "response");
});

test("001-18 with stream: true the answer is text/event-stream", async () => {
  // Greedy, so it runs to max_output_tokens (sampled, it may end sooner: response.completed).
  const r = await resp({ input: "hi", stream: true, temperature: 0 });
  assert.ok(r.headers.get("content-type")?.startsWith("text/event-stream"));
  assert.equal(sseEvents(r.text).at(-1)?.event, "response.incomplete");
});

test("001-19 stream_options.include_usage defaults to false; with true the stream carries usage", async () => {
  const last = (text: string) => (sseEvents(text).at(-1)!.data as any).response;
  const without = await resp({ input: "hi", stream: true });
  assert.equal(last(without.text).usage, null);
  // Greedy: sampled at temperature 1 the model may end before max_output_tokens (4); greedy it never
  // ends by itself.
  const withUsage = await resp({ input: "hi", stream: true, stream_options: { include_usage: true }, temperature: 0 });
  const usage = last(withUsage.text).usage;
  assert.equal(usage.completion_tokens, 4, JSON.stringify(usage));
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  // The same counts under the Responses API's names, which OpenAI clients of this path require.
  assert.equal(usage.input_tokens, usage.prompt_tokens);
  assert.equal(usage.output_tokens, usage.completion_tokens);
  const plain = await resp({ input: "hi", temperature: 0 });
  assert.equal(plain.json.usage.input_tokens, plain.json.usage.prompt_tokens, plain.text);
  assert.equal(plain.json.usage.output_tokens, plain.json.usage.completion_tokens, plain.text);
  refused(await resp({ input: "hi", stream_options: { include_usage: true } }), "stream_options");
});

test("001-20 temperature and top_p omitted are 1.0, echoed in the response", async () => {
  const r = await resp({ input: "hi" });
  assert.equal(r.json.temperature, 1);
  assert.equal(r.json.top_p, 1);
});

test("001-21 top_p: 0 is rejected", async () => {
  refused(await resp({ input: "hi", top_p: 0 }), "top_p");
});

test("001-22 max_output_tokens: 0 is rejected; null means no limit", async () => {
  refused(await resp({ input: "hi", max_output_tokens: 0 }), "max_output_tokens");
  const r = await resp({ input: "hi", max_output_tokens: null, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.max_output_tokens, null);
  assert.ok(r.json.usage.completion_tokens > 4);
});

test("001-23 max_output_tokens bounds visible and reasoning tokens together", async () => {
  // Greedy: sampled, the model may end its turn at the first token, before any thinking.
  const r = await resp({ ...THINK, input: "why?", max_output_tokens: 20, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.usage.reasoning_tokens > 0);
  assert.ok(r.json.usage.completion_tokens <= 20, JSON.stringify(r.json.usage));
  assert.ok(["incomplete", "completed"].includes(r.json.status));
});

test("001-24 max_tool_calls: 0 is rejected", async () => {
  refused(await resp({ input: "hi", max_tool_calls: 0 }), "max_tool_calls");
});

test("001-25 tool_choice omitted is auto, parallel_tool_calls true", async () => {
  const r = await resp({ input: "hi" });
  assert.equal(r.json.tool_choice, "auto");
  assert.equal(r.json.parallel_tool_calls, true);
});

test("001-26 metadata with 16 pairs is echoed; 17 are rejected", async () => {
  const pairs = (k: number) => Object.fromEntries(Array.from({ length: k }, (_, i) => [`k${i}`, `v${i}`]));
  const r = await resp({ input: "hi", metadata: pairs(16) });
  assert.deepEqual(r.json.metadata, pairs(16));
  refused(await resp({ input: "hi", metadata: pairs(17) }), "metadata");
});

test("001-27 top_logprobs takes 0 to 20 (the output text then carries logprobs); 21 is rejected", async () => {
  // Greedy, so the answer is 4 tokens long (sampled, it may end sooner, or at once with no output item).
  const r = await resp({ input: "hi", top_logprobs: 3, temperature: 0 });
  const part = r.json.output[0].content[0];
  assert.equal(part.logprobs.length, 4);
  assert.equal(part.logprobs[0].top_logprobs.length, 3);
  assert.equal((await resp({ input: "hi", top_logprobs: 0 })).status, 200);
  refused(await resp({ input: "hi", top_logprobs: 21 }), "top_logprobs");
});

test("001-28 prompt_cache_retention: 24h is accepted; another value is rejected", async () => {
  assert.equal((await resp({ input: "hi", prompt_cache_retention: "24h" })).status, 200);
  refused(await resp({ input: "hi", prompt_cache_retention: "1h" }), "prompt_cache_retention");
});

test("001-29 user (deprecated), safety_identifier and prompt_cache_key are accepted", async () => {
  const r = await resp({ input: "hi", user: "u1", safety_identifier: "s1", prompt_cache_key: "k1" });
  assert.equal(r.status, 200, r.text);
  // prompt's documented default, null, is no template; a template itself is refused by name.
  assert.equal((await resp({ input: "hi", prompt: null })).status, 200);
  refused(await resp({ input: "hi", prompt: { id: "pmpt_1" } }), "prompt");
});

test("001-30 reasoning.effort takes low, medium and high; omitted, the effective effort is medium", async () => {
  for (const effort of ["low", "medium", "high"]) {
    const r = await resp({ model: "think", input: "why?", reasoning: { effort } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.reasoning.effort, effort);
  }
  assert.equal((await resp({ model: "think", input: "why?" })).json.reasoning.effort, "medium");
  refused(await resp({ input: "hi", reasoning: { effort: "minimal" } }), "reasoning.effort");
});

test("001-31 reasoning.encrypted_content from an earlier response is accepted later; an altered one is refused", async () => {
  // Greedy: sampled, the model may end its turn at the first token, leaving no reasoning item.
  const first = await dbx(s, "POST", "/serving-endpoints/responses", { ...THINK, input: "why?", max_output_tokens: 12, temperature: 0, include: ["reasoning.encrypted_content"] });
  assert.equal(first.status, 200, first.text);
  const sealed = first.json.output.find((o: any) => o.type === "reasoning").encrypted_content;
  assert.equal(typeof sealed, "string");
  const next = await resp({ model: "think", input: "and then?", reasoning: { effort: "low", encrypted_content: sealed } });
  assert.equal(next.status, 200, next.text);
  refused(await resp({ model: "think", input: "x", reasoning: { encrypted_content: `${sealed.slice(0, -4)}AAAA` } }), "encrypted_content");
});

test("001-32 code_interpreter and web_search tools are not supported", async () => {
  for (const type of ["code_interpreter", "web_search"]) refused(await resp({ input: "hi", tools: [{ type }] }), "tools[0].type");
});

test("001-33 function and custom tools are accepted; mcp, image_generation and shell are hosted tools this server cannot run", async () => {
  const ok = await resp({ input: "hi", tools: [fn("f"), { type: "custom", name: "c", description: "free text" }], tool_choice: "none" });
  assert.equal(ok.status, 200, ok.text);
  for (const type of ["mcp", "image_generation", "shell"]) refused(await resp({ input: "hi", tools: [{ type }] }), "hosted");
});

test("001-34 a function tool without its nested function object is rejected", async () => {
  refused(await resp({ input: "hi", tools: [{ type: "function", name: "f", description: "flat" }] }), "tools[0]");
});

test("001-35 a custom tool without name or description is rejected", async () => {
  refused(await resp({ input: "hi", tools: [{ type: "custom", description: "d" }] }), "name");
  refused(await resp({ input: "hi", tools: [{ type: "custom", name: "c" }] }), "description");
});

const forceCustom = (tool: Record<string, unknown>, seed = 1) =>
  resp({ ...THINK, input: "go", tools: [tool], tool_choice: { type: "custom", name: tool.name }, max_output_tokens: 640, temperature: 1, top_p: 0.9, metadata: { seed: String(seed) } });

test("001-36 a custom tool with format omitted takes free text, as {type: text}", async () => {
  const r = await forceCustom({ type: "custom", name: "note", description: "write a note" });
  assert.equal(r.status, 200, r.text);
  const call = r.json.output.find((o: any) => o.type === "custom_tool_call");
  assert.equal(typeof call.input, "string");
  assert.deepEqual(r.json.tools[0].format, undefined, "the request's own tool is echoed");
});

test("001-37 a grammar format needs definition and syntax, and syntax lark", async () => {
  const tool = (format: unknown) => ({ input: "hi", tools: [{ type: "custom", name: "g", description: "d", format }] });
  refused(await resp(tool({ type: "grammar", syntax: "lark" })), "definition");
  refused(await resp(tool({ type: "grammar", definition: "start: \"a\"" })), "syntax");
  refused(await resp(tool({ type: "grammar", syntax: "regex", definition: "a+" })), "lark");
});

test("001-38 custom tools and grammars run on every served model: the server holds the output to the grammar itself", async () => {
  const r = await forceCustom({ type: "custom", name: "yesno", description: "answer", format: { type: "grammar", syntax: "lark", definition: 'start: "yes" | "no"' } });
  assert.equal(r.status, 200, r.text);
  const call = r.json.output.find((o: any) => o.type === "custom_tool_call");
  assert.ok(["yes", "no"].includes(call.input), call.input);
});

test("001-39 a FunctionObject without name, or without description, is rejected", async () => {
  refused(await resp({ input: "hi", tools: [{ type: "function", function: { description: "d" } }] }), "name");
  refused(await resp({ input: "hi", tools: [{ type: "function", function: { name: "f" } }] }), "description");
});

const props = (k: number) => ({ type: "object", properties: Object.fromEntries(Array.from({ length: k }, (_, i) => [`p${i}`, { type: "string" }])) });

test("001-40 parameters.properties with 16 keys is rejected; 15 is accepted", async () => {
  assert.equal((await resp({ input: "hi", tools: [fn("f", { parameters: props(15) })], tool_choice: "none" })).status, 200);
  refused(await resp({ input: "hi", tools: [fn("f", { parameters: props(16) })] }), "15");
});

const forceFn = (tool: Record<string, unknown>) =>
  resp({ ...THINK, input: "go", tools: [tool], tool_choice: { type: "function", function: { name: (tool.function as any).name } }, max_output_tokens: 640 });

test("001-41 a function without parameters is a function of no arguments", async () => {
  const r = await forceFn(fn("ping"));
  const call = r.json.output.find((o: any) => o.type === "function_call");
  assert.deepEqual(JSON.parse(call.arguments), {});
});

test("001-42 with strict: true the call's arguments follow the parameters schema", async () => {
  const parameters = { type: "object", properties: { unit: { enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false };
  const r = await forceFn(fn("temp", { parameters, strict: true }));
  const args = JSON.parse(r.json.output.find((o: any) => o.type === "function_call").arguments);
  assert.deepEqual(Object.keys(args), ["unit"]);
  assert.ok(["c", "f"].includes(args.unit));
});

test("001-43 tool_choice {type: function, function: {name}} forces that function, which must be among the tools", async () => {
  const r = await forceFn(fn("lookup"));
  assert.equal(r.json.output.find((o: any) => o.type === "function_call").name, "lookup");
  assert.deepEqual(r.json.tool_choice, { type: "function", function: { name: "lookup" } });
  refused(await resp({ input: "hi", tools: [fn("a")], tool_choice: { type: "function", function: { name: "b" } } }), "tool_choice");
});

test("001-44 tool_choice {type: custom, name} forces that custom tool", async () => {
  const r = await forceCustom({ type: "custom", name: "draft", description: "draft text" });
  assert.equal(r.json.output.filter((o: any) => o.type === "custom_tool_call")[0].name, "draft");
});

test("001-45 a custom tool call is an output item {type, id, call_id, name, input: plain text, status}", async () => {
  const r = await forceCustom({ type: "custom", name: "code", description: "code", format: { type: "grammar", syntax: "lark", definition: 'start: "print(1)"' } });
  const call = r.json.output.find((o: any) => o.type === "custom_tool_call");
  assert.equal(call.input, "print(1)");
  assert.equal(typeof call.id, "string");
  assert.equal(typeof call.call_id, "string");
  assert.ok(["completed", "in_progress"].includes(call.status));
  // Cut by the token budget mid-input: its status is left out (the dialect knows only completed and
  // in_progress), in the JSON answer and in every streamed item alike.
  const cut = { input: "go", tools: [{ type: "custom", name: "code_exec", description: "x" }], tool_choice: { type: "custom", name: "code_exec" }, max_output_tokens: 16, temperature: 0 };
  const whole = await resp(cut);
  assert.equal(whole.status, 200, whole.text);
  const cutCall = whole.json.output.find((o: any) => o.type === "custom_tool_call");
  assert.equal(whole.json.status, "incomplete", whole.text);
  assert.ok(cutCall && !("status" in cutCall), whole.text);
  const streamed = await resp({ ...cut, stream: true });
  assert.equal(streamed.status, 200, streamed.text);
  const items = [...streamed.text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1])).flatMap((e) => [e.item, ...(e.response?.output ?? [])]);
  const calls = items.filter((i) => i?.type === "custom_tool_call");
  assert.ok(calls.length > 0, streamed.text);
  for (const c of calls) assert.ok(c.status === undefined || ["completed", "in_progress"].includes(c.status), JSON.stringify(c));
});

test("001-46 a custom_tool_call_output input item is accepted", async () => {
  const r = await resp({
    input: [
      { role: "user", content: "run" },
      { type: "custom_tool_call", id: "ctc_1", call_id: "c1", name: "code", input: "print(1)" },
      { type: "custom_tool_call_output", call_id: "c1", output: "1" },
    ],
    tools: [{ type: "custom", name: "code", description: "code" }],
  });
  assert.equal(r.status, 200, r.text);
});

test("001-47 a function_call input item takes arguments as an object or a string; id is required", async () => {
  const items = (call: Record<string, unknown>) => [
    { role: "user", content: "weather?" },
    { type: "function_call", call_id: "c1", name: "w", ...call },
    { type: "function_call_output", call_id: "c1", output: "sunny" },
  ];
  for (const args of [{ city: "Paris" }, '{"city":"Paris"}']) {
    const r = await resp({ input: items({ id: "fc_1", arguments: args }), tools: [fn("w")] });
    assert.equal(r.status, 200, r.text);
  }
  refused(await resp({ input: items({ arguments: "{}" }), tools: [fn("w")] }), "id");
});

test("001-48 a function_call_output takes output as a string or a JSON object", async () => {
  for (const output of ["sunny", { sky: "clear" }]) {
    const r = await resp({
      input: [{ role: "user", content: "w?" }, { type: "function_call", id: "fc_1", call_id: "c1", name: "w", arguments: "{}" }, { type: "function_call_output", call_id: "c1", output }],
      tools: [fn("w")],
    });
    assert.equal(r.status, 200, r.text);
  }
});

test("001-49 input_image without image_url is rejected; with one, the served text model refuses images", async () => {
  const image = (block: Record<string, unknown>) => resp({ input: [{ role: "user", content: [{ type: "input_image", ...block }] }] });
  refused(await image({}), "image_url");
  for (const url of ["https://example.com/a.png", "data:image/png;base64,iVBORw0KGgo="]) refused(await image({ image_url: url }), "text only");
});

test("001-50 input_file with file_data needs a model that reads files: the served text model refuses it by name", async () => {
  refused(await resp({ input: [{ role: "user", content: [{ type: "input_file", filename: "a.pdf", file_data: "data:application/pdf;base64,JVBERi0=" }] }] }), "input[0].content[0]");
});

test("001-51 text.format json_schema needs its nested json_schema; the output validates against the schema", async () => {
  refused(await resp({ input: "hi", text: { format: { type: "json_schema" } } }), "json_schema");
  const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const r = await resp({ input: "hi", max_output_tokens: 30, text: { format: { type: "json_schema", json_schema: { name: "r", schema } } } });
  assert.equal(r.status, 200, r.text);
  assert.equal(typeof JSON.parse(r.json.output[0].content[0].text).ok, "boolean");
  // A schema that cannot be enforced is named where this request put it, not where OpenAI's would.
  const bad = await resp({ input: "hi", text: { format: { type: "json_schema", json_schema: { name: "r", schema: { type: "bogus" } } } } });
  refused(bad, "text.format.json_schema.schema");
  const badTool = await resp({ input: "hi", tools: [fn("f", { parameters: { type: "bogus" } })] });
  refused(badTool, "tools[0].function.parameters");
});

test("001-52 a response has id, object, created_at, status, model, output and usage", async () => {
  const r = await resp({ input: "hi" });
  assert.equal(typeof r.json.id, "string");
  assert.equal(r.json.object, "response");
  assert.ok(Math.abs(r.json.created_at - Date.now() / 1000) < 60);
  assert.equal(r.json.model, "tiny");
  assert.ok(Array.isArray(r.json.output));
  // The seed's shape, and the same counts under the Responses API's names for OpenAI clients.
  assert.deepEqual(Object.keys(r.json.usage).sort(), ["completion_tokens", "input_tokens", "output_tokens", "prompt_tokens", "total_tokens"]);
});

test("001-53 status is one of the documented values", async () => {
  const statuses = ["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"];
  assert.ok(statuses.includes((await resp({ input: "hi" })).json.status));
  assert.ok(statuses.includes((await resp({ input: "hi", max_output_tokens: null, temperature: 0 })).json.status));
});

test("001-54 the response echoes instructions, max_output_tokens, temperature, top_p, tools, tool_choice, parallel_tool_calls, metadata", async () => {
  const tools = [fn("f", { parameters: props(1) })];
  const r = await resp({ input: "hi", instructions: "be brief", max_output_tokens: 5, temperature: 0.5, top_p: 0.9, tools, tool_choice: "none", parallel_tool_calls: false, metadata: { a: "b" } });
  const j = r.json;
  assert.deepEqual([j.instructions, j.max_output_tokens, j.temperature, j.top_p, j.tool_choice, j.parallel_tool_calls], ["be brief", 5, 0.5, 0.9, "none", false]);
  assert.deepEqual(j.tools, tools);
  assert.deepEqual(j.metadata, { a: "b" });
});

test("001-55 output message items: type message, id, role assistant, output_text blocks", async () => {
  // Greedy: sampled, the model may end its turn at once, and an empty answer has no output item.
  const item = (await resp({ input: "hi", temperature: 0 })).json.output[0];
  assert.equal(item.type, "message");
  assert.equal(typeof item.id, "string");
  assert.equal(item.role, "assistant");
  assert.equal(item.content[0].type, "output_text");
  assert.equal(typeof item.content[0].text, "string");
});

test("001-57 an incomplete response has status incomplete and incomplete_details.reason", async () => {
  // Greedy, so it runs out of tokens (sampled, it may end by itself first: completed).
  const r = await resp({ input: "hi", max_output_tokens: 2, temperature: 0 });
  assert.equal(r.json.status, "incomplete");
  assert.equal(r.json.incomplete_details.reason, "max_output_tokens");
});

test("001-58 the response's store is a boolean, always false", async () => {
  assert.equal((await resp({ input: "hi" })).json.store, false);
});

test("001-52 the openai client with base_url <host>/serving-endpoints: responses, plain and streamed", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  // Greedy: sampled, the model may end its turn at once, with no text.
  const r = await client.responses.create({ model: "pt", input: "hello", max_output_tokens: 4, temperature: 0 });
  assert.equal(r.model, "tiny-pt");
  assert.ok(r.output_text.length > 0);
  const stream = await client.responses.create({ model: "tiny", input: "hello", max_output_tokens: 4, temperature: 0, stream: true });
  let text = "";
  for await (const ev of stream) if (ev.type === "response.output_text.delta") text += ev.delta;
  assert.ok(text.length > 0);
});

// Embeddings.

const embed = (body: Record<string, unknown>) => invoke("bert", body);

test("an endpoint mixing a chat model and an embedding model that are both loaded is refused at once, not failed later", async () => {
  const mixed = await dbx(s, "POST", "/api/2.0/serving-endpoints", {
    name: "mixed",
    config: {
      served_entities: [
        { name: "c", entity_name: "tiny" },
        { name: "e", entity_name: "bert" },
      ],
      traffic_config: { routes: [{ served_model_name: "c", traffic_percentage: 50 }, { served_model_name: "e", traffic_percentage: 50 }] },
    },
  });
  refused(mixed, "same API format");
  assert.equal((await dbx(s, "GET", "/api/2.0/serving-endpoints/mixed")).status, 404);
});

test("001-05 embeddings usage has no completion_tokens", async () => {
  const r = await embed({ input: "hello" });
  assert.deepEqual(Object.keys(r.json.usage).sort(), ["prompt_tokens", "total_tokens"]);
});

test("001-96 an embeddings request without input is rejected; a string and a list are accepted", async () => {
  refused(await dbx(s, "POST", "/serving-endpoints/embeddings", { model: "bert" }), "input");
  assert.equal((await embed({ input: "one" })).json.data.length, 1);
  assert.equal((await embed({ input: ["one", "two"] })).json.data.length, 2);
});

test("001-97 dimensions 32 and 64 (within the model's 64) give vectors of exactly that length", async () => {
  for (const d of [32, 64]) assert.equal((await embed({ input: "hello", dimensions: d })).json.data[0].embedding.length, d);
});

test("001-98 dimensions 48, 16 or 2048 are rejected", async () => {
  for (const d of [48, 16, 2048]) refused(await embed({ input: "hello", dimensions: d }), "dimensions");
});

test("001-99 dimensions larger than the served model's vectors are refused (the model cannot make them)", async () => {
  refused(await embed({ input: "hello", dimensions: 128 }), "dimensions");
});

test("001-100 instruction is passed to the model, in the instruction format", async () => {
  const plain = (await embed({ input: "paris" })).json.data[0].embedding;
  const instructed = (await embed({ input: "paris", instruction: "find capitals" })).json.data[0].embedding;
  const spelled = (await embed({ input: "Instruct: find capitals\nQuery:paris" })).json.data[0].embedding;
  assert.notDeepEqual(instructed, plain);
  assert.deepEqual(instructed, spelled);
});

test("001-101 an embeddings response: id, object list, model, data of {object embedding, index, embedding}, usage", async () => {
  const r = await embed({ input: "hello" });
  assert.equal(typeof r.json.id, "string");
  assert.equal(r.json.object, "list");
  assert.equal(r.json.model, "bert");
  assert.equal(r.json.data[0].object, "embedding");
  assert.equal(r.json.data[0].index, 0);
  assert.ok(r.json.data[0].embedding.every((x: unknown) => typeof x === "number"));
});

test("001-102 k inputs give k entries indexed 0..k-1", async () => {
  const r = await embed({ input: ["a", "b", "c", "d"] });
  assert.deepEqual(r.json.data.map((d: any) => d.index), [0, 1, 2, 3]);
});

test("001-103 an endpoint returns vectors of its model's fixed size (64 for the fixture; BGE-Large would give 1024)", async () => {
  const r = await embed({ input: ["short", "a somewhat longer sentence"] });
  assert.deepEqual(r.json.data.map((d: any) => d.embedding.length), [64, 64]);
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  const e = await client.embeddings.create({ model: "bert", input: "hello", encoding_format: "float" } as any);
  assert.equal(e.data[0].embedding.length, 64);
});

// Completions.

const complete = (name: string, body: Record<string, unknown>) => invoke(name, body);
const LONG = "word ".repeat(1400);

test("001-104 a completions request without prompt is rejected; a string and a batch are accepted", async () => {
  refused(await dbx(s, "POST", "/serving-endpoints/completions", { model: "tiny" }), "prompt");
  assert.equal((await complete("tiny", { prompt: "a", max_tokens: 2 })).json.choices.length, 1);
  assert.equal((await complete("tiny", { prompt: ["a", "b"], max_tokens: 2 })).json.choices.length, 2);
});

test("001-105 completions stream pinned: omitted is JSON, true is an event stream", async () => {
  assert.ok((await complete("tiny", { prompt: "a", max_tokens: 2 })).headers.get("content-type")?.startsWith("application/json"));
  const r = await complete("tiny", { prompt: "a", max_tokens: 2, stream: true });
  assert.ok(r.headers.get("content-type")?.startsWith("text/event-stream"));
  assert.ok(r.text.trim().endsWith("data: [DONE]"));
});

test("001-106 error_behavior defaults to error: a context-length overflow is refused", async () => {
  const r = await complete("tiny", { prompt: LONG, max_tokens: 3 });
  assert.equal(r.status, 400, r.text);
  assert.ok(r.json.message.includes("context"), r.text);
});

test("001-107 error_behavior truncate on a pay-per-token endpoint returns what fits instead of an error", async () => {
  const r = await complete("tiny", { prompt: LONG, max_tokens: 3, error_behavior: "truncate" });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.usage.prompt_tokens <= 1024, JSON.stringify(r.json.usage));
  // Only what overflows goes: the prompt keeps (nearly) all the room the answer's budget leaves.
  // (A quarter at a time, a prompt a few tokens over lost hundreds.)
  assert.ok(r.json.usage.prompt_tokens >= 1024 - 3 - 8, JSON.stringify(r.json.usage));
  const barely = await complete("tiny", { prompt: "word ".repeat(1024 - 3 - 1 - 2) + "word word word word", max_tokens: 3, error_behavior: "truncate" });
  assert.equal(barely.status, 200, barely.text);
  assert.ok(barely.json.usage.prompt_tokens >= 1024 - 3 - 8, JSON.stringify(barely.json.usage));
  const budget = await complete("tiny", { prompt: "a", max_tokens: 100_000, error_behavior: "truncate", stop: ["e", "a", "o", " "] });
  assert.equal(budget.status, 200, budget.text);
});

test("001-108 error_behavior on a provisioned-throughput endpoint is rejected", async () => {
  refused(await complete("pt", { prompt: "a", error_behavior: "truncate" }), "error_behavior");
});

test("001-109 error_behavior other than truncate or error is rejected", async () => {
  refused(await complete("tiny", { prompt: "a", error_behavior: "ignore" }), "error_behavior");
});

test("001-110 n: 2 with 3 prompts on a provisioned endpoint returns 6 choices, each indexed by its prompt", async () => {
  const r = await complete("pt", { prompt: ["a", "b", "c"], n: 2, max_tokens: 2 });
  assert.deepEqual(r.json.choices.map((c: any) => c.index), [0, 0, 1, 1, 2, 2]);
});

test("a completions stream with n > 1 indexes each chunk by its choice, so the choices can be told apart", async () => {
  const json = await complete("pt", { prompt: ["a", "b"], n: 2, max_tokens: 3, temperature: 0, suffix: "!" });
  const r = await complete("pt", { prompt: ["a", "b"], n: 2, max_tokens: 3, temperature: 0, suffix: "!", stream: true });
  const texts = new Map<number, string>();
  const ends = new Map<number, string>();
  for (const chunk of sseData(r.text) as any[]) {
    if (chunk === "[DONE]") continue;
    for (const c of chunk.choices) {
      assert.ok(!ends.has(c.index), `text for choice ${c.index} after its end`);
      texts.set(c.index, (texts.get(c.index) ?? "") + c.text);
      if (c.finish_reason) ends.set(c.index, c.finish_reason);
    }
  }
  assert.deepEqual([...ends.keys()].sort(), [0, 1, 2, 3]);
  // Choice k answers prompt floor(k / n): the same texts as the JSON answer, in its order.
  assert.deepEqual([0, 1, 2, 3].map((k) => texts.get(k)), json.json.choices.map((c: any) => c.text));
});

test("001-111 suffix is appended to each completion", async () => {
  const r = await complete("tiny", { prompt: ["a", "b"], suffix: "END", max_tokens: 3 });
  for (const c of r.json.choices) assert.ok(c.text.endsWith("END"), c.text);
});

test("001-112 suffix omitted appends nothing", async () => {
  const base = { prompt: "once upon", max_tokens: 5, top_k: 1 };
  const plain = (await complete("tiny", base)).json.choices[0].text;
  const suffixed = (await complete("tiny", { ...base, suffix: "END" })).json.choices[0].text;
  assert.equal(suffixed, `${plain}END`);
});

test("001-113 echo: true returns the prompt followed by the completion; echo defaults to false", async () => {
  const base = { prompt: "once upon", max_tokens: 5, top_k: 1 };
  const plain = (await complete("tiny", base)).json.choices[0].text;
  const echoed = (await complete("tiny", { ...base, echo: true })).json.choices[0].text;
  assert.equal(echoed, `once upon${plain}`);
  assert.ok(!plain.startsWith("once upon"));
});

test("001-114 use_raw_prompt defaults to true on PT and false on PPT; true passes the prompt without the template", async () => {
  const tokens = (await dbx(s, "POST", "/tokenize", { model: "tiny", prompt: "once upon a time" })).json.tokens.length;
  const count = async (name: string, extra: Record<string, unknown> = {}) =>
    (await complete(name, { prompt: "once upon a time", max_tokens: 1, ...extra })).json.usage.prompt_tokens;
  assert.equal(await count("tiny", { use_raw_prompt: true }), tokens);
  assert.ok((await count("tiny")) > tokens, "pay-per-token wraps the prompt in the chat template");
  assert.equal(await count("pt"), tokens);
  assert.ok((await count("pt", { use_raw_prompt: false })) > tokens);
});

test("001-115 a completions response has id, object text_completion, created, choices with index, text and finish_reason, and usage", async () => {
  for (const name of ["tiny", "pt"]) {
    const r = await complete(name, { prompt: ["once upon", "a time"], max_tokens: 3 });
    assert.equal(r.status, 200, r.text);
    const body = r.json;
    assert.equal(typeof body.id, "string");
    assert.ok(body.id.length > 0);
    assert.equal(body.object, "text_completion");
    assert.ok(Number.isInteger(body.created) && Math.abs(body.created - Date.now() / 1000) < 60, String(body.created));
    assert.deepEqual(body.choices.map((c: any) => c.index), [0, 1]);
    for (const c of body.choices) {
      assert.equal(typeof c.text, "string");
      assert.ok(["stop", "length"].includes(c.finish_reason), c.finish_reason);
    }
    const u = body.usage;
    assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0, JSON.stringify(u));
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  }
});
