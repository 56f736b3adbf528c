import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, type FixtureSpec } from "../fixtures/models.ts";
import { GIGACHAT_3_1_TEMPLATE, GIGACHAT_3_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, startFamilyServer, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through GigaChat's own templates, which node-llama-cpp could not read a layout from
// (it fell back to its generic `||call:` system message):
// - GigaChat 3: a call is a turn of its own after the assistant's,
//   `<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": …, "arguments": {…}}`;
// - GigaChat 3.1: the call stays in the assistant's turn, `<|function_call|>{"name": …, "arguments": {…}}`.
// Both write one call per turn and take results as `function result` turns. The fixtures are the
// tiny BPE model with the real templates and their markers as control tokens. The expected prompts
// are llama-server's (--jinja) renderings of the same conversations (/apply-template), with the
// fixture's BOS.

const G3_MARKERS = ["<|role_sep|>", "<|message_sep|>"];
const G31_MARKERS = [...G3_MARKERS, "<|function_call|>"];
const SPECS: Record<string, { spec: FixtureSpec; markers: string[] }> = {
  gigachat3: { spec: { ...BPE_SPEC, name: "plinth-gigachat-3", chatTemplate: GIGACHAT_3_TEMPLATE, controlTokens: G3_MARKERS }, markers: G3_MARKERS },
  "gigachat3.1": { spec: { ...BPE_SPEC, name: "plinth-gigachat-3.1", chatTemplate: GIGACHAT_3_1_TEMPLATE, controlTokens: G31_MARKERS }, markers: G31_MARKERS },
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
const LEAKS = [...G31_MARKERS, "function call", '{"name"', "||call"];

const checkCalls = toolCallChecker({ get_weather: WEATHER_SCHEMA, get_time: CLOCK_SCHEMA }, LEAKS);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({ model, messages: [SYSTEM, QUESTION], tools: WEATHER_AND_CLOCK, max_tokens: 120, ...extra });

/** How each template's calls open. */
const OPENINGS: Record<string, string> = {
  gigachat3: '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "',
  "gigachat3.1": '<|function_call|>{"name": "',
};

for (const model of MODELS) {
  test(`${model}: a forced call (required, named) is a valid tool_calls answer in the template's layout, streamed the same, no marker in content`, async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const c = (await server.http.chat(ask(model, { tool_choice: "required", temperature: 1, seed }))).choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls!.length, 1, "one call per turn");
      checkCalls(c.message.tool_calls!.map((t) => t.function), c.message.content);
    }
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const answer = await server.http.chat(named);
    const whole = answer.choices[0];
    // The prompt is the template's rendering, then the call's opening (its markers as their tokens).
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools });
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

  test(`${model}: in auto mode, the model's sampling the call's first marker starts a call, held to the schema`, async () => {
    const marker = OPENINGS[model].startsWith("<|function_call|>") ? "<|function_call|>" : "<|message_sep|>";
    const body = ask(model, { logit_bias: { [ids[model][marker]]: 100 }, temperature: 1, seed: 3 });
    await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
  });

  test(`${model}: a call Plinth returned goes back with its result, and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

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

/** llama-server's rendering of both templates' opening: BOS and the fixed "developer system" turn. */
const HEAD = "<|startoftext|>developer system<|role_sep|>\n<role_description>\nDescription of the roles available in the dialog.\n\n`developer system`\nA message added by Sber before the main dialog. It has the highest priority and sets global, non-overridable conditions (for example, conversation rules, the safety policy, the assistant's overall response style, etc.).\n\n`system`\nA system instruction added by developers or by the user, but with a lower priority than `developer system`. It usually describes the assistant's instructions, a specific response style, and other conditions for this particular dialog.\n\n`user`\nA message or request from the user. The assistant follows it if it does not conflict with higher-priority instructions (see <instruction_priority>).\n\n`user memory`\nA sequence of the most up-to-date long-term facts about the user at the time of their request, presented as a JSON list of strings. Facts are listed in chronological order, meaning newer facts are appended to the end of the sequence. When facts are changed or deleted, records of previous facts remain in the sequence. The assistant saves facts using a function and uses them in accordance with the <memory_guidelines> block below.\n\n`added files`\nMetadata about files available for use in the dialog, presented in JSON format. It contains the following keys: id (a unique file identifier), name (file name), type (file type).\n\n`assistant`\nThe assistant's reply to the user's request. If the system instruction or the user does not set additional rules for `assistant`, this reply must comply with the instructions in the <assistant_guidelines> block below. The list of functions available to call is contained in `function descriptions`. The name of the required function and its arguments will be generated next by the `function call` role. In its replies, the assistant follows the instructions in accordance with <instruction_priority>.\n\n`function descriptions`\nFunction descriptions in TypeScript format. A function is a special tool (or a set of instructions) that the assistant can call to perform specific actions, computations, or obtain data needed to solve the user's task. Each function description contains blocks with the name, description, and arguments. Sometimes the description contains separate blocks with return parameters and usage examples that illustrate the correct call and arguments.\n\n`function call`\nThe function that `assistant` calls based on the dialog context, and its arguments. The function is invoked in strict accordance with the instructions in the <function_usage> block.\n\n`function result`\nThe result of the last function call.\n</role_description>\n\n<available_modalities>\nThe assistant can work with the following modalities: text, available functions.\n</available_modalities>\n\n<instruction_priority>\nIf instructions from different roles conflict within the dialog context, observe the following priorities:  \n`developer system` > `system` > `user` > `function descriptions` > `function result` > `user memory`\n</instruction_priority>\n\n<function_usage>\nBasic instructions for working with functions.\n\nOnly call those functions that are described in `function descriptions`.\n\nCall available functions when, according to their description, such a call will help provide a more complete and/or accurate answer to the user's request. Fill in function arguments using information from the dialog context. If a function could help answer the request but a required argument is missing from the context, ask the user for the missing data before calling the function. If a necessary function is unavailable or an error occurs, briefly inform the user and, if possible, suggest an alternative.\n</function_usage>\n\n<memory_guidelines>\nRules for using facts in long-term memory:\n\nIf there is no message under the `user memory` role in the dialog, this is equivalent to the absence of long-term facts about the user in memory. In that case, information about the user is limited to the current dialog, and no new facts should be saved.\n</memory_guidelines>\n\n<assistant_guidelines>\nYou are a helpful assistant.\n\n# Instructions\n- Strictly follow the instruction priority.\n- Maintain a logical chain of reasoning when answering the user's question.\n- For complex questions (for example, STEM), try to answer in detail unless the system message or dialog context limits the response length.\n- Be helpful, truthful, and avoid unsafe or prohibited content in your responses.\n- Try to reply in the language in which the user asked their question.\n</assistant_guidelines>\n\nA dialog will follow below.\nThe dialog may include various roles described in the <role_description> block.\nEach turn begins with the role name and a special token that marks the end of the role's full name, and ends with a special end-of-turn token.\nYour task is to continue the dialog from the last specified role in accordance with the dialog context.<|message_sep|>\n\n";
/** Then the system turn, the tools (as TypeScript), the question and the open assistant turn. */
const QUESTION_TURNS = "system<|role_sep|>\nYou are a helpful assistant.<|message_sep|>\n\nfunction descriptions<|role_sep|>\nnamespace functions {\n// Get the weather for a city\ntype get_weather = (_: {\n  // City name\n  city: string,\n}) => any;\n\n} // namespace functions\n\n<|message_sep|>\n\nuser<|role_sep|>\nWhat is the weather in Paris?<|message_sep|>\n\nassistant<|role_sep|>\n";

test("gigachat3: tools, a call and its result are written by the template, as llama-server renders them", async () => {
  await assertPrompt("gigachat3", [SYSTEM, QUESTION], HEAD + QUESTION_TURNS);
  await assertPrompt("gigachat3", ROUND_TRIP, HEAD + QUESTION_TURNS + "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}<|message_sep|>\n\nfunction result<|role_sep|>\n{\"temp\": 20}<|message_sep|>\n\nassistant<|role_sep|>\n");
});

test("gigachat3.1: tools, a call and its result are written by the template, as llama-server renders them", async () => {
  await assertPrompt("gigachat3.1", [SYSTEM, QUESTION], HEAD + QUESTION_TURNS);
  await assertPrompt("gigachat3.1", ROUND_TRIP, HEAD + QUESTION_TURNS + "<|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}<|message_sep|>\n\nfunction result<|role_sep|>\n{\"temp\": 20}<|message_sep|>\n\nassistant<|role_sep|>\n");
});
