import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { byteTokenId, EXTRA_TOKENS, ensureFixtureModel, type FixtureSpec, TINY_SPEC } from "../fixtures/models.ts";
import { QWEN3_CODER_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { streamedCalls, toolCallChecker } from "../helpers/tool-calls.ts";

// Tool calling for templates that write a call's arguments as XML parameters, one block per
// argument, a string raw and anything else as JSON: Qwen3-Coder's
// `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`.
// The fixture is the tiny model with Qwen3-Coder's real template and <tool_call> as one token (as
// in Qwen's vocabulary). The expected prompts are llama-server's (--jinja, /apply-template)
// renderings of the same conversations on the same file.

const QWEN_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-qwen3-coder", seed: 3141, chatTemplate: QWEN3_CODER_TEMPLATE, extraTokens: true };

let server: TestServer;
before(async () => {
  server = await startTestServer({ model: [`qwen=${await ensureFixtureModel(QWEN_SPEC)}`] });
});
after(async () => {
  await server?.close();
});

const weather = {
  type: "object",
  properties: {
    city: { type: "string", description: "City name", maxLength: 12 },
    days: { type: "integer", minimum: 1, maximum: 7 },
    unit: { enum: ["celsius", "fahrenheit"] },
    hours: { type: "array", items: { type: "integer", minimum: 0, maximum: 23 }, maxItems: 3 },
  },
  required: ["city", "days"],
  additionalProperties: false,
};
const clock = { type: "object", properties: { zone: { type: "string", pattern: "^[A-Z][a-z]{2,8}$" } }, required: ["zone"], additionalProperties: false };
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: weather } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a zone", parameters: clock } },
];

const MARKUP = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"];

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, MARKUP);

const ask = (extra: Partial<ChatBody> = {}): ChatBody => ({
  model: "qwen",
  messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is the weather in Paris?" }],
  tools: TOOLS,
  max_tokens: 160,
  ...extra,
});

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

