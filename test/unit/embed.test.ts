import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { loadConfig } from "../../src/config/load.ts";
import { normalise } from "../../src/core/embed.ts";
import { embeddingsToCanonical } from "../../src/dialects/openai/embeddings-to-canonical.ts";
import { toBase64 } from "../../src/dialects/openai/embeddings-to-wire.ts";
import { embeddingFieldNames } from "../../src/dialects/openai/field-names.ts";

test("normalise keeps a prefix and scales it to unit length", () => {
  const v = Float32Array.from([3, 4, 12]);
  assert.deepEqual(Array.from(normalise(v, 3)), [3 / 13, 4 / 13, 12 / 13].map((x) => Math.fround(x)));
  assert.deepEqual(Array.from(normalise(v, 2)), [0.6, 0.8].map((x) => Math.fround(x)));
  assert.deepEqual(Array.from(v), [3, 4, 12], "the input is not modified");
  assert.deepEqual(Array.from(normalise(new Float32Array(4), 4)), [0, 0, 0, 0], "a zero vector stays zero");
  assert.throws(() => normalise(Float32Array.from([1, NaN]), 2), /not finite/);
});

test("base64 is little-endian float32", () => {
  const b = Buffer.from(toBase64(Float32Array.from([1, -2.5])), "base64");
  assert.deepEqual([...b], [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0]);
});

test("each input shape maps to inputs named the way OpenAI names the field", () => {
  const one = embeddingsToCanonical({ model: "m", input: "hi" });
  assert.deepEqual(one.inputs, [{ kind: "text", text: "hi" }]);
  assert.equal(embeddingFieldNames({ input: "hi" })("inputs[0]"), "input");
  const texts = embeddingsToCanonical({ model: "m", input: ["a", "b"], dimensions: 8, user: "u" });
  assert.equal(embeddingFieldNames({ input: ["a", "b"] })("inputs[1]"), "input[1]");
  assert.equal(texts.dimensions, 8);
  assert.equal(embeddingFieldNames({ input: [1, 2] })("inputs[0][1]"), "input[1]", "a token of the single input");
  assert.deepEqual(embeddingsToCanonical({ model: "m", input: [1, 2] }).inputs, [{ kind: "tokens", tokens: [1, 2] }]);
  const arrays = embeddingsToCanonical({ model: "m", input: [[1], [2, 3]] });
  assert.deepEqual(arrays.inputs, [
    { kind: "tokens", tokens: [1] },
    { kind: "tokens", tokens: [2, 3] },
  ]);
  assert.equal(embeddingFieldNames({ input: [[1], [2, 3]] })("inputs[1][0]"), "input[1][0]");
});

test("embedding-contexts defaults to 2 and comes from flags and the environment", () => {
  assert.equal(loadConfig({}, {})["embedding-contexts"], 2);
  assert.equal(loadConfig({}, { PLINTH_EMBEDDING_CONTEXTS: "3" })["embedding-contexts"], 3);
  assert.equal(loadConfig({ "embedding-contexts": "4" }, { PLINTH_EMBEDDING_CONTEXTS: "3" })["embedding-contexts"], 4);
  assert.throws(() => loadConfig({ "embedding-contexts": "0" }, {}), /embedding-contexts/);
});

test("a one-input request is not held behind a large batch: each input takes its own turn at the slots (scripted embedder)", async () => {
  const { embed } = await import("../../src/core/embed.ts");
  // Each input costs 5 ms of a slot.
  const { registry } = await scriptedEmbeddings(0, undefined, async () => {
    await new Promise((r) => setTimeout(r, 5));
    return Float32Array.from([1, 0]);
  });
  const signal = new AbortController().signal;
  const order: string[] = [];
  const big = embed(registry, { model: "e", inputs: Array.from({ length: 200 }, () => ({ kind: "text" as const, text: "x" })) }, signal).then(() => order.push("big"));
  await new Promise((r) => setTimeout(r, 20));
  const started = performance.now();
  await embed(registry, { model: "e", inputs: [{ kind: "text", text: "y" }] }, signal).then(() => order.push("small"));
  // The 200 inputs take ~500 ms on two slots; the small request waits for about one input, not all.
  assert.ok(performance.now() - started < 200, `the small request took ${Math.round(performance.now() - started)} ms`);
  await big;
  assert.deepEqual(order, ["small", "big"]);
});

