import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Ajv } from "ajv";
import type OpenAI from "openai";
import { EXTRA_TOKENS } from "../fixtures/models.ts";
import { type ChatCompletion, type ChatMessageBody, type ClientChatParams, type ClientChatStreamParams, functionOf } from "../helpers/requests.ts";
import { startTestServer, type TestServer, useTestServer } from "../helpers/server.ts";

const s = useTestServer({}, { think: true });

const weather = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
    unit: { enum: ["c", "f"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const clock = {
  type: "object",
  properties: { zone: { type: "string", maxLength: 8 } },
  required: ["zone"],
  additionalProperties: false,
};
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Weather for a city", parameters: weather, strict: true } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a zone", parameters: clock, strict: true } },
];
const ajv = new Ajv({ strict: false });
const validators = { get_weather: ajv.compile(weather), get_time: ajv.compile(clock) } as Record<string, ReturnType<typeof ajv.compile>>;
const base = { model: "think", messages: [{ role: "user" as const, content: "What is the weather in Paris?" }], tools: TOOLS, reasoning_effort: "none" as const, max_tokens: 120 };

type ToolCall = NonNullable<ChatCompletion["choices"][number]["message"]["tool_calls"]>[number];

function checkCalls(calls: ToolCall[] | undefined) {
  assert.ok(calls && calls.length > 0, "expected tool calls");
  const ids = new Set<string>();
  for (const call of calls) {
    assert.match(call.id, /^call_/);
    ids.add(call.id);
    assert.equal(call.type, "function");
    const args = JSON.parse(call.function.arguments);
    const validate = validators[call.function.name];
    assert.ok(validate, `unknown tool ${call.function.name}`);
    assert.ok(validate(args), `${call.function.arguments}: ${JSON.stringify(validate.errors)}`);
  }
  assert.equal(ids.size, calls.length, "call ids are unique");
}

test("tool_choice required: every answer is a valid call, over many seeds at temperature 1", async () => {
  for (let seed = 1; seed <= 8; seed++) {
    const r = await s.http.chat({ ...base, tool_choice: "required", temperature: 1, seed });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.content, null);
    checkCalls(c.message.tool_calls);
  }
});

test("a named tool_choice calls exactly that tool, once", async () => {
  for (let seed = 1; seed <= 4; seed++) {
    const r = await s.http.chat({
      ...base,
      tool_choice: { type: "function", function: { name: "get_time" } },
      temperature: 1,
      seed,
    });
    const calls = r.choices[0].message.tool_calls!;
    checkCalls(calls);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, "get_time");
  }
});

test("tool_choice allowed_tools: calls only the listed tools (required: one of them at least), and names a tool it does not have", async () => {
  const only = (mode: "auto" | "required", ...names: string[]) =>
    ({ type: "allowed_tools", allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) } }) as never;
  const eager = { [EXTRA_TOKENS.toolCallOpen]: 15 };
  for (let seed = 1; seed <= 4; seed++) {
    const r = await s.http.chat({ ...base, tool_choice: only("required", "get_time"), temperature: 1, seed, logit_bias: eager, max_tokens: 200 });
    const calls = r.choices[0].message.tool_calls!;
    if (r.choices[0].finish_reason === "tool_calls") checkCalls(calls);
    assert.ok(calls.length > 0 && calls.every((c) => c.function.name === "get_time"), JSON.stringify(calls));
  }
  // auto: a call the model starts is held to the allowed tools too.
  const started = await s.http.chat({ ...base, tool_choice: only("auto", "get_time"), parallel_tool_calls: false, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 } });
  assert.deepEqual(started.choices[0].message.tool_calls!.map((c) => c.function.name), ["get_time"]);
  const unknown = await s.http.post("/v1/chat/completions", { ...base, tool_choice: only("required", "get_time", "nope") });
  assert.equal(unknown.status, 400, unknown.text);
  assert.equal(unknown.error?.param, "tool_choice.allowed_tools.tools[1].function.name");
});

