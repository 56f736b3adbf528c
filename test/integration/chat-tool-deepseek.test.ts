import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, type FixtureSpec } from "../fixtures/models.ts";
import { DEEPSEEK_V3_1_TEMPLATE, DEEPSEEK_V3_2_TEMPLATE, DEEPSEEK_V4_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, startFamilyServer, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through DeepSeek's own templates, V3.1 onwards:
// - V3.1 writes a turn's calls as
//   `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
//   (no `function` type, no ```json block, unlike R1) and documents no tools: llama-server shows
//   the model none, and neither does Plinth.
// - V3.2 and V4 document the tools in the system prompt and write calls in their DSML markup,
//   `<｜DSML｜function_calls>` (V4: `tool_calls`) around `<｜DSML｜invoke name="NAME">` blocks of
//   `<｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>` (`｜DSML｜` is text).
// The fixtures are the tiny BPE model with the real template and its markers as control tokens.
// The expected prompts are llama-server's (--jinja) renderings of the same conversations
// (/apply-template on the same fixture), with the fixture's BOS.

const V3_1_MARKERS = [
  "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
  "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
  "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
];
const DSML_MARKERS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"];
const SPECS: Record<string, { spec: FixtureSpec; markers: string[] }> = {
  "v3.1": { spec: { ...BPE_SPEC, name: "plinth-deepseek-v3.1", chatTemplate: DEEPSEEK_V3_1_TEMPLATE, controlTokens: V3_1_MARKERS }, markers: V3_1_MARKERS },
  "v3.2": { spec: { ...BPE_SPEC, name: "plinth-deepseek-v3.2", chatTemplate: DEEPSEEK_V3_2_TEMPLATE, controlTokens: DSML_MARKERS }, markers: DSML_MARKERS },
  v4: { spec: { ...BPE_SPEC, name: "plinth-deepseek-v4", chatTemplate: DEEPSEEK_V4_TEMPLATE, controlTokens: DSML_MARKERS }, markers: DSML_MARKERS },
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

/** Text of the layouts that must never reach content. */
const LEAKS = [...V3_1_MARKERS, "｜DSML｜", "||call"];
const checkCalls = toolCallChecker({ get_weather: WEATHER_SCHEMA, get_time: CLOCK_SCHEMA }, LEAKS);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

// The generation prompt opens a thinking section that random weights never close: the forced-call
// checks turn thinking off (the template's enable_thinking, which /tokenize takes too).
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };
const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({ model, messages: [SYSTEM, QUESTION], tools: WEATHER_AND_CLOCK, max_tokens: 400, ...NO_THINKING, ...extra });

/** How each version's calls open after the generation prompt. */
const OPENINGS: Record<string, string> = {
  "v3.1": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
  "v3.2": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="',
  v4: '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="',
};

for (const model of MODELS) {
  test(`${model}: a forced call (required, named) is a valid tool_calls answer in the model's layout, streamed the same, no marker in content`, async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const c = (await server.http.chat(ask(model, { tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed }))).choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      checkCalls(c.message.tool_calls!.map((t) => t.function), c.message.content);
    }
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const answer = await server.http.chat(named);
    const whole = answer.choices[0];
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...NO_THINKING });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, ...NO_THINKING });
    const opening = await server.http.tokenize({ model, prompt: OPENINGS[model], add_special_tokens: false });
    assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
    assert.equal(answer.usage!.prompt_tokens, forced.count);
    assert.equal(whole.finish_reason, "tool_calls");
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls!.map((t) => t.function), whole.message.content);
    const stream = await streamedCalls(server.url, named);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
  });

  test(`${model}: a call Plinth returned goes back with its result, and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

test("v3.1: in auto mode, the model's sampling <｜tool▁calls▁begin｜> starts a call, held to the schema", async () => {
  const marker = "<｜tool▁calls▁begin｜>";
  const body = ask("v3.1", { parallel_tool_calls: false, logit_bias: { [ids["v3.1"][marker]]: 100 }, temperature: 1, seed: 3 });
  await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
});

const ONE_TOOL = [{ type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } } }];
const ROUND_TRIP: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
/** Two calls in one turn, with text before them, their results, an answer and a new question. */
const TWO_CALLS: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  {
    role: "assistant",
    content: "Let me look.",
    tool_calls: [
      { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
      { id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } },
    ],
  },
  { role: "tool", tool_call_id: "call_1", content: '{"temp": 20}' },
  { role: "tool", tool_call_id: "call_2", content: '{"temp": 25}' },
  { role: "assistant", content: "Paris 20, Rome 25." },
  { role: "user", content: "Thanks!" },
];

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string, extra: { chat_template_kwargs?: { enable_thinking: boolean } } = {}) {
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...extra });
  const wanted = await server.http.tokenize({ model, prompt: expected, add_special_tokens: false });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, return_token_strs: true, ...extra })).token_strs!.join("");
    assert.fail(`prompt differs from the template's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

const THINK_OFF = { chat_template_kwargs: { enable_thinking: false } };
const THINK_ON = { chat_template_kwargs: { enable_thinking: true } };

test("v3.1: calls and results are written by the template, thinking on and off, as llama-server renders them", async () => {
  const head = "<|startoftext|>You are a helpful assistant.<｜User｜>What is the weather in Paris?<｜Assistant｜>";
  await assertPrompt("v3.1", [SYSTEM, QUESTION], `${head}<think>`);
  await assertPrompt("v3.1", [SYSTEM, QUESTION], `${head}<think>`, THINK_ON);
  await assertPrompt("v3.1", [SYSTEM, QUESTION], `${head}<think></think>`, THINK_OFF);
  const call = (city: string) => `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "${city}"}<｜tool▁call▁end｜>`;
  const trip = `${head}<think></think><｜tool▁calls▁begin｜>${call("Paris")}<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜>`;
  for (const extra of [THINK_ON, THINK_OFF]) await assertPrompt("v3.1", ROUND_TRIP, trip, extra);
  const two =
    `${head}<think></think>Let me look.<｜tool▁calls▁begin｜>${call("Paris")}${call("Rome")}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>` +
    `<｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜><｜tool▁output▁begin｜>{"temp": 25}<｜tool▁output▁end｜>Paris 20, Rome 25.<｜end▁of▁sentence｜><｜User｜>Thanks!<｜Assistant｜>`;
  await assertPrompt("v3.1", TWO_CALLS, `${two}<think>`, THINK_ON);
  await assertPrompt("v3.1", TWO_CALLS, `${two}<think></think>`, THINK_OFF);
});

// llama-server's renderings (/apply-template, --jinja) of the same conversations on the V3.2 and
// V4 fixtures, the system prompt with the tools written once as `head`.
const DSML_RENDERINGS: Record<string, Record<string, string>> = {
  "v3.2": {
    head: "<|startoftext|>You are a helpful assistant.\n\n## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\nYou can invoke functions by writing a \"<｜DSML｜function_calls>\" block like the following as part of your reply to the user:\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"$FUNCTION_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$FUNCTION_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜function_calls>\n\nString and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The \"string\" attribute should be set to \"true\" for string type parameters and \"false\" for other types (numbers, booleans, arrays, objects).\n\nIf the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:\n\n<｜DSML｜function_calls>\n...\n</｜DSML｜function_calls>\n\n<function_results>\n...\n</function_results>\n\n<think>...thinking about results</think>\n\nHere are the functions available in JSONSchema format:\n<functions>\n{\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}}, \"required\": [\"city\"]}}\n</functions>\n<｜User｜>What is the weather in Paris?",
    "q on": "<｜Assistant｜><think>",
    "q off": "<｜Assistant｜><think></think>",
    "two on": "<｜Assistant｜></think>Let me look.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>{\"temp\": 20}</result>\n<result>{\"temp\": 25}</result>\n</function_results>\n\n</think>Paris 20, Rome 25.<｜end▁of▁sentence｜><｜User｜>Thanks!<｜Assistant｜><think>",
    "two off": "<｜Assistant｜></think>Let me look.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>{\"temp\": 20}</result>\n<result>{\"temp\": 25}</result>\n</function_results>\n\n</think>Paris 20, Rome 25.<｜end▁of▁sentence｜><｜User｜>Thanks!<｜Assistant｜><think></think>",
    "rt on": "<｜Assistant｜><think></think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>{\"temp\": 20}</result>\n</function_results>\n\n<think>",
    "rt off": "<｜Assistant｜></think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>{\"temp\": 20}</result>\n</function_results>\n\n<think></think>",
  },
  "v4": {
    head: "<|startoftext|>You are a helpful assistant.\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n{\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}}, \"required\": [\"city\"]}}\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n<｜User｜>What is the weather in Paris?",
    "q on": "<｜Assistant｜><think>",
    "q off": "<｜Assistant｜></think>",
    "two on": "<｜Assistant｜><think></think>Let me look.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temp\": 20}</tool_result>\n\n<tool_result>{\"temp\": 25}</tool_result><｜Assistant｜><think></think>Paris 20, Rome 25.<｜end▁of▁sentence｜><｜User｜>Thanks!<｜Assistant｜><think>",
    "two off": "<｜Assistant｜></think>Let me look.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temp\": 20}</tool_result>\n\n<tool_result>{\"temp\": 25}</tool_result><｜Assistant｜></think>Paris 20, Rome 25.<｜end▁of▁sentence｜><｜User｜>Thanks!<｜Assistant｜></think>",
    "rt on": "<｜Assistant｜><think></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temp\": 20}</tool_result><｜Assistant｜><think>",
    "rt off": "<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temp\": 20}</tool_result><｜Assistant｜></think>",
  },
};

for (const model of ["v3.2", "v4"]) {
  test(`${model}: tools, calls and results are written by the template in DSML, thinking on and off, as llama-server renders them`, async () => {
    const r = DSML_RENDERINGS[model];
    // (After tool results V3.2's template opens the turn itself, `\n\n<think>`: "rt" is its generation prompt there.)
    for (const [name, messages] of [["q", [SYSTEM, QUESTION]], ["two", TWO_CALLS], ["rt", ROUND_TRIP]] as const) {
      await assertPrompt(model, [...messages], r.head + r[`${name} on`], THINK_ON);
      await assertPrompt(model, [...messages], r.head + r[`${name} off`], THINK_OFF);
    }
  });
}
