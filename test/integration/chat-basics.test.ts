import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import type OpenAI from "openai";
import { byteTokenId, ensureFixtureModel, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { streamedChunks } from "../helpers/requests.ts";
import { NO_EOG, startTestServer, useTestServer } from "../helpers/server.ts";

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
  // vLLM's and SGLang's model cards carry `root`, which their clients and tests read.
  assert.equal((one as unknown as { root: string }).root, "tiny");
  assert.equal((list.data[0] as unknown as { root: string }).root, "tiny");
  const missing = await fetch(`${s.url}/v1/models/nope`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, "model_not_found");
});

test("POST /invocations (SageMaker's route) answers as /v1/chat/completions does, on the real engine", async () => {
  const body = { model: s.model, messages: user("Same answer"), max_tokens: 8, temperature: 0, logit_bias: NO_EOG };
  const direct = await s.http.chat(body);
  const invoked = await s.http.post("/invocations", body);
  if (invoked.status !== 200) assert.fail(invoked.text);
  assert.equal(invoked.json.object, "chat.completion");
  assert.equal(invoked.json.choices[0].message.content, direct.choices[0].message.content);
  // The second request reuses the first one's prompt from the cache; the counts are the same.
  assert.equal(invoked.json.usage?.prompt_tokens, direct.usage!.prompt_tokens);
  assert.equal(invoked.json.usage?.completion_tokens, direct.usage!.completion_tokens);
});

test("a model named with '/' (--model org/name=path) is listed, retrieved (the slash sent encoded or not) and served", async () => {
  const server = await startTestServer({ model: [`acme/tiny-v1=${await ensureFixtureModel()}`] });
  try {
    assert.deepEqual((await server.client.models.list()).data.map((m) => m.id), ["acme/tiny-v1"]);
    assert.equal((await server.client.models.retrieve("acme/tiny-v1")).id, "acme/tiny-v1");
    for (const path of ["acme/tiny-v1", "acme%2Ftiny-v1"]) {
      const res = await fetch(`${server.url}/v1/models/${path}`);
      assert.equal(res.status, 200, path);
      assert.equal((await res.json()).id, "acme/tiny-v1");
    }
    const other = await fetch(`${server.url}/v1/models/acme/other`);
    assert.equal(other.status, 404);
    assert.equal((await other.json()).error.code, "model_not_found");
    const long = await fetch(`${server.url}/v1/models/acme/${"m".repeat(600)}`);
    assert.equal(long.status, 414, "each segment is held to the router's length for a parameter");
    assert.equal((await long.json()).error.code, "uri_too_long");
    const r = await server.client.chat.completions.create({ model: "acme/tiny-v1", messages: user("Hi"), max_tokens: 3, temperature: 0, logit_bias: NO_EOG });
    assert.equal(r.model, "acme/tiny-v1");
    assert.equal(r.usage?.completion_tokens, 3);
  } finally {
    await server.close();
  }
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


test("OpenRouter's usage.include streams the usage chunk as include_usage does, on chat and completions; a misspelt key is refused", async () => {
  for (const [path, body] of [
    ["/v1/chat/completions", { model: s.model, messages: user("hi"), max_tokens: 4, logit_bias: NO_EOG }],
    ["/v1/completions", { model: s.model, prompt: "hi", max_tokens: 4, logit_bias: NO_EOG }],
  ] as const) {
    const { chunks } = await streamedChunks(`${s.url}${path}`, { ...body, stream: true, usage: { include: true } });
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, [], path);
    assert.equal(last.usage.completion_tokens, 4, path);
    const off = await streamedChunks(`${s.url}${path}`, { ...body, stream: true, usage: { include: false } });
    assert.ok(off.chunks.every((c) => !("usage" in c) || c.usage === null), path);
    const bad = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, usage: { includes: true } }) });
    assert.equal(bad.status, 400, path);
    assert.match(((await bad.json()) as { error: { param: string } }).error.param, /^usage/, path);
  }
});

