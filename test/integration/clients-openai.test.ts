import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type OpenAI from "openai";
import { EXTRA_TOKENS, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { type ClientChatStreamParams, functionOf } from "../helpers/requests.ts";
import { useTestServer } from "../helpers/server.ts";

// The `openai` Node SDK's stream helper (`chat.completions.stream`) builds the message from the
// deltas; what it ends with must match the non-streamed reply, content null for a tool-call-only
// answer included. (The rest of the SDK's surface is covered by the other integration tests.)

const s = useTestServer({}, { think: true });

const weather = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [{ type: "function" as const, function: { name: "get_weather", description: "Weather for a city", parameters: weather, strict: true } }];
/** Calls by name and arguments (ids are fresh per request). */
const calls = (m: OpenAI.Chat.ChatCompletionMessage) => (m.tool_calls ?? []).map((c) => [functionOf(c).name, functionOf(c).arguments]);
const ask = { messages: [{ role: "user" as const, content: "What is the weather in Paris?" }], temperature: 0 };

test("a streamed tool-call-only answer: the role chunk has content null, and finalChatCompletion() ends with content null", async () => {
  const body = { model: "think", ...ask, tools, tool_choice: "required" as const, reasoning_effort: "none" as const, max_tokens: 100 };
  const params: ClientChatStreamParams = { ...body, stream: true };
  const whole = await s.client.chat.completions.create({ ...body, stream: false });
  assert.equal(whole.choices[0].message.content, null);

  const raw = await s.http.chatStream(body);
  assert.deepEqual(raw.chunks[0].choices[0].delta, { role: "assistant", content: null, refusal: null });
  for (const chunk of raw.chunks) for (const c of chunk.choices) assert.ok(!("content" in c.delta) || c.delta.content === null, JSON.stringify(c.delta));

  const stream = s.client.chat.completions.stream(params);
  const final = await stream.finalChatCompletion();
  const m = final.choices[0].message;
  assert.equal(m.content, null);
  assert.equal(m.refusal, null);
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.ok(m.tool_calls!.length > 0);
  assert.deepEqual(calls(m), calls(whole.choices[0].message));
});

test("a streamed text answer still accumulates its text, equal to the non-streamed one", async () => {
  const params: ClientChatStreamParams = { model: "tiny", ...ask, max_tokens: 12, stream: true };
  const whole = await s.client.chat.completions.create({ ...params, stream: false });
  const stream = s.client.chat.completions.stream(params);
  let deltas = "";
  stream.on("content", (delta) => {
    deltas += delta;
  });
  const final = await stream.finalChatCompletion();
  assert.ok(whole.choices[0].message.content!.length > 0);
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
  assert.equal(deltas, whole.choices[0].message.content);
  assert.equal(final.choices[0].finish_reason, whole.choices[0].finish_reason);
});

test("text before a call stays content when streamed, as it does when not", async () => {
  // A few words first, then the call marker becomes likely.
  const params: ClientChatStreamParams = {
    model: "think",
    ...ask,
    tools,
    reasoning_effort: "none",
    parallel_tool_calls: false,
    max_tokens: 100,
    temperature: 1,
    seed: 1,
    logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 6 },
    stream: true,
  };
  const whole = await s.client.chat.completions.create({ ...params, stream: false });
  assert.ok(whole.choices[0].message.content!.length > 0, "text before the call");
  assert.ok(whole.choices[0].message.tool_calls!.length > 0, "a call");
  const final = await s.client.chat.completions.stream(params).finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
  assert.deepEqual(calls(final.choices[0].message), calls(whole.choices[0].message));
});

test("an answer with no text and no call (an immediate stop) is \"\" streamed as it is not streamed", async () => {
  const params = { model: "tiny", ...ask, max_tokens: 8, logit_bias: { [FIXTURE_TOKENS.imEnd]: 100 } };
  const whole = await s.http.chat(params);
  assert.equal(whole.choices[0].message.content, "");
  const raw = await s.http.chatStream(params);
  assert.equal(raw.chunks[0].choices[0].delta.content, null);
  const last = raw.chunks.find((c) => c.choices[0]?.finish_reason)!;
  assert.deepEqual(last.choices[0].delta, { content: "" });
  assert.equal(last.choices[0].finish_reason, "stop");
});

test("a tool conversation that sends back each assistant message as the SDK hands it over (create, parse, the stream helper) goes on", async () => {
  const body = { model: "think", ...ask, tools, tool_choice: "required" as const, reasoning_effort: "none" as const, max_tokens: 100 };
  const handedOver: Array<[string, OpenAI.Chat.ChatCompletionMessage]> = [
    ["create()", (await s.client.chat.completions.create(body)).choices[0].message],
    // parse() adds `parsed: null` to the message and `parsed_arguments` to each strict tool's call.
    ["parse()", (await s.client.chat.completions.parse(body)).choices[0].message],
    // The stream helper builds the message from the chunks, with `parsed_arguments` too.
    ["stream()", (await s.client.chat.completions.stream({ ...body, stream: true }).finalChatCompletion()).choices[0].message],
  ];
  for (const [how, message] of handedOver) {
    assert.ok(message.tool_calls!.length > 0, how);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [...ask.messages, message];
    // The function's name on the result, as LangChain and LlamaIndex send it.
    for (const c of message.tool_calls!) messages.push({ role: "tool", tool_call_id: c.id, content: '{"temp": 21}', name: functionOf(c).name } as OpenAI.Chat.ChatCompletionToolMessageParam);
    const next = await s.client.chat.completions.create({ ...body, messages, tool_choice: "none", max_tokens: 8 });
    assert.equal(next.choices[0].message.role, "assistant", how);
  }
  // A thinking answer's reasoning_content and reasoning go back with it.
  const thought = (await s.client.chat.completions.create({ model: "think", ...ask, max_tokens: 16 })).choices[0].message as OpenAI.Chat.ChatCompletionMessage & { reasoning_content?: string };
  assert.equal(typeof thought.reasoning_content, "string");
  const again = await s.client.chat.completions.create({ model: "think", messages: [...ask.messages, thought, { role: "user", content: "And in Rome?" }], max_tokens: 4 });
  assert.equal(again.choices[0].message.role, "assistant");
});
