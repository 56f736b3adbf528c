import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { BPE_SPEC, ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { nemoCallId } from "../../src/engines/llama-cpp/mistral-wrapper.ts";
import { GRANITE_3_3_TEMPLATE, KIMI_K2_TEMPLATE, MISTRAL_NEMO_TEMPLATE, MISTRAL_SMALL_3_2_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling for templates whose call markers are control tokens and whose layout node-llama-cpp
// cannot read: Mistral Small 3.x (`[TOOL_CALLS]name[ARGS]{json}`) and Granite 3.x
// (`<|tool_call|>[{"name": …, "arguments": …}]`). The fixtures are the tiny BPE model with the
// family's real template and its markers as control tokens, as in the real vocabularies. The
// expected prompts are llama-server's (--jinja) renderings of the same conversations, or, where
// llama-server refuses Mistral's template (it checks ids are 9 characters, and passes the client's),
// Python Jinja's rendering of the template with the ids node-llama-cpp gives calls.

const MISTRAL_MARKERS = [
  "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
  "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]",
];
const GRANITE_MARKERS = ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"];
const MISTRAL_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-mistral-small-3.2", chatTemplate: MISTRAL_SMALL_3_2_TEMPLATE, controlTokens: MISTRAL_MARKERS };
const NEMO_MARKERS = ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"];
const NEMO_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-mistral-nemo", chatTemplate: MISTRAL_NEMO_TEMPLATE, controlTokens: NEMO_MARKERS };
const GRANITE_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-granite-3.3", chatTemplate: GRANITE_3_3_TEMPLATE, controlTokens: GRANITE_MARKERS };
// Kimi K2: node-llama-cpp reads its layout from samples but cuts `<|tool_calls_section_begin|>` in
// two (its markers share their first characters); Plinth moves the cut back to the marker's edge.
const KIMI_MARKERS = [
  // (<|im_end|> is the fixture vocabulary's own already.)
  "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
  "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
];
const KIMI_SPEC: FixtureSpec = { ...BPE_SPEC, name: "plinth-kimi-k2", chatTemplate: KIMI_K2_TEMPLATE, controlTokens: KIMI_MARKERS };

let server: TestServer;
/** Token ids of each model's markers, by model and text. */
const ids: Record<string, Record<string, number>> = {};
before(async () => {
  const [mistral, granite, nemo, kimi] = [MISTRAL_SPEC, GRANITE_SPEC, NEMO_SPEC, KIMI_SPEC].map((spec) => ensureFixtureModel(spec));
  server = await startTestServer({ model: [`mistral=${await mistral}`, `granite=${await granite}`, `nemo=${await nemo}`, `kimi=${await kimi}`] });
  for (const [model, markers] of [["mistral", MISTRAL_MARKERS], ["granite", GRANITE_MARKERS], ["nemo", NEMO_MARKERS], ["kimi", KIMI_MARKERS]] as const) {
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

const checkCalls = toolCallChecker({ get_weather: weather, get_time: clock }, [...MISTRAL_MARKERS, ...GRANITE_MARKERS, ...KIMI_MARKERS, "[", "]"]);

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({
  model,
  messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is the weather in Paris?" }],
  tools: TOOLS,
  max_tokens: 120,
  ...extra,
});

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

/** How each family's calls open (Nemo's is the older JSON list, as node-llama-cpp's Mistral wrapper writes it). */
const OPENINGS: Record<string, string> = {
  mistral: "[TOOL_CALLS]",
  granite: '<|tool_call|>[{"name": "',
  nemo: '[TOOL_CALLS][{"name": "',
  kimi: "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
};

for (const model of ["mistral", "granite", "nemo", "kimi"]) {
  test(`${model}: a forced call (required, named) is a valid tool_calls answer, streamed the same, no marker in content`, async () => {
    for (let seed = 1; seed <= 4; seed++) {
      const r = await server.http.chat(ask(model, { tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed }));
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      checkCalls(c.message.tool_calls, c.message.content);
    }
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const answer = await server.http.chat(named);
    const whole = answer.choices[0];
    // The call opens as the family's calls open: the prompt (as /tokenize counts it, with a forced
    // call's opening) is the template's rendering, then that opening.
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools });
    const opening = await server.http.tokenize({ model, prompt: OPENINGS[model], add_special_tokens: false });
    assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
    assert.equal(answer.usage!.prompt_tokens, forced.count);
    assert.equal(whole.finish_reason, "tool_calls");
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls, whole.message.content);
    const stream = await streamed(named);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
  });

  test(`${model}: in auto mode, the model's sampling its control-token marker starts a call, held to the schema`, async () => {
    const marker = { granite: "<|tool_call|>", kimi: "<|tool_calls_section_begin|>" }[model] ?? "[TOOL_CALLS]";
    const body = ask(model, { parallel_tool_calls: false, logit_bias: { [ids[model][marker]]: 100 }, temperature: 1, seed: 3 });
    await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
    // Without tools the marker stays what it decodes to: nothing.
    const plain = (await server.http.chat({ ...body, tools: undefined, parallel_tool_calls: undefined, max_tokens: 4 })).choices[0];
    assert.equal(plain.message.tool_calls, undefined);
    assert.ok(!(plain.message.content ?? "").includes(marker));
  });
}

test("a call layout's closing and inner markers sampled outside a call decode to nothing, streamed or not: only the opening marker reads as text there", async () => {
  // Kimi K2's markers after its opening one, made certain; the opening one banned.
  const inner = ["<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>"];
  const bias = Object.fromEntries([...inner.map((m) => [ids.kimi[m], 100]), [ids.kimi["<|tool_calls_section_begin|>"], -100]]);
  const body = ask("kimi", { logit_bias: bias, temperature: 1, seed: 5, max_tokens: 24 });
  const c = (await server.http.chat(body)).choices[0];
  assert.equal(c.message.tool_calls, undefined, JSON.stringify(c));
  for (const m of inner) assert.ok(!(c.message.content ?? "").includes(m), `${m} in ${JSON.stringify(c.message.content)}`);
  const stream = await streamed(body);
  for (const m of inner) assert.ok(!stream.content.includes(m), `${m} in ${JSON.stringify(stream.content)}`);
  const raw = await server.http.chat({ ...body, logprobs: true });
  const entries = raw.choices[0].logprobs!.content!;
  // The markers were sampled (and counted): each decoded to nothing, and its logprob entry names it
  // (a control token has no bytes).
  assert.equal(raw.usage!.completion_tokens, 24);
  assert.equal(entries.length, 24);
  for (const e of entries) assert.ok(inner.includes(e.token) && e.bytes === null, JSON.stringify(e));
  assert.equal(raw.choices[0].message.content, "");
});

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };
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

const MISTRAL_TOOLS = '[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}][/AVAILABLE_TOOLS]';

test("mistral: tools, a call and its result are written by the template, as llama-server and the template render them", async () => {
  const bos = "<|startoftext|>";
  await assertPrompt("mistral", [SYSTEM, QUESTION], `${bos}[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]${MISTRAL_TOOLS}[INST]What is the weather in Paris?[/INST]`);
  await assertPrompt(
    "mistral",
    ROUND_TRIP,
    `${bos}[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]${MISTRAL_TOOLS}[INST]What is the weather in Paris?[/INST]` +
      // The template takes ids of 9 letters or digits: OpenAI's `call_…` is mapped to that shape.
      `[TOOL_CALLS]get_weather[CALL_ID]${nemoCallId("call_abc123", new Set())}[ARGS]{"city": "Paris"}<|im_end|>[TOOL_RESULTS]${nemoCallId("call_abc123", new Set())}[TOOL_CONTENT]{"temp": 20}[/TOOL_RESULTS]`,
  );
});

const GRANITE_TOOLS =
  '<|start_of_role|>available_tools<|end_of_role|>[\n    {\n        "type": "function",\n        "function": {\n            "name": "get_weather",\n            "description": "Get the weather for a city",\n            "parameters": {\n                "type": "object",\n                "properties": {\n                    "city": {\n                        "type": "string",\n                        "description": "City name"\n                    }\n                },\n                "required": [\n                    "city"\n                ]\n            }\n        }\n    }\n]<|end_of_text|>\n';

test("granite: tools go into the template's available_tools turn and results into tool turns, as llama-server renders them", async () => {
  const system = "<|start_of_role|>system<|end_of_role|>You are a helpful assistant.<|end_of_text|>\n";
  const user = "<|start_of_role|>user<|end_of_role|>What is the weather in Paris?<|end_of_text|>\n";
  const open = "<|start_of_role|>assistant<|end_of_role|>";
  await assertPrompt("granite", [SYSTEM, QUESTION], system + GRANITE_TOOLS + user + open);
  await assertPrompt("granite", ROUND_TRIP, system + GRANITE_TOOLS + user + `${open}<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>{"temp": 20}<|end_of_text|>\n${open}`);
});

for (const model of ["mistral", "granite"]) {
  test(`${model}: a call Plinth returned goes back with its result, and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

for (const [model, marker, between] of [["mistral", "[TOOL_CALLS]", "[TOOL_CALLS]"], ["granite", "<|tool_call|>", ", "], ["nemo", "[TOOL_CALLS]", ", "]] as const) {
  test(`${model}: several calls in one turn (${JSON.stringify(between)} between them) are each read and valid`, async () => {
    let most = 0;
    for (let seed = 1; seed <= 12 && most < 2; seed++) {
      // The fixture ends the group at once unless the next [TOOL_CALLS] is made likelier (too likely, and the
      // model also writes it inside argument strings, whose grammar takes a control token by its text).
      const bias = model === "mistral" ? { [ids[model][marker]]: 33 } : {};
      const r = await server.http.chat(ask(model, { tool_choice: "required", temperature: 1, seed, logit_bias: bias, max_tokens: 200 }));
      const c = r.choices[0];
      const calls = c.message.tool_calls!;
      checkCalls(c.finish_reason === "tool_calls" ? calls : calls.slice(0, -1), c.message.content);
      most = Math.max(most, calls.length);
    }
    assert.ok(most >= 2, `no seed produced more than ${most} call`);
  });
}

test("mistral: with a response format in auto mode, the answer's grammar lets the marker token start a call", async () => {
  const body = ask("mistral", { parallel_tool_calls: false, response_format: { type: "json_object" }, logit_bias: { [ids.mistral["[TOOL_CALLS]"]]: 100 }, seed: 2 });
  const c = (await server.http.chat(body)).choices[0];
  assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
  checkCalls(c.message.tool_calls, c.message.content);
  // Kept out, the answer is the format's.
  const plain = (await server.http.chat({ ...body, logit_bias: { [ids.mistral["[TOOL_CALLS]"]]: -100 }, max_tokens: 40 })).choices[0];
  assert.equal(plain.message.tool_calls, undefined);
  assert.ok((plain.message.content ?? "").trimStart().startsWith("{"), plain.message.content ?? "");
});

test("nemo: a call's id is the one the model wrote (9 letters or digits, as llama.cpp's grammar has it), streamed the same, and written back as it is", async () => {
  const named = ask("nemo", { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
  const whole = (await server.http.chat(named)).choices[0];
  const calls = whole.message.tool_calls!;
  for (const c of calls) assert.match(c.id, /^[A-Za-z0-9]{9}$/);
  assert.equal(new Set(calls.map((c) => c.id)).size, calls.length);
  const stream = await streamed(named);
  assert.deepEqual(stream.calls.map((c) => c.id), calls.map((c) => c.id));
  // The next turn shows the model its call as it wrote it, id and all, and the result by that id.
  const history = [...named.messages, { role: "assistant" as const, content: null, tool_calls: calls }, ...calls.map((c) => ({ role: "tool" as const, tool_call_id: c.id, content: "12:00" }))];
  const prompt = await server.http.tokenize({ model: "nemo", messages: history, tools: named.tools, return_token_strs: true } as never);
  const text = (prompt as unknown as { token_strs: string[] }).token_strs.join("");
  for (const c of calls) {
    assert.ok(text.includes(`"id": "${c.id}"}`) || text.includes(`"id":▁"${c.id}"}`) || text.includes(`"id":Ġ"${c.id}"}`), text);
    assert.ok(text.includes(c.id + '"}[/TOOL_RESULTS]'), text);
  }
});