test("parallel_tool_calls: false allows one call; true lets the model make several", async () => {
  const eager = { [EXTRA_TOKENS.toolCallOpen]: 15 };
  const single = await s.http.chat({ ...base, tool_choice: "required", parallel_tool_calls: false, logit_bias: eager, max_tokens: 200 });
  assert.equal(single.choices[0].message.tool_calls!.length, 1);
  const several = await s.http.chat({ ...base, tool_choice: "required", logit_bias: eager, max_tokens: 200, seed: 5 });
  const calls = several.choices[0].message.tool_calls!;
  assert.ok(calls.length >= 2, `only ${calls.length} call(s)`);
  if (several.choices[0].finish_reason === "tool_calls") checkCalls(calls);
  else checkCalls(calls.slice(0, -1)); // the budget may cut the last one short
});

test("auto: a call the model starts on its own is constrained and parsed; text before it stays content", async () => {
  // The bias starts a call at once; one call per answer, or the bias would start call after call.
  const r = await s.http.chat({ ...base, parallel_tool_calls: false, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 } });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  checkCalls(c.message.tool_calls);
  assert.ok(!(c.message.content ?? "").includes("<tool_call>"));
});

test("auto without a call: plain content, no tool text leaks", async () => {
  const r = await s.http.chat({ ...base, max_tokens: 30, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: -100 } });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(typeof r.choices[0].message.content, "string");
});

test("tool_choice none: no calls even when the model writes the marker", async () => {
  const r = await s.http.chat({ ...base, tool_choice: "none", max_tokens: 20, logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 } });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.notEqual(r.choices[0].finish_reason, "tool_calls");
});

test("streamed tool calls: first delta has index, id, type, name; arguments concatenate to the non-streamed ones", async () => {
  // Through the openai client: its stream accumulator must rebuild the calls from Plinth's deltas.
  const params: ClientChatParams = { ...base, tool_choice: "required", temperature: 0 };
  const whole = await s.client.chat.completions.create(params);
  const streamParams: ClientChatStreamParams = { ...params, stream: true };
  const stream = s.client.chat.completions.stream(streamParams);
  const firsts: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  let contentText = "";
  for await (const chunk of stream) {
    for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) if (tc.id) firsts.push(tc);
    contentText += chunk.choices[0]?.delta?.content ?? "";
  }
  const final = await stream.finalChatCompletion();
  assert.ok(firsts.length > 0);
  for (const f of firsts) {
    assert.equal(typeof f.index, "number");
    assert.equal(f.type, "function");
    assert.ok(f.function!.name);
  }
  assert.equal(contentText, "");
  assert.deepEqual(
    final.choices[0].message.tool_calls!.map((c) => [functionOf(c).name, functionOf(c).arguments]),
    whole.choices[0].message.tool_calls!.map((c) => [functionOf(c).name, functionOf(c).arguments]),
  );
  assert.equal(final.choices[0].finish_reason, "tool_calls");
});

test("tools + streaming + logprobs together", async () => {
  const stream = await s.client.chat.completions.create({
    ...base,
    tool_choice: "required",
    stream: true,
    logprobs: true,
    top_logprobs: 2,
    temperature: 1,
    seed: 3,
  });
  let args = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) args += tc.function?.arguments ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "tool_calls");
  assert.ok(args.length > 2);
});

test("thinking first, then a forced call", async () => {
  // Greedy: sampled, the first token may end the turn or close the thinking section, leaving no reasoning.
  const r = await s.http.chat({ ...base, reasoning_effort: undefined, reasoning: { budget_tokens: 6 }, tool_choice: "required", temperature: 0 });
  assert.ok(r.choices[0].message.reasoning_content!.length > 0);
  checkCalls(r.choices[0].message.tool_calls);
});

test("tool results in history render through the template and the conversation continues", async () => {
  const first = await s.http.chat({ ...base, tool_choice: "required", temperature: 0 });
  const call = first.choices[0].message.tool_calls![0];
  const messages: ChatMessageBody[] = [
    ...base.messages,
    { role: "assistant", content: null, tool_calls: [call] },
    { role: "tool", tool_call_id: call.id, content: '{"temp": 21}' },
  ];
  const tok = await s.http.post("/tokenize", { model: "think", messages });
  assert.equal(tok.status, 200, tok.text);
  const text = await s.http.post("/detokenize", { model: "think", tokens: tok.json.tokens });
  assert.ok(text.json.prompt.includes('{"temp": 21}'), text.json.prompt);
  assert.ok(text.json.prompt.includes(call.function.name));
  const next = await s.http.chat({ model: "think", messages, tools: TOOLS, reasoning_effort: "none", max_tokens: 8 });
  assert.equal(next.choices.length, 1);
});