test("qwen3-coder: a forced call (required, named) is written parameter by parameter and read back as JSON arguments valid for the schema, streamed the same", async () => {
  const seen = new Set<string>();
  for (let seed = 1; seed <= 6; seed++) {
    const choice = seed <= 3 ? "required" : { type: "function" as const, function: { name: "get_weather" } };
    const r = await server.http.chat(ask({ tool_choice: choice, parallel_tool_calls: false, temperature: 1, seed }));
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.content, null);
    checkCalls(c.message.tool_calls, c.message.content);
    for (const call of c.message.tool_calls!) for (const k of Object.keys(JSON.parse(call.function.arguments))) seen.add(k);
  }
  // Optional parameters come and go; across seeds each kind of value was written at least once.
  for (const k of ["city", "days"]) assert.ok(seen.has(k), `never saw ${k}: ${[...seen]}`);
  const named = ask({ tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
  const whole = (await server.http.chat(named)).choices[0];
  assert.equal(whole.finish_reason, "tool_calls");
  assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
  checkCalls(whole.message.tool_calls, whole.message.content);
  // The call opens as the template writes calls: the prompt, then `<tool_call>\n<function=`.
  const forced = await server.http.tokenize({ model: "qwen", messages: named.messages, tools: named.tools, tool_choice: named.tool_choice });
  const free = await server.http.tokenize({ model: "qwen", messages: named.messages, tools: named.tools });
  const opening = await server.http.tokenize({ model: "qwen", prompt: "<tool_call>\n<function=", add_special_tokens: false });
  assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
  const stream = await streamed(named);
  assert.equal(stream.content, "");
  assert.equal(stream.finish, "tool_calls");
  assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
  assert.ok(stream.deltas > 1, `arguments came in ${stream.deltas} delta(s)`);
});

test("qwen3-coder: strings are written raw and streamed as they come, numbers and arrays as JSON", async () => {
  // A long free string, streamed: several argument deltas, no tag in them, and JSON at the end.
  const tools = [{ type: "function" as const, function: { name: "note", parameters: { type: "object", properties: { text: { type: "string" }, tags: { type: "array", items: { type: "integer" }, maxItems: 2 } }, required: ["text", "tags"] } } }];
  const body = ask({ tools, tool_choice: "required", temperature: 1, seed: 4, max_tokens: 60, logit_bias: { [EXTRA_TOKENS.toolCallClose]: -100 } });
  const stream = await streamed(body);
  const whole = (await server.http.chat(body)).choices[0];
  // Cut at the token limit inside the string: the arguments read so far, no markup among them.
  assert.equal(whole.finish_reason, "length");
  assert.ok(stream.deltas > 3, `${stream.deltas} deltas`);
  assert.equal(stream.calls[0].arguments, whole.message.tool_calls![0].function.arguments);
  assert.match(stream.calls[0].arguments, /^\{"text": "/);
  for (const m of MARKUP) assert.ok(!stream.calls[0].arguments.includes(m), stream.calls[0].arguments);
  const done = (await server.http.chat({ ...body, tools: [{ type: "function", function: { name: "note", parameters: { ...tools[0].function.parameters, properties: { text: { type: "string", maxLength: 5 }, tags: tools[0].function.parameters.properties.tags } } } }], max_tokens: 100 })).choices[0];
  assert.equal(done.finish_reason, "tool_calls", JSON.stringify(done));
  const args = JSON.parse(done.message.tool_calls![0].function.arguments);
  assert.equal(typeof args.text, "string");
  assert.ok(args.text.length <= 5);
  assert.ok(Array.isArray(args.tags) && args.tags.every((t: unknown) => Number.isInteger(t)), JSON.stringify(args));
});

test("qwen3-coder: in auto mode, the model's writing <tool_call> starts a call held to the schema", async () => {
  const body = ask({ parallel_tool_calls: false, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 }, temperature: 1, seed: 3 });
  const c = (await server.http.chat(body)).choices[0];
  assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
  checkCalls(c.message.tool_calls, c.message.content);
  const stream = await streamed(body);
  assert.equal(stream.finish, "tool_calls");
  for (const m of MARKUP) assert.ok(!stream.content.includes(m), stream.content);
  assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
});

test("qwen3-coder: several calls in one turn are each read and valid", async () => {
  let most = 0;
  for (let seed = 1; seed <= 12 && most < 2; seed++) {
    const c = (await server.http.chat(ask({ tool_choice: "required", temperature: 1, seed, max_tokens: 300, logit_bias: { [byteTokenId(10)]: 15, [EXTRA_TOKENS.toolCallOpen]: 30 } }))).choices[0];
    const calls = c.message.tool_calls!;
    // (Calls are written "\n" apart, a byte token the fixture hardly ever samples unless made likelier.)
    checkCalls(c.finish_reason === "tool_calls" ? calls : calls.slice(0, -1), c.message.content);
    most = Math.max(most, calls.length);
  }
  assert.ok(most >= 2, `no seed produced more than ${most} call`);
});

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };
const ONE_TOOL = [
  {
    type: "function" as const,
    function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, days: { type: "integer" } }, required: ["city"] } },
  },
];
// llama-server's rendering of the tools (its /apply-template on the fixture).
const TOOLS_TEXT =
  "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>\n<function>\n<name>get_weather</name>\n<description>Get the weather for a city</description>\n<parameters>\n<parameter>\n<name>city</name>\n<type>string</type>\n<description>City name</description>\n</parameter>\n<parameter>\n<name>days</name>\n<type>integer</type>\n</parameter>\n<required>[\"city\"]</required>\n</parameters>\n</function>\n</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: the tool calling block MUST begin with an opening <tool_call> tag and end with a closing </tool_call> tag.\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT><|im_end|>\n";

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(messages: ChatMessageBody[], expected: string) {
  const rendered = await server.http.tokenize({ model: "qwen", messages, tools: ONE_TOOL });
  // (The fixture's tokenizer adds BOS, as llama-server adds it when it tokenizes the rendered text.)
  const wanted = await server.http.tokenize({ model: "qwen", prompt: expected });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model: "qwen", messages, tools: ONE_TOOL, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from llama-server's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

test("qwen3-coder: the template writes a call's arguments as parameters (strings raw, the rest as JSON) and its result, as llama-server renders them", async () => {
  const user = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n";
  await assertPrompt([SYSTEM, QUESTION], TOOLS_TEXT + user);
  const args = { city: "Paris\n<b>", days: 3, opts: { a: [1, "x"] } };
  await assertPrompt(
    [
      SYSTEM,
      QUESTION,
      { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: JSON.stringify(args) } }] },
      { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
    ],
    TOOLS_TEXT +
      user +
      '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<b>\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{"a": [1, "x"]}\n</parameter>\n</function>\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n',
  );
});