test("vLLM's continuous_usage_stats: every chunk carries its choice's usage, one more completion token per generated token; the usage chunk still ends the stream", async () => {
  // logprobs list each chunk's tokens, so each step of completion_tokens can be checked against them.
  const body = { model: s.model, messages: user("Tell me a story é 世界"), max_tokens: 12, n: 2, logprobs: true, logit_bias: NO_EOG, stream: true };
  const { chunks } = await streamedChunks(`${s.url}/v1/chat/completions`, { ...body, stream_options: { include_usage: true, continuous_usage_stats: true } });
  const final = chunks.at(-1)!;
  assert.deepEqual(final.choices, []);
  assert.equal(final.usage.completion_tokens, 24);
  for (const index of [0, 1]) {
    const mine = chunks.slice(0, -1).filter((c) => c.choices[0].index === index);
    assert.equal(mine[0].choices[0].delta.role, "assistant");
    assert.deepEqual(mine[0].usage, { prompt_tokens: final.usage.prompt_tokens, completion_tokens: 0, total_tokens: final.usage.prompt_tokens });
    let before = 0;
    for (const c of mine.slice(1)) {
      assert.equal(c.usage.prompt_tokens, final.usage.prompt_tokens, JSON.stringify(c));
      assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
      assert.equal(c.usage.completion_tokens - before, c.choices[0].logprobs?.content.length ?? 0, JSON.stringify(c));
      before = c.usage.completion_tokens;
    }
    assert.equal(mine.at(-1)!.choices[0].finish_reason, "length");
    assert.equal(before, 12, `choice ${index}`);
  }
  // As vLLM: without include_usage the option has no effect (no usage anywhere).
  const alone = await streamedChunks(`${s.url}/v1/chat/completions`, { ...body, n: 1, stream_options: { continuous_usage_stats: true } });
  assert.ok(alone.chunks.every((c) => !("usage" in c)));
});