test("a call in history whose arguments are not JSON (one cut short by max_tokens) is kept as its text, and the conversation continues", async () => {
  const cut = '{"city": "Par';
  const messages: ChatMessageBody[] = [
    ...base.messages,
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: cut } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
  ];
  const tok = await s.http.post("/tokenize", { model: "think", messages });
  assert.equal(tok.status, 200, tok.text);
  const text = await s.http.post("/detokenize", { model: "think", tokens: tok.json.tokens });
  assert.ok(text.json.prompt.includes("Par"), text.json.prompt);
  const next = await s.http.chat({ model: "think", messages, tools: TOOLS, reasoning_effort: "none", max_tokens: 4 });
  assert.equal(next.choices.length, 1);
});

/** An assistant turn calling get_weather under each id. */
function calling(...ids: string[]): ChatMessageBody {
  return { role: "assistant", content: null, tool_calls: ids.map((id) => ({ id, type: "function" as const, function: { name: "get_weather", arguments: '{"city":"Paris","unit":"c"}' } })) };
}
const answer = (id: string): ChatMessageBody => ({ role: "tool", tool_call_id: id, content: "sunny" });
const ask = base.messages[0];

test("a tool call left unanswered before the next turn is a 400 naming the message that came too early, in OpenAI's words", async () => {
  const cases: Array<[ChatMessageBody[], string, string]> = [
    [[ask, calling("call_1"), { role: "user", content: "Well?" }], "messages[2].role", "call_1"],
    [[ask, calling("call_1", "call_2"), answer("call_2"), { role: "user", content: "Well?" }], "messages[3].role", "call_1"],
    [[ask, calling("call_1"), { role: "assistant", content: "It is sunny." }], "messages[2].role", "call_1"],
    [[ask, calling("call_1"), { role: "system", content: "Be brief." }, { role: "user", content: "Well?" }], "messages[2].role", "call_1"],
    [[ask, calling("call_1"), { role: "developer", content: "Be brief." }], "messages[2].role", "call_1"],
    // The answers stop short and the list ends: the call's own message is at fault.
    [[ask, calling("call_1", "call_2", "call_3"), answer("call_1")], "messages[1].tool_calls", "call_2, call_3"],
  ];
  for (const stream of [false, true]) {
    for (const [messages, param, ids] of cases) {
      const r = await s.http.postRaw("/v1/chat/completions", { ...base, messages, stream });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.error?.type, "invalid_request_error", r.text);
      assert.equal(r.error?.param, param, r.text);
      assert.equal(
        r.error?.message,
        `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${ids}`,
      );
    }
  }
});

test("every call answered (in any order) goes on; a trailing assistant turn with calls is still a prefill", async () => {
  const answered = await s.http.chat({ ...base, messages: [ask, calling("call_1", "call_2"), answer("call_2"), answer("call_1"), { role: "user", content: "And?" }], max_tokens: 4 });
  assert.equal(answered.choices.length, 1);
  const twoTurns = await s.http.chat({ ...base, messages: [ask, calling("call_1"), answer("call_1"), calling("call_2"), answer("call_2")], max_tokens: 4 });
  assert.equal(twoTurns.choices.length, 1);
  const prefill = await s.http.chat({ ...base, messages: [ask, calling("call_1")], max_tokens: 4 });
  assert.equal(prefill.choices.length, 1);
});

test("a tool message answering no earlier call is refused by the dialect, naming its tool_call_id", async () => {
  const r = await s.http.postRaw("/v1/chat/completions", { ...base, messages: [ask, calling("call_1"), answer("call_1"), answer("call_9")] });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.error?.type, "invalid_request_error");
  assert.equal(r.error?.param, "messages[3].tool_call_id", r.text);
  // A result for a call made before a later user message answers nothing either (it was answered
  // already; a late result would be a stray one in the prompt).
  const late = await s.http.postRaw("/v1/chat/completions", {
    ...base,
    messages: [ask, calling("call_1"), answer("call_1"), { role: "user", content: "again" }, answer("call_1")],
  });
  assert.equal(late.status, 400, late.text);
  assert.equal(late.error?.param, "messages[4].tool_call_id", late.text);
});

