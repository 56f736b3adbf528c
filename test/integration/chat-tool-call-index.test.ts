import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, type FixtureSpec } from "../fixtures/models.ts";
import { APRIEL_1_5_TEMPLATE, APRIEL_1_6_TEMPLATE, KIMI_K2_INSTRUCT_TEMPLATE, KIMI_K2_THINKING_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, startFamilyServer, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through the model's own template for families whose templates node-llama-cpp's
// Jinja engine could not run, and which therefore fell back to node-llama-cpp's generic `||call:`
// system message:
// - Kimi K2 Instruct and K2 Thinking: each call is
//   `<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{json}<|tool_call_end|>`, N a
//   counter across the conversation, which the template keeps with Python's list methods (append,
//   pop); the model writes its own counter (digits, as llama.cpp's server allows) and the parser
//   leaves it out of the name.
// - Apriel 1.5 and 1.6: tools are listed as `tool|string` (Python's repr of a dict), calls as
//   `<tool_calls>[{"name": …, "arguments": …}]</tool_calls>`.
// The fixtures are the tiny BPE model with the family's real template and its markers as control
// tokens. The expected prompts are llama-server's (--jinja) renderings of the same conversations
// (/apply-template), with the fixture's BOS and EOS.

const KIMI_MARKERS = [
  "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
  "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
];
const APRIEL_1_5_MARKERS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool_result|>", "<|content|>"];
const APRIEL_1_6_MARKERS = ["<|begin_system|>", "<|begin_user|>", "<|begin_assistant|>", "<|end|>", "<|begin_tool_result|>", "<|begin_content|>"];
const SPECS: Record<string, { spec: FixtureSpec; markers: string[] }> = {
  kimi: { spec: { ...BPE_SPEC, name: "plinth-kimi-k2-instruct", chatTemplate: KIMI_K2_INSTRUCT_TEMPLATE, controlTokens: KIMI_MARKERS }, markers: KIMI_MARKERS },
  "kimi-thinking": { spec: { ...BPE_SPEC, name: "plinth-kimi-k2-thinking-tools", chatTemplate: KIMI_K2_THINKING_TEMPLATE, controlTokens: KIMI_MARKERS }, markers: KIMI_MARKERS },
  "apriel-1.5": { spec: { ...BPE_SPEC, name: "plinth-apriel-1.5", chatTemplate: APRIEL_1_5_TEMPLATE, controlTokens: APRIEL_1_5_MARKERS }, markers: APRIEL_1_5_MARKERS },
  "apriel-1.6": { spec: { ...BPE_SPEC, name: "plinth-apriel-1.6", chatTemplate: APRIEL_1_6_TEMPLATE, controlTokens: APRIEL_1_6_MARKERS }, markers: APRIEL_1_6_MARKERS },
};
const MODELS = Object.keys(SPECS);

let server: TestServer;
let ids: Record<string, Record<string, number>> = {};
before(async () => {
  ({ server, ids } = await startFamilyServer(SPECS));
});
after(async () => {
  await server?.close();
});

const weather = WEATHER_SCHEMA;
const clock = CLOCK_SCHEMA;
const TOOLS = WEATHER_AND_CLOCK;

/** Text of the layouts that must never reach content. */
const LEAKS = [...KIMI_MARKERS, "functions.", "<tool_calls>", "</tool_calls>", "||call"];

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, LEAKS);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({ model, messages: [SYSTEM, QUESTION], tools: TOOLS, max_tokens: 120, ...extra });

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

/** How each family's calls open. */
const OPENINGS: Record<string, string> = {
  kimi: "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
  "kimi-thinking": "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
  "apriel-1.5": '\n<tool_calls>[{"name": "',
  "apriel-1.6": '\n<tool_calls>[{"name": "',
};

