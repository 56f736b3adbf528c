import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { samplerSeed } from "../../src/core/random.ts";
import type { AddressInfo } from "node:net";
import OpenAI from "openai";
import type { EngineChunk } from "../../src/core/engine.ts";
import { ApiError } from "../../src/core/errors.ts";
import { scriptedApp, sseData, sseEvents, type ScriptedApp } from "../helpers/scripted-app.ts";

// Konan (/v3) request validation, defaults and rendering, through the real app over the SCRIPTED
// engine (no model). Behaviour that needs real sampling is in test/integration/konan-api.test.ts.

let s: ScriptedApp;
let client: OpenAI;
let base: string;
/** What the scripted engine answers: "Hello" then stop, or a script the test sets. */
let script: ((req: unknown) => Array<EngineChunk | Error>) | undefined;
before(async () => {
  s = await scriptedApp({ id: "Konan-LLM-ENT-11", contextSize: 512, script: (req) => script?.(req) ?? [{ kind: "text", text: "Hello", tokens: 1 }, { kind: "end", reason: "stop" }] });
  await s.app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(s.app.server.address() as AddressInfo).port}`;
  client = new OpenAI({ baseURL: `${base}/v3`, apiKey: "unused", maxRetries: 0 });
});
after(async () => {
  await s.app.close();
});

const model = "Konan-LLM-ENT-11";
const ok = { model, messages: [{ role: "user", content: "안녕" }] };
type Obj = Record<string, any>;

const post = async (payload: unknown) => {
  const r = await s.app.inject({
    method: "POST",
    url: "/v3/chat/completions",
    headers: { "content-type": "application/json" },
    payload: typeof payload === "string" ? payload : JSON.stringify(payload),
  });
  return { status: r.statusCode, body: r.body, json: (() => { try { return r.json() as Obj; } catch { return undefined as unknown as Obj; } })(), headers: r.headers };
};
/** The canonical request the engine was last asked to run. */
const lastRequest = () => s.engine.prepared.at(-1)!;

const rejects = async (body: unknown, param: string) => {
  const r = await post(body);
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.param, param, r.body);
  assert.equal(r.json.error.type, "invalid_request_error");
  assert.equal(typeof r.json.error.message, "string");
  return r;
};
const accepts = async (body: unknown) => {
  const r = await post(body);
  assert.equal(r.status, 200, r.body);
  return r.json;
};

test("000-01 POST /v3/chat/completions with {model, messages} returns one chat completion object (HTTP and openai client)", async () => {
  const j = await accepts(ok);
  assert.equal(j.object, "chat.completion");
  const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "안녕" }] });
  assert.equal(c.object, "chat.completion");
  assert.equal(c.choices[0].message.content, "Hello");
});

test("000-02 a request without messages is rejected", async () => {
  await rejects({ model }, "messages");
  await rejects({ model, messages: [] }, "messages");
});

test("000-03 a request without model is rejected", async () => {
  await rejects({ messages: ok.messages }, "model");
  await assert.rejects(client.chat.completions.create({ messages: ok.messages } as never), (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "model");
});

test("000-04 a message without role is rejected", async () => {
  await rejects({ model, messages: [{ content: "x" }] }, "messages[0].role");
  // Roles Konan does not document are refused too.
  await rejects({ model, messages: [{ role: "tool", content: "x" }] }, "messages[0].role");
});

test("a message holds role and content only: name, tool_calls or an unknown key are 400s naming it", async () => {
  await rejects({ model, messages: [{ role: "user", content: "hi", name: "bob" }] }, "messages[0].name");
  await rejects({ model, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "", tool_calls: [] }] }, "messages[1].tool_calls");
  await rejects({ model, messages: [{ role: "user", content: "x", reasoning_content: "y" }] }, "messages[0].reasoning_content");
  await rejects({ model, messages: [{ role: "assistant", content: "x", reasoning_content: 3 }, ok.messages[0]] }, "messages[0].reasoning_content");
  await rejects({ model, messages: [{ role: "system", content: "x", foo: 1 }] }, "messages[0].foo");
});

test("an answer sent back as history (with its reasoning_content) is accepted; the earlier thinking is not shown to the model", async () => {
  const turn = (reasoning_content?: string | null) => ({
    model,
    temperature: 0,
    max_completion_tokens: 4,
    messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello", ...(reasoning_content !== undefined ? { reasoning_content } : {}) }, { role: "user", content: "again" }],
  });
  const without = await accepts(turn());
  for (const r of ["a long earlier thought", null]) {
    const j = await accepts(turn(r));
    assert.equal(j.usage.prompt_tokens, without.usage.prompt_tokens, String(r));
  }
});

test("000-05 system, user and assistant messages with string content are accepted in one conversation", async () => {
  const j = await accepts({
    model,
    messages: [
      { role: "system", content: "너는 친절한 챗봇이야." },
      { role: "user", content: "안녕" },
      { role: "assistant", content: "안녕하세요!" },
      { role: "user", content: "잘 지내?" },
    ],
  });
  assert.equal(j.choices[0].message.role, "assistant");
  assert.deepEqual(
    (lastRequest().prompt as { messages: Array<{ role: string }> }).messages.map((m) => m.role),
    ["system", "user", "assistant", "user"],
  );
  await rejects({ model, messages: [{ role: "user", content: [{ type: "text", text: "x" }] }] }, "messages[0].content");
});

test("000-08 frequency_penalty omitted is 0; 000-09 repetition_penalty omitted is 1", async () => {
  await accepts(ok);
  assert.equal(lastRequest().sampling.frequencyPenalty, 0);
  assert.equal(lastRequest().sampling.repetitionPenalty, 1);
  assert.equal(lastRequest().sampling.presencePenalty, 0);
});

test("000-10 temperature 0 and 2 are accepted; 2.5 and -0.1 are rejected", async () => {
  await accepts({ ...ok, temperature: 0 });
  assert.equal(lastRequest().sampling.temperature, 0);
  await accepts({ ...ok, temperature: 2 });
  await rejects({ ...ok, temperature: 2.5 }, "temperature");
  await rejects({ ...ok, temperature: -0.1 }, "temperature");
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], temperature: 2.5 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
  );
});

test("000-11 frequency_penalty -2 and 2 are accepted; 2.5 is rejected", async () => {
  await accepts({ ...ok, frequency_penalty: -2 });
  assert.equal(lastRequest().sampling.frequencyPenalty, -2);
  await accepts({ ...ok, frequency_penalty: 2 });
  await rejects({ ...ok, frequency_penalty: 2.5 }, "frequency_penalty");
  await rejects({ ...ok, frequency_penalty: -2.5 }, "frequency_penalty");
});

test("000-12 repetition_penalty 0 and 2 are accepted; -0.1 and 2.1 are rejected", async () => {
  await accepts({ ...ok, repetition_penalty: 0 });
  assert.ok(lastRequest().sampling.repetitionPenalty > 0 && lastRequest().sampling.repetitionPenalty < 0.1, "0 runs as the sampler's floor");
  await accepts({ ...ok, repetition_penalty: 2 });
  assert.equal(lastRequest().sampling.repetitionPenalty, 2);
  await rejects({ ...ok, repetition_penalty: -0.1 }, "repetition_penalty");
  await rejects({ ...ok, repetition_penalty: 2.1 }, "repetition_penalty");
});

test("000-15 explicit null is accepted for every nullable field and behaves like omission", async () => {
  await accepts({ ...ok, seed: 7 });
  const omitted = lastRequest();
  const nulls = {
    temperature: null,
    top_p: null,
    frequency_penalty: null,
    repetition_penalty: null,
    max_completion_tokens: null,
    stop: null,
    stream: null,
    reasoning: null,
    output_parser: null,
    metadata: null,
  };
  const j = await accepts({ ...ok, seed: 7, ...nulls });
  assert.equal(j.object, "chat.completion");
  assert.deepEqual(lastRequest(), omitted);
  await accepts({ ...ok, seed: null });
  const seeded = lastRequest().sampling;
  assert.equal(seeded.temperature, 0.3);
});

test("000-16 stream omitted or false gives object chat.completion; 000-17 the object has id, object, created, model, choices, usage", async () => {
  for (const body of [ok, { ...ok, stream: false }]) {
    const j = await accepts(body);
    assert.equal(j.object, "chat.completion");
    assert.equal(typeof j.id, "string");
    assert.match(j.id, /^cmpl-/);
    assert.ok(Number.isInteger(j.created) && Math.abs(j.created - Date.now() / 1000) < 60);
    assert.equal(j.model, model);
    assert.ok(Array.isArray(j.choices));
    assert.equal(typeof j.usage, "object");
    // Konan's field set: no OpenAI-only fields.
    assert.equal(j.system_fingerprint, undefined);
    assert.equal(j.choices[0].logprobs, undefined);
    assert.equal(j.choices[0].message.refusal, undefined);
  }
});

test("000-18 choices[0].index is 0 and message.role is assistant", async () => {
  const j = await accepts(ok);
  assert.equal(j.choices[0].index, 0);
  assert.equal(j.choices[0].message.role, "assistant");
});

test("000-19 a non-streaming finish_reason is stop or length, a tool call included", async () => {
  script = () => [{ kind: "text", text: "ab", tokens: 2 }, { kind: "end", reason: "length" }];
  assert.equal((await accepts(ok)).choices[0].finish_reason, "length");
  script = () => [
    { kind: "tool-call", index: 0, id: "call_1", name: "f" },
    { kind: "tool-call-arguments", index: 0, text: "{}", tokens: 2 },
    { kind: "end", reason: "tool_calls" },
  ];
  const j = await accepts({ ...ok, tools: [{ type: "function", function: { name: "f" } }] });
  assert.equal(j.choices[0].finish_reason, "stop");
  assert.equal(j.choices[0].message.tool_calls[0].function.name, "f");
  // content is a string in Konan's reference (2.1.3): an answer that is only a call has "", as its
  // streamed deltas do, not OpenAI's null.
  assert.equal(j.choices[0].message.content, "");
  const streamed = sseData((await post({ ...ok, stream: true, tools: [{ type: "function", function: { name: "f" } }] })).body).filter((d) => d !== "[DONE]");
  assert.ok((streamed as Obj[]).every((c) => c.choices.every((ch: Obj) => ch.delta.content === undefined || typeof ch.delta.content === "string")), JSON.stringify(streamed));
  script = undefined;
  assert.equal((await accepts(ok)).choices[0].finish_reason, "stop");
});

test("000-20 max_completion_tokens below 1 or not an integer is rejected; the budget reaches the engine", async () => {
  await rejects({ ...ok, max_completion_tokens: 0 }, "max_completion_tokens");
  await rejects({ ...ok, max_completion_tokens: 1.5 }, "max_completion_tokens");
  await accepts({ ...ok, max_completion_tokens: 5 });
  assert.equal(lastRequest().maxTokens, 5);
  await accepts(ok);
  assert.equal(lastRequest().maxTokens, undefined, "null/absent: only the context bounds it");
  const over = await post({ ...ok, max_completion_tokens: 5000 });
  assert.equal(over.status, 400);
  assert.equal(over.json.error.param, "max_completion_tokens");
});

test("000-22 stop is accepted as a string, an array of strings and null", async () => {
  await accepts({ ...ok, stop: "\n" });
  assert.deepEqual(lastRequest().stop, ["\n"]);
  await accepts({ ...ok, stop: ["a", "b", "c", "d", "e"] });
  assert.deepEqual(lastRequest().stop, ["a", "b", "c", "d", "e"]);
  await accepts({ ...ok, stop: null });
  assert.deepEqual(lastRequest().stop, []);
  await rejects({ ...ok, stop: 5 }, "stop");
  // No limit is documented; 256 is Plinth's (each stop string is checked after every token, and a
  // million of them held every request for seconds).
  const many = Array.from({ length: 256 }, (_, i) => `zq${i}`);
  await accepts({ ...ok, stop: many });
  assert.equal(lastRequest().stop?.length, 256);
  await rejects({ ...ok, stop: [...many, "one more"] }, "stop");
});

test("000-23 total_tokens is prompt_tokens + completion_tokens; 000-24 reasoning_tokens sits at the top level of usage", async () => {
  const { usage } = await accepts(ok);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok("reasoning_tokens" in usage);
  assert.ok(usage.reasoning_tokens === null || Number.isInteger(usage.reasoning_tokens));
  assert.equal(usage.completion_tokens_details, undefined);
  assert.equal(usage.prompt_tokens_details, undefined);
});

async function stream(body: Obj) {
  const r = await post({ ...body, stream: true });
  assert.equal(r.status, 200, r.body);
  assert.match(String(r.headers["content-type"]), /^text\/event-stream/);
  return { raw: r.body, events: sseData(r.body) };
}

test("000-25 streamed: each event is a data: line and the last is data: [DONE]; 000-26 every chunk is chat.completion.chunk", async () => {
  const { raw, events } = await stream(ok);
  for (const block of raw.split("\n\n").filter((b) => b.trim())) assert.match(block, /^data: /);
  assert.equal(events.at(-1), "[DONE]");
  for (const c of events.slice(0, -1) as Obj[]) assert.equal(c.object, "chat.completion.chunk");
});

test("000-27 all chunks share one id; 000-28 all chunks share one created", async () => {
  script = () => [..."abcdef"].map((ch) => ({ kind: "text" as const, text: ch, tokens: 1 })).concat([{ kind: "end", reason: "stop" } as never]);
  const chunks = (await stream(ok)).events.slice(0, -1) as Obj[];
  script = undefined;
  assert.ok(chunks.length >= 7);
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.equal(new Set(chunks.map((c) => c.created)).size, 1);
});

test("000-29 every chunk before the final one has finish_reason null; 000-30 the final content chunk's is stop, length or error", async () => {
  for (const reason of ["stop", "length"] as const) {
    script = () => [{ kind: "text", text: "ab", tokens: 2 }, { kind: "end", reason }];
    const chunks = (await stream(ok)).events.slice(0, -1) as Obj[];
    for (const c of chunks.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);
    assert.equal(chunks.at(-1)!.choices[0].finish_reason, reason);
  }
  script = undefined;
});

test("000-31 the chunk with the final finish_reason carries usage, earlier chunks usage: null, with no stream_options (HTTP and openai client)", async () => {
  const chunks = (await stream(ok)).events.slice(0, -1) as Obj[];
  const last = chunks.at(-1)!;
  assert.equal(last.choices.length, 1, "no usage-only chunk with empty choices");
  assert.equal(last.choices[0].finish_reason, "stop");
  assert.ok(Number.isInteger(last.usage.prompt_tokens) && Number.isInteger(last.usage.completion_tokens));
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);

  const seen: OpenAI.Chat.ChatCompletionChunk[] = [];
  for await (const c of await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], stream: true })) seen.push(c);
  assert.equal(seen.at(-1)!.choices[0].finish_reason, "stop");
  assert.ok(seen.at(-1)!.usage!.total_tokens > 0);
  assert.ok(seen.slice(0, -1).every((c) => c.usage === null));
});

test("000-32 an error mid-stream is a chunk with finish_reason error whose delta.content holds the code and message, then [DONE]", async () => {
  script = () => [{ kind: "text", text: "Hel", tokens: 1 }, new ApiError(503, "The model was unloaded.", { code: "model_unloaded" })];
  const answered = await post({ ...ok, stream: true });
  const events = sseData(answered.body);
  script = undefined;
  // A failure of the server's quotes the request id the answer was sent under, as every 5xx does.
  assert.ok(JSON.stringify(events.at(-2)).includes(`(request id: ${answered.headers["x-request-id"]})`), JSON.stringify(events.at(-2)));
  assert.equal(events.at(-1), "[DONE]");
  const err = events.at(-2) as Obj;
  assert.equal(err.object, "chat.completion.chunk");
  assert.equal(err.choices[0].finish_reason, "error");
  assert.match(err.choices[0].delta.content, /model_unloaded/);
  assert.match(err.choices[0].delta.content, /The model was unloaded\./);
  assert.equal(err.id, (events[0] as Obj).id);
  // 000-31: the chunk with the final finish_reason carries the usage, an error ending too (one token generated).
  assert.equal(err.usage.completion_tokens, 1, JSON.stringify(err.usage));
  assert.ok(err.usage.prompt_tokens > 0);
  assert.equal(err.usage.total_tokens, err.usage.prompt_tokens + 1);
  // An unexpected failure gets a code too.
  script = () => [{ kind: "text", text: "Hel", tokens: 1 }, new Error("boom")];
  const other = (await stream(ok)).events;
  script = undefined;
  assert.equal((other.at(-2) as Obj).choices[0].finish_reason, "error");
  assert.match((other.at(-2) as Obj).choices[0].delta.content, /^\w+: \S/);
});

test("output_parser responses: a stream that fails mid-way reports the usage spent on its response.failed", async () => {
  script = () => [{ kind: "text", text: "Hel", tokens: 1 }, { kind: "text", text: "lo", tokens: 1 }, new Error("boom")];
  const answered = await post({ ...ok, stream: true, output_parser: "responses" });
  script = undefined;
  const failed = sseEvents(answered.body).find((e) => e.event === "response.failed");
  assert.ok(failed, answered.body);
  const usage = (failed.data as Obj).response.usage;
  assert.equal(usage?.output_tokens, 2, JSON.stringify(usage));
  assert.ok(usage.input_tokens > 0);
  assert.equal(usage.total_tokens, usage.input_tokens + 2);
});

test("000-33 delta.role is assistant on the first chunk", async () => {
  const chunks = (await stream(ok)).events as Obj[];
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  // delta.content is a string in Konan's reference, on every chunk.
  for (const c of chunks.slice(0, -1)) if ("content" in c.choices[0].delta) assert.equal(typeof c.choices[0].delta.content, "string", JSON.stringify(c));
});

test("000-34 reasoning omitted or null turns thinking off on the canonical request", async () => {
  await accepts(ok);
  assert.deepEqual(lastRequest().reasoning, { enabled: false, budgetTokens: undefined, effort: undefined });
  await accepts({ ...ok, reasoning: null });
  assert.equal(lastRequest().reasoning?.enabled, false);
});

test("000-35 reasoning effort low, medium and high are accepted and turn thinking on", async () => {
  for (const effort of ["low", "medium", "high"] as const) {
    await accepts({ ...ok, reasoning: { effort } });
    assert.equal(lastRequest().reasoning?.enabled, true);
    assert.equal(lastRequest().reasoning?.effort, effort);
  }
  await accepts({ ...ok, reasoning: {} });
  assert.equal(lastRequest().reasoning?.enabled, true);
  await accepts({ ...ok, reasoning: { effort: null, budget_tokens: 64 } });
  assert.equal(lastRequest().reasoning?.budgetTokens, 64);
});

test("000-36 reasoning.effort extreme is rejected", async () => {
  await rejects({ ...ok, reasoning: { effort: "extreme" } }, "reasoning.effort");
  await rejects({ ...ok, reasoning: { budget_tokens: 0 } }, "reasoning.budget_tokens");
});

test("000-38 reasoning effort together with budget_tokens is rejected", async () => {
  const r = await rejects({ ...ok, reasoning: { effort: "high", budget_tokens: 64 } }, "reasoning.budget_tokens");
  assert.match(r.json.error.message, /effort/);
});

test("000-40 seed -1 behaves like no seed: every request gets a fresh random seed", async () => {
  const seeds = new Set<number>();
  for (let i = 0; i < 4; i++) {
    await accepts({ ...ok, seed: -1 });
    seeds.add(lastRequest().sampling.seed);
  }
  assert.ok(seeds.size > 1, "seed -1 is not pinned");
  await accepts({ ...ok, seed: 42 });
  assert.equal(lastRequest().sampling.seed, 42);
  // "Any integer": one past JavaScript's safe integers too (folded from all its bits, samplerSeed).
  await accepts({ ...ok, seed: 2 ** 62 + 2 ** 40 + 5 * 2 ** 10 });
  assert.equal(lastRequest().sampling.seed, samplerSeed(2 ** 62 + 2 ** 40 + 5 * 2 ** 10));
});

test("000-42 metadata with 16 pairs is accepted and stored; 17 pairs is rejected", async () => {
  const pairs = (n: number, tag: string) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i === 0 ? tag : "v"]));
  const tag = `konan-${Date.now()}`;
  const j = await accepts({ ...ok, metadata: pairs(16, tag), user: "kim" });
  await rejects({ ...ok, metadata: pairs(17, tag) }, "metadata");
  const long = await post({ ...ok, metadata: { ["k".repeat(65)]: "v" } });
  assert.equal(long.status, 400);
  assert.match(long.json.error.param, /^metadata/);
  await rejects({ ...ok, metadata: { k: 5 } }, "metadata.k");
  // Kept with the completion and queryable through the stored Chat Completions API (the
  // application's: the end user it was stored for need not be named).
  const v1 = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  const listed = await v1.chat.completions.list({ metadata: { k0: tag } });
  assert.deepEqual(
    listed.data.map((c) => c.id),
    [j.id],
  );
  assert.equal(listed.data[0].choices[0].message.content, "Hello");
  // Kept in OpenAI's shape, which is what the routes that read it back speak (Konan's answer has no
  // logprobs or refusal, and puts reasoning_tokens at the top of usage).
  const stored = (await v1.chat.completions.retrieve(j.id)) as unknown as Obj;
  assert.equal(stored.choices[0].logprobs, null);
  assert.equal(stored.choices[0].message.refusal, null);
  assert.equal(typeof stored.usage.completion_tokens_details, "object");
  assert.equal(stored.usage.reasoning_tokens, undefined);
  assert.equal(stored.id, j.id);
  const messages = await v1.chat.completions.messages.list(j.id);
  assert.equal(messages.data[0].content, "안녕");
  // Without metadata nothing is stored.
  const plain = await accepts({ ...ok, user: "kim" });
  await assert.rejects(v1.chat.completions.retrieve(plain.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
});

test("000-43 output_parser responses answers as a Responses object, and streams the Responses events", async () => {
  const j = await accepts({ ...ok, output_parser: "responses" });
  assert.equal(j.object, "response");
  assert.equal(j.status, "completed");
  assert.equal(j.output[0].type, "message");
  assert.equal(j.output[0].content[0].type, "output_text");
  assert.equal(j.output[0].content[0].text, "Hello");
  assert.equal(j.usage.total_tokens, j.usage.input_tokens + j.usage.output_tokens);
  assert.equal(j.temperature, 0.3);
  assert.equal(j.top_p, 0.75);
  // Every field OpenAI's Response object requires, those Konan has no field for included.
  for (const [key, value] of Object.entries({ parallel_tool_calls: true, truncation: "disabled", background: false, service_tier: "default", previous_response_id: null, top_logprobs: 0 }))
    assert.deepEqual(j[key], value, key);
  assert.equal(j.text.verbosity, "medium");

  const r = await post({ ...ok, output_parser: "responses", stream: true });
  const events = sseEvents(r.body);
  const types = events.map((e) => e.event);
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.completed");
  assert.ok(types.includes("response.output_text.delta"));
  for (const e of events) assert.equal((e.data as Obj).type, e.event);
  const done = events.at(-1)!.data as Obj;
  assert.equal(done.response.output[0].content[0].text, "Hello");
  assert.equal(done.response.id, (events[0].data as Obj).response.id);

  const viaClient = (await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], output_parser: "responses" } as never)) as unknown as Obj;
  assert.equal(viaClient.object, "response");
  await rejects({ ...ok, output_parser: "xml" }, "output_parser");
});

test("000-44 output_parser omitted or null answers chat.completion", async () => {
  assert.equal((await accepts(ok)).object, "chat.completion");
  assert.equal((await accepts({ ...ok, output_parser: null })).object, "chat.completion");
});

test("000-47 response_format omitted behaves as text", async () => {
  await accepts(ok);
  assert.equal(lastRequest().responseFormat, undefined);
  await accepts({ ...ok, response_format: { type: "text" } });
  assert.equal(lastRequest().responseFormat, undefined);
  await accepts({ ...ok, response_format: { type: "json_object" } });
  assert.deepEqual(lastRequest().responseFormat, { type: "json_object" });
  await rejects({ ...ok, response_format: { type: "yaml" } }, "response_format.type");
});

test("000-48 a tools function without name is rejected", async () => {
  await rejects({ ...ok, tools: [{ type: "function", function: { description: "x" } }] }, "tools[0].function.name");
  await rejects({ ...ok, tools: [{ type: "function", function: { name: "" } }] }, "tools[0].function.name");
  // A key beside `function` (OpenAI's `strict` put one level too high) is refused, not dropped.
  await rejects({ ...ok, tools: [{ type: "function", strict: true, function: { name: "f" } }] }, "tools[0].strict");
});

test("000-49 a function with strict omitted runs as strict: false", async () => {
  await accepts({ ...ok, tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }] });
  assert.equal(lastRequest().tools![0].strict, false);
  await accepts({ ...ok, tools: [{ type: "function", function: { name: "lookup", strict: true } }] });
  assert.equal(lastRequest().tools![0].strict, true);
});

test("000-50 user is accepted and names the request's namespace", async () => {
  const j = await accepts({ ...ok, user: "user-123" });
  assert.equal(j.object, "chat.completion");
  await rejects({ ...ok, user: 5 }, "user");
});

test("GET /v3/models lists the served models (the model list API); unknown /v3 routes answer in OpenAI's envelope", async () => {
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    [model],
  );
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
  const r = await fetch(`${base}/v3/nowhere`);
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.code, "not_found");
  const unknown = await post({ ...ok, model: "nope" });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.json.error.param, "model");
});

test("a key Konan's reference does not list is a 400 naming it, with what Konan takes instead where there is one", async () => {
  const typo = await rejects({ ...ok, temprature: 0.5 }, "temprature");
  assert.equal(typo.json.error.code, "unknown_field");
  assert.match(typo.json.error.message, /temperature/);
  const other = await rejects({ ...ok, reasoning_effort: "high" }, "reasoning_effort");
  assert.match(other.json.error.message, /'reasoning'/);
  await rejects({ ...ok, frobnicate: true }, "frobnicate");
});

test("OpenAI fields Konan's chat route can run are run: presence_penalty, logit_bias, tool_choice, parallel_tool_calls", async () => {
  const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }];
  await accepts({ ...ok, presence_penalty: 0.7, logit_bias: { "5": -100 }, tools, tool_choice: "none", parallel_tool_calls: false });
  const req = lastRequest() as Obj;
  assert.equal(req.sampling.presencePenalty, 0.7);
  assert.equal(req.sampling.logitBias.get(5), -100);
  assert.equal(req.toolChoice, "none");
  await accepts({ ...ok, tools, tool_choice: { type: "function", function: { name: "lookup" } } });
  assert.deepEqual((lastRequest() as Obj).toolChoice, { name: "lookup" });
  await rejects({ ...ok, tools, tool_choice: { type: "function", function: { name: "other" } } }, "tool_choice");
  await rejects({ ...ok, presence_penalty: 3 }, "presence_penalty");
});

test("n, logprobs and top_logprobs take only what Konan's answer can carry; stream_options is taken (usage always ends the stream)", async () => {
  await accepts({ ...ok, n: 1, logprobs: false, top_logprobs: 0 });
  assert.match((await rejects({ ...ok, n: 2 }, "n")).json.error.message, /one choice/);
  await rejects({ ...ok, logprobs: true }, "logprobs");
  await rejects({ ...ok, top_logprobs: 3 }, "top_logprobs");
  const streamed = await post({ ...ok, stream: true, stream_options: { include_usage: true } });
  assert.equal(streamed.status, 200, streamed.body);
  const chunks = sseData(streamed.body).filter((d) => d !== "[DONE]") as Obj[];
  assert.ok(chunks.at(-1)!.usage?.total_tokens > 0, streamed.body);
  await rejects({ ...ok, stream: true, stream_options: { include_usag: true } }, "stream_options.include_usag");
});
