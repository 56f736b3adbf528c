import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { BERT_TOKENS, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { clientError, floatVectors, plinthModel } from "../helpers/requests.ts";
import { startTestServer, useTestServer, waitFor } from "../helpers/server.ts";

// A small context so an over-long input is cheap to provoke; the BERT fixture is served beside
// the tiny llama model as "bert".
const s = useTestServer({ "ctx-size": "128" }, { bert: true });

/**
 * Longest embedding input of the tiny model: its context less one. llama.cpp rounds a requested
 * context up (128 → 256), and embeddings get the room prompts get.
 */
const TINY_LIMIT = 255;
/** The BERT model's embedding context is the requested 128, well within its 512 trained positions. */
const BERT_LIMIT = 127;

const DIMS = 64;

const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((a, x) => a + x * x, 0));
const assertUnit = (v: ArrayLike<number>) => assert.ok(Math.abs(norm(v) - 1) <= 1e-5, `norm ${norm(v)}`);
const assertClose = (a: ArrayLike<number>, b: ArrayLike<number>, tol = 1e-6) => {
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) <= tol, `component ${i}: ${a[i]} vs ${b[i]}`);
};
const distance = (a: ArrayLike<number>, b: ArrayLike<number>) => norm(Array.from(a, (x, i) => x - b[i]));

/** The tokens the model's tokenizer gives for a text, without any special tokens. */
async function contentTokens(model: string, text: string): Promise<number[]> {
  const r = await s.http.post("/tokenize", { model, prompt: text, add_special_tokens: false });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

const TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "once upon a time", "a red star in the night sky", "thanks"];

test("a single string: one unit vector, OpenAI's response shape", async () => {
  const r = await s.client.embeddings.create({ model: "tiny", input: "hello world", encoding_format: "float" });
  assert.equal(r.object, "list");
  assert.equal(r.model, "tiny");
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].object, "embedding");
  assert.equal(r.data[0].index, 0);
  assert.equal(r.data[0].embedding.length, DIMS);
  assertUnit(r.data[0].embedding);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
});

test("a batch comes back in input order, each vector equal to the input embedded alone", async () => {
  const batch = await s.client.embeddings.create({ model: "tiny", input: TEXTS, encoding_format: "float" });
  assert.deepEqual(
    batch.data.map((d) => d.index),
    TEXTS.map((_, i) => i),
  );
  for (const [i, text] of TEXTS.entries()) {
    const alone = await s.client.embeddings.create({ model: "tiny", input: text, encoding_format: "float" });
    assertUnit(batch.data[i].embedding);
    assertClose(batch.data[i].embedding, alone.data[0].embedding);
  }
});

test("identical inputs give identical vectors; different inputs differ", async () => {
  for (const model of ["tiny", "bert"]) {
    const vectors = floatVectors(await s.http.embed({ model, input: ["hello world", "the quick brown fox", "hello world", "Hello world!"] }));
    assert.deepEqual(vectors[0], vectors[2]);
    assert.ok(distance(vectors[0], vectors[1]) > 0.05, `${model}: different texts are too close`);
    assert.ok(distance(vectors[0], vectors[3]) > 1e-4, `${model}: punctuation made no difference`);
  }
});

test("token-id inputs embed the same as the text they spell", async () => {
  for (const model of ["tiny", "bert"]) {
    const tokens = await Promise.all(TEXTS.slice(0, 2).map((t) => contentTokens(model, t)));
    const text = await s.http.embed({ model, input: TEXTS.slice(0, 2) });
    const single = await s.http.embed({ model, input: tokens[0] });
    const many = await s.http.embed({ model, input: tokens });
    assert.equal(floatVectors(single).length, 1);
    assertClose(floatVectors(single)[0], floatVectors(text)[0]);
    assertClose(floatVectors(many)[0], floatVectors(text)[0]);
    assertClose(floatVectors(many)[1], floatVectors(text)[1]);
    assert.equal(many.usage.prompt_tokens, text.usage.prompt_tokens);
  }
});