/**
 * A registry serving one scripted embedding engine "e" on two slots, whose tokenizer costs
 * `tokenizeMs` of CPU per input (two tokens each) and whose `embed` may be given.
 */
async function scriptedEmbeddings(tokenizeMs: number, minimumTokens?: (text: string) => number, embed: () => Promise<Float32Array> = async () => Float32Array.from([1, 0])) {
  const { ModelRegistry } = await import("../../src/core/registry.ts");
  const { ScriptedEngine } = await import("../helpers/scripted-engine.ts");
  const calls = { tokenize: 0 };
  const embedder = {
    info: { dimensions: 2, pooling: "mean" as const, poolingDeclared: true, maxInputTokens: 64, vocabularySize: 1000, slots: 2, embeddingOnly: false },
    minimumTokens: (input: { kind: string; text?: string }) => (input.kind === "text" && minimumTokens ? minimumTokens(input.text ?? "") : 0),
    tokenize: async () => {
      calls.tokenize++;
      const until = performance.now() + tokenizeMs;
      while (performance.now() < until);
      return [1, 2];
    },
    embed,
  };
  class Embedding extends ScriptedEngine {
    override readonly embeddings = embedder;
  }
  const registry = new ModelRegistry(64);
  const engine = new Embedding({ id: "e" });
  registry.register(engine.id);
  registry.ready(engine);
  return { registry, calls };
}

test("tokenizing a large request gives the event loop back every few milliseconds (scripted embedder)", async () => {
  const { embed } = await import("../../src/core/embed.ts");
  const { registry } = await scriptedEmbeddings(2);
  // 100 inputs at 2 ms each: 200 ms of tokenizing. A timer due in 5 ms must not wait for all of it.
  let timerAt = 0;
  const started = performance.now();
  setTimeout(() => (timerAt = performance.now() - started), 5);
  const result = await embed(registry, { model: "e", inputs: Array.from({ length: 100 }, () => ({ kind: "text" as const, text: "x" })) }, new AbortController().signal);
  const took = performance.now() - started;
  assert.equal(result.vectors.length, 100);
  assert.ok(timerAt > 0 && timerAt < took / 2, `the timer ran at ${Math.round(timerAt)} ms of ${Math.round(took)}`);
});

test("a client that leaves while its inputs are tokenized stops the tokenizing (scripted embedder)", async () => {
  const { embed } = await import("../../src/core/embed.ts");
  const { registry, calls } = await scriptedEmbeddings(2);
  const gone = new AbortController();
  setTimeout(() => gone.abort(new Error("client left")), 20);
  await assert.rejects(embed(registry, { model: "e", inputs: Array.from({ length: 500 }, () => ({ kind: "text" as const, text: "x" })) }, gone.signal), /client left/);
  assert.ok(calls.tokenize < 100, `${calls.tokenize} inputs tokenized`);
});

test("an input that can never fit is refused before any other input is tokenized (scripted embedder)", async () => {
  const { embed } = await import("../../src/core/embed.ts");
  const { ApiError } = await import("../../src/core/errors.ts");
  const { registry, calls } = await scriptedEmbeddings(2, (text) => text.length);
  const inputs = Array.from({ length: 50 }, () => ({ kind: "text" as const, text: "x" }));
  inputs.push({ kind: "text", text: "y".repeat(100) });
  await assert.rejects(embed(registry, { model: "e", inputs }, new AbortController().signal), (err: unknown) => err instanceof ApiError && err.status === 400 && err.field === "inputs[50]");
  assert.equal(calls.tokenize, 0);
});
