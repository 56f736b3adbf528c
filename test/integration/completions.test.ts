import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type OpenAI from "openai";
import type { CompletionBody } from "../helpers/requests.ts";
import { streamedChunks } from "../helpers/requests.ts";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

const s = useTestServer({ "ctx-size": "512" });

const complete = (params: Omit<CompletionBody, "model">) => s.http.complete({ model: "tiny", ...params });

test("a text prompt completes with OpenAI's shape; max_tokens defaults to 16", async () => {
  const r = await complete({ prompt: "Once upon a time", logit_bias: NO_EOG });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, "string");
  assert.equal(r.choices[0].logprobs, null);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage!.completion_tokens, 16);
});

test("batched prompts × n are ordered prompt_index * n + j and match single requests", async () => {
  const r = await complete({ prompt: ["The king", "A river"], n: 2, max_tokens: 6, temperature: 0, logit_bias: NO_EOG });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const king = await complete({ prompt: "The king", max_tokens: 6, temperature: 0, logit_bias: NO_EOG });
  const river = await complete({ prompt: "A river", max_tokens: 6, temperature: 0, logit_bias: NO_EOG });
  assert.equal(r.choices[0].text, king.choices[0].text);
  assert.equal(r.choices[1].text, king.choices[0].text);
  assert.equal(r.choices[2].text, river.choices[0].text);
  assert.equal(r.choices[3].text, river.choices[0].text);
  assert.equal(r.usage!.prompt_tokens, king.usage!.prompt_tokens + river.usage!.prompt_tokens);
  assert.equal(r.usage!.completion_tokens, 24);
});

test("token-id prompts are used exactly as sent", async () => {
  const tok = await s.http.post("/tokenize", { model: "tiny", prompt: "The quick brown fox" });
  assert.equal(tok.status, 200);
  const fromText = await complete({ prompt: "The quick brown fox", max_tokens: 8, temperature: 0, logit_bias: NO_EOG });
  const fromIds = await complete({ prompt: tok.json.tokens, max_tokens: 8, temperature: 0, logit_bias: NO_EOG });
  assert.equal(fromIds.usage!.prompt_tokens, tok.json.tokens.length);
  assert.equal(fromIds.choices[0].text, fromText.choices[0].text);
  // Without the BOS token the prompt is one token shorter and counted as such.
  const noBos = await complete({ prompt: tok.json.tokens.slice(1), max_tokens: 1 });
  assert.equal(noBos.usage!.prompt_tokens, tok.json.tokens.length - 1);
  const batch = await complete({ prompt: [tok.json.tokens, tok.json.tokens.slice(1)], max_tokens: 1 });
  assert.equal(batch.choices.length, 2);
});

test("echo returns the prompt before the completion", async () => {
  const r = await complete({ prompt: "Hello world", echo: true, max_tokens: 4, logit_bias: NO_EOG });
  assert.ok(r.choices[0].text.startsWith("Hello world"));
  assert.ok(r.choices[0].text.length > "Hello world".length);
});

test("logprobs: legacy shape, one entry per token, top maps sorted, greedy picks the top token", async () => {
  const k = 3;
  const r = await complete({ prompt: "The sun", max_tokens: 10, temperature: 0, logprobs: k, logit_bias: NO_EOG });
  const lp = r.choices[0].logprobs!;
  assert.equal(lp.tokens.length, 10);
  assert.equal(lp.tokens.join(""), r.choices[0].text);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i]! <= 0);
    // A JSON object cannot keep an order for number-like keys ("9"), so compare by value.
    const top = Object.values(lp.top_logprobs[i]!);
    assert.equal(top.length, k);
    assert.ok(top.every((v) => v <= 0));
    // At temperature 0 the chosen token is the most likely one.
    assert.ok(Math.abs(lp.token_logprobs[i]! - Math.max(...top)) < 1e-9);
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  }
});