test("stream_options.include_obfuscation pads every chunk (the usage chunk too) to a multiple of 32 bytes; without it nothing is added", async () => {
  const body = { model: s.model, messages: user("Say something long é"), max_tokens: 8, logit_bias: NO_EOG, stream: true, stream_options: { include_usage: true, include_obfuscation: true } };
  const { chunks, raw } = await streamedChunks(`${s.url}/v1/chat/completions`, body);
  assert.ok(chunks.length >= 10, `${chunks.length} chunks`);
  chunks.forEach((c, i) => {
    assert.equal(typeof c.obfuscation, "string", JSON.stringify(c));
    assert.equal(Buffer.byteLength(raw[i]) % 32, 0, raw[i]);
  });
  assert.equal(chunks.at(-1)!.choices.length, 0, "the usage chunk is padded too");
  for (const options of [{ include_usage: true }, { include_usage: true, include_obfuscation: false }]) {
    const plain = await streamedChunks(`${s.url}/v1/chat/completions`, { ...body, stream_options: options });
    assert.ok(plain.chunks.every((c) => !("obfuscation" in c)), JSON.stringify(options));
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

test("every seed reproduces, at the edges of its range too", async () => {
  // 2^32 − 1 is llama.cpp's "random seed" value: reduced onto it, a seed sampled at random. int64's
  // largest values and 2^64's multiples once all reduced onto 0. n: 2 gives the second choice seed + 1.
  // 2^63 − 1024 is the largest double within int64 (JavaScript writes 2^63 − 1 as 2^63, past it).
  const ask = (seed: number) =>
    s.http.chat({ model: s.model, messages: user("Randomness"), max_tokens: 16, temperature: 1.5, seed, n: 2, logit_bias: NO_EOG });
  const texts = async (seed: number) => (await ask(seed)).choices.map((c) => c.message.content);
  const seeds = [2 ** 32 - 1, 2 ** 32 - 2, -1, 2 ** 63 - 1024, -(2 ** 63), 0];
  const runs = await Promise.all(seeds.flatMap((seed) => [texts(seed), texts(seed)]));
  for (let i = 0; i < seeds.length; i++) assert.deepEqual(runs[2 * i], runs[2 * i + 1], `seed ${seeds[i]} did not reproduce`);
  // 2^63 − 1024 and −2^63 are seeds of their own, not 0's.
  assert.notDeepEqual(runs[6], runs[10]);
  assert.notDeepEqual(runs[8], runs[10]);
});

test("requests without a seed get different samples even within the same second", async () => {
  const ask = () =>
    s.client.chat.completions.create({ model: s.model, messages: user("Surprise me"), max_tokens: 24, temperature: 1 });
  const [a, b] = await Promise.all([ask(), ask()]);
  assert.notEqual(a.choices[0].message.content, b.choices[0].message.content);
});

test("sampling knobs are honoured: top_k 1, min_p 1 and top_p 0 (OpenAI's lower bound) are greedy; penalties change greedy output", async () => {
  // top_k, min_p and repetition_penalty are vendor fields the openai client's types do not list.
  const base = { model: s.model, messages: user("Knobs"), max_tokens: 30, logit_bias: NO_EOG };
  const greedy = (await s.http.chat({ ...base, temperature: 0 })).choices[0].message.content;
  const topK1 = (await s.http.chat({ ...base, temperature: 1.5, top_k: 1 })).choices[0].message.content;
  const minP1 = (await s.http.chat({ ...base, temperature: 1.5, min_p: 1 })).choices[0].message.content;
  const topP0 = (await s.http.chat({ ...base, temperature: 1.5, top_p: 0 })).choices[0].message.content;
  assert.equal(topK1, greedy);
  assert.equal(minP1, greedy);
  assert.equal(topP0, greedy);
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

test("vLLM's and llama-server's generation fields: ignore_eos, n_predict and repeat_penalty are honoured; the rest at their neutral values only", async () => {
  const END = { [FIXTURE_TOKENS.eos]: 100 };
  const post = (path: "/v1/chat/completions" | "/v1/completions" | "/tokenize", body: Record<string, unknown>) => s.http.post(path, { model: "tiny", ...body } as never) as Promise<any>;
  // The end-of-turn token is all the model wants; ignore_eos runs to the budget regardless.
  const ended = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 12, logit_bias: END });
  assert.equal(ended.json.choices[0].finish_reason, "stop");
  for (const stream of [false, true]) {
    const ran = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 12, logit_bias: END, ignore_eos: true, stream, stream_options: stream ? { include_usage: true } : undefined });
    assert.equal(ran.status, 200, ran.text);
    if (!stream) {
      assert.equal(ran.json.choices[0].finish_reason, "length");
      assert.equal(ran.json.usage.completion_tokens, 12);
    } else assert.match(ran.text, /"finish_reason":"length"/);
  }
  const completion = await post("/v1/completions", { prompt: "Hi", max_tokens: 9, logit_bias: END, ignore_eos: true });
  assert.equal(completion.json.usage.completion_tokens, 9);
  // llama-server's names for the budget and the repetition penalty.
  const predicted = await post("/v1/completions", { prompt: "Hi", n_predict: 7, logit_bias: NO_EOG, repeat_penalty: 1.1 });
  assert.equal(predicted.json.usage.completion_tokens, 7);
  assert.equal((await post("/v1/chat/completions", { messages: user("Hi"), n_predict: 5, logit_bias: NO_EOG })).json.usage.completion_tokens, 5);
  // With tool_choice "none" no tool grammar has to end the answer: ignore_eos runs on.
  const noTools = await post("/v1/chat/completions", {
    messages: user("Hi"),
    max_tokens: 6,
    logit_bias: END,
    ignore_eos: true,
    tool_choice: "none",
    tools: [{ type: "function", function: { name: "f" } }],
  });
  assert.equal(noTools.json.usage.completion_tokens, 6, noTools.text);
  // llama-server's web UI sends every sampler setting, switched off: all accepted.
  const webUi = {
    samplers: "edkypmxt", dynatemp_range: 0, dynatemp_exponent: 1, typical_p: 1, xtc_probability: 0, xtc_threshold: 0.1,
    repeat_last_n: 64, repeat_penalty: 1, dry_multiplier: 0, dry_base: 1.75, dry_allowed_length: 2, dry_penalty_last_n: -1,
    timings_per_token: false, cache_prompt: true, mirostat: 0, mirostat_tau: 5, adaptive_target: -1, adaptive_decay: 0.9,
    backend_sampling: false, typ_p: 1, reasoning_control: true, n_discard: 0, grammar_lazy: false, preserved_tokens: [], grammar_triggers: [],
  };
  assert.equal((await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, ...webUi })).status, 200);
  // The later fields at the values that describe what is done here anyway.
  const neutral = {
    echo: false, include_reasoning: true, logprob_token_ids: [], truncation_side: "left", kv_transfer_params: null, vllm_xargs: {},
    mm_processor_kwargs: {}, media_io_kwargs: {}, prompt_embeds: null, reasoning_format: "auto", thinking_forced_open: false,
    parse_tool_calls: true, response_fields: [], return_tokens: false, min_keep: 0, n_cache_reuse: 0, sse_ping_interval: 0, verbose: false,
  };
  const taken = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, ...neutral });
  assert.equal(taken.status, 200, taken.text);
  // SGLang's fields at their defaults, and its scheduling labels (nothing about the answer changes).
  const sglang = {
    stop_regex: null, no_stop_trim: false, separate_reasoning: true, stream_reasoning: true, lora_path: null, session_params: null,
    custom_logit_processor: null, custom_params: null, return_hidden_states: false, return_routed_experts: false,
    return_cached_tokens_details: false, return_prompt_token_ids: false, return_meta_info: false, use_audio_in_video: false,
    rid: "req-1", extra_key: "k", routed_dp_rank: 0, data_parallel_rank: 0, input_ids: null, bootstrap_room: null,
  };
  const sglangTaken = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, ...sglang });
  assert.equal(sglangTaken.status, 200, sglangTaken.text);
  // This model has no thinking section: there is nothing to separate, so false is what happens anyway.
  const unseparated = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, separate_reasoning: false });
  assert.equal(unseparated.status, 200, unseparated.text);
  // text-generation-inference's and Ollama's, at the values that say what is done here.
  const others = { do_sample: true, watermark: false, decoder_input_details: false, details: false, top_n_tokens: 0, truncate: null, keep_alive: "5m", options: {}, raw: false, images: [] };
  const othersTaken = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, ...others });
  assert.equal(othersTaken.status, 200, othersTaken.text);
  assert.equal((await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, do_sample: false, temperature: 0 })).status, 200);
  // vLLM's prefill request: a last assistant message is continued, which is what the switches ask.
  const prefill = [...user("Say a proverb"), { role: "assistant", content: "An apple a day, keeps" }];
  const continued = await post("/v1/chat/completions", { messages: prefill, max_tokens: 2, continue_final_message: true, add_generation_prompt: false });
  assert.equal(continued.status, 200, continued.text);
  assert.equal((await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 2, continue_final_message: false, add_generation_prompt: true })).status, 200);
  // llama-server's -1 for max_tokens (its n_predict's alias): no limit but the context, as when the
  // field is left out (a completion's default of 16 included); 0 and below -1 are still refused. A
  // prompt that leaves 64 tokens of the context keeps the run short.
  const sized = (await post("/tokenize", { messages: user("word ".repeat(1000)) })).json;
  const nearEnd = user("word ".repeat(sized.max_model_len - 64 - (sized.count - 1000)));
  for (const budget of ["max_tokens", "max_completion_tokens"]) {
    const unbounded = await post("/v1/chat/completions", { messages: nearEnd, [budget]: -1, logit_bias: NO_EOG });
    assert.equal(unbounded.status, 200, unbounded.text);
    assert.equal(unbounded.json.choices[0].finish_reason, "length", unbounded.text);
    assert.equal(unbounded.json.usage.total_tokens, sized.max_model_len, unbounded.text);
    for (const bad of [0, -2]) {
      const refusedBudget = await post("/v1/chat/completions", { messages: user("Hi"), [budget]: bad });
      assert.equal(refusedBudget.status, 400, refusedBudget.text);
      assert.equal(refusedBudget.json.error.param, budget);
    }
  }
  const nearEndIds = Array.from({ length: sized.max_model_len - 64 }, () => byteTokenId(0x61));
  const longCompletion = await post("/v1/completions", { prompt: nearEndIds, max_tokens: -1, logit_bias: NO_EOG });
  assert.equal(longCompletion.status, 200, longCompletion.text);
  assert.equal(longCompletion.json.usage.completion_tokens, 64, longCompletion.text);
  assert.equal((await post("/v1/completions", { prompt: "Hi", max_tokens: -2 })).status, 400);
  // llama-server's "no grammar" is an empty string (its web UI sends it so); a grammar is refused.
  for (const [path, body] of [["/v1/chat/completions", { messages: user("Hi") }], ["/v1/completions", { prompt: "Hi" }]] as const) {
    const noGrammar = await post(path, { ...body, max_tokens: 2, grammar: "" });
    assert.equal(noGrammar.status, 200, `${path}: ${noGrammar.text}`);
    const grammar = await post(path, { ...body, max_tokens: 2, grammar: 'root ::= "a"' });
    assert.equal(grammar.status, 400, grammar.text);
    assert.equal(grammar.json.error.param, "grammar");
  }
  // The same table on completions, where a prompt is used as sent and its text returned unparsed.
  const completionNeutral = { reasoning_format: "none", include_reasoning: true, min_keep: 1, n_cache_reuse: 0, return_tokens: false };
  assert.equal((await post("/v1/completions", { prompt: "Hi", max_tokens: 2, ...completionNeutral })).status, 200);
  const completionRefused: Array<[Record<string, unknown>, string]> = [
    [{ stop_regex: ["x"] }, "stop_regex"],
    [{ reasoning_format: "deepseek" }, "reasoning_format"],
    [{ thinking_token_budget: 8 }, "thinking_token_budget"],
    [{ include_reasoning: false }, "include_reasoning"],
    [{ prompt_embeds: "AAAA" }, "prompt_embeds"],
    [{ return_tokens: true }, "return_tokens"],
  ];
  for (const [field, param] of completionRefused) {
    const r = await post("/v1/completions", { prompt: "Hi", max_tokens: 3, ...field });
    assert.equal(r.status, 400, `${JSON.stringify(field)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
  }
  // Asking for what is not done here is a 400 naming the field, never an answer as if unasked.
  const refused: Array<[Record<string, unknown>, string]> = [
    [{ mirostat: 2 }, "mirostat"],
    [{ dry_multiplier: 0.8 }, "dry_multiplier"],
    [{ adaptive_target: 0.5 }, "adaptive_target"],
    [{ adaptive_target: 0.5, adaptive_decay: 0.5 }, "adaptive_target"],
    [{ min_tokens: 4 }, "min_tokens"],
    [{ use_beam_search: true }, "use_beam_search"],
    [{ stop_token_ids: [5] }, "stop_token_ids"],
    [{ include_stop_str_in_output: true }, "include_stop_str_in_output"],
    [{ chat_template: "{{ messages }}" }, "chat_template"],
    // Progress chunks and per-token timings are switches: anything but a boolean is refused.
    [{ return_progress: "yes", stream: true }, "return_progress"],
    [{ timings_per_token: 42 }, "timings_per_token"],
    [{ verbose: true }, "verbose"],
    [{ backend_sampling: "on" }, "backend_sampling"],
    [{ repeat_penalty: 1.2, repeat_last_n: 128 }, "repeat_last_n"],
    [{ n_predict: 4, max_tokens: 3 }, "n_predict"],
    [{ repeat_penalty: 1.1, repetition_penalty: 1.2 }, "repeat_penalty"],
    [{ ignore_eos: true, response_format: { type: "json_object" } }, "ignore_eos"],
    [{ echo: true }, "echo"],
    [{ include_reasoning: 0 }, "include_reasoning"],
    [{ logprob_token_ids: [5] }, "logprob_token_ids"],
    [{ truncate_prompt_tokens: 8, truncation_side: "left" }, "truncate_prompt_tokens"],
    [{ kv_transfer_params: { do_remote_decode: true } }, "kv_transfer_params"],
    [{ vllm_xargs: { k: 1 } }, "vllm_xargs"],
    [{ mm_processor_kwargs: { fps: 1 } }, "mm_processor_kwargs"],
    [{ media_io_kwargs: { video: {} } }, "media_io_kwargs"],
    [{ prompt_embeds: "AAAA" }, "prompt_embeds"],
    [{ reasoning_format: "none" }, "reasoning_format"],
    [{ reasoning_format: "deepseek-legacy" }, "reasoning_format"],
    [{ reasoning_control: "off" }, "reasoning_control"],
    [{ typ_p: 0.5 }, "typ_p"],
    [{ grammar_lazy: true }, "grammar_lazy"],
    [{ grammar_triggers: [{ type: 0, value: "<tool_call>" }] }, "grammar_triggers"],
    [{ preserved_tokens: ["<tool_call>"] }, "preserved_tokens"],
    [{ n_discard: -1 }, "n_discard"],
    [{ thinking_forced_open: "yes" }, "thinking_forced_open"],
    [{ parse_tool_calls: false }, "parse_tool_calls"],
    [{ response_fields: ["content"] }, "response_fields"],
    [{ return_tokens: true }, "return_tokens"],
    [{ min_keep: 5 }, "min_keep"],
    [{ n_cache_reuse: 256 }, "n_cache_reuse"],
    [{ sse_ping_interval: 2.5, stream: true }, "sse_ping_interval"],
    // SGLang's, asking for what is not done here.
    [{ stop_regex: "[a-z]" }, "stop_regex"],
    [{ no_stop_trim: true }, "no_stop_trim"],
    [{ stream_reasoning: "no", stream: true }, "stream_reasoning"],
    [{ lora_path: "my-adapter" }, "lora_path"],
    [{ session_params: { id: "s1" } }, "session_params"],
    [{ custom_logit_processor: "x" }, "custom_logit_processor"],
    [{ return_hidden_states: true }, "return_hidden_states"],
    [{ return_cached_tokens_details: true }, "return_cached_tokens_details"],
    [{ input_ids: [1, 2, 3] }, "input_ids"],
    [{ bootstrap_host: "10.0.0.1" }, "bootstrap_host"],
    [{ custom_labels: { team: "a" } }, "custom_labels"],
    // Labels that change nothing, but of the wrong type (SGLang and vLLM check their types too).
    [{ rid: { a: 1 } }, "rid"],
    [{ priority: "high" }, "priority"],
    [{ priority: 1.5 }, "priority"],
    [{ extra_key: 5 }, "extra_key"],
    [{ data_parallel_rank: -5 }, "data_parallel_rank"],
    [{ routed_dp_rank: "x" }, "routed_dp_rank"],
    [{ request_id: 7 }, "request_id"],
    // OpenRouter's reasoning object: a key it does not define (SGLang's `enable`) is not dropped.
    [{ reasoning: { enable: false } }, "reasoning.enable"],
    [{ reasoning: { exclude: true }, include_reasoning: true }, "reasoning.exclude"],
    // text-generation-inference's and Ollama's.
    [{ tool_prompt: "You have tools:" }, "tool_prompt"],
    [{ guideline: "be safe" }, "guideline"],
    [{ top_n_tokens: 3 }, "top_n_tokens"],
    [{ watermark: true }, "watermark"],
    [{ do_sample: false }, "do_sample"],
    [{ do_sample: true, temperature: 0 }, "do_sample"],
    [{ truncate: 100 }, "truncate"],
    [{ adapter_id: "a" }, "adapter_id"],
    [{ think: false }, "think"],
    [{ format: "json" }, "format"],
    [{ options: { temperature: 0 } }, "options"],
    [{ system: "be brief" }, "system"],
    [{ template: "{{ .Prompt }}" }, "template"],
    [{ context: [1, 2] }, "context"],
    // The template switches where they ask for the other rendering than the conversation gets.
    [{ add_generation_prompt: false }, "add_generation_prompt"],
    [{ continue_final_message: true }, "continue_final_message"],
    [{ messages: prefill, continue_final_message: false }, "continue_final_message"],
    [{ messages: prefill, add_generation_prompt: true }, "add_generation_prompt"],
    // A budget too large for the context names the field it came in.
    [{ max_tokens: undefined, n_predict: 100_000 }, "n_predict"],
  ];
  for (const [field, param] of refused) {
    const r = await post("/v1/chat/completions", { messages: user("Hi"), max_tokens: 3, ...field });
    assert.equal(r.status, 400, `${JSON.stringify(field)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
  }
});

