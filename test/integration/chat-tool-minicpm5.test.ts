import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { MINICPM5_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { logprobParts } from "../helpers/logprob-parts.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through MiniCPM5's own template, which writes a call's arguments as XML parameters,
// `<function name="NAME"><param name="KEY">VALUE</param>…</function>` (a string raw, anything else
// as JSON), and results as `<tool_response>` blocks in a user turn. Its template counts a turn's
// calls with `|min`, which node-llama-cpp's Jinja engine lacked: node-llama-cpp wrote calls and
// results itself (and tools in its generic `||call:` system message). The fixture is the tiny BPE
// model with the real template (ChatML's markers are its control tokens already; MiniCPM5's tags
// are text in its vocabulary too). The expected prompts are llama-server's (--jinja) renderings of
// the same conversations (/apply-template), thinking on, off and left to the template.

const SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-minicpm5", chatTemplate: MINICPM5_TEMPLATE };

let server: TestServer;
before(async () => {
  server = await startTestServer({ model: [`minicpm5=${await ensureFixtureModel(SPEC)}`] });
});
after(async () => {
  await server?.close();
});

const MARKUP = ["<function", "</function>", "<param", "</param>", "<think>", "</think>", "||call"];
const checkCalls = toolCallChecker({ get_weather: WEATHER_SCHEMA, get_time: CLOCK_SCHEMA }, MARKUP);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };
// The generation prompt opens a thinking section random weights never close: forced calls turn it off.
const OFF = { chat_template_kwargs: { enable_thinking: false } };
const ask = (extra: Partial<ChatBody> = {}): ChatBody => ({ model: "minicpm5", messages: [SYSTEM, QUESTION], tools: WEATHER_AND_CLOCK, max_tokens: 120, ...OFF, ...extra });

test("minicpm5: a forced call (required, named) is written parameter by parameter and read back as schema-valid JSON arguments, streamed the same, no markup in content", async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const c = (await server.http.chat(ask({ tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed }))).choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.content, null);
    checkCalls(c.message.tool_calls, c.message.content);
  }
  const named = ask({ tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
  const answer = await server.http.chat(named);
  const whole = answer.choices[0];
  // The call opens as the template writes calls: the prompt, then `<function name="`.
  const forced = await server.http.tokenize({ model: "minicpm5", messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...OFF });
  const free = await server.http.tokenize({ model: "minicpm5", messages: named.messages, tools: named.tools, ...OFF });
  const opening = await server.http.tokenize({ model: "minicpm5", prompt: '<function name="', add_special_tokens: false });
  assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
  assert.equal(answer.usage!.prompt_tokens, forced.count);
  assert.equal(whole.finish_reason, "tool_calls");
  assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
  checkCalls(whole.message.tool_calls, whole.message.content);
  const stream = await streamedCalls(server.url, named);
  assert.equal(stream.content, "");
  assert.equal(stream.finish, "tool_calls");
  assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
});

test("minicpm5: a section Plinth closes at its budget holds what the model wrote, not the newline of the closing layout", async () => {
  // MiniCPM5 closes with "\n</think>\n\n": its first newline is layout, not thinking.
  const body = { model: "minicpm5", messages: [SYSTEM, QUESTION], max_tokens: 24, temperature: 0, thinking_token_budget: 3 };
  const parts = await logprobParts(server.http, body);
  assert.equal(parts.reasoning.tokens.length, 3, JSON.stringify(parts));
  assert.equal(parts.reasoning.text, parts.reasoning.tokens.join(""));
  assert.ok(parts.content.text.length > 0, "the answer goes on after the forced close");
});

test("minicpm5: a call Plinth returned goes back with its result, and the conversation continues", async () => {
  await assertConversationContinues(server.http, ask, [SYSTEM, QUESTION]);
});

const ROUND_TRIP: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
const ONE_TOOL = [{ type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } } }];

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(messages: ChatMessageBody[], extra: object, expected: string) {
  const rendered = await server.http.tokenize({ model: "minicpm5", messages, tools: ONE_TOOL, ...extra });
  const wanted = await server.http.tokenize({ model: "minicpm5", prompt: expected, add_special_tokens: false });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model: "minicpm5", messages, tools: ONE_TOOL, ...extra, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from the template's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

/** llama-server's rendering up to the first assistant turn: BOS, the system turn with the tools, the question. */
const HEAD = "<|startoftext|><|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nTool usage guidelines:\n- You may call zero or more functions. If no function calls are needed, just answer normally and do not include any <function ... </function>.\n- When calling a function, return an XML object within <function ... </function> using:\n<function name=\"function-name\"><param name=\"param-name\">param-value</param></function>\n- param-value may be multi-line. If it contains <, & or newline characters, wrap it in a CDATA block: <param name=\"param-name\"><![CDATA[...multi-line value...]]></param><|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n";
/** The answered call and its result. */
const CALL_AND_RESULT = "<|im_start|>assistant\n<function name=\"get_weather\"><param name=\"city\">Paris</param></function><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response><|im_end|>\n";

test("minicpm5: tools, a call and its result are written by the template, as llama-server renders them, thinking on, off and by default", async () => {
  for (const [extra, open] of [[{}, "<|im_start|>assistant\n<think>\n"], [OFF, "<|im_start|>assistant\n<think>\n\n</think>\n\n"], [{ chat_template_kwargs: { enable_thinking: true } }, "<|im_start|>assistant\n<think>\n"]] as const) {
    await assertPrompt([SYSTEM, QUESTION], extra, HEAD + open);
    await assertPrompt(ROUND_TRIP, extra, HEAD + CALL_AND_RESULT + open);
  }
});