test("logprobs: alternatives with the same text keep distinct keys (bytes:\\xNN, control tokens by name)", async () => {
  // Tokens 233–235 are the bytes E4, E5, E6 (each a character's first byte, text ""); 1 and 3 are
  // control tokens. All of them have the text "", and once shared the map's one key.
  // Two tokens: a last token that leaves its character unfinished spells U+FFFD (test below).
  const bytes = await complete({ prompt: "Hello", max_tokens: 2, temperature: 0, logprobs: 3, logit_bias: { 233: 100, 234: 99, 235: 98 } });
  const top = bytes.choices[0].logprobs!.top_logprobs[0]!;
  assert.deepEqual(Object.keys(top), ["bytes:\\xe4", "bytes:\\xe5", "bytes:\\xe6"]);
  assert.equal(top["bytes:\\xe4"], bytes.choices[0].logprobs!.token_logprobs[0]);
  assert.ok(top["bytes:\\xe4"] > top["bytes:\\xe5"] && top["bytes:\\xe5"] > top["bytes:\\xe6"]);

  const control = await complete({ prompt: "Hello", max_tokens: 1, temperature: 0, logprobs: 2, logit_bias: { 3: 100, 1: 99 } });
  const ctop = control.choices[0].logprobs!.top_logprobs[0]!;
  assert.equal(Object.keys(ctop).length, 2, JSON.stringify(ctop));
  assert.equal(Math.max(...Object.values(ctop)), control.choices[0].logprobs!.token_logprobs[0]);
});

test("logprobs: after a token that began a character, an alternative of whole characters is keyed by its own text, not with U+FFFD", async () => {
  // The echoed prompt splits each Greek letter over two byte tokens; at the second byte's position
  // the alternatives are ordinary tokens (" arou"), once keyed "\ufffd arou" (the pending first
  // byte decoded with them).
  const r = await complete({ prompt: "αβγ 😀", echo: true, logprobs: 1, max_tokens: 1, temperature: 0 });
  const lp = r.choices[0].logprobs!;
  const keys = lp.top_logprobs.flatMap((m) => Object.keys(m ?? {}));
  assert.ok(keys.length > 8, JSON.stringify(lp.top_logprobs));
  assert.ok(keys.every((k) => !k.includes("\ufffd")), JSON.stringify(keys));
  // The tokens that complete a character still carry it, and the first bytes are bytes:.
  assert.ok(lp.tokens.includes("α") && keys.includes("α"), JSON.stringify(lp.tokens));
  assert.ok(keys.includes("bytes:\\xce"), JSON.stringify(keys));
});

test("logprobs: a token read after bytes that form no character is keyed as tokens spells it, U+FFFD and all", async () => {
  // Token 233 is the byte E4, a character's first byte; an ordinary token after it leaves it no
  // character, so that token's text starts with U+FFFD. Its map key must be that text too, or
  // top_logprobs[i][tokens[i]] finds nothing.
  const word = (await s.http.post("/tokenize", { model: "tiny", prompt: " Hello", add_special_tokens: false })).json.tokens as number[];
  const r = await complete({ prompt: [233, ...word], echo: true, logprobs: 1, max_tokens: 1, temperature: 0 });
  const lp = r.choices[0].logprobs!;
  assert.ok(lp.tokens[1].startsWith("\ufffd"), JSON.stringify(lp.tokens));
  for (let i = 1; i < lp.tokens.length; i++) {
    const map = lp.top_logprobs[i]!;
    assert.equal(map[lp.tokens[i]], lp.token_logprobs[i], `${i}: ${JSON.stringify(lp.tokens)} ${JSON.stringify(map)}`);
    assert.ok(Object.keys(map).length <= 2, JSON.stringify(map));
  }
});

