import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { COMMAND_R_PLUS_TOOL_USE_TEMPLATE, DEEPSEEK_R1_DISTILL_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through the model's own template for families whose calls are a name and JSON
// arguments but whose layout node-llama-cpp cannot read (it fell back to its generic `||call:`
// system message): DeepSeek R1 and its distills (`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
// <｜tool▁sep｜>NAME` + a ```json block) and Cohere Command R+ (`Action:` + a ```json list of
// {tool_name, parameters}). The fixtures are the tiny BPE model with the family's real template and
// its markers as control tokens, as in the real vocabularies. The expected prompts are llama-server's
// (--jinja) renderings of the same conversations (/apply-template), with the fixture's BOS.

const DEEPSEEK_MARKERS = [
  "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
  "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
];
const COHERE_MARKERS = ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>"];
const DEEPSEEK_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-deepseek-r1-distill", chatTemplate: DEEPSEEK_R1_DISTILL_TEMPLATE, controlTokens: DEEPSEEK_MARKERS };
const COHERE_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-command-r-plus", chatTemplate: COMMAND_R_PLUS_TOOL_USE_TEMPLATE, controlTokens: COHERE_MARKERS };

let server: TestServer;
const ids: Record<string, Record<string, number>> = {};
before(async () => {
  const [deepseek, cohere] = [DEEPSEEK_SPEC, COHERE_SPEC].map((spec) => ensureFixtureModel(spec));
  server = await startTestServer({ model: [`deepseek=${await deepseek}`, `cohere=${await cohere}`] });
  for (const [model, markers] of [["deepseek", DEEPSEEK_MARKERS], ["cohere", COHERE_MARKERS]] as const) {
    const { tokens } = await server.http.tokenize({ model, prompt: markers.join(""), add_special_tokens: false });
    assert.equal(tokens.length, markers.length, `${model}: each marker is one token`);
    ids[model] = Object.fromEntries(markers.map((m, i) => [m, tokens[i]]));
  }
});
after(async () => {
  await server?.close();
});

const weather = WEATHER_SCHEMA;
const clock = CLOCK_SCHEMA;
const TOOLS = WEATHER_AND_CLOCK;

/** Text of the layouts that must never reach content. */
const LEAKS = [...DEEPSEEK_MARKERS, ...COHERE_MARKERS, "```", "Action:", "tool_name", "||call"];

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, LEAKS);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

// DeepSeek R1's generation prompt opens a thinking section that random weights never close: the
// forced-call checks turn thinking off (the template's enable_thinking, which /tokenize takes too), as a client may.
const NO_THINKING: Record<string, { chat_template_kwargs?: { enable_thinking: boolean } }> = { deepseek: { chat_template_kwargs: { enable_thinking: false } }, cohere: {} };

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({
  model,
  messages: [SYSTEM, QUESTION],
  tools: TOOLS,
  max_tokens: 120,
  ...NO_THINKING[model],
  ...extra,
});

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

/** How each family's calls open. */
const OPENINGS: Record<string, string> = {
  deepseek: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
  cohere: 'Action:\n```json\n[\n    {\n        "tool_name": "',
};

for (const model of ["deepseek", "cohere"]) {
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
    // The call opens as the family's calls open (its markers as their tokens): the prompt is the
    // template's rendering, then that opening.
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...NO_THINKING[model] });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, ...NO_THINKING[model] });
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

test("deepseek: in auto mode, the model's sampling <｜tool▁calls▁begin｜> starts a call, held to the schema", async () => {
  const marker = "<｜tool▁calls▁begin｜>";
  const body = ask("deepseek", { parallel_tool_calls: false, logit_bias: { [ids.deepseek[marker]]: 100 }, temperature: 1, seed: 3 });
  await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
});

const ROUND_TRIP: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
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

test("deepseek: a call and its result are written by the template, as llama-server renders them", async () => {
  const head = "<|startoftext|>You are a helpful assistant.<｜User｜>What is the weather in Paris?";
  // The distills' template documents no tools (llama-server shows the model none either).
  await assertPrompt("deepseek", [SYSTEM, QUESTION], `${head}<｜Assistant｜><think>\n`);
  await assertPrompt(
    "deepseek",
    ROUND_TRIP,
    `${head}<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n\`\`\`json\n{"city": "Paris"}\n\`\`\`<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>` +
      `<｜Assistant｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>`,
  );
});

const COHERE_PREAMBLE =
  "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># Safety Preamble\nThe instructions in this section override those in the task description and style guide sections. Don't answer questions that are harmful or immoral.\n\n" +
  "# System Preamble\n## Basic Rules\nYou are a powerful conversational AI trained by Cohere to help people. You are augmented by a number of tools, and your job is to use and consume the output of these tools to best help the user. You will see a conversation history between yourself and a user, ending with an utterance from the user. You will then see a specific instruction instructing you what kind of response to generate. When you answer the user's requests, you cite your sources in your answers, according to those instructions.\n\n" +
  "# User Preamble\nYou are a helpful assistant.\n\n## Available Tools\nHere is a list of tools that you have available to you:\n\n" +
  '```python\ndef get_weather(city: str) -> List[Dict]:\n    """Get the weather for a city\n\n    Args:\n        city (str): City name\n    """\n    pass\n```<|END_OF_TURN_TOKEN|>' +
  "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>What is the weather in Paris?<|END_OF_TURN_TOKEN|>";
const COHERE_INSTRUCTION =
  "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Write 'Action:' followed by a json-formatted list of actions that you want to perform in order to produce a good response to the user's last input. You can use any of the supplied tools any number of times, but you should aim to execute the minimum number of necessary actions for the input. You should use the `directly-answer` tool if calling the other tools is unnecessary. The list of actions you want to call should be formatted as a list of json objects, for example:\n" +
  '```json\n[\n    {\n        "tool_name": title of the tool in the specification,\n        "parameters": a dict of parameters to input into the tool as they are defined in the specs, or {} if it takes no parameters\n    }\n]```<|END_OF_TURN_TOKEN|>' +
  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";

test("cohere: tools, a call and its result are written by the template, as llama-server renders them", async () => {
  // llama-server's /apply-template leaves out the BOS its tokenizer adds; so does /tokenize's prompt here.
  const bos = "<|startoftext|>";
  await assertPrompt("cohere", [SYSTEM, QUESTION], bos + COHERE_PREAMBLE + COHERE_INSTRUCTION);
  await assertPrompt(
    "cohere",
    ROUND_TRIP,
    bos + COHERE_PREAMBLE +
      '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>\nAction:\n```json\n[\n    {\n        "tool_name": "get_weather",\n        "parameters": {\n            "city": "Paris"\n        }\n    }\n]```\n' +
      '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><results>\n{"temp": 20}</results><|END_OF_TURN_TOKEN|>' +
      COHERE_INSTRUCTION,
  );
});