test("invalid tool definitions and choices are refused by name", async () => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ tools: [{ type: "function", function: { name: "bad name!" } }] }, "tools[0].function.name"],
    [{ tools: [TOOLS[0], TOOLS[0]] }, "tools[1].function.name"],
    [{ tools: TOOLS, tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice"],
    [{ tools: undefined, tool_choice: "required" }, "tool_choice"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", not: {} }, strict: true } }] }, "tools[0].function.parameters"],
    [{ tools: [{ type: "retrieval" }] }, "tools[0].type"],
  ];
  for (const [extra, param] of cases) {
    // Deliberately outside the schema's input type, so sent untyped.
    const r = await s.http.postRaw("/v1/chat/completions", { ...base, ...extra });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.error?.param, param, r.text);
  }
  // Not strict: an unenforceable schema still gets a JSON object.
  const loose = await s.http.post("/v1/chat/completions", {
    ...base,
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", not: {} } } }],
    tool_choice: "required",
  });
  assert.equal(loose.status, 200, loose.text);
  const args = loose.json.choices[0].message.tool_calls![0].function.arguments;
  assert.ok(args.trimStart().startsWith("{"), args);
  if (loose.json.choices[0].finish_reason === "tool_calls") assert.equal(typeof JSON.parse(args), "object");
});

/** A forced call at temperature 1 on a server with another call layout. */
function forcedCall(server: TestServer, seed: number, content = "Weather?") {
  return server.http.chat({
    model: "tiny",
    messages: [{ role: "user", content }],
    tools: TOOLS,
    tool_choice: "required",
    max_tokens: 200,
    temperature: 1,
    seed,
  });
}

/** A named tool_choice on a server with another call layout: that tool, with valid arguments. */
async function checkNamedCall(server: TestServer) {
  const named = await server.http.chat({
    model: "tiny",
    messages: [{ role: "user", content: "Time?" }],
    tools: TOOLS,
    tool_choice: { type: "function", function: { name: "get_time" } },
    max_tokens: 120,
  });
  assert.equal(named.choices[0].message.tool_calls![0].function.name, "get_time");
  checkCalls(named.choices[0].message.tool_calls);
}

test("other call layouts: Mistral's bracketed [TOOL_CALLS] group (forced with --chat-wrapper mistral)", async () => {
  const mistral = await startTestServer({ "chat-wrapper": "mistral" });
  try {
    // The random model ends the group after one call for some seeds and continues it for others;
    // every call it completed must be valid, and some seed must produce a group of several.
    let most = 0;
    for (let seed = 1; seed <= 12 && most < 2; seed++) {
      const parallel = await forcedCall(mistral, seed, "Weather and time?");
      const calls = parallel.choices[0].message.tool_calls!;
      checkCalls(parallel.choices[0].finish_reason === "tool_calls" ? calls : calls.slice(0, -1));
      most = Math.max(most, calls.length);
    }
    assert.ok(most >= 2, `no seed produced more than ${most} call`);
    const single = await mistral.http.chat({
      model: "tiny",
      messages: [{ role: "user", content: "Weather?" }],
      tools: TOOLS,
      tool_choice: "required",
      parallel_tool_calls: false,
      max_tokens: 120,
      seed: 9,
    });
    assert.equal(single.choices[0].finish_reason, "tool_calls");
    assert.equal(single.choices[0].message.tool_calls!.length, 1);
    checkCalls(single.choices[0].message.tool_calls);
    await checkNamedCall(mistral);
  } finally {
    await mistral.close();
  }
});

for (const [wrapper, layout] of [
  ["llama3.1", "Llama 3.1's <function=name>{…}</function>"],
  ["llama3.2-lightweight", 'Llama 3.2\'s JSON {"name": …, "parameters": {…}}'],
] as const) {
  test(`other call layouts: ${layout} (forced with --chat-wrapper ${wrapper})`, async () => {
    const server = await startTestServer({ "chat-wrapper": wrapper });
    try {
      for (let seed = 1; seed <= 4; seed++) {
        const choice = (await forcedCall(server, seed)).choices[0];
        assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
        checkCalls(choice.message.tool_calls);
        assert.equal(choice.message.content, null);
      }
      await checkNamedCall(server);
    } finally {
      await server.close();
    }
  });
}
