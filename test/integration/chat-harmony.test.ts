// gpt-oss's "harmony" message layout, on a generated model with gpt-oss's structural tokens and
// name (node-llama-cpp picks its Harmony chat format by the name, as for real gpt-oss files).
import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Ajv } from "ajv";
import { ensureFixtureModel, HARMONY_SPEC, HARMONY_TOKENS } from "../fixtures/models.ts";
import { type ChatBody, type ClientChatStreamParams, functionOf, plinthChunk } from "../helpers/requests.ts";
import { logprobParts } from "../helpers/logprob-parts.ts";
import { startTestServer, useTestServer } from "../helpers/server.ts";

const s = useTestServer({}, { harmony: true });

const MARKERS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"];
const noMarkers = (text: string | null | undefined) => {
  for (const m of MARKERS) assert.ok(!(text ?? "").includes(m), `${m} leaked into ${JSON.stringify(text)}`);
};

const city = { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false };
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Weather for a city", parameters: city, strict: true } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a city", parameters: city, strict: true } },
];
const validCity = new Ajv({ strict: false }).compile(city);
const base = { model: "oss", messages: [{ role: "user" as const, content: "What is the weather in Paris?" }], max_tokens: 160 };
const chat = (body: Partial<ChatBody>) => s.http.post("/v1/chat/completions", { ...base, ...body });

test("the analysis channel is the reasoning, the final channel the answer; no markers leak", async () => {
  const r = await chat({ reasoning: { budget_tokens: 8 }, max_tokens: 60, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  const m = r.json.choices[0].message;
  assert.ok(m.reasoning_content!.length > 0);
  assert.ok(m.content!.length > 0);
  noMarkers(m.reasoning_content);
  noMarkers(m.content);
  // The 8 thinking tokens of the budget; the <|end|> written by force to close the analysis message
  // is output but not thinking.
  assert.equal(r.json.usage!.completion_tokens_details.reasoning_tokens, 8);
  // The engine's own message header after the thinking counts as output too.
  assert.equal(r.json.usage!.completion_tokens, 60);
  assert.equal(r.json.choices[0].finish_reason, "length");

  // Streamed: the same text, reasoning first. In a namespace of its own, so that its prompt is
  // evaluated as the first one was: taken from the cache, the last prompt token's logits come from a
  // one-token batch, whose floats differ from the whole prompt's in the last bits, and a greedy
  // choice between two near-equal tokens can go the other way (the harmony prompt carries the date,
  // so which day's prompt meets such a tie changes from day to day).
  const stream = await s.http.chatStream({ ...base, reasoning: { budget_tokens: 8 }, max_tokens: 60, temperature: 0, cache_salt: "streamed" });
  let reasoning = "";
  let content = "";
  for (const chunk of stream.chunks) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning_content) {
      assert.equal(content, "", "reasoning after content");
      reasoning += d.reasoning_content;
    }
    if (d.content) content += d.content;
  }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
});

test("the <|end|> that closes the analysis message is not listed in the reasoning's logprobs", async () => {
  const parts = await logprobParts(s.http, { ...base, max_tokens: 4, temperature: 0, logit_bias: { [HARMONY_TOKENS.end]: 100 } });
  assert.deepEqual(parts.reasoning, { text: "", tokens: [] });
});

test("the model's own <|end|> closes the analysis message; after the final header it ends the answer", async () => {
  // <|end|> is the only likely token: the first one closes the thinking, the next ends the answer.
  const r = await chat({ logit_bias: { [HARMONY_TOKENS.end]: 60 }, max_tokens: 50, temperature: 1, seed: 3 });
  assert.equal(r.status, 200, r.text);
  const choice = r.json.choices[0];
  assert.equal(r.json.usage!.completion_tokens_details.reasoning_tokens, 1, r.text);
  assert.equal(choice.message.content, "");
  assert.equal(choice.finish_reason, "stop", r.text);
  assert.ok(r.json.usage!.completion_tokens < 50, r.text);
});