for (const model of MODELS) {
  test(`${model}: a forced call (required, named) is a valid tool_calls answer in the family's layout, streamed the same, no marker in content`, async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const c = (await server.http.chat(ask(model, { tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed }))).choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      checkCalls(c.message.tool_calls!.map((t) => t.function), c.message.content);
    }
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const answer = await server.http.chat(named);
    const whole = answer.choices[0];
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools });
    const opening = await server.http.tokenize({ model, prompt: OPENINGS[model], add_special_tokens: false });
    assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
    assert.equal(answer.usage!.prompt_tokens, forced.count);
    assert.equal(whole.finish_reason, "tool_calls");
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls!.map((t) => t.function), whole.message.content);
    const stream = await streamed(named);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
  });

  test(`${model}: a call Plinth returned goes back with its result, and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

test("kimi: in auto mode, the model's sampling <|tool_calls_section_begin|> starts a call, held to the schema, its counter left out of the name", async () => {
  const marker = "<|tool_calls_section_begin|>";
  const body = ask("kimi", { parallel_tool_calls: false, logit_bias: { [ids.kimi[marker]]: 100 }, temperature: 1, seed: 3 });
  await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
});

const ROUND_TRIP: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
const SECOND_CALL: ChatMessageBody[] = [
  { role: "assistant", content: null, tool_calls: [{ id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } }] },
  { role: "tool", tool_call_id: "call_2", content: '{"temp": 25}' },
];
const ONE_TOOL = [{ type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } } }];

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string) {
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL });
  const wanted = await server.http.tokenize({ model, prompt: expected, add_special_tokens: false });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from the template's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

const KIMI_HEAD =
  '<|im_system|>tool_declare<|im_middle|>[{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}]<|im_end|>' +
  "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|><|im_user|>user<|im_middle|>What is the weather in Paris?<|im_end|><|im_assistant|>assistant<|im_middle|>";
const kimiCall = (think: string, city: string, n: number, temp: number) =>
  `${think}<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:${n}<|tool_call_argument_begin|>{"city": "${city}"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>` +
  `<|im_system|>tool<|im_middle|>## Return of functions.get_weather:${n}\n{"temp": ${temp}}<|im_end|><|im_assistant|>assistant<|im_middle|>`;

test("kimi: tools, calls and results are written by the template, numbered across the conversation, as llama-server renders them", async () => {
  await assertPrompt("kimi", [SYSTEM, QUESTION], KIMI_HEAD);
  await assertPrompt("kimi", ROUND_TRIP, KIMI_HEAD + kimiCall("", "Paris", 0, 20));
  await assertPrompt("kimi", [...ROUND_TRIP, ...SECOND_CALL], KIMI_HEAD + kimiCall("", "Paris", 0, 20) + kimiCall("", "Rome", 1, 25));
});

test("kimi-thinking: tools, a call and its result are written by the template, as llama-server renders them", async () => {
  await assertPrompt("kimi-thinking", [SYSTEM, QUESTION], KIMI_HEAD);
  await assertPrompt("kimi-thinking", ROUND_TRIP, KIMI_HEAD + kimiCall("<think></think>", "Paris", 0, 20));
});

const APRIEL_TOOL = "{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Get the weather for a city', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string', 'description': 'City name'}}, 'required': ['city']}}}";
// The call's id in an earlier turn: the client's (`call_abc123`), as llama-server writes it.
const APRIEL_CALL = `\n<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_abc123"}]</tool_calls>\n<|end|>\n`;

test("apriel-1.5: tools (as Python writes a dict), a call and its result are written by the template, as llama-server renders them", async () => {
  const head =
    "<|startoftext|><|system|>\nYou are a thoughtful and systematic AI assistant built by ServiceNow Language Models (SLAM) lab. Before providing an answer, analyze the problem carefully and present your reasoning step by step. After explaining your thought process, provide the final solution in the following format: [BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE].You are a helpful assistant.\n" +
    "You are provided with function signatures within <available_tools></available_tools> XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about the arguments. You should infer the argument values from previous user responses and the system message. Here are the available tools:\n" +
    `<available_tools>\n${APRIEL_TOOL}\n</available_tools>\n<|end|>\n<|user|>\nWhat is the weather in Paris?\n<|end|>\n<|assistant|>\n`;
  await assertPrompt("apriel-1.5", [SYSTEM, QUESTION], head);
  // (The template ends an answered turn with eos_token, the fixture's <|im_end|>.)
  await assertPrompt("apriel-1.5", ROUND_TRIP, `${head}${APRIEL_CALL}<|im_end|><|tool_result|>\n{"temp": 20}\n<|end|>\n<|assistant|>\n`);
});

test("apriel-1.6: tools (as Python writes a dict), a call and its result are written by the template, as llama-server renders them", async () => {
  const head =
    "<|startoftext|><|begin_system|>\nYou are a thoughtful, systematic AI assistant from ServiceNow Language Models (SLAM) lab.\n    Analyze each question carefully, present your reasoning step-by-step, then provide the final\n    response after the marker [BEGIN FINAL RESPONSE].\nYou are a helpful assistant.\n" +
    "You are provided with function signatures within <available_tools></available_tools> XML tags.\n        You may call one or more functions to assist with the user query.\n        Don't make assumptions about the arguments. You should infer the argument values from previous\n        user responses and the system message.\n        Here are the available tools: \n" +
    `        <available_tools>\n${APRIEL_TOOL}        \n        </available_tools>.\n\n` +
    "        Return all function calls as a list of JSON objects within <tool_calls></tool_calls> XML tags.\n        Each JSON object should contain a function name and arguments as follows:\n" +
    '        <tool_calls>[\n            {"name": <function-name-1>, "arguments": <args-dict-1>},\n            {"name": <function-name-2>, "arguments": <args-dict-2>},\n            ...\n        ]</tool_calls>\n' +
    "<|begin_user|>\nWhat is the weather in Paris?\n<|begin_assistant|>\n";
  await assertPrompt("apriel-1.6", [SYSTEM, QUESTION], `${head}Here are my reasoning steps:\n`);
  await assertPrompt("apriel-1.6", ROUND_TRIP, `${head}${APRIEL_CALL}<|begin_tool_result|>\n{"temp": 20}\n\n\n\n<|begin_assistant|>\nHere are my reasoning steps:\n`);
});