test("usage counts the tokens embedded, including the ones the model adds", async () => {
  // The tiny llama model adds BOS; the BERT model wraps every input in [CLS] … [SEP].
  const added: Record<string, number> = { tiny: 1, bert: 2 };
  for (const model of ["tiny", "bert"]) {
    const lengths = await Promise.all(TEXTS.map((t) => contentTokens(model, t)));
    const expected = lengths.reduce((sum, t) => sum + t.length + added[model], 0);
    const r = await s.client.embeddings.create({ model, input: TEXTS });
    assert.equal(r.usage.prompt_tokens, expected, model);
    assert.equal(r.usage.total_tokens, expected);
  }
  // Token ids that already start with BOS get no second one.
  const withBos = await s.http.embed({ model: "tiny", input: [[FIXTURE_TOKENS.bos, 300, 301], [300, 301]] });
  assert.equal(withBos.usage.prompt_tokens, 3 + 3);
  assertClose(floatVectors(withBos)[0], floatVectors(withBos)[1]);
  const bert = await s.http.embed({ model: "bert", input: [[BERT_TOKENS.cls, 20, 21, BERT_TOKENS.sep], [20, 21]] });
  assert.equal(bert.usage.prompt_tokens, 4 + 4);
  assertClose(floatVectors(bert)[0], floatVectors(bert)[1]);
});

test("a text opening with typed special-token text gets the model's own begin token too, counted alike everywhere", async () => {
  // "<s>hi" is BOS, then the typed <s> read as BOS, then the text, as llama.cpp's tokenizer (and
  // llama-server's /embeddings) reads it, /tokenize and a completions prompt count it: embeddings
  // took the typed <s> for the one to add, and counted one token less.
  for (const [model, text, begin] of [
    ["tiny", "<s>hi there", FIXTURE_TOKENS.bos],
    ["bert", "[CLS] hello world", BERT_TOKENS.cls],
  ] as const) {
    const content = await contentTokens(model, text);
    assert.equal(content[0], begin, JSON.stringify(content));
    const tokenized = await s.http.post("/tokenize", { model, prompt: text });
    const r = await s.http.embed({ model, input: text });
    assert.equal(r.usage.prompt_tokens, content.length + (model === "bert" ? 2 : 1), model);
    assert.equal(r.usage.prompt_tokens, tokenized.json.count, model);
    // The same tokens given as ids embed the same.
    const ids = await s.http.embed({ model, input: [tokenized.json.tokens] });
    assert.equal(ids.usage.prompt_tokens, r.usage.prompt_tokens);
    assertClose(floatVectors(ids)[0], floatVectors(r)[0]);
  }
  const completion = await s.http.complete({ model: "tiny", prompt: "<s>hi there", max_tokens: 1 });
  assert.equal(completion.usage!.prompt_tokens, (await contentTokens("tiny", "<s>hi there")).length + 1);
});

test("dimensions keeps a renormalised prefix of the full vector (Matryoshka)", async () => {
  const [full] = floatVectors(await s.http.embed({ model: "tiny", input: "a red star in the night sky" }));
  for (const k of [1, 8, 32, DIMS]) {
    const [cut] = floatVectors(await s.http.embed({ model: "tiny", input: "a red star in the night sky", dimensions: k }));
    assert.equal(cut.length, k);
    assertUnit(cut);
    const prefix = full.slice(0, k);
    const n = norm(prefix);
    assertClose(
      cut,
      prefix.map((x) => x / n),
      1e-5,
    );
  }
  const r = await s.client.embeddings.create({ model: "bert", input: ["hello", "world"], dimensions: 16 });
  for (const d of r.data) {
    assert.equal(d.embedding.length, 16);
    assertUnit(d.embedding);
  }
});

test("base64 is little-endian float32 and decodes to the float response", async () => {
  const input = ["hello world", "once upon a time"];
  const floats = await s.http.post("/v1/embeddings", { model: "tiny", input, encoding_format: "float" });
  const b64 = await s.http.post("/v1/embeddings", { model: "tiny", input, encoding_format: "base64" });
  assert.equal(b64.status, 200, b64.text);
  assert.deepEqual(b64.json.usage, floats.json.usage);
  for (const [i, d] of b64.json.data.entries()) {
    assert.equal(typeof d.embedding, "string");
    const bytes = Buffer.from(d.embedding as string, "base64"); // a string, as asserted just above
    assert.equal(bytes.length, DIMS * 4);
    const decoded = Array.from({ length: DIMS }, (_, k) => bytes.readFloatLE(k * 4));
    // JSON floats are the same float32 values printed as doubles, so the match is exact.
    assert.deepEqual(decoded, floats.json.data[i].embedding);
  }
  // The openai SDK asks for base64 when no format is given and decodes it itself.
  const sdk = await s.client.embeddings.create({ model: "tiny", input });
  assert.deepEqual(
    sdk.data.map((d) => d.embedding),
    floats.json.data.map((d) => d.embedding),
  );
});

