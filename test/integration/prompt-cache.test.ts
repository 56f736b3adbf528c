import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { ChatBody, ChatMessageBody } from "../helpers/requests.ts";
import { NO_EOG, startTestServer, type TestServer, useTestServer } from "../helpers/server.ts";

// One sequence, so every request lands in the same slot and only the cache rules decide reuse.
const s = useTestServer({ parallel: "1", "ctx-size": "1024", "cache-min-tokens": "16" });

const SYSTEM = "You are a careful assistant. " + "Answer every question about the king, the river and the city in detail. ".repeat(12);
const chat = (user: string, extra: Partial<ChatBody> = {}) =>
  s.http.chat({
    model: "tiny",
    messages: [
      { role: "system", content: SYSTEM },
      { role: "user", content: user },
    ],
    max_tokens: 12,
    temperature: 0,
    logit_bias: NO_EOG,
    ...extra,
  });

async function systemPrefixTokens(): Promise<number> {
  const r = await s.http.post("/tokenize", { model: "tiny", messages: [{ role: "system", content: SYSTEM }] });
  return r.json.count;
}

test("a second request sharing a long system prompt reports the reused tokens, JSON and streamed", async () => {
  const prefix = await systemPrefixTokens();
  assert.ok(prefix > 150);
  await chat("First question about the king?");
  const warm = await chat("Second question about the river?");
  const cached = warm.usage!.prompt_tokens_details.cached_tokens;
  // Everything up to where the user turn starts is shared; the template boundary may cost a token or two.
  assert.ok(cached >= prefix - 2, `cached ${cached} < prefix ${prefix} - 2`);
  assert.ok(cached < warm.usage!.prompt_tokens);

  const stream = await s.http.chatStream({
    model: "tiny",
    messages: [
      { role: "system", content: SYSTEM },
      { role: "user", content: "Third, about the city?" },
    ],
    max_tokens: 4,
    stream_options: { include_usage: true },
  });
  const usage = stream.usage;
  assert.ok(usage!.prompt_tokens_details.cached_tokens >= prefix - 2);
});

test("the same prompt again reuses all but its last token", async () => {
  const a = await chat("Exactly the same?");
  const b = await chat("Exactly the same?");
  assert.equal(b.usage!.prompt_tokens_details.cached_tokens, b.usage!.prompt_tokens - 1);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test("a warm answer equals the cold answer at temperature 0", async () => {
  const cold = await chat("Is the answer the same?", { cache_prompt: false });
  assert.equal(cold.usage!.prompt_tokens_details.cached_tokens, 0);
  await chat("Something else to change the sequence tail.");
  const warm = await chat("Is the answer the same?");
  assert.ok(warm.usage!.prompt_tokens_details.cached_tokens > 0);
  assert.equal(warm.choices[0].message.content, cold.choices[0].message.content);
});

test("another user never reuses the prompt, even an identical one", async () => {
  await s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "Only alice asked this before. ".repeat(8) }],
    max_tokens: 2,
    user: "alice",
  });
  await chat("Private question", { user: "alice" });
  const alice = await chat("Private question", { user: "alice" });
  assert.ok(alice.usage!.prompt_tokens_details.cached_tokens > 0);
  const bob = await chat("Private question", { user: "bob" });
  assert.equal(bob.usage!.prompt_tokens_details.cached_tokens, 0);
  const salted = await chat("Private question", { user: "alice", cache_salt: "other" });
  assert.equal(salted.usage!.prompt_tokens_details.cached_tokens, 0);
  const anonymous = await s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "Only alice asked this before. ".repeat(8) }],
    max_tokens: 2,
  });
  // Only the template's opening tokens, which every anonymous chat shares, may be reused.
  assert.ok(anonymous.json.usage!.prompt_tokens_details.cached_tokens <= 2);
  // safety_identifier is the newer name of the same boundary.
  await chat("Private question", { safety_identifier: "carol" });
  const carol = await chat("Private question", { safety_identifier: "carol" });
  assert.ok(carol.usage!.prompt_tokens_details.cached_tokens > 0);
  const dave = await chat("Private question", { safety_identifier: "dave" });
  assert.equal(dave.usage!.prompt_tokens_details.cached_tokens, 0);
});

test("cache_prompt: false evaluates the whole prompt", async () => {
  await chat("Opt out");
  const r = await chat("Opt out", { cache_prompt: false });
  assert.equal(r.usage!.prompt_tokens_details.cached_tokens, 0);
});

test("completions report cached tokens too", async () => {
  const prompt = SYSTEM + " Continue:";
  await s.http.complete({ model: "tiny", prompt, max_tokens: 2 });
  const r = await s.http.complete({ model: "tiny", prompt, max_tokens: 2 });
  assert.ok(r.usage!.prompt_tokens_details.cached_tokens > 100);
});

