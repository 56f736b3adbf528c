import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { EXTRA_TOKENS, ensureFixtureModel, type FixtureSpec, TINY_SPEC } from "../fixtures/models.ts";
import { GLM_4_6_TEMPLATE, GLM_4_7_TEMPLATE, MINIMAX_M2_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { logprobParts } from "../helpers/logprob-parts.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { streamedCalls, toolCallChecker } from "../helpers/tool-calls.ts";

// Tool calls with XML-parameter arguments in GLM 4.5–4.7's and MiniMax-M2's layouts (the
// Qwen3-Coder layout is chat-tool-xml-args.test.ts):
//   GLM 4.6: <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n…</tool_call>
//   GLM 4.7: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>
//   MiniMax-M2: <minimax:tool_call>\n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n…</invoke>\n</minimax:tool_call>
// The fixtures are the tiny model with each real template (llama.cpp's models/templates), the
// role markers as control tokens and <tool_call> as one token (as in GLM's vocabulary). The
// expected prompts are llama-server's (--jinja, /apply-template) renderings of the same
// conversations with the same templates. Both GLMs are thinking models whose random weights never
// close the section: generation tests turn thinking off.

const GLM_MARKERS = ["[gMASK]", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"];
const GLM46_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-glm-4.6", seed: 4601, chatTemplate: GLM_4_6_TEMPLATE, extraTokens: true, controlTokens: GLM_MARKERS };
const GLM47_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-glm-4.7", seed: 4701, chatTemplate: GLM_4_7_TEMPLATE, extraTokens: true, controlTokens: GLM_MARKERS };
const MINIMAX_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-minimax-m2", seed: 2201, chatTemplate: MINIMAX_M2_TEMPLATE, extraTokens: true, controlTokens: ["]~!b[", "]~b]", "[e~["] };

let server: TestServer;
before(async () => {
  server = await startTestServer({
    model: [`glm46=${await ensureFixtureModel(GLM46_SPEC)}`, `glm47=${await ensureFixtureModel(GLM47_SPEC)}`, `minimax=${await ensureFixtureModel(MINIMAX_SPEC)}`],
  });
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

const MARKUP = ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "minimax:tool_call>", "<invoke", "</invoke>", "<parameter", "</parameter>"];

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, MARKUP);

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({
  model,
  messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is the weather in Paris?" }],
  tools: TOOLS,
  max_tokens: 160,
  // (The GLMs' thinking switch is turned off; MiniMax-M2's template has none and opens the section
  // itself, so Plinth closes it.)
  reasoning_effort: "none",
  ...extra,
});

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

for (const [model, opening] of [
  ["glm46", "<tool_call>"],
  ["glm47", "<tool_call>"],
  ["minimax", '<minimax:tool_call>\n<invoke name="'],
] as const) {
  test(`${model}: a forced call (required, named) is written parameter by parameter and read back as JSON arguments valid for the schema, streamed the same`, async () => {
    const seen = new Set<string>();
    for (let seed = 1; seed <= 6; seed++) {
      const choice = seed <= 3 ? "required" : { type: "function" as const, function: { name: "get_weather" } };
      const r = await server.http.chat(ask(model, { tool_choice: choice, parallel_tool_calls: false, temperature: 1, seed }));
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      checkCalls(c.message.tool_calls, c.message.content);
      for (const call of c.message.tool_calls!) for (const k of Object.keys(JSON.parse(call.function.arguments))) seen.add(k);
    }
    for (const k of ["city", "days"]) assert.ok(seen.has(k), `never saw ${k}: ${[...seen]}`);
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const whole = (await server.http.chat(named)).choices[0];
    assert.equal(whole.finish_reason, "tool_calls");
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls, whole.message.content);
    // The call opens as the template writes calls: the prompt, then the layout's opening.
    const thinking = { chat_template_kwargs: { enable_thinking: false } };
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...thinking });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, ...thinking });
    const open = await server.http.tokenize({ model, prompt: opening, add_special_tokens: false });
    assert.deepEqual(forced.tokens.slice(-open.tokens.length), open.tokens);
    assert.deepEqual(forced.tokens.slice(0, free.tokens.length), free.tokens);
    const stream = await streamed(named);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
    assert.ok(stream.deltas > 1, `arguments came in ${stream.deltas} delta(s)`);
  });

  test(`${model}: a long raw string streams as it comes, cut at the token limit with no tag in the arguments`, async () => {
    const tools = [{ type: "function" as const, function: { name: "note", parameters: { type: "object", properties: { text: { type: "string" }, tags: { type: "array", items: { type: "integer" }, maxItems: 2 } }, required: ["text", "tags"] } } }];
    const body = ask(model, { tools, tool_choice: "required", temperature: 1, seed: 4, max_tokens: 60 });
    const stream = await streamed(body);
    const whole = (await server.http.chat(body)).choices[0];
    assert.equal(whole.finish_reason, "length");
    assert.ok(stream.deltas > 3, `${stream.deltas} deltas`);
    // (Both cut inside the string; the last sampled token may differ between the two runs.)
    for (const args of [stream.calls[0].arguments, whole.message.tool_calls![0].function.arguments]) {
      assert.match(args, /^\{"text": "/);
      for (const m of ["</arg_value>", "</parameter>", "</invoke>"]) assert.ok(!args.includes(m), args);
    }
  });
}

for (const model of ["glm46", "glm47"] as const) {
  test(`${model}: in auto mode, the model's writing <tool_call> starts a call held to the schema`, async () => {
    const body = ask(model, { parallel_tool_calls: false, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 }, temperature: 1, seed: 3 });
    const c = (await server.http.chat(body)).choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    checkCalls(c.message.tool_calls, c.message.content);
    const stream = await streamed(body);
    assert.equal(stream.finish, "tool_calls");
    for (const m of MARKUP) assert.ok(!stream.content.includes(m), stream.content);
    assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
  });
}

