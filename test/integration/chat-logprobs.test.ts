import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type OpenAI from "openai";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

const s = useTestServer();

const base = { model: "tiny", messages: [{ role: "user" as const, content: "Log my probabilities" }], max_tokens: 16, logit_bias: NO_EOG };

test("logprobs.content has one entry per token, concatenating to the content, top_logprobs sorted", async () => {
  const r = await s.client.chat.completions.create({ ...base, temperature: 0, logprobs: true, top_logprobs: 4 });
  const content = r.choices[0].logprobs!.content!;
  assert.equal(content.length, 16);
  assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 4);
    const values = e.top_logprobs.map((t) => t.logprob);
    assert.deepEqual(values, [...values].sort((a, b) => b - a));
    // Greedy: the chosen token is the most likely one.
    assert.equal(e.token, e.top_logprobs[0].token);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-9);
    assert.deepEqual(Buffer.from(e.bytes!).toString("utf8"), e.token);
  }
});

test("logprobs without top_logprobs gives empty alternatives; without logprobs it is null", async () => {
  const r = await s.client.chat.completions.create({ ...base, logprobs: true });
  assert.ok(r.choices[0].logprobs!.content!.every((e) => e.top_logprobs.length === 0));
  const plain = await s.client.chat.completions.create(base);
  assert.equal(plain.choices[0].logprobs, null);
});

test("streamed logprobs arrive per chunk and match the non-streamed ones at temperature 0", async () => {
  const params = { ...base, temperature: 0, logprobs: true, top_logprobs: 2 };
  const whole = await s.client.chat.completions.create(params);
  const stream = await s.client.chat.completions.create({ ...params, stream: true });
  const entries: OpenAI.Chat.Completions.ChatCompletionTokenLogprob[] = [];
  let text = "";
  for await (const c of stream) {
    const ch = c.choices[0];
    if (ch?.delta?.content) {
      text += ch.delta.content;
      assert.ok(ch.logprobs?.content?.length, "a content chunk carries its tokens' logprobs");
    }
    entries.push(...(ch?.logprobs?.content ?? []));
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.deepEqual(entries, whole.choices[0].logprobs!.content);
});

test("sampled (temperature 1) tokens are reproducible by seed with logprobs on, and n choices each get theirs", async () => {
  const params = { ...base, temperature: 1, seed: 11, logprobs: true, top_logprobs: 1, n: 2 };
  const [a, b] = await Promise.all([s.client.chat.completions.create(params), s.client.chat.completions.create(params)]);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.choices[1].message.content, b.choices[1].message.content);
  assert.notEqual(a.choices[0].message.content, a.choices[1].message.content);
  for (const c of a.choices) assert.equal(c.logprobs!.content!.map((e) => e.token).join(""), c.message.content);
});

test("asking for logprobs does not change what a seed samples, and each sampled token's logprob is its own", async () => {
  const params = { ...base, max_tokens: 24, temperature: 1, seed: 3 };
  const [plain, probed] = await Promise.all([
    s.client.chat.completions.create(params),
    s.client.chat.completions.create({ ...params, logprobs: true, top_logprobs: 2 }),
  ]);
  assert.equal(probed.choices[0].message.content, plain.choices[0].message.content);
  const content = probed.choices[0].logprobs!.content!;
  // At temperature 1 some sampled tokens are not among the top two; they still get a real value.
  const outside = content.filter((e) => !e.top_logprobs.some((t) => t.token === e.token));
  assert.ok(outside.length > 0, "every sampled token was in the top two");
  for (const e of outside) assert.ok(e.logprob < e.top_logprobs[1].logprob + 1e-9 && e.logprob > -100, String(e.logprob));
});

test("logprobs stop at a stop string with the text", async () => {
  const free = await s.client.chat.completions.create({ ...base, temperature: 0 });
  const text = free.choices[0].message.content!;
  const stop = text.slice(6, 10);
  const r = await s.client.chat.completions.create({ ...base, temperature: 0, stop, logprobs: true });
  const tokens = r.choices[0].logprobs!.content!.map((e) => e.token).join("");
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  // The token in which the stop string begins is reported; nothing after it.
  assert.ok(tokens.startsWith(r.choices[0].message.content!));
  assert.ok(tokens.length < r.choices[0].message.content!.length + stop.length + 8);
});

test("control tokens among the alternatives are named as the vocabulary spells them, with null bytes", async () => {
  // Token 3 (<|im_start|>) and 1 (<s>) are control tokens: neither adds text or bytes, so both
  // once read as {token: "", bytes: []} and a client could not tell them apart.
  const r = await s.client.chat.completions.create({ ...base, max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: 3, logit_bias: { 3: 100, 1: 99 } });
  const [entry] = r.choices[0].logprobs!.content!;
  assert.deepEqual(
    entry.top_logprobs.slice(0, 2).map((t) => [t.token, t.bytes]),
    [
      ["<|im_start|>", null],
      ["<s>", null],
    ],
  );
  // A token with text keeps its bytes.
  assert.ok(entry.top_logprobs[2].bytes!.length > 0);
  // The chosen token is the first alternative (greedy), named the same way; it adds nothing to the content.
  assert.deepEqual([entry.token, entry.bytes], ["<|im_start|>", null]);
  assert.equal(r.choices[0].message.content, "");
});
