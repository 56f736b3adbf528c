import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { byteTokenId, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { NO_EOG, postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// Token texts on the three fixture tokenizers: the default one (SentencePiece pieces, no space
// prefix), "spm" (Llama 2 style: "▁word" pieces and a space prefix llama.cpp drops from a text's
// first piece) and "bpe" (GPT-2 style byte-level BPE, "Ġword"). Whatever the tokenizer, the reported
// tokens spell the text exactly: their texts concatenate to it (a character split over tokens
// belongs to the token that completes it; the ones before it are ""), their bytes decode to it, and
// text_offset indexes it.

const MODELS = ["tiny", "spm", "bpe"] as const;

let s: TestServer;
before(async () => {
  s = await startTestServer({}, { tokenizers: true });
});
after(async () => {
  await s?.close();
});

/**
 * Bans the end tokens and lifts some raw bytes (é's, —'s and 🎉's) to about the level of ordinary
 * tokens, so answers run to max_tokens and mix words with characters split over byte tokens (and
 * byte sequences that are no character at all). Byte pieces sit at the same ids in all three.
 */
const BIAS: Record<string, number> = { ...NO_EOG };
// Unequal lifts: the byte tokens' logits are otherwise identical, and ties make "greedy picks the
// top token" ambiguous.
[0xc3, 0xa9, 0xe2, 0x80, 0x94, 0xf0, 0x9f].forEach((b, i) => (BIAS[byteTokenId(b)] = 32 - 0.25 * i));

const messages = [{ role: "user" as const, content: "Tell me about Flor and the café" }];
const chat = (model: string, extra: Record<string, unknown> = {}) => ({ model, messages, max_tokens: 24, logit_bias: BIAS, ...extra });

interface Entry {
  token: string;
  bytes: number[] | null;
  logprob: number;
  top_logprobs: Array<{ token: string; bytes: number[] | null; logprob: number }>;
}

/** What a UTF-8 decoder makes of the bytes: invalid ones are U+FFFD, and so is a character still unfinished at the end. */
const decodeWhole = (bytes: number[]) => new TextDecoder("utf-8").decode(Uint8Array.from(bytes));

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Texts concatenate to the content, and bytes decode to it; a greedy token is its own top alternative. */
function assertSpells(entries: Entry[], content: string, what: string, greedy = false) {
  assert.equal(entries.map((e) => e.token).join(""), content, `${what}: token texts spell the content`);
  const bytes = entries.flatMap((e) => e.bytes ?? []);
  assert.equal(decodeWhole(bytes), content, `${what}: token bytes decode to the content`);
  if (!content.includes("\uFFFD")) assert.deepEqual(Buffer.from(content), Buffer.from(bytes), `${what}: bytes are the content's UTF-8`);
  for (const e of entries) {
    // A token's bytes always cover its text (only the character it completes may start earlier).
    const own = Buffer.from(e.bytes ?? []).toString("utf8");
    if (!e.token.includes("\uFFFD") && !own.includes("\uFFFD")) assert.equal(e.token, own, `${what}: ${JSON.stringify(e)}`);
    if (greedy && e.top_logprobs.length > 0) {
      // Greedy picks the top token (or one tied with it: the lifted byte tokens can tie), and the
      // alternative is spelled the same as the chosen token.
      const same = e.top_logprobs.find((t) => t.token === e.token && JSON.stringify(t.bytes) === JSON.stringify(e.bytes));
      assert.ok(same !== undefined, `${what}: the greedy token is among its alternatives: ${JSON.stringify(e)}`);
      assert.ok(Math.abs(same.logprob - e.top_logprobs[0].logprob) < 1e-4, `${what}: greedy picks the top token: ${JSON.stringify(e)}`);
    }
  }
}

/**
 * Legacy logprobs: tokens concatenate to the text and each offset points at its token in it, counted
 * in characters (code points, as a Python client indexes the text), not UTF-16 units.
 */
function assertLegacy(lp: { tokens: string[]; text_offset: number[] }, text: string, what: string, from = 0) {
  const chars = Array.from(text);
  assert.equal(lp.tokens.join(""), chars.slice(from).join(""), `${what}: tokens spell the text`);
  let at = from;
  lp.tokens.forEach((t, i) => {
    assert.equal(lp.text_offset[i], at, `${what}: text_offset[${i}]`);
    const length = Array.from(t).length;
    assert.equal(chars.slice(at, at + length).join(""), t);
    at += length;
  });
}

async function streamChat(body: Record<string, unknown>) {
  const stream = await s.client.chat.completions.create({ ...(body as any), stream: true });
  const chunks: string[] = [];
  const entries: Entry[] = [];
  for await (const c of stream as unknown as AsyncIterable<any>) {
    const choice = c.choices[0];
    if (!choice) continue;
    if (choice.delta?.content) chunks.push(choice.delta.content);
    entries.push(...(choice.logprobs?.content ?? []));
  }
  return { chunks, content: chunks.join(""), entries };
}

for (const model of MODELS) {
  test(`${model}: chat logprob tokens spell the content, streamed and not, at temperature 0 and 1`, async () => {
    const greedy = await s.client.chat.completions.create({ ...chat(model), temperature: 0, logprobs: true, top_logprobs: 3 });
    const content = greedy.choices[0].message.content!;
    const entries = greedy.choices[0].logprobs!.content! as Entry[];
    assert.equal(entries.length, 24);
    assertSpells(entries, content, `${model} greedy`, true);

    const streamed = await streamChat({ ...chat(model), temperature: 0, logprobs: true, top_logprobs: 3 });
    assert.equal(streamed.content, content, "streamed text equals the non-streamed text");
    assert.deepEqual(streamed.entries.map((e) => [e.token, e.bytes]), entries.map((e) => [e.token, e.bytes]));
    for (const c of streamed.chunks) assert.ok(!LONE_SURROGATE.test(c), `a chunk splits a character: ${JSON.stringify(c)}`);

    let split = 0;
    let words = 0;
    for (const seed of [1, 2, 3]) {
      const r = await s.client.chat.completions.create({ ...chat(model), temperature: 1, seed, logprobs: true, top_logprobs: 2 });
      const e = r.choices[0].logprobs!.content! as Entry[];
      assertSpells(e, r.choices[0].message.content!, `${model} seed ${seed}`);
      split += e.filter((x) => x.token === "" && (x.bytes ?? []).length > 0).length;
      words += e.filter((x) => /^ \S/.test(x.token) && x.bytes?.[0] === 0x20).length;
      const again = await streamChat({ ...chat(model), temperature: 1, seed, logprobs: true });
      assert.equal(again.content, r.choices[0].message.content);
      for (const c of again.chunks) assert.ok(!LONE_SURROGATE.test(c), `a chunk splits a character: ${JSON.stringify(c)}`);
    }
    assert.ok(split > 0, "some token ended inside a character");
    assert.ok(words > 0, 'some word piece ("▁word", "Ġword") kept its space');
  });

  test(`${model}: completions' legacy tokens spell the text and text_offset indexes it, streamed and not`, async () => {
    const body = { model, prompt: "Flor went to the café", max_tokens: 20, logit_bias: BIAS, temperature: 0, logprobs: 2 };
    const r = await postJson(`${s.url}/v1/completions`, body);
    assert.equal(r.status, 200, r.text);
    const text: string = r.json.choices[0].text;
    assertLegacy(r.json.choices[0].logprobs, text, model);
    assert.equal(r.json.choices[0].logprobs.tokens.length, 20);

    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    });
    const tokens: string[] = [];
    const offsets: number[] = [];
    let streamedText = "";
    for (const line of (await res.text()).split("\n")) {
      if (!line.startsWith("data: {")) continue;
      const c = JSON.parse(line.slice(6)).choices[0];
      if (!c) continue;
      assert.ok(!LONE_SURROGATE.test(c.text), `a chunk splits a character: ${JSON.stringify(c.text)}`);
      streamedText += c.text;
      tokens.push(...(c.logprobs?.tokens ?? []));
      offsets.push(...(c.logprobs?.text_offset ?? []));
    }
    assert.equal(streamedText, text);
    assertLegacy({ tokens, text_offset: offsets }, streamedText, `${model} streamed`);
  });

  test(`${model}: echo with logprobs spells the prompt exactly, split characters included`, async () => {
    const prompt = "Hello Flor, the café — 🎉 naïve";
    const r = await postJson(`${s.url}/v1/completions`, { model, prompt, echo: true, logprobs: 1, max_tokens: 6, logit_bias: BIAS, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    const { text, logprobs } = r.json.choices[0];
    assert.ok(text.startsWith(prompt), JSON.stringify(text));
    assertLegacy(logprobs, text, `${model} echo`);
    assert.equal(logprobs.token_logprobs[0], null);
    // The prompt's tokens end exactly where the prompt does; the 4-byte emoji is split over byte tokens.
    let k = 0;
    for (let at = 0; at < prompt.length; k++) at += logprobs.tokens[k].length;
    assert.equal(logprobs.tokens.slice(0, k).join(""), prompt);
    const emoji = logprobs.tokens.indexOf("🎉");
    assert.ok(emoji >= 3 && logprobs.tokens.slice(emoji - 3, emoji).every((t: string) => t === ""), JSON.stringify(logprobs.tokens));
    // The word pieces keep their spaces ("▁Flor", "ĠFlor"); the default vocabulary has no such piece.
    if (model !== "tiny") assert.ok(logprobs.tokens.includes(" Flor"), JSON.stringify(logprobs.tokens));
  });

  test(`${model}: a stop string cuts the content, and the tokens still spell it up to there`, async () => {
    const free = await s.client.chat.completions.create({ ...chat(model), temperature: 0 });
    const chars = Array.from(free.choices[0].message.content!);
    const stop = chars.slice(10, 13).join("");
    const expected = free.choices[0].message.content!.slice(0, free.choices[0].message.content!.indexOf(stop));
    const r = await s.client.chat.completions.create({ ...chat(model), temperature: 0, stop, logprobs: true });
    assert.equal(r.choices[0].message.content, expected);
    const entries = r.choices[0].logprobs!.content! as Entry[];
    // The token in which the stop string begins is reported, nothing after it.
    const spelled = entries.map((e) => e.token).join("");
    assert.ok(spelled.startsWith(expected), `${JSON.stringify(spelled)} vs ${JSON.stringify(expected)}`);
    assert.ok(entries.slice(0, -1).map((e) => e.token).join("").length <= expected.length);
    const streamed = await streamChat({ ...chat(model), temperature: 0, stop, logprobs: true });
    assert.equal(streamed.content, expected);
    assert.deepEqual(streamed.entries.map((e) => e.token), entries.map((e) => e.token));
  });
}

/** A greedy chat request with logprobs whose strict schema forces the answer {"<key>": "<value>"}. */
function forcedAnswer(model: string, key: string, value: string) {
  const schema = { type: "object", properties: { [key]: { type: "string", enum: [value] } }, required: [key], additionalProperties: false };
  return {
    model,
    messages: [{ role: "user" as const, content: "say it" }],
    max_tokens: 60,
    temperature: 0,
    logprobs: true,
    response_format: { type: "json_schema" as const, json_schema: { name: "x", strict: true, schema } },
  };
}

for (const model of MODELS) {
  test(`${model}: a stop string whose first character spans tokens leaves that character's bytes out of the logprobs`, async () => {
    // The grammar forces 世界😀é; 😀 (4 bytes) is the stop string. Its first bytes' tokens add no text
    // of their own, and were reported although the stop starts at them.
    const body = { ...forcedAnswer(model, "a", "世界😀é"), stop: "😀" };
    const bytesOf = (entries: Entry[]) => Buffer.from(entries.flatMap((e) => e.bytes ?? []));
    const r = await s.client.chat.completions.create(body);
    const content = r.choices[0].message.content!;
    assert.ok(content.endsWith("世界"), JSON.stringify(content));
    const entries = r.choices[0].logprobs!.content! as Entry[];
    assert.deepEqual(bytesOf(entries), Buffer.from(content), JSON.stringify(entries.slice(-4).map((e) => [e.token, e.bytes])));
    assert.equal(entries.map((e) => e.token).join(""), content);
    const streamed = await streamChat(body);
    assert.equal(streamed.content, content);
    assert.deepEqual(bytesOf(streamed.entries), Buffer.from(content));
  });
}

test("spm: a text's first piece loses the space prefix; a piece after the prompt keeps its space", async () => {
  // The prompt "Flor" is "▁Flor" after <s>: echoed as "Flor", as the prompt reads.
  const r = await postJson(`${s.url}/v1/completions`, { model: "spm", prompt: "Flor", echo: true, logprobs: 0, max_tokens: 3, logit_bias: NO_EOG, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  const lp = r.json.choices[0].logprobs;
  assert.deepEqual(lp.tokens.slice(0, 2), ["", "Flor"]);
  assertLegacy(lp, r.json.choices[0].text, "spm echo");
  // In a chat answer, a word piece right after "assistant\n" keeps its space in text and bytes.
  const c = await s.client.chat.completions.create({ ...chat("spm"), logit_bias: NO_EOG, temperature: 0, logprobs: true });
  const first = c.choices[0].logprobs!.content![0];
  assert.ok(c.choices[0].message.content!.startsWith(first.token));
  if (first.token.startsWith(" ")) assert.equal(first.bytes![0], 0x20);
});

test("a ▁ typed in a text prompt is echoed and listed as typed, with every offset after it in place", async () => {
  // SentencePiece reads a typed ▁ as a space: its token spelled " " where the text has ▁, and every
  // text_offset after it was one character short (spm also listed it as "").
  for (const model of MODELS) {
    for (const prompt of ["a ▁ b▁▁c ▁x", "▁start", "x▁", "ĠBPE Ġ▁ mixed"]) {
      const r = await postJson(`${s.url}/v1/completions`, { model, prompt, echo: true, logprobs: 0, max_tokens: 2, logit_bias: NO_EOG, temperature: 0 });
      assert.equal(r.status, 200, r.text);
      const text = r.json.choices[0].text as string;
      assert.ok(text.startsWith(prompt), `${model}: ${JSON.stringify(text)}`);
      assertLegacy(r.json.choices[0].logprobs, text, `${model} ${JSON.stringify(prompt)}`);
    }
  }
});

test("spm: token ids after BOS read as their text: /detokenize gives /tokenize's text back, and an echo matches its tokens", async () => {
  for (const text of ["Hello world", "the the", "café 世界 😀 naïve"]) {
    const t = await postJson(`${s.url}/tokenize`, { model: "spm", prompt: text });
    assert.equal(t.status, 200, t.text);
    const d = await postJson(`${s.url}/detokenize`, { model: "spm", tokens: t.json.tokens });
    // llama.cpp's detokenizer gave " Hello world": the space prefix came back after BOS.
    assert.equal(d.json.prompt, text);
    const echo = await postJson(`${s.url}/v1/completions`, { model: "spm", prompt: t.json.tokens, echo: true, logprobs: 0, max_tokens: 0 });
    assert.equal(echo.status, 200, echo.text);
    assert.equal(echo.json.choices[0].text, text);
    assertLegacy(echo.json.choices[0].logprobs, text, "spm token echo");
  }
  // A character left unfinished at the end of the ids is what a decoder reads there: U+FFFD.
  const partial = await postJson(`${s.url}/detokenize`, { model: "spm", tokens: [byteTokenId(0xe4), byteTokenId(0xb8)] });
  assert.equal(partial.json.prompt, "\uFFFD");
  // Echoed, the same bytes are left to the token that completes them: prompt and answer together
  // read as the bytes do, with nothing doubled.
  const joined = await postJson(`${s.url}/v1/completions`, {
    model: "spm",
    prompt: [byteTokenId(0xe4), byteTokenId(0xb8)],
    echo: true,
    max_tokens: 1,
    logit_bias: { [byteTokenId(0x96)]: 100 },
  });
  assert.equal(joined.json.choices[0].text, "世");
});

for (const model of MODELS) {
  test(`${model}: echo with logprobs of a prompt holding special-token text reads along the prompt as sent`, async () => {
    // A conversation the client templated itself: its markers are read as control tokens, which
    // spelled "" while the echo keeps their text (and on spm the space the tokenizer adds after each
    // one came out as text), so text_offset fell behind the echoed text from the first marker on.
    const prompt = "<s>Hi</s> <|im_start|>user\ncafé 日本<|im_end|>\n<|im_start|>assistant\n";
    const r = await postJson(`${s.url}/v1/completions`, { model, prompt, echo: true, logprobs: 1, max_tokens: 4, logit_bias: NO_EOG, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    const { text, logprobs } = r.json.choices[0];
    assert.ok(text.startsWith(prompt), JSON.stringify(text));
    assertLegacy(logprobs, text, `${model} templated echo`);
    assert.ok(logprobs.tokens.includes("<|im_start|>"), JSON.stringify(logprobs.tokens));
    const streamed = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, prompt, echo: true, logprobs: 1, max_tokens: 4, logit_bias: NO_EOG, temperature: 0, stream: true }),
    });
    const tokens: string[] = [];
    for (const line of (await streamed.text()).split("\n"))
      if (line.startsWith("data: {")) tokens.push(...(JSON.parse(line.slice(6)).choices[0]?.logprobs?.tokens ?? []));
    assert.deepEqual(tokens, logprobs.tokens);
  });
}

for (const model of ["tiny", "spm"] as const) {
  test(`${model}: a typed <unk> is the unknown token, echoed and listed as its text as control tokens are`, async () => {
    // <unk> (token type unknown, not control) spelled "": the listed tokens no longer spelled the
    // echo, the space spm's tokenizer adds after it came out as text, and its top_logprobs key was "".
    const prompt = "a<unk>b c";
    const r = await postJson(`${s.url}/v1/completions`, { model, prompt, echo: true, logprobs: 1, max_tokens: 1, seed: 3, logit_bias: NO_EOG });
    assert.equal(r.status, 200, r.text);
    const { text, logprobs } = r.json.choices[0];
    assert.ok(text.startsWith(prompt), JSON.stringify(text));
    assertLegacy(logprobs, text, `${model} <unk> echo`);
    const at = logprobs.tokens.indexOf("<unk>");
    assert.ok(at > 0, JSON.stringify(logprobs.tokens));
    assert.ok("<unk>" in logprobs.top_logprobs[at], JSON.stringify(logprobs.top_logprobs[at]));
    // Sampled in an answer, it is named as control tokens are: its text, no bytes, no content.
    const c = await postJson(`${s.url}/v1/chat/completions`, { model, messages, max_tokens: 1, logprobs: true, top_logprobs: 1, logit_bias: { [FIXTURE_TOKENS.unk]: 100 } });
    assert.equal(c.status, 200, c.text);
    const [entry] = c.json.choices[0].logprobs.content;
    assert.deepEqual([entry.token, entry.bytes, c.json.choices[0].message.content], ["<unk>", null, ""]);
  });
}

for (const model of MODELS) {
  test(`${model}: U+FEFF (a zero-width no-break space) is text like any character, not a byte-order mark to drop`, async () => {
    // Each token's bytes were decoded apart by a decoder that drops a leading BOM, so U+FEFF
    // vanished from answers, echoes and /detokenize while the bytes still held it.
    for (const text of ["a\uFEFFb", "\uFEFFbom"]) {
      const t = await postJson(`${s.url}/tokenize`, { model, prompt: text });
      const d = await postJson(`${s.url}/detokenize`, { model, tokens: t.json.tokens });
      assert.equal(d.json.prompt, text);
      const echo = await postJson(`${s.url}/v1/completions`, { model, prompt: text, echo: true, logprobs: 0, max_tokens: 0 });
      assert.equal(echo.json.choices[0].text, text);
      assertLegacy(echo.json.choices[0].logprobs, text, `${model} echo`);
    }
    const body = forcedAnswer(model, "v", "x\uFEFFy");
    const r = await s.client.chat.completions.create(body);
    const content = r.choices[0].message.content!;
    assert.equal(JSON.parse(content).v, "x\uFEFFy");
    assertSpells(r.choices[0].logprobs!.content! as Entry[], content, `${model} answer`);
    assert.equal((await streamChat(body)).content, content);
  });
}

test("legacy text_offset counts characters: a token after an emoji starts where a Python client finds it", async () => {
  const prompt = "Hello 😀 world";
  const r = await postJson(`${s.url}/v1/completions`, { model: "spm", prompt, echo: true, logprobs: 0, max_tokens: 0 });
  assert.equal(r.status, 200, r.text);
  const lp = r.json.choices[0].logprobs;
  const world = lp.tokens.indexOf(" world");
  assert.ok(world > 0, JSON.stringify(lp.tokens));
  assert.equal(lp.text_offset[world], Array.from("Hello 😀").length);
});

test("a chat prompt opens with BOS only on a model that adds one: byte-level BPE (add_bos_token false, as Qwen) starts at <|im_start|>, as llama-server renders it", async () => {
  const messages = [
    { role: "system", content: "A" },
    { role: "user", content: "Hi" },
  ];
  const tokens = async (model: string) => {
    const r = await postJson(`${s.url}/tokenize`, { model, messages });
    assert.equal(r.status, 200, r.text);
    return r.json.tokens as number[];
  };
  // The BPE fixture's BOS is <s> (id 1) and it says not to add it; llama-server's tokens for this
  // chat on that file are [3, 951, 15, 70, 4, 15, 3, 930, …]: <|im_start|> first.
  const bpe = await tokens("bpe");
  assert.equal(bpe[0], 3, JSON.stringify(bpe));
  assert.ok(!bpe.includes(1), JSON.stringify(bpe));
  // The generation's usage counts the same prompt.
  const answer = await postJson(`${s.url}/v1/chat/completions`, { model: "bpe", messages, max_tokens: 1 });
  assert.equal(answer.json.usage.prompt_tokens, bpe.length);
  // Models that add BOS keep it in front.
  for (const model of ["tiny", "spm"]) assert.equal((await tokens(model))[0], 1, model);
});