test("the BERT encoder serves embeddings and refuses chat", async () => {
  const r = await s.client.embeddings.create({ model: "bert", input: TEXTS, encoding_format: "float" });
  assert.equal(r.data.length, TEXTS.length);
  for (const d of r.data) {
    assert.equal(d.embedding.length, DIMS);
    assertUnit(d.embedding);
  }
  const chat = await s.http.post("/v1/chat/completions", { model: "bert", messages: [{ role: "user", content: "hi" }] });
  assert.equal(chat.status, 400, chat.text);
  assert.equal(chat.error?.param, "model");
  assert.match(chat.error!.message, /embedding/);
  await assert.rejects(
    s.client.chat.completions.create({ model: "bert", messages: [{ role: "user", content: "hi" }] }),
    clientError(400, "model"),
  );
});

test("/v1/models describes each model's embeddings", async () => {
  const models = await s.client.models.list();
  const byId = Object.fromEntries(models.data.map((m) => [m.id, plinthModel(m)]));
  for (const m of models.data) {
    assert.equal(m.object, "model");
    assert.equal(typeof m.created, "number");
    assert.equal(typeof m.owned_by, "string");
  }
  // The llama fixture declares no pooling, so the last token's hidden state stands in.
  assert.deepEqual(byId.tiny.embedding, {
    dimensions: DIMS,
    pooling: "last",
    pooling_declared: false,
    max_input_tokens: TINY_LIMIT,
    embedding_only: false,
  });
  assert.equal(byId.tiny.max_model_len, TINY_LIMIT + 1);
  assert.deepEqual(byId.bert.embedding, { dimensions: DIMS, pooling: "mean", pooling_declared: true, max_input_tokens: BERT_LIMIT, embedding_only: true });
});

test("one model serves chat and embeddings at the same time", async () => {
  const chats = Array.from({ length: 3 }, (_, i) =>
    s.client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: `tell me a story ${i}` }],
      max_tokens: 24,
      // Greedy: sampled, an answer may end at its first token, with no text.
      temperature: 0,
      stream: true,
    }),
  );
  const embeddings = Array.from({ length: 4 }, () => s.client.embeddings.create({ model: "tiny", input: TEXTS, encoding_format: "float" }));
  const [streams, vectors] = await Promise.all([Promise.all(chats), Promise.all(embeddings)]);
  for (const stream of streams) {
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(text.length > 0);
    assert.ok(finish);
  }
  for (const r of vectors) {
    assert.equal(r.data.length, TEXTS.length);
    assertClose(r.data[0].embedding, vectors[0].data[0].embedding);
  }
});

const ok = { model: "tiny", input: "hello" };