test("an answer cut by max_tokens inside a character ends in U+FFFD, in the text, the stream and the last token, not in nothing", async () => {
  // Token 233 is the byte E4, the first of three: the answer ends with the character unfinished.
  const body = { prompt: "Hello", max_tokens: 2, temperature: 0, logprobs: 1, logit_bias: { ...NO_EOG, 233: 100 } };
  const r = await complete(body);
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, "length");
  assert.ok(choice.text.endsWith("\ufffd"), JSON.stringify(choice.text));
  assert.equal(choice.logprobs!.tokens.join(""), choice.text);
  const last = choice.logprobs!.tokens.at(-1)!;
  assert.equal(choice.logprobs!.top_logprobs.at(-1)![last], choice.logprobs!.token_logprobs.at(-1));
  const { chunks } = await streamedChunks(`${s.url}/v1/completions`, { model: "tiny", ...body, stream: true });
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? "").join(""), choice.text);
  // Every token's entry is in the chunk that carries it; the finish chunk has none, so null (as chat's).
  assert.deepEqual(chunks.flatMap((c) => c.choices[0]?.logprobs?.tokens ?? []), choice.logprobs!.tokens);
  const finish = chunks.find((c) => c.choices[0]?.finish_reason);
  assert.deepEqual([finish?.choices[0].text, finish?.choices[0].logprobs], ["", null]);
  // Chat the same way, with the bytes exact in the last entry.
  const chat = await s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: 1, logit_bias: { ...NO_EOG, 233: 100 } });
  const entry = chat.choices[0].logprobs!.content![0];
  assert.equal(chat.choices[0].message.content, "\ufffd");
  assert.equal(entry.token, "\ufffd");
  assert.deepEqual(entry.bytes, [0xe4]);
  assert.equal(entry.top_logprobs[0].token, "\ufffd");
});

test("logprobs: each map holds the sampled token too (up to logprobs + 1 keys; logprobs 0: just it)", async () => {
  // At temperature 1 some sampled tokens are not the most likely one.
  const r = await complete({ prompt: "Dice", max_tokens: 12, temperature: 1, seed: 5, logprobs: 1, echo: true, logit_bias: NO_EOG });
  const lp = r.choices[0].logprobs!;
  let outside = 0;
  for (let i = 1; i < lp.tokens.length; i++) {
    const map = lp.top_logprobs[i]!;
    assert.equal(map[lp.tokens[i]], lp.token_logprobs[i], `${i}: ${JSON.stringify(map)}`);
    assert.ok(Object.keys(map).length <= 2);
    if (Object.keys(map).length === 2) outside++;
  }
  assert.ok(outside > 0, "some sampled or prompt token was outside the top 1");
  const zero = await complete({ prompt: "Dice", max_tokens: 4, temperature: 1, seed: 5, logprobs: 0, logit_bias: NO_EOG });
  const z = zero.choices[0].logprobs!;
  z.tokens.forEach((t, i) => assert.deepEqual(z.top_logprobs[i], { [t]: z.token_logprobs[i] }));
});

test("echo + logprobs covers the prompt too, in one pass; the first prompt token has none", async () => {
  const prompt = "Once upon a time";
  const tok = await s.http.post("/tokenize", { model: "tiny", prompt });
  const r = await complete({ prompt, echo: true, logprobs: 2, max_tokens: 5, logit_bias: NO_EOG });
  const lp = r.choices[0].logprobs!;
  assert.equal(lp.tokens.length, tok.json.count + 5);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  for (const v of lp.token_logprobs.slice(1)) assert.ok(typeof v === "number" && v <= 0);
  assert.equal(lp.text_offset[0], 0);

  // Scoring only: max_tokens 0 generates nothing.
  const scored = await complete({ prompt, echo: true, logprobs: 0, max_tokens: 0 });
  assert.equal(scored.choices[0].text, prompt);
  assert.equal(scored.usage!.completion_tokens, 0);
  assert.deepEqual(scored.choices[0].logprobs!.token_logprobs.slice(1), lp.token_logprobs.slice(1, tok.json.count));
});

