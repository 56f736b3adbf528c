import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { ensureFixtureModel, type FixtureSpec, TINY_SPEC } from "../fixtures/models.ts";
import { GEMMA_4_INTERLEAVED_TEMPLATE, GEMMA_4_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody, plinthModel } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { streamedCalls, toolCallChecker } from "../helpers/tool-calls.ts";

// Tool calling for Gemma 4, whose calls are a notation of its own rather than JSON:
//   <|tool_call>call:NAME{key:VALUE,…}<tool_call|>
// keys bare, strings between <|"|> tokens, nested {…} and […], numbers, booleans and null as in
// JSON; tools declared in the template's `declaration:` notation, results written back as
// <|tool_response>response:NAME{…}<tool_response|>. The fixtures are the tiny model with each real
// Gemma 4 template (llama.cpp's models/templates) and Gemma's markers as control tokens. The
// expected prompts are llama-server's (--jinja, /apply-template) renderings of the same conversations
// on the same file, with thinking left alone (on: llama-server sets enable_thinking for a template
// that can think) and turned off.
//
// Gemma 4 also thinks: `<|think|>` at the top of the system turn asks for it, and the model writes
// `<|channel>thought\n…<channel|>` before its answer; with thinking off the generation prompt closes
// the section empty. Forced-call checks keep thinking off, so the random-weight model's answer is
// the call itself.

const MARKERS = ["<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>"];
const GEMMA4_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-gemma-4", seed: 4401, chatTemplate: GEMMA_4_TEMPLATE, controlTokens: MARKERS };
const INTERLEAVED_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-gemma-4-interleaved", seed: 4402, chatTemplate: GEMMA_4_INTERLEAVED_TEMPLATE, controlTokens: MARKERS };
// Gemma 4's own vocabulary (llama.cpp's ggml-vocab-gemma-4.gguf) types the call, response, quote and
// channel markers as user-defined tokens, which detokenize to their text; only the turn, tool and
// think markers are control tokens. The same fixture with those types (same ids).
const USER_DEFINED = ["<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>"];
const REAL_TYPES_SPEC: FixtureSpec = { ...GEMMA4_SPEC, name: "plinth-gemma-4-real-types", userDefinedTokens: USER_DEFINED };

let server: TestServer;
/** The fixture's ids of the markers, by text. */
const ids: Record<string, number> = {};
before(async () => {
  server = await startTestServer({
    model: [`gemma=${await ensureFixtureModel(GEMMA4_SPEC)}`, `gemma-il=${await ensureFixtureModel(INTERLEAVED_SPEC)}`, `gemma-ud=${await ensureFixtureModel(REAL_TYPES_SPEC)}`],
  });
  const { tokens } = await server.http.tokenize({ model: "gemma", prompt: MARKERS.join(""), add_special_tokens: false });
  assert.equal(tokens.length, MARKERS.length);
  MARKERS.forEach((m, i) => (ids[m] = tokens[i]));
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
    where: { type: "object", properties: { lat: { type: "number" }, exact: { type: "boolean" }, note: { type: ["string", "null"], maxLength: 4 } }, required: ["lat"] },
  },
  required: ["city", "days"],
  additionalProperties: false,
};
const clock = { type: "object", properties: { zone: { type: "string", pattern: "^[A-Z][a-z]{2,8}$" } }, required: ["zone"], additionalProperties: false };
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: weather } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a zone", parameters: clock } },
];

const MARKUP = [...MARKERS, "call:", "<|", "|>"];

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, MARKUP);

/** Thinking turned off, the template's way (also what /tokenize reads). */
const OFF = { chat_template_kwargs: { enable_thinking: false } };

const ask = (extra: Partial<ChatBody> = {}): ChatBody => ({
  model: "gemma",
  messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is the weather in Paris?" }],
  tools: TOOLS,
  max_tokens: 200,
  ...OFF,
  ...extra,
});

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

