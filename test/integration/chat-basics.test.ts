import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import type OpenAI from "openai";
import { byteTokenId, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

const s = useTestServer();

const user = (content: string) => [{ role: "user" as const, content }];

test("health and model listing", async () => {
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 200);
  assert.equal((await health.json()).status, "ok");

  const list = await s.client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ["tiny"]);
  assert.equal(list.data[0].object, "model");
  const one = await s.client.models.retrieve("tiny");
  assert.equal(one.id, "tiny");
  const missing = await fetch(`${s.url}/v1/models/nope`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, "model_not_found");
});

test("a non-streamed completion has OpenAI's shape and runs to max_tokens → length", async () => {
  const r = await s.client.chat.completions.create({
    model: s.model,
    messages: user("Hello there"),
    max_tokens: 12,
    temperature: 0,
    logit_bias: NO_EOG,
  });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, "tiny");
  assert.ok(r.system_fingerprint);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage?.completion_tokens, 12);
  assert.equal(r.usage?.total_tokens, (r.usage?.prompt_tokens ?? 0) + 12);
});

test("prompt_tokens equals the tokenizer's count of the rendered ChatML prompt", async () => {
  const messages = [
    { role: "system" as const, content: "You are terse." },
    { role: "user" as const, content: "Count my tokens, please: héllo 世界" },
  ];
  const r = await s.client.chat.completions.create({ model: s.model, messages, max_tokens: 1 });
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: s.modelPath, vocabOnly: true });
  const rendered =
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nCount my tokens, please: héllo 世界<|im_end|>\n<|im_start|>assistant\n";
  const expected = model.tokenize(rendered, true).length + (model.tokens.shouldPrependBosToken ? 1 : 0);
  await model.dispose();
  assert.equal(r.usage?.prompt_tokens, expected);
});

test("streamed text equals non-streamed text at temperature 0, with OpenAI's chunk sequence", async () => {
  const params = { model: s.model, messages: user("Tell me a story"), max_tokens: 40, temperature: 0 };
  const whole = await s.client.chat.completions.create(params);
  const stream = await s.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);

  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  assert.equal(text, whole.choices[0].message.content);
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finishes.length, 1);
  assert.equal(finishes[0].choices[0].finish_reason, whole.choices[0].finish_reason);
  const last = chunks.at(-1)!;
  assert.deepEqual(last.choices, []);
  // Counts match; cached_tokens may differ, since the second request reuses the first one's prompt.
  assert.equal(last.usage?.prompt_tokens, whole.usage?.prompt_tokens);
  assert.equal(last.usage?.completion_tokens, whole.usage?.completion_tokens);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === "chat.completion.chunk"));
});

test("without include_usage no usage chunk is sent, and the stream ends with [DONE]", async () => {
  const res = await s.http.chatStream({ model: s.model, messages: user("hi"), max_tokens: 4 });
  assert.equal(res.headers.get("content-type")?.startsWith("text/event-stream"), true);
  const events = res.text.split("\n\n").filter(Boolean);
  assert.equal(events.at(-1), "data: [DONE]");
  for (const e of events.slice(0, -1)) {
    const chunk = JSON.parse(e.slice("data: ".length));
    assert.equal("usage" in chunk, false);
    assert.equal(chunk.choices.length, 1);
  }
});

test("every role renders: system, developer, user, assistant (history and prefill), text parts", async () => {
  const r = await s.client.chat.completions.create({
    model: s.model,
    max_tokens: 3,
    messages: [
      { role: "developer", content: "Be nice." },
      { role: "system", content: [{ type: "text", text: "Really." }] },
      { role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] },
      { role: "assistant", content: "Sure." },
      { role: "user", content: "Again" },
      { role: "assistant", content: "Once upon" },
    ],
  });
  assert.equal(r.choices.length, 1);
  assert.ok((r.usage?.prompt_tokens ?? 0) > 10);
});