test("echo + logprobs with n: the prompt is scored once and every choice carries the same prompt logprobs", async () => {
  const prompt = "Once upon a time there was a king";
  const count = (await s.http.post("/tokenize", { model: "tiny", prompt })).json.count as number;
  const one = await complete({ prompt, echo: true, logprobs: 2, max_tokens: 4, temperature: 0, logit_bias: NO_EOG });
  const three = await complete({ prompt, echo: true, logprobs: 2, max_tokens: 4, n: 3, temperature: 0, logit_bias: NO_EOG });
  assert.equal(three.choices.length, 3);
  const promptPart = (c: (typeof one.choices)[number]) => ({
    tokens: c.logprobs!.tokens.slice(0, count),
    token_logprobs: c.logprobs!.token_logprobs.slice(0, count),
    top_logprobs: c.logprobs!.top_logprobs.slice(0, count),
  });
  for (const c of three.choices) {
    assert.deepEqual(promptPart(c), promptPart(one.choices[0]));
    // The choices that took the scores still read the prompt themselves: greedy, they answer as one does.
    assert.equal(c.text, one.choices[0].text);
    // (to within the float noise of a batch of three against one alone)
    const generated = c.logprobs!.token_logprobs.slice(count);
    one.choices[0].logprobs!.token_logprobs.slice(count).forEach((v, i) => assert.ok(Math.abs((generated[i] ?? 0) - (v ?? 0)) < 1e-4, `${generated[i]} vs ${v}`));
  }
  assert.equal(three.usage!.prompt_tokens, one.usage!.prompt_tokens);
});

test("/detokenize takes no more ids than the model's context holds (millions held every request for seconds)", async () => {
  const { max_model_len } = (await s.http.post("/tokenize", { model: "tiny", prompt: "hi" })).json as { max_model_len: number };
  assert.ok(max_model_len > 0);
  const fits = await s.http.post("/detokenize", { model: "tiny", tokens: new Array(max_model_len).fill(300) });
  assert.equal(fits.status, 200, fits.text);
  const over = await s.http.post("/detokenize", { model: "tiny", tokens: new Array(max_model_len + 1).fill(300) });
  assert.equal(over.status, 400, over.text);
  assert.equal(over.error?.param, "tokens");
  const huge = await s.http.post("/detokenize", { model: "tiny", tokens: new Array(1_100_000).fill(5) });
  assert.equal(huge.status, 400, huge.text.slice(0, 200));
});