test("a multi-turn chat hits the cache on every turn", async () => {
  const messages: ChatMessageBody[] = [{ role: "system", content: SYSTEM }];
  const hits: number[] = [];
  for (let turn = 0; turn < 4; turn++) {
    messages.push({ role: "user", content: `Turn ${turn}: go on.` });
    const r = await s.http.chat({ model: "tiny", messages, max_tokens: 8, temperature: 0, logit_bias: NO_EOG, user: "chatter" });
    messages.push({ role: "assistant", content: r.choices[0].message.content });
    hits.push(r.usage!.prompt_tokens_details.cached_tokens / r.usage!.prompt_tokens);
  }
  for (const h of hits.slice(1)) assert.ok(h > 0.8, `hit rate ${h}`);
});

const OTHER_SYSTEM = "Poet mode. " + "Write verses about the moon, the sea and the stars at night. ".repeat(12);
const chatWith = (server: TestServer, system: string, user: string) =>
  server.http.chat({
    model: "tiny",
    messages: [
      { role: "system", content: system },
      { role: "user", content: user },
    ],
    max_tokens: 12,
    temperature: 0,
    logit_bias: NO_EOG,
  });

test("a prefix pushed out of the sequence is restored from its saved state", async () => {
  const first = await chatWith(s, SYSTEM, "Restore me");
  await chatWith(s, OTHER_SYSTEM, "Take the sequence"); // the only sequence now holds another prompt
  const again = await chatWith(s, SYSTEM, "Restore me");
  assert.equal(again.usage!.prompt_tokens_details.cached_tokens, again.usage!.prompt_tokens - 1);
  assert.equal(again.choices[0].message.content, first.choices[0].message.content);
});

test("under a small --cache-ram budget old prefixes are evicted and answers stay right", async () => {
  // About one saved state of this prompt size fits (≈90 kB each on the fixture model).
  const small = await startTestServer({ parallel: "1", "ctx-size": "1024", "cache-min-tokens": "16", "cache-ram": "150000" });
  try {
    const a1 = await chatWith(small, SYSTEM, "Evict me");
    const b1 = await chatWith(small, OTHER_SYSTEM, "Evict me");
    // The engine's private prompt-state store, reached past its type on purpose: only its size matters here.
    const store = (small.registry.resolve("tiny").engine as unknown as { slotCache: { store: { bytesUsed: number; size: number } } }).slotCache.store;
    assert.ok(store.bytesUsed <= 150000);
    assert.equal(store.size, 1);
    const a2 = await chatWith(small, SYSTEM, "Evict me");
    // A's state was evicted: only the template's opening ("<s><|im_start|>system\n"), shared with B, can match.
    assert.ok(a2.usage!.prompt_tokens_details.cached_tokens <= 8, `cached ${a2.usage!.prompt_tokens_details.cached_tokens}`);
    assert.equal(a2.choices[0].message.content, a1.choices[0].message.content);
    const b2 = await chatWith(small, OTHER_SYSTEM, "Evict me");
    assert.equal(b2.choices[0].message.content, b1.choices[0].message.content);
  } finally {
    await small.close();
  }
});

test("--cache-ram 0 keeps no saved states; the sequence itself still reuses its prompt", async () => {
  const none = await startTestServer({ parallel: "1", "ctx-size": "1024", "cache-ram": "0" });
  try {
    await chatWith(none, SYSTEM, "Zero");
    await chatWith(none, OTHER_SYSTEM, "Zero");
    const again = await chatWith(none, SYSTEM, "Zero");
    assert.ok(again.usage!.prompt_tokens_details.cached_tokens <= 8, `cached ${again.usage!.prompt_tokens_details.cached_tokens}`);
    const same = await chatWith(none, SYSTEM, "Zero");
    assert.equal(same.usage!.prompt_tokens_details.cached_tokens, same.usage!.prompt_tokens - 1);
  } finally {
    await none.close();
  }
});

test("the Responses API keeps cache_salt's boundary too (it was dropped there: a salted prompt hit another salt's cache)", async () => {
  const respond = async (cache_salt: string) => {
    const r = await s.http.postRaw("/v1/responses", { model: "tiny", input: "The quick brown fox jumps over the lazy dog. ".repeat(8), max_output_tokens: 2, store: false, cache_salt });
    assert.equal(r.status, 200, r.text.slice(0, 300));
    return (r.json as { usage: { input_tokens_details: { cached_tokens: number } } }).usage.input_tokens_details.cached_tokens;
  };
  await respond("salt-a");
  assert.ok((await respond("salt-a")) > 10, "the same salt reuses its prompt");
  // Only the template's opening tokens, which every request shares, may be reused across salts.
  assert.ok((await respond("salt-b")) <= 2, "another salt does not");
});