test("thinking off: the analysis message is closed empty and everything is the answer", async () => {
  const r = await chat({ reasoning_effort: "none", max_tokens: 30, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  const m = r.json.choices[0].message;
  assert.equal(m.reasoning_content, undefined);
  assert.ok(m.content!.length > 0);
  noMarkers(m.content);
  assert.equal(r.json.usage!.completion_tokens_details.reasoning_tokens, 0);
});

test("reasoning_effort reaches the template's system message", async () => {
  const low = await chat({ reasoning_effort: "low", max_tokens: 1 });
  const high = await chat({ reasoning_effort: "high", max_tokens: 1 });
  const unset = await chat({ max_tokens: 1 });
  assert.equal(low.status, 200, low.text);
  // "Reasoning: low" and "Reasoning: high" tokenize to a different length than the default "medium".
  assert.notEqual(low.json.usage!.prompt_tokens, unset.json.usage!.prompt_tokens);
  assert.notEqual(high.json.usage!.prompt_tokens, unset.json.usage!.prompt_tokens);
});

test("tool_choice required after thinking: one call per turn, in gpt-oss's commentary layout, valid arguments", async () => {
  for (let seed = 1; seed <= 6; seed++) {
    const r = await chat({ tools: TOOLS, tool_choice: "required", reasoning: { budget_tokens: 6 }, temperature: 1, seed });
    assert.equal(r.status, 200, r.text);
    const choice = r.json.choices[0];
    assert.equal(choice.finish_reason, "tool_calls", r.text);
    assert.equal(choice.message.tool_calls!.length, 1);
    const call = choice.message.tool_calls![0];
    assert.ok(["get_weather", "get_time"].includes(call.function.name));
    assert.ok(validCity(JSON.parse(call.function.arguments)), call.function.arguments);
    assert.equal(choice.message.content, null);
    noMarkers(choice.message.reasoning_content);
  }
});

test("a named tool with thinking off is called straight away", async () => {
  const r = await chat({ tools: TOOLS, tool_choice: { type: "function", function: { name: "get_time" } }, reasoning_effort: "none", temperature: 1, seed: 4 });
  assert.equal(r.status, 200, r.text);
  const choice = r.json.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls![0].function.name, "get_time");
  assert.ok(validCity(JSON.parse(choice.message.tool_calls![0].function.arguments)));
});

test("json_schema after thinking; with tools in auto mode the answer is either a valid call or valid JSON", async () => {
  const response_format = { type: "json_schema" as const, json_schema: { name: "place", schema: city, strict: true } };
  const r = await chat({ response_format, reasoning: { budget_tokens: 6 }, temperature: 1, seed: 2 });
  assert.equal(r.status, 200, r.text);
  assert.ok(validCity(JSON.parse(r.json.choices[0].message.content!)), r.json.choices[0].message.content!);
  let calls = 0;
  let answers = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const a = await chat({ response_format, tools: TOOLS, reasoning: { budget_tokens: 6 }, temperature: 1, seed });
    assert.equal(a.status, 200, a.text);
    const m = a.json.choices[0].message;
    if (m.tool_calls) {
      calls++;
      assert.ok(validCity(JSON.parse(m.tool_calls[0].function.arguments)));
      assert.equal(a.json.choices[0].finish_reason, "tool_calls");
    } else {
      answers++;
      noMarkers(m.content);
      assert.ok(validCity(JSON.parse(m.content!)), m.content!);
    }
  }
  assert.equal(calls + answers, 6);
});

test("auto tools without a call: plain answer, no markers", async () => {
  const r = await chat({ tools: TOOLS, reasoning: { budget_tokens: 4 }, max_tokens: 40, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  const m = r.json.choices[0].message;
  if (!m.tool_calls) {
    assert.ok(m.content!.length > 0);
    noMarkers(m.content);
  }
});

test("a tool result in the history renders in gpt-oss's layout and the conversation goes on", async () => {
  const r = await s.http.post("/v1/chat/completions", {
    model: "oss",
    messages: [
      { role: "system", content: "Answer briefly." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "c1", content: '{"sky":"clear"}' },
    ],
    tools: TOOLS,
    reasoning: { budget_tokens: 4 },
    max_tokens: 20,
  });
  assert.equal(r.status, 200, r.text);
  noMarkers(r.json.choices[0].message.content);
  const tok = await s.http.post("/tokenize", {
    model: "oss",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "c1", content: '{"sky":"clear"}' },
    ],
  });
  const text = await s.http.post("/detokenize", { model: "oss", tokens: tok.json.tokens });
  assert.ok(text.json.prompt.includes("to=functions.get_weather"), text.json.prompt);
  assert.ok(text.json.prompt.includes("functions.get_weather to=assistant<|channel|>commentary<|message|>"), text.json.prompt);
  assert.ok(text.json.prompt.includes('"sky"'), text.json.prompt);
});

test("tools + streaming + logprobs together, in gpt-oss's layout", async () => {
  // Through the openai client: its stream accumulator must rebuild the call from Plinth's deltas.
  const params: ClientChatStreamParams = {
    ...base,
    tools: TOOLS,
    tool_choice: "required",
    reasoning: { budget_tokens: 4 },
    logprobs: true,
    top_logprobs: 2,
    temperature: 1,
    seed: 5,
    stream: true,
  };
  const stream = s.client.chat.completions.stream(params);
  let reasoningEntries = 0;
  for await (const chunk of stream) reasoningEntries += plinthChunk(chunk).choices[0]?.logprobs?.reasoning_content?.length ?? 0;
  const done = await stream.finalChatCompletion();
  const choice = done.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls!.length, 1);
  assert.ok(validCity(JSON.parse(functionOf(choice.message.tool_calls![0]).arguments)));
  assert.ok(reasoningEntries >= 4, `reasoning logprob entries: ${reasoningEntries}`);
});

test("a model that node-llama-cpp does not know as gpt-oss, but whose template writes its channels, gets the same handling", async () => {
  // Another name, and a template of its own that matches none of node-llama-cpp's known variants.
  const template = [
    "{%- for message in messages -%}",
    "{%- if message['role'] == 'assistant' -%}{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}",
    "{%- else -%}{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}{%- endif -%}",
    "{%- endfor -%}",
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}",
  ].join("");
  const path = await ensureFixtureModel({ ...HARMONY_SPEC, name: "plinth-channels", chatTemplate: template });
  const other = await startTestServer({ model: [`chan=${path}`] });
  try {
    const r = await other.http.post("/v1/chat/completions", { ...base, model: "chan", reasoning: { budget_tokens: 6 }, max_tokens: 30, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.ok(m.reasoning_content!.length > 0, r.text);
    noMarkers(m.reasoning_content);
    noMarkers(m.content);
  } finally {
    await other.close();
  }
});