test("echo of a token-id prompt ending inside a character reads as /detokenize when nothing follows (U+FFFD)", async () => {
  // 233 is the byte E4, the start of a three-byte character that the next token (a word) never finishes.
  const prompt = [233, 189];
  const back = await s.http.post("/detokenize", { model: "tiny", tokens: prompt });
  assert.ok(back.json.prompt.endsWith("\uFFFD"), JSON.stringify(back.json.prompt));
  const plain = await complete({ prompt, max_tokens: 0, echo: true });
  assert.equal(plain.choices[0].text, back.json.prompt);
  const scored = await complete({ prompt, max_tokens: 0, echo: true, logprobs: 1 });
  assert.equal(scored.choices[0].text, back.json.prompt);
  assert.equal(scored.choices[0].logprobs!.tokens.join(""), back.json.prompt);
  const res = await fetch(`${s.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", prompt, max_tokens: 0, echo: true, logprobs: 1, stream: true }),
  });
  let streamed = "";
  for (const line of (await res.text()).split("\n")) if (line.startsWith("data: {")) streamed += JSON.parse(line.slice(6)).choices[0]?.text ?? "";
  assert.equal(streamed, back.json.prompt);
});

test("sampling with logprobs stays reproducible by seed and follows temperature", async () => {
  const ask = (seed: number) => complete({ prompt: "Dice", max_tokens: 12, temperature: 1, seed, logprobs: 1, logit_bias: NO_EOG });
  const [a, b, c] = await Promise.all([ask(5), ask(5), ask(6)]);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  // Sampled tokens are not always the top one at temperature 1.
  const lp = a.choices[0].logprobs!;
  const notTop = lp.tokens.filter((_, i) => lp.token_logprobs[i]! < Math.max(...Object.values(lp.top_logprobs[i]!)));
  assert.ok(notTop.length > 0);
});


test("stream_options.include_obfuscation pads every text_completion chunk to a multiple of 32 bytes; without it nothing is added", async () => {
  const body = { model: "tiny", prompt: "A long road", max_tokens: 8, logit_bias: NO_EOG, stream: true, stream_options: { include_usage: true, include_obfuscation: true } };
  const { chunks, raw } = await streamedChunks(`${s.url}/v1/completions`, body);
  assert.ok(chunks.length >= 10, `${chunks.length} chunks`);
  chunks.forEach((c, i) => {
    assert.equal(typeof c.obfuscation, "string", JSON.stringify(c));
    assert.equal(Buffer.byteLength(raw[i]) % 32, 0, raw[i]);
  });
  const plain = await streamedChunks(`${s.url}/v1/completions`, { ...body, stream_options: { include_usage: true } });
  assert.ok(plain.chunks.every((c) => !("obfuscation" in c)));
});

test("streaming: text_completion chunks, [DONE], text equal to the non-streamed text", async () => {
  const params = { prompt: "A long road", max_tokens: 20, temperature: 0, logit_bias: NO_EOG };
  const whole = await complete(params);
  // Through the openai client: its stream reader must take Plinth's text_completion chunks.
  const stream = await s.client.completions.create({ model: "tiny", ...params, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | null = null;
  for await (const c of stream) {
    assert.equal(c.object, "text_completion");
    if (c.choices[0]) {
      text += c.choices[0].text;
      finish = c.choices[0].finish_reason ?? finish;
    }
    if (c.usage) usage = c.usage;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, "length");
  assert.equal(usage!.prompt_tokens, whole.usage!.prompt_tokens);
  assert.equal(usage!.completion_tokens, whole.usage!.completion_tokens);
});

test("vLLM's continuous_usage_stats: each chunk carries its choice's own prompt and completion tokens so far, one more per token; the usage chunk sums them", async () => {
  const body = { model: "tiny", prompt: ["A long road", "Once"], n: 2, max_tokens: 10, logprobs: 0, logit_bias: NO_EOG, stream: true };
  const { chunks } = await streamedChunks(`${s.url}/v1/completions`, { ...body, stream_options: { include_usage: true, continuous_usage_stats: true } });
  const final = chunks.at(-1)!;
  assert.deepEqual(final.choices, []);
  assert.equal(final.usage.completion_tokens, 40);
  const prompts: number[] = [];
  for (const index of [0, 1, 2, 3]) {
    const mine = chunks.slice(0, -1).filter((c) => c.choices[0].index === index);
    let before = 0;
    for (const c of mine) {
      assert.equal(c.usage.prompt_tokens, mine[0].usage.prompt_tokens, JSON.stringify(c));
      assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
      assert.equal(c.usage.completion_tokens - before, c.choices[0].logprobs?.tokens.length ?? 0, JSON.stringify(c));
      before = c.usage.completion_tokens;
    }
    assert.equal(mine.at(-1)!.choices[0].finish_reason, "length");
    assert.equal(before, 10);
    prompts.push(mine[0].usage.prompt_tokens);
  }
  assert.equal(prompts[0], prompts[1]);
  assert.equal(prompts[2], prompts[3]);
  assert.equal(final.usage.prompt_tokens, prompts[0] + prompts[2]);
  // As vLLM: without include_usage the option has no effect.
  const alone = await streamedChunks(`${s.url}/v1/completions`, { ...body, stream_options: { continuous_usage_stats: true } });
  assert.ok(alone.chunks.every((c) => !("usage" in c)));
});

test("stop strings apply to completions too", async () => {
  const free = await complete({ prompt: "Write", max_tokens: 30, temperature: 0, logit_bias: NO_EOG });
  const text = free.choices[0].text;
  const stop = text.slice(8, 12);
  const r = await complete({ prompt: "Write", max_tokens: 30, temperature: 0, stop, logit_bias: NO_EOG });
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

const invalid: Array<[string, Record<string, unknown>, string, string?]> = [
  ["empty prompt array", { prompt: [] }, "prompt"],
  ["prompt of the wrong type", { prompt: 42 }, "prompt"],
  ["token id outside the vocabulary", { prompt: [1, 2, 999999] }, "prompt[2]"],
  ["negative token id", { prompt: [1, -3] }, "prompt[1]"],
  ["logprobs above 20", { prompt: "x", logprobs: 21 }, "logprobs"],
  ["best_of different from n", { prompt: "x", best_of: 3 }, "best_of", "unsupported_parameter"],
  ["best_of streamed (OpenAI: results cannot be streamed)", { prompt: "x", best_of: 2, n: 2, stream: true }, "best_of"],
  ["suffix on a model without FIM tokens", { prompt: "x", suffix: "y" }, "suffix", "unsupported_parameter"],
  ["negative max_tokens", { prompt: "x", max_tokens: -2 }, "max_tokens"],
  ["prompt longer than the context", { prompt: "word ".repeat(700) }, "prompt", "context_length_exceeded"],
  ["max_tokens that cannot fit", { prompt: "x", max_tokens: 600 }, "max_tokens", "context_length_exceeded"],
  ["stream_options without stream", { prompt: "x", stream_options: { include_usage: true } }, "stream_options"],
  ["vLLM's continuous usage stats without stream", { prompt: "x", stream_options: { include_usage: true, continuous_usage_stats: true } }, "stream_options"],
];
for (const [name, body, param, code] of invalid) {
  test(`completions: ${name} → 400 naming ${param}`, async () => {
    // Deliberately outside the schema's input type (or over the limits it cannot see), so sent untyped.
    const r = await s.http.postRaw("/v1/completions", { model: "tiny", ...body });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.error?.param, param, r.text);
    if (code) assert.equal(r.error?.code, code);
  });
}

test("completions: a prompt that leaves less room than the default max_tokens says the 16 was the default", async () => {
  const probe = await s.http.postRaw("/v1/completions", { model: "tiny", prompt: [5], max_tokens: 100_000 });
  const room = Number(/at most (\d+) tokens/.exec(probe.error!.message)?.[1]);
  assert.ok(room > 20, probe.text);
  // A few tokens short of the context: fewer left than the 16 a completion gets when max_tokens is not sent.
  const prompt = Array.from({ length: room - 5 }, () => 5);
  const r = await s.http.postRaw("/v1/completions", { model: "tiny", prompt });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.error?.param, "max_tokens");
  assert.equal(r.error?.code, "context_length_exceeded");
  assert.match(r.error!.message, /^max_tokens is 16 \(its default when not sent\), .*at most \d tokens/, r.text);
  // Sent by the client, it is just the number.
  const sent = await s.http.postRaw("/v1/completions", { model: "tiny", prompt, max_tokens: 16 });
  assert.match(sent.error!.message, /^max_tokens is 16, but/, sent.text);
  const fits = await s.http.postRaw("/v1/completions", { model: "tiny", prompt, max_tokens: 2 });
  assert.equal(fits.status, 200, fits.text);
});

test("completions: a fraction among token ids is refused as a non-integer token id, not as a non-string", async () => {
  for (const [prompt, param] of [[[1.5], "prompt[0]"], [[7, 2.5], "prompt[1]"], [[[1, 2.5]], "prompt[0][1]"]] as const) {
    const r = await s.http.postRaw("/v1/completions", { model: "tiny", prompt });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.error?.param, param, r.text);
    assert.match(r.error!.message, /expected an integer, got the number \d\.5/, r.text);
  }
});

test("completions: a token id outside the vocabulary is named where it sits, in a batch of one list too", async () => {
  // [[1, X]] named prompt[1], a place the request lacks: the batch of one lost its [0].
  const cases = [[[1, 999_999], "prompt[1]"], [[[1, 999_999]], "prompt[0][1]"], [[[1], [2, 999_999]], "prompt[1][1]"]] as const;
  for (const [prompt, param] of cases) {
    const r = await s.http.postRaw("/v1/completions", { model: "tiny", prompt, max_tokens: 1 });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.error?.param, param, r.text);
    assert.match(r.error!.message, /outside the vocabulary/, r.text);
  }
});

test("completions: chat-worded refusals are worded for completions (prompt_logprobs, template switches)", async () => {
  const r = await s.http.postRaw("/v1/completions", { model: "tiny", prompt: "x", prompt_logprobs: 1 });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.error?.param, "prompt_logprobs");
  assert.doesNotMatch(r.error!.message, /chat|\/v1\/completions/, r.text);
  assert.match(r.error!.message, /echo and logprobs/);
  const t = await s.http.postRaw("/v1/completions", { model: "tiny", prompt: "x", add_generation_prompt: false });
  assert.equal(t.error?.param, "add_generation_prompt", t.text);
  assert.doesNotMatch(t.error!.message, /assistant/, t.text);
  const chat = await s.http.postRaw("/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "x" }], prompt_logprobs: 1 });
  assert.match(chat.error!.message, /\/v1\/completions with echo/, chat.text);
});

test("best_of equal to n is accepted", async () => {
  const r = await complete({ prompt: "x", best_of: 2, n: 2, max_tokens: 2 });
  assert.equal(r.choices.length, 2);
});

test("/tokenize counts what generation counts; /detokenize inverts it", async () => {
  const messages = [{ role: "user" as const, content: "Count me" }];
  const tok = await s.http.post("/tokenize", { model: "tiny", messages });
  assert.equal(tok.status, 200);
  assert.equal(tok.json.count, tok.json.tokens.length);
  assert.equal(tok.json.max_model_len, 512);
  const chat = await s.client.chat.completions.create({ model: "tiny", messages, max_tokens: 1 });
  assert.equal(chat.usage?.prompt_tokens, tok.json.count);

  const text = "hello world, héllo 世界 🎉";
  const plain = await s.http.post("/tokenize", { model: "tiny", prompt: text, add_special_tokens: false });
  const withBos = await s.http.post("/tokenize", { model: "tiny", prompt: text });
  assert.equal(withBos.json.count, plain.json.count + 1);
  const back = await s.http.post("/detokenize", { model: "tiny", tokens: plain.json.tokens });
  assert.equal(back.json.prompt, text);
});

test("/tokenize with tools counts what the chat request with those tools counts; return_token_strs gives the vocabulary's pieces", async () => {
  const messages = [{ role: "user" as const, content: "Weather in Paris?" }];
  const tools = [
    {
      type: "function" as const,
      function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
    },
  ];
  for (const tool_choice of [undefined, "required", "none", { type: "function", function: { name: "get_weather" } }] as const) {
    const tok = await s.http.post("/tokenize", { model: "tiny", messages, tools, ...(tool_choice ? { tool_choice } : {}) });
    assert.equal(tok.status, 200, JSON.stringify(tok.json));
    const chat = await s.client.chat.completions.create({ model: "tiny", messages, tools, ...(tool_choice ? { tool_choice } : {}), max_tokens: 1 });
    assert.equal(tok.json.count, chat.usage!.prompt_tokens, `tool_choice ${JSON.stringify(tool_choice)}`);
  }
  const plain = await s.http.post("/tokenize", { model: "tiny", messages });
  const withTools = await s.http.post("/tokenize", { model: "tiny", messages, tools });
  assert.ok(withTools.json.count > plain.json.count + 50, "the tools are part of the rendered prompt");

  const strs = await s.http.post("/tokenize", { model: "tiny", messages, return_token_strs: true, add_generation_prompt: true, continue_final_message: false });
  assert.equal(strs.status, 200, JSON.stringify(strs.json));
  assert.deepEqual(strs.json.tokens, plain.json.tokens);
  assert.equal(strs.json.token_strs!.length, strs.json.tokens.length);
  assert.ok(strs.json.token_strs!.every((t) => typeof t === "string" && t !== ""), JSON.stringify(strs.json.token_strs));
  assert.equal(plain.json.token_strs, null, "vLLM's shape always carries token_strs; null unless asked for");
});

test("/tokenize refuses by name what it would not honour: vLLM's other switches, chat fields on a prompt, unknown fields", async () => {
  const messages = [{ role: "user" as const, content: "x" }];
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ messages, add_generation_prompt: false }, "add_generation_prompt"],
    [{ messages, continue_final_message: true }, "continue_final_message"],
    // A last assistant message is continued: vLLM's closing of it is refused, its continuing taken.
    [{ messages: [...messages, { role: "assistant", content: "Hel" }], continue_final_message: false }, "continue_final_message"],
    [{ messages: [...messages, { role: "assistant", content: "Hel" }], add_generation_prompt: true }, "add_generation_prompt"],
    // vLLM refuses the pair (it asks both to open a turn and to continue the last message).
    [{ messages: [...messages, { role: "assistant", content: "Hel" }], add_generation_prompt: true, continue_final_message: true }, "add_generation_prompt"],
    [{ messages, add_special_tokens: true }, "add_special_tokens"],
    [{ messages, chat_template: "{{ messages }}" }, "chat_template"],
    [{ messages, chat_template_kwargs: { custom: 1 } }, "chat_template_kwargs.custom"],
    [{ prompt: "x", tools: [{ type: "function", function: { name: "f" } }] }, "tools"],
    [{ prompt: "x", frobnicate: true }, "frobnicate"],
    [{ messages, tools: [{ type: "function", function: { name: "f" } }, { type: "function", function: { name: "f" } }] }, "tools[1].function.name"],
  ];
  for (const [body, param] of cases) {
    const r = await s.http.postRaw("/tokenize", { model: "tiny", ...body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.error?.param, param, r.text);
  }
  const prefill = [...messages, { role: "assistant" as const, content: "Hel" }];
  const continued = await s.http.post("/tokenize", { model: "tiny", messages: prefill, continue_final_message: true, add_generation_prompt: false });
  assert.equal(continued.status, 200, JSON.stringify(continued.json));
  assert.deepEqual(continued.json.tokens, (await s.http.post("/tokenize", { model: "tiny", messages: prefill })).json.tokens);
});

test("/tokenize and /detokenize refuse bad input with 4xx", async () => {
  const cases: Array<[string, unknown, number, string | null]> = [
    ["/tokenize", { model: "tiny" }, 400, "prompt"],
    ["/tokenize", { model: "tiny", prompt: "a", messages: [{ role: "user", content: "b" }] }, 400, "messages"],
    ["/tokenize", { model: "nope", prompt: "a" }, 404, "model"],
    ["/detokenize", { model: "tiny", tokens: [1, 99999] }, 400, "tokens[1]"],
    ["/detokenize", { model: "tiny", tokens: "abc" }, 400, "tokens"],
  ];
  for (const [path, body, status, param] of cases) {
    const r = await s.http.postRaw(path, body);
    assert.equal(r.status, status, `${path} ${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.error?.param, param, r.text);
  }
});