test("qwen3-coder: a call Plinth returned goes back with its result, written as the model wrote it", async () => {
  const first = (await server.http.chat(ask({ tool_choice: { type: "function", function: { name: "get_weather" } }, seed: 5 }))).choices[0];
  const call = first.message.tool_calls![0];
  const messages: ChatMessageBody[] = [SYSTEM, QUESTION, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: '{"temp": 20}' }];
  const text = (await server.http.tokenize({ model: "qwen", messages, tools: TOOLS, return_token_strs: true })).token_strs!.join("").replaceAll("\u2581", " ").replaceAll("<0x0A>", "\n");
  const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
  const params = Object.entries(args).map(([k, v]) => `<parameter=${k}>\n${typeof v === "string" ? v : JSON.stringify(v).replaceAll(",", ", ")}\n</parameter>\n`);
  assert.ok(text.includes(`<tool_call>\n<function=get_weather>\n${params.join("")}</function>\n</tool_call>`), text);
});

test("qwen3-coder: a raw string's allOf patterns all hold, and a keyword it cannot enforce is refused for a strict tool, naming it", async () => {
  // zod's password rules: the parts were ignored, so any 8 characters passed.
  const secret = { type: "object", properties: { pw: { type: "string", minLength: 8, maxLength: 10, allOf: [{ pattern: "[A-Z]" }, { pattern: "[0-9]" }] } }, required: ["pw"], additionalProperties: false };
  const tools = [{ type: "function" as const, function: { name: "login", parameters: secret } }];
  for (let seed = 1; seed <= 3; seed++) {
    const c = (await server.http.chat(ask({ tools, tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 }))).choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    const { pw } = JSON.parse(c.message.tool_calls![0].function.arguments) as { pw: string };
    assert.ok(pw.length >= 8 && pw.length <= 10 && /[A-Z]/.test(pw) && /[0-9]/.test(pw), JSON.stringify(pw));
  }
  // A keyword beside a $ref was lost with it: the definition alone was compiled.
  const coded = { type: "object", $defs: { Code: { type: "string", pattern: "^[a-z]+$" } }, properties: { code: { $ref: "#/$defs/Code", maxLength: 3 } }, required: ["code"], additionalProperties: false };
  for (let seed = 1; seed <= 3; seed++) {
    const c = (await server.http.chat(ask({ tools: [{ type: "function" as const, function: { name: "lookup", parameters: coded } }], tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 }))).choices[0];
    const { code } = JSON.parse(c.message.tool_calls![0].function.arguments) as { code: string };
    assert.ok(/^[a-z]{1,3}$/.test(code), JSON.stringify(code));
  }
  const strict = { type: "object", properties: { city: { type: "string", not: { const: "Paris" } } }, required: ["city"], additionalProperties: false };
  const r = await server.http.postRaw("/v1/chat/completions", ask({ tools: [{ type: "function", function: { name: "go", strict: true, parameters: strict } }], tool_choice: "required" }));
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.equal(r.error?.param, "tools[0].function.parameters");
  assert.match(r.error?.message ?? "", /properties\.city\.not/);
});