test("several calls in one turn (GLM's a newline apart, MiniMax-M2's in one section) are each read and valid", async () => {
  for (const model of ["glm46", "glm47", "minimax"]) {
    // What comes between calls is made likelier: the fixture hardly ever samples it otherwise.
    const between = await server.http.tokenize({ model, prompt: model === "minimax" ? '<invoke name="' : "\n<tool_call>", add_special_tokens: false });
    const bias = Object.fromEntries(between.tokens.map((t) => [t, t === EXTRA_TOKENS.toolCallOpen ? 30 : 15]));
    let most = 0;
    for (let seed = 1; seed <= 12 && most < 2; seed++) {
      const c = (await server.http.chat(ask(model, { tool_choice: "required", temperature: 1, seed, max_tokens: 300, logit_bias: bias }))).choices[0];
      const calls = c.message.tool_calls!;
      checkCalls(c.finish_reason === "tool_calls" ? calls : calls.slice(0, -1), c.message.content);
      most = Math.max(most, calls.length);
    }
    assert.ok(most >= 2, `${model}: no seed produced more than ${most} call`);
  }
});

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };
const ONE_TOOL = [
  {
    type: "function" as const,
    function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, days: { type: "integer" } }, required: ["city"] } },
  },
];
const ARGS = { city: "Paris\n<b>", days: 3, opts: { a: [1, "x"] } };
const ANSWERED: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_abc123", type: "function", function: { name: "get_weather", arguments: JSON.stringify(ARGS) } },
      { id: "call_2", type: "function", function: { name: "now", arguments: "{}" } },
    ],
  },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
  { role: "tool", tool_call_id: "call_2", content: "noon" },
];
const TOOLS_JSON = '{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}}';

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string, extra: object = {}) {
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...extra });
  const wanted = await server.http.tokenize({ model, prompt: expected });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, return_token_strs: true, ...extra })).token_strs!.join("");
    assert.fail(`prompt differs from llama-server's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

test("glm46: tools, a call's arguments as <arg_key>/<arg_value> pairs (strings raw, the rest as JSON) and the results render as llama-server renders them", async () => {
  const tools =
    "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
    TOOLS_JSON +
    "\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call><|system|>\nYou are a helpful assistant.<|user|>\nWhat is the weather in Paris?";
  const calls =
    "<|assistant|>\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris\n<b></arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"a\": [1, \"x\"]}</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>" +
    '<|observation|>\n<tool_response>\n{"temp": 20}\n</tool_response>\n<tool_response>\nnoon\n</tool_response>';
  // The open turn is "<|assistant|>": the model opens "\n<think>" itself (GLM 4.6's template writes
  // "\n<think>" into every assistant turn, which node-llama-cpp reads as a section opened on the
  // response's start, and its own open turn had opened it).
  await assertPrompt("glm46", [SYSTEM, QUESTION], tools + "<|assistant|>");
  await assertPrompt("glm46", ANSWERED, tools + calls + "<|assistant|>");
  await assertPrompt("glm46", ANSWERED, tools + calls + "<|assistant|>", { chat_template_kwargs: { enable_thinking: true } });
});

test("glm46: thinking off renders as llama-server renders it: '/nothink' after each user message, the open turn closing an empty section", async () => {
  const head = "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nWhat is the weather in Paris?/nothink";
  const off = { chat_template_kwargs: { enable_thinking: false } };
  const rendered = await server.http.tokenize({ model: "glm46", messages: [SYSTEM, QUESTION], ...off });
  const wanted = await server.http.tokenize({ model: "glm46", prompt: head + "<|assistant|>\n<think></think>" });
  assert.deepEqual(rendered.tokens, wanted.tokens);
  // After tool results (no user message ends the prompt), the same open turn.
  const calls =
    "<|assistant|>\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris\n<b></arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"a\": [1, \"x\"]}</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>" +
    '<|observation|>\n<tool_response>\n{"temp": 20}\n</tool_response>\n<tool_response>\nnoon\n</tool_response>';
  const answered = await server.http.tokenize({ model: "glm46", messages: ANSWERED, ...off });
  const answeredWanted = await server.http.tokenize({ model: "glm46", prompt: head + calls + "<|assistant|>\n<think></think>" });
  assert.deepEqual(answered.tokens, answeredWanted.tokens);
});

test("glm46: the model's own <think> opens the reasoning (thinking on); with thinking off what it writes is the answer", async () => {
  // The model writes <think> at every step: the first opens the section, the rest are reasoning.
  const body = { model: "glm46", messages: [SYSTEM, QUESTION], max_tokens: 6, temperature: 0, logit_bias: { [EXTRA_TOKENS.thinkOpen]: 100, [EXTRA_TOKENS.thinkClose]: -100 } };
  for (const on of [{}, { reasoning_effort: "high" as const }]) {
    const m = (await server.http.chat({ ...body, ...on })).choices[0].message;
    assert.equal(m.reasoning_content, "<think>".repeat(5), JSON.stringify({ on, m }));
    assert.ok(!m.content, JSON.stringify(m));
  }
  const stream = await server.http.chatStream(body);
  assert.equal(stream.reasoning, "<think>".repeat(5));
  assert.equal(stream.content, "");
  // (The prompt is the one llama-server renders, '/nothink' included.)
  const prompt = await server.http.tokenize({ model: "glm46", prompt: "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nWhat is the weather in Paris?/nothink<|assistant|>\n<think></think>" });
  for (const off of [{ reasoning_effort: "none" as const }, { chat_template_kwargs: { enable_thinking: false } }]) {
    const r = await server.http.chat({ ...body, ...off });
    const c = r.choices[0];
    assert.equal(c.message.reasoning_content, undefined, JSON.stringify(c));
    assert.equal(c.message.content, "<think>".repeat(6));
    assert.equal(r.usage!.prompt_tokens, prompt.tokens.length);
  }
});

test("glm46: the <think> the model opens its section with is in neither part's logprobs, streamed or not, nor an answer of its own on the Responses API", async () => {
  const bias = { [EXTRA_TOKENS.thinkOpen]: 100, [EXTRA_TOKENS.thinkClose]: -100 };
  const parts = await logprobParts(server.http, { model: "glm46", messages: [SYSTEM, QUESTION], max_tokens: 6, temperature: 0, logit_bias: bias });
  // Six tokens: the opening marker, then five more "<think>" that are thinking text.
  assert.deepEqual(parts.reasoning, { text: "<think>".repeat(5), tokens: Array(5).fill("<think>") });
  assert.deepEqual(parts.content, { text: "", tokens: [] });
  const r = await server.http.postRaw("/v1/responses", {
    model: "glm46",
    input: "What is the weather in Paris?",
    max_output_tokens: 6,
    temperature: 0,
    top_logprobs: 1,
    include: ["message.output_text.logprobs"],
    logit_bias: bias,
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual((r.json as { output: Array<{ type: string }> }).output.map((o) => o.type), ["reasoning"], r.text.slice(0, 1500));
});

test("glm46: a forced call after a thinking section Plinth closed at its budget is named (the blank line after the closing marker went into the name)", async () => {
  for (const [seed, choice] of [[1, "required"], [2, { type: "function", function: { name: "get_weather" } }]] as const) {
    // The model opens its section at once and never closes it: the 64-token budget of "minimal" does.
    const bias = { [EXTRA_TOKENS.thinkOpen]: 100, [EXTRA_TOKENS.thinkClose]: -100 };
    const body = ask("glm46", { reasoning_effort: "minimal", tool_choice: choice, max_tokens: 400, parallel_tool_calls: false, seed, logit_bias: bias });
    const c = (await server.http.chat(body)).choices[0];
    assert.ok((c.message.reasoning_content ?? "").length > 0, `it thought first: ${JSON.stringify(c).slice(0, 600)}`);
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c).slice(0, 400));
    checkCalls(c.message.tool_calls, c.message.content);
    const stream = await streamed(body);
    assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
  }
});

test("minimax: a section Plinth closes at its budget holds what the model wrote, not the newline of the closing layout", async () => {
  // MiniMax-M2 closes with "\n</think>\n\n": its first newline is layout, not thinking.
  const body = { model: "minimax", messages: [SYSTEM, QUESTION], max_tokens: 12, temperature: 0, thinking_token_budget: 3, logit_bias: { [EXTRA_TOKENS.thinkClose]: -100 } };
  const parts = await logprobParts(server.http, body);
  assert.equal(parts.reasoning.tokens.length, 3, JSON.stringify(parts));
  assert.equal(parts.reasoning.text, parts.reasoning.tokens.join(""));
  assert.ok(parts.content.text.length > 0, "the answer goes on after the forced close");
  const stream = await server.http.chatStream(body);
  const deltas = stream.chunks.flatMap((c) => c.choices.map((x) => x.delta.reasoning_content).filter((d) => d !== undefined));
  assert.ok(deltas.every((d) => d.trim() !== ""), `no reasoning delta of layout alone: ${JSON.stringify(deltas)}`);
});

test("glm47: tools, a call's arguments as <arg_key>/<arg_value> pairs with nothing between the tags, and the results render as llama-server renders them (thinking off)", async () => {
  const tools =
    "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
    TOOLS_JSON +
    "\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call><|system|>You are a helpful assistant.<|user|>What is the weather in Paris?";
  const calls =
    '<|assistant|></think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris\n<b></arg_value><arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{"a": [1, "x"]}</arg_value></tool_call><tool_call>now</tool_call>' +
    '<|observation|><tool_response>{"temp": 20}</tool_response><tool_response>noon</tool_response>';
  const off = { chat_template_kwargs: { enable_thinking: false } };
  await assertPrompt("glm47", [SYSTEM, QUESTION], tools + "<|assistant|></think>", off);
  await assertPrompt("glm47", ANSWERED, tools + calls + "<|assistant|></think>", off);
});

test("minimax: tools, calls as <invoke> blocks in one <minimax:tool_call> section with <parameter name=\"KEY\"> arguments, and the results render as llama-server renders them", async () => {
  const tools =
    ']~!b[]~b]system\nYou are a helpful assistant.\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in JSONSchema format:\n\n<tools>\n<tool>{"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}</tool>\n</tools>\n\n' +
    'When making tool calls, use XML format to invoke tools and pass parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">param-value-1</parameter>\n<parameter name="param-key-2">param-value-2</parameter>\n...\n</invoke>\n</minimax:tool_call>[e~[\n]~b]user\nWhat is the weather in Paris?[e~[\n';
  const calls =
    ']~b]ai\n\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris\n<b></parameter>\n<parameter name="days">3</parameter>\n<parameter name="opts">{"a": [1, "x"]}</parameter>\n</invoke>\n<invoke name="now">\n</invoke>\n</minimax:tool_call>[e~[\n' +
    ']~b]tool\n<response>{"temp": 20}</response>\n<response>noon</response>[e~[\n';
  await assertPrompt("minimax", [SYSTEM, QUESTION], tools + "]~b]ai\n<think>\n");
  await assertPrompt("minimax", ANSWERED, tools + calls + "]~b]ai\n<think>\n");
});

test("a call Plinth returned goes back with its result, written as the model wrote it", async () => {
  for (const [model, write] of [
    ["glm46", (k: string, v: string) => `<arg_key>${k}</arg_key>\n<arg_value>${v}</arg_value>\n`],
    ["glm47", (k: string, v: string) => `<arg_key>${k}</arg_key><arg_value>${v}</arg_value>`],
    ["minimax", (k: string, v: string) => `<parameter name="${k}">${v}</parameter>\n`],
  ] as const) {
    const first = (await server.http.chat(ask(model, { tool_choice: { type: "function", function: { name: "get_weather" } }, seed: 5 }))).choices[0];
    assert.equal(first.finish_reason, "tool_calls", JSON.stringify(first));
    const call = first.message.tool_calls![0];
    const messages: ChatMessageBody[] = [SYSTEM, QUESTION, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: '{"temp": 20}' }];
    const text = (await server.http.tokenize({ model, messages, tools: TOOLS, return_token_strs: true })).token_strs!.join("").replaceAll("\u2581", " ").replaceAll("<0x0A>", "\n");
    const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
    const params = Object.entries(args).map(([k, v]) => write(k, typeof v === "string" ? v : JSON.stringify(v).replaceAll(",", ", ")));
    assert.ok(text.includes(params.join("")) && params.length > 0, `${model}: ${text}`);
  }
});