test("a text prompt's special-token text is read as those tokens, as llama-server and vLLM read a prompt", async () => {
  const messages = [{ role: "user" as const, content: "Hi" }];
  const chat = await s.http.chat({ model: "tiny", messages, max_tokens: 1, temperature: 0, logit_bias: NO_EOG });
  // The same conversation, templated by the client: the prompt the chat request renders.
  const templated = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const r = await complete({ prompt: templated, max_tokens: 1, temperature: 0, logit_bias: NO_EOG });
  assert.equal(r.usage!.prompt_tokens, chat.usage!.prompt_tokens);
  assert.equal(r.choices[0].text, chat.choices[0].message.content);
  const tok = await s.http.post("/tokenize", { model: "tiny", prompt: "<|im_end|>", add_special_tokens: false, return_token_strs: true });
  assert.deepEqual(tok.json.token_strs, ["<|im_end|>"]);
  // A chat message's text stays text whatever it holds.
  const typed = await s.http.post("/tokenize", { model: "tiny", messages: [{ role: "user", content: "<|im_end|>" }] });
  const plain = await s.http.post("/tokenize", { model: "tiny", messages: [{ role: "user", content: "" }] });
  assert.ok(typed.json.count > plain.json.count + 1, `${typed.json.count} vs ${plain.json.count}`);
});
