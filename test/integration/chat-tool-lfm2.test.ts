import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { LFM2_5_TEMPLATE, LFM2_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, assertMarkerStartsCall, streamedCalls, toolCallChecker } from "../helpers/tool-calls.ts";

// Tool calling for Liquid's LFM2 and LFM2.5, whose calls are a Python list of calls with keyword
// arguments between markers:
//   <|tool_call_start|>[get_weather(city="Paris", days=3), get_time(zone="UTC")]<|tool_call_end|>
// tools listed as JSON in the system turn, results in `tool` turns. node-llama-cpp read no layout
// from these templates (LFM2's writes no calls; from LFM2.5's it read one `params=` argument holding
// JSON) and fell back to its generic `||call:` system message. The fixtures are the tiny BPE model
// with each real template and the family's markers as control tokens, as in the real vocabularies;
// the expected prompts are llama-server's (--jinja, /apply-template) renderings of the same
// conversations on the same files.

const MARKERS = ["<|tool_call_start|>", "<|tool_call_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>"];
const LFM2_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-lfm2", chatTemplate: LFM2_TEMPLATE, controlTokens: MARKERS };
const LFM2_5_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-lfm2.5", chatTemplate: LFM2_5_TEMPLATE, controlTokens: MARKERS };

let server: TestServer;
/** The fixtures' ids of the markers, by text (the same in both). */
const ids: Record<string, number> = {};
before(async () => {
  server = await startTestServer({ model: [`lfm2=${await ensureFixtureModel(LFM2_SPEC)}`, `lfm25=${await ensureFixtureModel(LFM2_5_SPEC)}`] });
  const { tokens } = await server.http.tokenize({ model: "lfm2", prompt: MARKERS.join(""), add_special_tokens: false });
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
    metric: { type: "boolean" },
    note: { type: ["string", "null"], maxLength: 4 },
    hours: { type: "array", items: { type: "integer", minimum: 0, maximum: 23 }, maxItems: 2 },
  },
  required: ["city", "days"],
  additionalProperties: false,
};
const clock = { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"], additionalProperties: false };
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: weather } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a zone", parameters: clock } },
];

const MARKUP = [...MARKERS, "||call", "get_weather(", "get_time("];
const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, MARKUP);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({ model, messages: [SYSTEM, QUESTION], tools: TOOLS, max_tokens: 200, ...extra });

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

for (const model of ["lfm2", "lfm25"]) {
  test(`${model}: a forced call (required, named) is written as a Python call and read back as JSON arguments valid for the schema, streamed the same`, async () => {
    const seen = new Set<string>();
    for (let seed = 1; seed <= 8; seed++) {
      const choice = seed <= 4 ? "required" : { type: "function" as const, function: { name: "get_weather" } };
      const body = ask(model, { tool_choice: choice, parallel_tool_calls: false, temperature: 1, seed });
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
    // The call opens as the family writes calls: the prompt, then `<|tool_call_start|>[`.
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools });
    const opening = await server.http.tokenize({ model, prompt: "<|tool_call_start|>[", add_special_tokens: false });
    assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
    const whole = (await server.http.chat(named)).choices[0];
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls, whole.message.content);
  });

  test(`${model}: in auto mode, the model's writing <|tool_call_start|> starts a call held to the schema`, async () => {
    const body = ask(model, { parallel_tool_calls: false, logit_bias: { [ids["<|tool_call_start|>"]]: 100 }, temperature: 1, seed: 3 });
    await assertMarkerStartsCall(server.http, server.url, body, "<|tool_call_start|>", checkCalls);
  });

  test(`${model}: a call Plinth returned goes back with its result and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

test("lfm2: several calls in one turn are each read and valid", async () => {
  let most = 0;
  for (let seed = 1; seed <= 12 && most < 2; seed++) {
    // (Random weights rarely choose `, ` over `]` after a call: the comma is made likelier.)
    const comma = (await server.http.tokenize({ model: "lfm2", prompt: ",", add_special_tokens: false })).tokens[0];
    const c = (await server.http.chat(ask("lfm2", { tool_choice: "required", temperature: 1, seed, max_tokens: 300, logit_bias: { [comma]: 6 } }))).choices[0];
    const calls = c.message.tool_calls!;
    checkCalls(c.finish_reason === "tool_calls" ? calls : calls.slice(0, -1), c.message.content);
    most = Math.max(most, calls.length);
  }
  assert.ok(most >= 2, `no seed produced more than ${most} call`);
});

const ONE_TOOL = [
  {
    type: "function" as const,
    function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, days: { type: "integer" } }, required: ["city"] } },
  },
];

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string) {
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL });
  const wanted = await server.http.tokenize({ model, prompt: expected });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from llama-server's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

const ARGS = { city: "Paris", days: 3, ok: true, none: null, opts: { a: [1, "x"], b: true }, list: ["a", true, null, 2.5] };
const ANSWERED: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: JSON.stringify(ARGS) } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
// llama-server's renderings (/apply-template on the fixtures).
const TOOL_LIST =
  '[{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}}]';
const USER = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n";

test("lfm2: the template lists the tools between its markers and writes a result between its own, as llama-server renders them", async () => {
  const system = `<|startoftext|><|im_start|>system\nYou are a helpful assistant.\nList of tools: <|tool_list_start|>${TOOL_LIST}<|tool_list_end|><|im_end|>\n`;
  await assertPrompt("lfm2", [SYSTEM, QUESTION], `${system}${USER}<|im_start|>assistant\n`);
  // (LFM2's template writes an answered call's content only, as llama-server renders it too.)
  await assertPrompt("lfm2", ANSWERED, `${system}${USER}<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n<|tool_response_start|>{"temp": 20}<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n`);
});

test("lfm2.5: the template writes an answered call as Python keyword arguments (True, None, lists as Python writes them), as llama-server renders it", async () => {
  const system = `<|startoftext|><|im_start|>system\nYou are a helpful assistant.\nList of tools: ${TOOL_LIST}<|im_end|>\n`;
  await assertPrompt("lfm25", [SYSTEM, QUESTION], `${system}${USER}<|im_start|>assistant\n`);
  await assertPrompt(
    "lfm25",
    ANSWERED,
    `${system}${USER}<|im_start|>assistant\n<|tool_call_start|>[get_weather(city='Paris', days=3, ok=True, none=None, opts={"a": [1, "x"], "b": true}, list=['a', True, None, 2.5])]<|tool_call_end|><|im_end|>\n<|im_start|>tool\n{"temp": 20}<|im_end|>\n<|im_start|>assistant\n`,
  );
});

test("lfm2.5: a call Plinth returned goes back in the history written as the model wrote it", async () => {
  const first = (await server.http.chat(ask("lfm25", { tool_choice: { type: "function", function: { name: "get_time" } }, seed: 5 }))).choices[0];
  const call = first.message.tool_calls![0];
  const zone = (JSON.parse(call.function.arguments) as { zone: string }).zone;
  const messages: ChatMessageBody[] = [SYSTEM, QUESTION, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: "noon" }];
  const rendered = await server.http.tokenize({ model: "lfm25", messages, tools: TOOLS });
  const tail = await server.http.tokenize({ model: "lfm25", prompt: `<|tool_call_start|>[get_time(zone='${zone}')]<|tool_call_end|><|im_end|>\n<|im_start|>tool\nnoon<|im_end|>\n<|im_start|>assistant\n`, add_special_tokens: false });
  assert.deepEqual(rendered.tokens.slice(-tail.tokens.length), tail.tokens);
});