test("gemma 4: a forced call (required, named) is written in Gemma's notation and read back as JSON arguments valid for the schema, streamed the same", async () => {
  const seen = new Set<string>();
  for (let seed = 1; seed <= 8; seed++) {
    const choice = seed <= 4 ? "required" : { type: "function" as const, function: { name: "get_weather" } };
    // (The fixture hardly ever samples a control token by itself: the closing quote is made likelier.)
    const body = ask({ tool_choice: choice, parallel_tool_calls: false, temperature: 1, seed, logit_bias: { [ids['<|"|>']]: 8 } });
    const c = (await server.http.chat(body)).choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.content, null);
    checkCalls(c.message.tool_calls, c.message.content);
    for (const call of c.message.tool_calls!) for (const k of Object.keys(JSON.parse(call.function.arguments))) seen.add(k);
    const stream = await streamed(body);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
  }
  for (const k of ["city", "days"]) assert.ok(seen.has(k), `never saw ${k}: ${[...seen]}`);
  const named = ask({ tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
  const whole = (await server.http.chat(named)).choices[0];
  assert.equal(whole.finish_reason, "tool_calls");
  assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
  checkCalls(whole.message.tool_calls, whole.message.content);
  // The call opens as the template writes calls: the prompt, then `<|tool_call>call:`.
  const forced = await server.http.tokenize({ model: "gemma", messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...OFF });
  const free = await server.http.tokenize({ model: "gemma", messages: named.messages, tools: named.tools, ...OFF });
  const opening = await server.http.tokenize({ model: "gemma", prompt: "<|tool_call>call:", add_special_tokens: false });
  assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
  const stream = await streamed(named);
  assert.equal(stream.finish, "tool_calls");
  assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
});

test("gemma 4: a string is streamed as it comes, with no marker in the arguments", async () => {
  const tools = [{ type: "function" as const, function: { name: "note", parameters: { type: "object", properties: { text: { type: "string" }, tags: { type: "array", items: { type: "integer" }, maxItems: 2 } }, required: ["text", "tags"] } } }];
  const body = ask({ tools, tool_choice: "required", temperature: 1, seed: 4, max_tokens: 40 });
  const stream = await streamed(body);
  const whole = (await server.http.chat(body)).choices[0];
  // Cut at the token limit inside the string: the arguments read so far, no markup among them.
  assert.equal(whole.finish_reason, "length");
  assert.ok(stream.deltas > 3, `${stream.deltas} deltas`);
  assert.equal(stream.calls[0].arguments, whole.message.tool_calls![0].function.arguments);
  assert.match(stream.calls[0].arguments, /^\{"text":"/);
  for (const m of MARKUP) assert.ok(!stream.calls[0].arguments.includes(m), stream.calls[0].arguments);
});

/** A call the model opens in auto mode: valid, no markup in the text, streamed as answered whole. */
async function autoCallRead(body: ChatBody): Promise<void> {
  const c = (await server.http.chat(body)).choices[0];
  assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
  checkCalls(c.message.tool_calls, c.message.content);
  const stream = await streamed(body);
  assert.equal(stream.finish, "tool_calls");
  for (const m of MARKUP) assert.ok(!stream.content.includes(m), stream.content);
  assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
}

test("gemma 4: in auto mode, the model's writing <|tool_call> starts a call held to the schema", async () => {
  await autoCallRead(ask({ parallel_tool_calls: false, logit_bias: { [ids["<|tool_call>"]]: 100, [ids['<|"|>']]: 8 }, temperature: 1, seed: 3 }));
});

test("gemma 4, markers typed as its own vocabulary types them: the model's writing <|tool_call> starts a call, as llama-server's trigger word", async () => {
  const udIds = (await server.http.tokenize({ model: "gemma-ud", prompt: MARKERS.join(""), add_special_tokens: false })).tokens;
  assert.deepEqual(udIds, MARKERS.map((m) => ids[m]));
  for (const seed of [3, 5])
    await autoCallRead(ask({ model: "gemma-ud", parallel_tool_calls: false, logit_bias: { [ids["<|tool_call>"]]: 100, [ids['<|"|>']]: 8 }, temperature: 1, seed }));
  // Forced calls are written and read the same as with control-token markers.
  const forced = ask({ model: "gemma-ud", tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed: 2, logit_bias: { [ids['<|"|>']]: 8 } });
  const f = (await server.http.chat(forced)).choices[0];
  assert.equal(f.finish_reason, "tool_calls", JSON.stringify(f));
  checkCalls(f.message.tool_calls, f.message.content);
});

test("gemma 4, markers typed as its own vocabulary types them: a stray channel marker is nothing, as a control token's is", async () => {
  const answer = async (model: string, marker: string, thinking: Partial<ChatBody>) => {
    const body = { model, messages: [SYSTEM, QUESTION], max_tokens: 4, temperature: 0, logit_bias: { [ids[marker]]: 100 }, ...thinking } as ChatBody;
    const c = (await server.http.chat(body)).choices[0];
    const stream = await streamed(body);
    assert.equal(stream.content, c.message.content ?? "");
    assert.equal(stream.reasoning, c.message.reasoning_content ?? "");
    assert.equal(c.finish_reason, "length");
    return { content: c.message.content, reasoning: c.message.reasoning_content };
  };
  for (const marker of ["<|channel>", "<channel|>"]) {
    // In an answer whose section the prompt closed, the marker is nothing (it showed as its text).
    for (const model of ["gemma", "gemma-ud"]) assert.deepEqual(await answer(model, marker, OFF), { content: "", reasoning: undefined }, `${model} ${marker}`);
    // With thinking on, an empty channel or a lone closing marker before the answer is nothing too
    // (llama.cpp's parser reads the answer up to them), whichever way the markers are typed.
    for (const model of ["gemma", "gemma-ud"]) assert.deepEqual(await answer(model, marker, {}), { content: "", reasoning: undefined }, `${model} ${marker} on`);
  }
  // Its logprob entries are a control token's too: named, no bytes (the bytes spell the content, "").
  const entries = async (model: string) => {
    const body = { model, messages: [SYSTEM, QUESTION], max_tokens: 3, temperature: 0, logprobs: true, logit_bias: { [ids["<|channel>"]]: 100 }, ...OFF } as ChatBody;
    const c = (await server.http.chat(body)).choices[0];
    return c.logprobs!.content!.map((e) => [e.token, e.bytes]);
  };
  assert.deepEqual(await entries("gemma-ud"), await entries("gemma"));
  assert.deepEqual(await entries("gemma-ud"), [["<|channel>", null], ["<|channel>", null], ["<|channel>", null]]);
});

test("gemma 4: several calls in one turn are each read and valid", async () => {
  let most = 0;
  for (let seed = 1; seed <= 8 && most < 2; seed++) {
    const c = (await server.http.chat(ask({ tool_choice: "required", temperature: 1, seed, max_tokens: 300, logit_bias: { [ids["<|tool_call>"]]: 30, [ids['<|"|>']]: 8 } }))).choices[0];
    const calls = c.message.tool_calls!;
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
// llama-server's rendering of the tools (its /apply-template on the fixture, enable_thinking false).
const TOOLS_TEXT =
  '<|turn>system\nYou are a helpful assistant.<|tool>declaration:get_weather{description:<|"|>Get the weather for a city<|"|>,parameters:{properties:{city:{description:<|"|>City name<|"|>,type:<|"|>STRING<|"|>},days:{type:<|"|>INTEGER<|"|>}},required:[<|"|>city<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><turn|>\n';
// The same with thinking on (llama-server's default): the thinking instruction tops the system turn.
const THINKING_TOOLS_TEXT = TOOLS_TEXT.replace("<|turn>system\n", "<|turn>system\n<|think|>\n");
const USER = "<|turn>user\nWhat is the weather in Paris?<turn|>\n<|turn>model\n";
/** The section the template closes empty in its generation prompt when thinking is off. */
const CLOSED = "<|channel>thought\n<channel|>";

/** The prompt's tokens (thinking as `thinking` says) equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string, thinking: "default" | "off" = "off") {
  const switched = thinking === "off" ? OFF : {};
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...switched });
  // (The fixture's tokenizer adds BOS, as llama-server adds it when it tokenizes the rendered text.)
  const wanted = await server.http.tokenize({ model, prompt: expected });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...switched, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from llama-server's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

const ARGS = { city: "Paris", days: 3, opts: { a: [1, "x"], b: true } };
const ANSWERED: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: JSON.stringify(ARGS) } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
const CALL_TEXT = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{a:[1,<|"|>x<|"|>],b:true}}<tool_call|>';

test("gemma 4: the template declares the tools and writes a call in its notation and its result, as llama-server renders them", async () => {
  await assertPrompt("gemma", [SYSTEM, QUESTION], TOOLS_TEXT + USER + "<|channel>thought\n<channel|>");
  // The result as sent, a string to the template (the model's turn goes on after it).
  await assertPrompt("gemma", ANSWERED, TOOLS_TEXT + USER + CALL_TEXT + '<|tool_response>response:get_weather{value:<|"|>{"temp": 20}<|"|>}<tool_response|>');
});

test("gemma 4 (interleaved template): results go on the assistant's turn as llama-server passes them, a JSON result as its value", async () => {
  await assertPrompt("gemma-il", [SYSTEM, QUESTION], TOOLS_TEXT + USER + "<|channel>thought\n<channel|>");
  // After the results this template's generation prompt closes the section too, with thinking off.
  await assertPrompt("gemma-il", ANSWERED, TOOLS_TEXT + USER + CALL_TEXT + "<|tool_response>response:get_weather{temp:20}<tool_response|>" + CLOSED);
  // The answer after the results joins the same turn; a result that is not JSON is a string.
  await assertPrompt(
    "gemma-il",
    [...ANSWERED, { role: "assistant", content: "It is 20 degrees." }, { role: "user", content: "Thanks" }],
    TOOLS_TEXT + USER + CALL_TEXT + "<|tool_response>response:get_weather{temp:20}<tool_response|>It is 20 degrees.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n<|channel>thought\n<channel|>",
  );
  await assertPrompt(
    "gemma-il",
    [...ANSWERED.slice(0, 3), { role: "tool", tool_call_id: "call_abc123", content: "sunny" }],
    TOOLS_TEXT + USER + CALL_TEXT + '<|tool_response>response:get_weather{value:<|"|>sunny<|"|>}<tool_response|>' + CLOSED,
  );
});

test("gemma 4: a call Plinth returned goes back with its result, written as the model wrote it", async () => {
  const first = (await server.http.chat(ask({ tool_choice: { type: "function", function: { name: "get_time" } }, seed: 5, logit_bias: { [ids['<|"|>']]: 8 } }))).choices[0];
  const call = first.message.tool_calls![0];
  const zone = (JSON.parse(call.function.arguments) as { zone: string }).zone;
  const messages: ChatMessageBody[] = [SYSTEM, QUESTION, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: "noon" }];
  const rendered = await server.http.tokenize({ model: "gemma", messages, tools: TOOLS, ...OFF });
  const tail = await server.http.tokenize({ model: "gemma", prompt: `<|tool_call>call:get_time{zone:<|"|>${zone}<|"|>}<tool_call|><|tool_response>response:get_time{value:<|"|>noon<|"|>}<tool_response|>`, add_special_tokens: false });
  assert.deepEqual(rendered.tokens.slice(-tail.tokens.length), tail.tokens);
});

// ---- Thinking.

test("gemma 4: both templates are thinking models in the model list", async () => {
  const models = await server.client.models.list();
  const byId = Object.fromEntries(models.data.map((m) => [m.id, plinthModel(m)]));
  assert.equal(byId.gemma.reasoning, true);
  assert.equal(byId["gemma-il"].reasoning, true);
});

const ANSWERED_WITH_TEXT: ChatMessageBody[] = [SYSTEM, QUESTION, { ...ANSWERED[2], content: "Let me check." }, ANSWERED[3]];

test("gemma 4: with thinking left alone (on, as llama-server sets it) and off, prompts are llama-server's", async () => {
  const RESULT = '<|tool_response>response:get_weather{value:<|"|>{"temp": 20}<|"|>}<tool_response|>';
  // Left alone: <|think|> in the system turn, and the generation prompt leaves the section to the model.
  await assertPrompt("gemma", [SYSTEM, QUESTION], THINKING_TOOLS_TEXT + USER, "default");
  await assertPrompt("gemma", ANSWERED, THINKING_TOOLS_TEXT + USER + CALL_TEXT + RESULT, "default");
  // A turn closed after its results (an answer went with the calls): llama-server opens the model's
  // next turn itself, with no closed section even when thinking is off.
  await assertPrompt("gemma", ANSWERED_WITH_TEXT, THINKING_TOOLS_TEXT + USER + CALL_TEXT + RESULT + "Let me check.<turn|>\n<|turn>model\n", "default");
  await assertPrompt("gemma", ANSWERED_WITH_TEXT, TOOLS_TEXT + USER + CALL_TEXT + RESULT + "Let me check.<turn|>\n<|turn>model\n", "off");
  await assertPrompt("gemma-il", [SYSTEM, QUESTION], THINKING_TOOLS_TEXT + USER, "default");
  await assertPrompt("gemma-il", ANSWERED, THINKING_TOOLS_TEXT + USER + CALL_TEXT + "<|tool_response>response:get_weather{temp:20}<tool_response|>", "default");
  // Text that went with the calls: llama-server's rewrite of the messages for this template keeps
  // only the answer after the results, so the text is left out and the call is still in the notation.
  const ON_TURN = CALL_TEXT + "<|tool_response>response:get_weather{temp:20}<tool_response|>";
  await assertPrompt("gemma-il", ANSWERED_WITH_TEXT, THINKING_TOOLS_TEXT + USER + ON_TURN, "default");
  await assertPrompt("gemma-il", ANSWERED_WITH_TEXT, TOOLS_TEXT + USER + ON_TURN + CLOSED, "off");
  const answered: ChatMessageBody[] = [...ANSWERED_WITH_TEXT, { role: "assistant", content: "It is 20 degrees." }, { role: "user", content: "Thanks" }];
  await assertPrompt("gemma-il", answered, THINKING_TOOLS_TEXT + USER + ON_TURN + "It is 20 degrees.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n", "default");
  await assertPrompt("gemma-il", answered, TOOLS_TEXT + USER + ON_TURN + "It is 20 degrees.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n" + CLOSED, "off");
  // Without tools or a system message, thinking on still opens a system turn for <|think|>.
  for (const model of ["gemma", "gemma-il"]) {
    const on = await server.http.tokenize({ model, messages: [QUESTION] });
    const off = await server.http.tokenize({ model, messages: [QUESTION], ...OFF });
    assert.deepEqual(on.tokens, (await server.http.tokenize({ model, prompt: "<|turn>system\n<|think|>\n<turn|>\n" + USER })).tokens);
    assert.deepEqual(off.tokens, (await server.http.tokenize({ model, prompt: USER + CLOSED })).tokens);
  }
});

test("gemma 4: every dialect's control turns thinking on and off (no 'no thinking section' refusal)", async () => {
  const plain = { model: "gemma", messages: [SYSTEM, QUESTION], max_tokens: 1 };
  const count = async (extra: Partial<ChatBody>) => (await server.http.chat({ ...plain, ...extra } as ChatBody)).usage!.prompt_tokens;
  const on = (await server.http.tokenize({ model: "gemma", messages: [SYSTEM, QUESTION] })).tokens.length;
  const off = (await server.http.tokenize({ model: "gemma", messages: [SYSTEM, QUESTION], ...OFF })).tokens.length;
  assert.notEqual(on, off);
  assert.equal(await count({}), on);
  for (const extra of [{ reasoning_effort: "none" }, OFF, { reasoning: { enabled: false } }] as Partial<ChatBody>[]) assert.equal(await count(extra), off, JSON.stringify(extra));
  for (const extra of [{ reasoning_effort: "high" }, { chat_template_kwargs: { enable_thinking: true } }, { reasoning: { enabled: true } }] as Partial<ChatBody>[])
    assert.equal(await count(extra), on, JSON.stringify(extra));
});

test("gemma 4: the thought is reasoning_content, never content, and a forced call follows it (streamed the same)", async () => {
  for (const model of ["gemma", "gemma-il"]) {
    // Held to a call from its first token, the model could not open the section: Plinth opens it as
    // the template writes it, and the minimal effort's budget closes it for the random-weight model.
    const body = ask({ model, tool_choice: "required", parallel_tool_calls: false, chat_template_kwargs: undefined, reasoning_effort: "minimal", temperature: 0, max_tokens: 300, logit_bias: { [ids['<|"|>']]: 8 } });
    const c = (await server.http.chat(body)).choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.ok(c.message.reasoning_content && c.message.reasoning_content.length > 0, JSON.stringify(c.message));
    assert.ok(!c.message.content, JSON.stringify(c.message));
    checkCalls(c.message.tool_calls, c.message.content);
    for (const m of MARKUP) assert.ok(!c.message.reasoning_content!.includes(m), `${m} in ${c.message.reasoning_content}`);
    const stream = await streamed(body);
    assert.equal(stream.reasoning, c.message.reasoning_content);
    assert.equal(stream.content, "");
    assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
  }
});
