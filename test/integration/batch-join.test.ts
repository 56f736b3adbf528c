// White-box: a real LlamaCppEngine on the tiny fixture model, with the context's native batch calls
// counted, to check how requests that arrive together are batched.
import { after, before, test } from "node:test";
import type { GenerationRequest } from "../../src/core/types.ts";
import { LlamaCppEngine } from "../../src/engines/llama-cpp/llama-engine.ts";
import { ensureFixtureModel, FIXTURE_TOKENS } from "../fixtures/models.ts";
import assert from "../helpers/assert.ts";

let engine: LlamaCppEngine;
/** Sequences in each decode, in order. */
const batches: number[] = [];

before(async () => {
  engine = await LlamaCppEngine.load({
    id: "tiny", modelPath: await ensureFixtureModel(), contextSize: 256, parallel: 4, threads: 1, gpu: "off", cacheRam: 0, decodeContexts: 1,
  });
  const ctx = (engine as unknown as { contexts: Array<{ _ctx: Record<string, (...a: unknown[]) => unknown> }> }).contexts[0]._ctx;
  const addToBatch = ctx.addToBatch.bind(ctx);
  const decodeBatch = ctx.decodeBatch.bind(ctx);
  let inBatch = 0;
  const own = (name: string, fn: (...a: unknown[]) => unknown) => Object.defineProperty(ctx, name, { value: fn, writable: true, configurable: true });
  own("addToBatch", (...a) => {
    inBatch++;
    return addToBatch(...a);
  });
  own("decodeBatch", (...a) => {
    batches.push(inBatch);
    inBatch = 0;
    return decodeBatch(...a);
  });
});

after(async () => {
  await engine?.dispose();
});

const request = (i: number): GenerationRequest => ({
  model: "tiny",
  prompt: { kind: "chat", messages: [{ role: "user", content: `Say something about the number ${i}.` }] },
  sampling: { temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1, logitBias: new Map([[FIXTURE_TOKENS.endOfSequence, -100], [FIXTURE_TOKENS.imEnd, -100]]) },
  maxTokens: 4,
  stop: [],
  n: 1,
  cachePrompt: false,
});

test("requests that arrive together start in one step, even when the HTTP side takes a while to hand over each one's cached count", async () => {
  const prepared = await Promise.all([0, 1, 2, 3].map((i) => engine.prepare(request(i))));
  batches.length = 0;
  const runs = prepared.map(async (p, slot) => {
    let tokens = 0;
    for await (const chunk of engine.generate(p, { sampling: request(slot).sampling, maxTokens: 4, slot }, new AbortController().signal)) {
      // The consumer of request i is slow to ask for more after the cached count (a busy event loop).
      if (chunk.kind === "cached") await new Promise((r) => setTimeout(r, 8 * slot));
      if (chunk.kind === "text") tokens += chunk.tokens;
    }
    return tokens;
  });
  assert.deepEqual(await Promise.all(runs), [4, 4, 4, 4]);
  // The first decode carries all four prompts; every later one, the four streams' next tokens.
  assert.equal(batches[0], 4, `decodes: ${batches.join(", ")}`);
  assert.ok(batches.every((b) => b === 4), `decodes: ${batches.join(", ")}`);
});