test("a chat request exactly as llama-server's web UI builds it (its settings synced from llama-server's defaults) is taken, with the timings and prompt progress it asks for", async () => {
  // tools/ui chat.service.ts sendMessage with getApiOptions' settings, as the UI fills them from
  // llama-server's /props (its sampler defaults; max_tokens -1 is "no limit"); a user's typ_p: 1 too.
  const webUi = (stream: boolean) => ({
    model: "tiny",
    messages: [{ role: "user", content: "Hi" }],
    ...(stream ? { return_progress: true, sse_ping_interval: 1 } : {}),
    stream,
    reasoning_format: "auto",
    reasoning_control: true,
    temperature: 0.8, max_tokens: -1, dynatemp_range: 0, dynatemp_exponent: 1, top_k: 40, top_p: 0.95, min_p: 0.05,
    xtc_probability: 0, xtc_threshold: 0.1, typ_p: 1, repeat_last_n: 64, repeat_penalty: 1, presence_penalty: 0, frequency_penalty: 0,
    dry_multiplier: 0, dry_base: 1.75, dry_allowed_length: 2, dry_penalty_last_n: 64,
    samplers: ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    backend_sampling: false, timings_per_token: true,
    // The UI's "custom" JSON setting, merged in as it is: "no grammar", and no end-of-turn token, so
    // that every answer (its budget set below) has the same length.
    grammar: "",
    logit_bias: NO_EOG,
  });
  const post = (body: Record<string, unknown>) => s.http.post("/v1/chat/completions", body as never) as Promise<any>;
  const timingKeys = ["cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"];
  // The answer carries llama-server's timings, which the UI reads (speed, tokens).
  const whole = await post({ ...webUi(false), max_tokens: 4 });
  assert.equal(whole.status, 200, whole.text);
  assert.equal(whole.json.object, "chat.completion");
  assert.deepEqual(Object.keys(whole.json.timings), timingKeys);
  assert.equal(whole.json.timings.predicted_n, whole.json.usage.completion_tokens);
  assert.equal(whole.json.timings.prompt_n + whole.json.timings.cache_n, whole.json.usage.prompt_tokens);
  assert.ok(whole.json.timings.prompt_ms > 0 && whole.json.timings.predicted_ms > 0, whole.text);
  // Streamed: prompt progress (the cached prefix, then the whole prompt) before the first token, and
  // timings on every chunk after the role chunk.
  const { chunks, raw } = await streamedChunks(`${s.url}/v1/chat/completions`, { ...webUi(true), max_tokens: 4, cache_prompt: false });
  const streamed = { text: raw.join("\n") };
  const progress = chunks.filter((c) => c.prompt_progress);
  assert.ok(progress.length >= 1, streamed.text);
  const firstText = chunks.findIndex((c) => c.choices?.[0]?.delta?.content);
  assert.ok(chunks.indexOf(progress.at(-1)!) < firstText, streamed.text);
  const done = progress.at(-1)!.prompt_progress;
  assert.equal(done.processed, done.total);
  assert.equal(done.cache, 0, "cache_prompt: false reuses nothing");
  assert.ok(chunks.slice(1).every((c) => c.timings && Object.keys(c.timings).join() === timingKeys.join()), streamed.text);
  const last = chunks.at(-1)!.timings;
  assert.equal(last.predicted_n, 4);
  assert.equal(last.prompt_n, done.total);
});