/** [description, body, expected status, expected param, expected code (optional)] */
const cases: Array<[string, unknown, number, string | null, string?]> = [
  ["missing input", { model: "tiny" }, 400, "input"],
  ["missing model", { input: "hello" }, 400, "model"],
  ["unknown model", { ...ok, model: "no-such-model" }, 404, "model", "model_not_found"],
  ["empty string", { ...ok, input: "" }, 400, "input"],
  ["empty array", { ...ok, input: [] }, 400, "input"],
  ["array containing an empty string", { ...ok, input: ["a", "b", ""] }, 400, "input[2]"],
  ["empty token array among token arrays", { ...ok, input: [[300], []] }, 400, "input[1]"],
  ["input is a number", { ...ok, input: 42 }, 400, "input"],
  ["input is null", { ...ok, input: null }, 400, "input"],
  ["strings mixed with token ids", { ...ok, input: ["a", 5] }, 400, "input[1]"],
  ["fractional token id", { ...ok, input: [300, 1.5] }, 400, "input[1]"],
  ["more than 2048 inputs", { ...ok, input: Array.from({ length: 2049 }, () => "a") }, 400, "input"],
  ["model is a number", { ...ok, model: 7 }, 400, "model"],
  ["dimensions 0", { ...ok, dimensions: 0 }, 400, "dimensions"],
  ["dimensions above the model's size", { ...ok, dimensions: DIMS + 1 }, 400, "dimensions"],
  ["dimensions as a string", { ...ok, dimensions: "8" }, 400, "dimensions"],
  ["fractional dimensions", { ...ok, dimensions: 2.5 }, 400, "dimensions"],
  ["unknown encoding_format", { ...ok, encoding_format: "int8" }, 400, "encoding_format"],
  ["user of the wrong type", { ...ok, user: 5 }, 400, "user"],
  ["token id beyond the vocabulary", { ...ok, input: [300, 999_999] }, 400, "input[1]"],
  ["negative token id", { ...ok, input: [[300], [-1]] }, 400, "input[1][0]"],
  ["BERT token id beyond its vocabulary", { model: "bert", input: [[5], [5, 100_000]] }, 400, "input[1][1]"],
  ["one input longer than the context", { ...ok, input: ["a", "b", "c", "word ".repeat(TINY_LIMIT)] }, 400, "input[3]", "context_length_exceeded"],
  ["a single input longer than the context", { ...ok, input: "word ".repeat(TINY_LIMIT) }, 400, "input", "context_length_exceeded"],
  // BOS + TINY_LIMIT ids: one token too many.
  ["token input longer than the context", { ...ok, input: [[300], Array.from({ length: TINY_LIMIT }, () => 300)] }, 400, "input[1]", "context_length_exceeded"],
  // [CLS] + 126 words + [SEP] = 128 tokens.
  ["BERT input longer than the context", { model: "bert", input: ["ok", "word ".repeat(BERT_LIMIT - 1)] }, 400, "input[1]", "context_length_exceeded"],
];

for (const [name, body, status, param, code] of cases) {
  test(`${name} → ${status} naming ${param ?? "no param"}`, async () => {
    // Deliberately outside the schema's input type (or over limits it cannot see), so sent untyped.
    const r = await s.http.postRaw("/v1/embeddings", body);
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.error?.message, "string", r.text);
    assert.equal(typeof r.error!.type, "string");
    assert.equal(r.error!.param, param, r.text);
    if (code) assert.equal(r.error!.code, code);
  });
}

test("an input of exactly the limit is accepted", async () => {
  const tiny = await s.http.post("/v1/embeddings", { model: "tiny", input: Array.from({ length: TINY_LIMIT - 1 }, () => 300) });
  assert.equal(tiny.status, 200, tiny.text);
  assert.equal(tiny.json.usage.prompt_tokens, TINY_LIMIT);
  const bert = await s.http.post("/v1/embeddings", { model: "bert", input: "word ".repeat(BERT_LIMIT - 2) });
  assert.equal(bert.status, 200, bert.text);
  assert.equal(bert.json.usage.prompt_tokens, BERT_LIMIT);
});

test("user is accepted", async () => {
  const r = await s.http.post("/v1/embeddings", { ...ok, user: "user-1234" });
  assert.equal(r.status, 200, r.text);
});

test("vLLM's embedding fields: taken at the values that say what is done here, refused by name otherwise", async () => {
  const plain = await s.http.post("/v1/embeddings", { model: "tiny", input: "hello world", encoding_format: "base64" });
  // (and Ollama's keep_alive, truncate: false, empty options; llama-server's embd_normalize: 2, Euclidean)
  const neutral = { normalize: true, use_activation: true, add_special_tokens: true, embed_dtype: "float32", endianness: "little", truncate_prompt_tokens: null, keep_alive: "5m", truncate: false, options: {}, embd_normalize: 2, priority: 0, request_id: "r-1" };
  const taken = await s.http.post("/v1/embeddings", { model: "tiny", input: "hello world", encoding_format: "base64", ...neutral } as never);
  assert.equal(taken.status, 200, taken.text);
  assert.deepEqual(taken.json.data, plain.json.data);
  const refused: Array<[Record<string, unknown>, string]> = [
    [{ truncate_prompt_tokens: 8 }, "truncate_prompt_tokens"],
    [{ truncate_prompt_tokens: -1 }, "truncate_prompt_tokens"],
    [{ normalize: false }, "normalize"],
    [{ use_activation: false }, "use_activation"],
    [{ add_special_tokens: false }, "add_special_tokens"],
    [{ embed_dtype: "float16" }, "embed_dtype"],
    [{ endianness: "big" }, "endianness"],
    [{ messages: [{ role: "user", content: "hi" }] }, "messages"],
    [{ chat_template: "{{ messages }}" }, "chat_template"],
    [{ encoding_format: "bytes" }, "encoding_format"],
    [{ truncate: true }, "truncate"],
    [{ options: { num_ctx: 4096 } }, "options"],
    // llama-server's other normalisations: none, max-abs, taxicab.
    [{ embd_normalize: -1 }, "embd_normalize"],
    [{ embd_normalize: 0 }, "embd_normalize"],
    [{ embd_normalize: 1 }, "embd_normalize"],
    // vLLM's labels, of the wrong type.
    [{ priority: "high" }, "priority"],
    [{ request_id: 5 }, "request_id"],
  ];
  for (const [field, param] of refused) {
    const r = await s.http.post("/v1/embeddings", { ...ok, ...field } as never);
    assert.equal(r.status, 400, `${JSON.stringify(field)}: ${r.text}`);
    assert.equal(r.error?.param, param, r.text);
  }
});