test("n=3 gives three independent choices; completion tokens add up", async () => {
  const r = await s.client.chat.completions.create({
    model: s.model,
    messages: user("Pick a word"),
    n: 3,
    max_tokens: 16,
    temperature: 1,
    seed: 7,
    logit_bias: NO_EOG,
  });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const texts = new Set(r.choices.map((c) => c.message.content));
  assert.equal(texts.size, 3, "three samples of 16 tokens should not coincide");
  assert.equal(r.usage?.completion_tokens, 48);
});

test("n=2 streams both choices, each with its own role delta and finish", async () => {
  const stream = await s.client.chat.completions.create({
    model: s.model,
    messages: user("x"),
    n: 2,
    max_tokens: 5,
    stream: true,
    logit_bias: NO_EOG,
  });
  const roles = new Set<number>();
  const finishes = new Set<number>();
  for await (const c of stream) {
    for (const ch of c.choices) {
      if (ch.delta.role) roles.add(ch.index);
      if (ch.finish_reason) finishes.add(ch.index);
    }
  }
  assert.deepEqual([...roles].sort(), [0, 1]);
  assert.deepEqual([...finishes].sort(), [0, 1]);
});

test("the same seed reproduces a temperature-1 sample; another seed does not", async () => {
  const ask = (seed: number) =>
    s.client.chat.completions.create({
      model: s.model,
      messages: user("Randomness"),
      max_tokens: 24,
      temperature: 1,
      seed,
      logit_bias: NO_EOG,
    });
  const [a, b, c] = await Promise.all([ask(1234), ask(1234), ask(99)]);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

test("requests without a seed get different samples even within the same second", async () => {
  const ask = () =>
    s.client.chat.completions.create({ model: s.model, messages: user("Surprise me"), max_tokens: 24, temperature: 1 });
  const [a, b] = await Promise.all([ask(), ask()]);
  assert.notEqual(a.choices[0].message.content, b.choices[0].message.content);
});

test("sampling knobs are honoured: top_k 1 and min_p 1 are greedy; penalties change greedy output", async () => {
  // top_k, min_p and repetition_penalty are vendor fields the openai client's types do not list.
  const base = { model: s.model, messages: user("Knobs"), max_tokens: 30, logit_bias: NO_EOG };
  const greedy = (await s.http.chat({ ...base, temperature: 0 })).choices[0].message.content;
  const topK1 = (await s.http.chat({ ...base, temperature: 1.5, top_k: 1 })).choices[0].message.content;
  const minP1 = (await s.http.chat({ ...base, temperature: 1.5, min_p: 1 })).choices[0].message.content;
  assert.equal(topK1, greedy);
  assert.equal(minP1, greedy);
  for (const knob of [{ frequency_penalty: 2 }, { presence_penalty: 2 }, { repetition_penalty: 1.8 }]) {
    const out = (await s.http.chat({ ...base, temperature: 0, ...knob })).choices[0].message.content;
    assert.notEqual(out, greedy, `${Object.keys(knob)[0]} had no effect`);
  }
});


test("logit_bias reaches end-of-sequence: +100 ends at once, a +100 token repeats", async () => {
  const eos = FIXTURE_TOKENS.imEnd;
  const stopNow = await s.client.chat.completions.create({
    model: s.model,
    messages: user("Say nothing"),
    max_tokens: 20,
    logit_bias: { [eos]: 100 },
  });
  assert.equal(stopNow.choices[0].finish_reason, "stop");
  assert.equal(stopNow.choices[0].message.content, "");
  assert.equal(stopNow.usage?.completion_tokens, 1);

  const forced = await s.http.post("/v1/chat/completions", {
    model: s.model,
    messages: user("Say x"),
    max_tokens: 6,
    logit_bias: { [byteTokenId("s".charCodeAt(0))]: 100 },
  });
  assert.equal(forced.status, 200);
  const text = forced.json.choices[0].message.content!;
  assert.ok(text.length > 0);
  assert.equal(text, "ssssss");
});