test("GET /props (llama-server's server properties): the model's context, slots, template and sampler defaults, which a request may send back as they are", async () => {
  const props = await fetch(`${s.url}/props`);
  assert.equal(props.status, 200);
  const p = (await props.json()) as any;
  const listed = ((await (await fetch(`${s.url}/v1/models/tiny`)).json()) as any);
  assert.equal(p.default_generation_settings.n_ctx, listed.max_model_len);
  assert.equal(p.total_slots, listed.parallel);
  // The served name, never the file's path on the server's disk.
  assert.equal(p.model_path, "tiny");
  assert.deepEqual(p.modalities, { vision: false, audio: false, video: false });
  // The model file's own template, which renders its chat prompts.
  const { getLlama } = await import("node-llama-cpp");
  const model = await (await getLlama({ gpu: false, logLevel: LlamaLogLevel.error })).loadModel({ modelPath: s.modelPath });
  assert.equal(p.chat_template, model.fileInfo.metadata.tokenizer.chat_template);
  await model.dispose();
  assert.match(p.build_info, /^plinth-/);
  // llama-server's web UI copies these defaults into every request: each is taken as it is (the
  // budget set, both its names, for a short answer).
  const r = await s.http.post("/v1/chat/completions", { model: "tiny", messages: user("Hi"), ...p.default_generation_settings.params, max_tokens: 3, n_predict: 3 } as never);
  assert.equal(r.status, 200, r.text);
  // ?model= picks the model (llama-server's router takes it so); one not served is a 404 in the envelope.
  assert.equal(((await (await fetch(`${s.url}/props?model=tiny&autoload=false`)).json()) as any).model_path, "tiny");
  const missing = await fetch(`${s.url}/props?model=nope`);
  assert.equal(missing.status, 404);
  assert.equal(((await missing.json()) as any).error.code, "model_not_found");
});