test("a request's inputs spread over the pool; a full queue is a 429; a disconnect frees the contexts", async () => {
  const q = await startTestServer({ "max-queue": "0", "embedding-contexts": "2" });
  try {
    const scheduler = q.registry.list()[0].embeddingScheduler!;
    const big = Array.from({ length: 2048 }, (_, i) => `the quick brown fox ${i}`);
    const controller = new AbortController();
    const running = q.http.send("/v1/embeddings", { model: "tiny", input: big }, controller.signal).catch((e) => e);
    await waitFor(() => scheduler.busy === 2);
    const refused = await q.http.post("/v1/embeddings", { model: "tiny", input: "hello" });
    assert.equal(refused.status, 429, refused.text);
    assert.ok(refused.headers.get("retry-after"));
    controller.abort();
    await running;
    await waitFor(() => scheduler.busy === 0);
    const after = await q.http.post("/v1/embeddings", { model: "tiny", input: "hello" });
    assert.equal(after.status, 200, after.text);
  } finally {
    await q.close();
  }
});

test("/tokenize counts an embedding model's text as /v1/embeddings does: [CLS] and [SEP] both", async () => {
  const text = "hello world, and a little more";
  const counted = await s.http.post("/tokenize", { model: "bert", prompt: text });
  assert.equal(counted.status, 200, JSON.stringify(counted.json));
  const embedded = await s.http.post("/v1/embeddings", { model: "bert", input: text });
  assert.equal(embedded.status, 200, JSON.stringify(embedded.json));
  assert.equal(counted.json.count, embedded.json.usage.prompt_tokens);
  // Without special tokens, neither is added.
  const bare = await s.http.post("/tokenize", { model: "bert", prompt: text, add_special_tokens: false });
  assert.equal(bare.json.count, counted.json.count - 2);
});

test("/detokenize gives a BERT text back without the space llama.cpp puts before its first word", async () => {
  for (const text of ["hello world", "hello world, and a little more", "a"]) {
    const counted = await s.http.post("/tokenize", { model: "bert", prompt: text });
    assert.equal(counted.status, 200, JSON.stringify(counted.json));
    const back = await s.http.post("/detokenize", { model: "bert", tokens: counted.json.tokens });
    assert.equal(back.status, 200, JSON.stringify(back.json));
    assert.equal(back.json.prompt, text);
  }
});

test("a BERT text of whitespace only is embedded as [CLS] [SEP], counted the same by /tokenize", async () => {
  const counted = await s.http.post("/tokenize", { model: "bert", prompt: " \n " });
  assert.equal(counted.status, 200, JSON.stringify(counted.json));
  assert.equal(counted.json.count, 2);
  const embedded = await s.http.post("/v1/embeddings", { model: "bert", input: [" \n ", "hello"] });
  assert.equal(embedded.status, 200, JSON.stringify(embedded.json));
  assertUnit(embedded.json.data[0].embedding as number[]);
  assert.ok(distance(embedded.json.data[0].embedding as number[], embedded.json.data[1].embedding as number[]) > 1e-3);
  assert.equal(embedded.json.usage.prompt_tokens, 2 + (await s.http.post("/tokenize", { model: "bert", prompt: "hello" })).json.count);
});
