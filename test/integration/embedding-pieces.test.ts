// Embedding inputs read in pieces (decode-share.ts), on the real tiny model: the pieces must add up
// to the vector node-llama-cpp gives the input in its own whole batches, and they must really be
// pieces (counted at the decode).
import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import { decodeShare, EMBED_PIECE } from "../../src/engines/llama-cpp/decode-share.ts";
import { embeddingTraits, LlamaEmbedder } from "../../src/engines/llama-cpp/embedder.ts";
import { getRuntime } from "../../src/engines/llama-cpp/runtime.ts";
import { ensureFixtureModel, TINY_SPEC } from "../fixtures/models.ts";

let model: LlamaModel;
let embedder: LlamaEmbedder;
/** node-llama-cpp's own createEmbeddingContext: contexts without the engine's pieces, nor counting. */
let originalCreate: LlamaModel["createEmbeddingContext"];
/** Decodes made by the embedding contexts, each with its token count. */
const decodes: number[] = [];

before(async () => {
  const path = await ensureFixtureModel(TINY_SPEC);
  const llama = await getRuntime({ gpu: "off", threads: 1 });
  model = await llama.loadModel({ modelPath: path });
  // Counts each decode of the embedding contexts as the embedder creates them.
  const create = model.createEmbeddingContext.bind(model);
  originalCreate = create;
  model.createEmbeddingContext = async (options) => {
    const context = await create(options);
    const inner = (context as unknown as { _llamaContext: LlamaContext & { _ctx: { addToBatch: (...a: unknown[]) => unknown } } })._llamaContext;
    const addon = inner._ctx;
    const add = addon.addToBatch.bind(addon);
    // The addon's methods are read-only on its prototype; an own property shadows them.
    Object.defineProperty(addon, "addToBatch", {
      configurable: true,
      value: (...args: unknown[]) => {
        decodes.push((args[2] as Uint32Array).length);
        return add(...args);
      },
    });
    return context;
  };
  const created = LlamaEmbedder.create(model, { contexts: 1, contextSize: 2048, threads: 1 }, embeddingTraits(model), Number.MAX_SAFE_INTEGER /* ids are not checked here */);
  assert.ok(created);
  embedder = created;
});

after(async () => {
  await embedder?.dispose();
  await model?.dispose();
});

const text = Array.from({ length: 300 }, (_, i) => `word${i % 37}`).join(" ");

async function embedCounting(tokens: number[]): Promise<{ vector: Float32Array; pieces: number[] }> {
  decodes.length = 0;
  const vector = await embedder.embed(tokens, 0, new AbortController().signal);
  return { vector, pieces: decodes.slice() };
}

/** Cosine similarity of two vectors (1: the same direction). */
function cosine(x: ArrayLike<number>, y: ArrayLike<number>): number {
  let dot = 0;
  let a = 0;
  let b = 0;
  for (let i = 0; i < x.length; i++) {
    dot += x[i] * y[i];
    a += x[i] ** 2;
    b += y[i] ** 2;
  }
  assert.ok(a > 0 && b > 0);
  return dot / Math.sqrt(a * b);
}

test("an input read in pieces, with and beside generation, embeds as node-llama-cpp does in whole batches", async () => {
  const tokens = await embedder.tokenize({ kind: "text", text });
  assert.ok(tokens.length > 2 * EMBED_PIECE, `the input is ${tokens.length} tokens`);
  assert.ok(tokens.length < 2048);
  const pieces = Array.from({ length: Math.ceil(tokens.length / EMBED_PIECE) }, (_, i) => Math.min(EMBED_PIECE, tokens.length - EMBED_PIECE * i));

  // node-llama-cpp's own context, in its batches of 512.
  const plain = await originalCreate({ contextSize: 2048, threads: 1 });
  let reference: Float32Array;
  try {
    reference = Float32Array.from((await plain.getEmbeddingFor(tokens as Token[])).vector);
  } finally {
    await plain.dispose();
  }

  const alone = await embedCounting(tokens as Token[]);
  assert.deepEqual(alone.pieces, pieces);
  // Generation running (a decode of it in flight) for the whole embedding.
  decodeShare.generationStarted();
  let beside: { vector: Float32Array; pieces: number[] };
  try {
    beside = await embedCounting(tokens as Token[]);
  } finally {
    decodeShare.generationEnded();
  }
  assert.deepEqual(beside.pieces, pieces);
  // Not bit for bit: a long input's vector moves in the last digits from one run to the next even in
  // whole batches (cosine ~0.999995 between two such runs here), as batch shapes change the order of
  // the sums.
  for (const v of [alone.vector, beside.vector]) {
    assert.equal(v.length, reference.length);
    const c = cosine(v, reference);
    assert.ok(c >= 0.9999, `cosine ${c}`);
  }
});
