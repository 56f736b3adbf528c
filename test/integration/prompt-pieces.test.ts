// White-box: a real LlamaCppEngine on the tiny fixture model, with the context's native batch calls
// recorded, to check that a long prompt arriving while another sequence generates is read in pieces
// that each share a decode with that sequence's next token, and that cutting it changes no output.
import { after, before, test } from "node:test";
import type { GenerationRequest } from "../../src/core/types.ts";
import { LlamaCppEngine } from "../../src/engines/llama-cpp/llama-engine.ts";
import { ensureFixtureModel, FIXTURE_TOKENS } from "../fixtures/models.ts";
import assert from "../helpers/assert.ts";

let engine: LlamaCppEngine;
/** Each decode's batch: [sequence id, tokens] per sequence in it. */
const batches: Array<Array<[number, number]>> = [];
/** Called with each batch as it is decoded. */
let onBatch: ((batch: Array<[number, number]>) => void) | undefined;

before(async () => {
  engine = await LlamaCppEngine.load({
    id: "tiny", modelPath: await ensureFixtureModel(), contextSize: 2048, parallel: 2, threads: 1, gpu: "off", cacheRam: 0, decodeContexts: 1,
  });
  const ctx = (engine as unknown as { contexts: Array<{ _ctx: Record<string, (...a: unknown[]) => unknown> }> }).contexts[0]._ctx;
  const addToBatch = ctx.addToBatch.bind(ctx);
  const decodeBatch = ctx.decodeBatch.bind(ctx);
  let current: Array<[number, number]> = [];
  const own = (name: string, fn: (...a: unknown[]) => unknown) => Object.defineProperty(ctx, name, { value: fn, writable: true, configurable: true });
  own("addToBatch", (...a) => {
    current.push([a[0] as number, (a[2] as Uint32Array).length]);
    return addToBatch(...a);
  });
  own("decodeBatch", (...a) => {
    batches.push(current);
    onBatch?.(current);
    current = [];
    return decodeBatch(...a);
  });
});

after(async () => {
  await engine?.dispose();
});

const sampling = { temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1, logitBias: new Map([[FIXTURE_TOKENS.endOfSequence, -100], [FIXTURE_TOKENS.imEnd, -100]]) };
const request = (content: string, maxTokens: number): GenerationRequest & { maxTokens: number } => ({
  model: "tiny",
  prompt: { kind: "chat", messages: [{ role: "user", content }] },
  sampling,
  maxTokens,
  stop: [],
  n: 1,
  cachePrompt: false,
});

async function run(req: GenerationRequest & { maxTokens: number }, slot: number, onText?: (n: number) => void, signal = new AbortController().signal): Promise<string> {
  const prepared = await engine.prepare(req);
  let text = "";
  let tokens = 0;
  for await (const chunk of engine.generate(prepared, { sampling: req.sampling, maxTokens: req.maxTokens, slot }, signal)) {
    if (chunk.kind === "text") {
      text += chunk.text;
      tokens += chunk.tokens;
      onText?.(tokens);
    }
  }
  return text;
}

const LONG = Array.from({ length: 180 }, (_, i) => `note ${i} about the river`).join("; ");
const RUNNING = "Tell me a long story about a lantern.";

let aloneLong: string;

test("a long prompt arriving while another sequence generates is read in pieces, each beside a token of the running one, with the same answers as alone", async () => {
  // Each alone first (slot 0 and slot 1, nothing else running).
  const aloneRunning = await run(request(RUNNING, 120), 0);
  aloneLong = await run(request(LONG, 8), 1);
  batches.length = 0;
  let started!: () => void;
  const runningHasTokens = new Promise<void>((r) => (started = r));
  const running = run(request(RUNNING, 120), 0, (n) => n >= 3 && started());
  await runningHasTokens;
  const long = await run(request(LONG, 8), 1);
  assert.equal(await running, aloneRunning);
  assert.equal(long, aloneLong);
  // The decodes that carried the long prompt's tokens (sequence 1, more than one token).
  const withPrompt = batches.filter((b) => b.some(([seq, n]) => seq === 1 && n > 1));
  const promptTokens = withPrompt.reduce((a, b) => a + b.filter(([seq]) => seq === 1).reduce((x, [, n]) => x + n, 0), 0);
  assert.ok(promptTokens > 1000, `the prompt is long: ${promptTokens} tokens`);
  assert.ok(withPrompt.length >= 3, `read in pieces: ${JSON.stringify(withPrompt)}`);
  // Every piece shared its decode with the running sequence's next token.
  for (const b of withPrompt) assert.ok(b.some(([seq, n]) => seq === 0 && n === 1), `a piece without the running sequence: ${JSON.stringify(b)}`);
});

test("a request cancelled while its long prompt is read stops within a slice, and what it left in its slot serves the next request correctly", async () => {
  const cancel = new AbortController();
  batches.length = 0;
  onBatch = (b) => {
    if (b.some(([seq, n]) => seq === 1 && n > 1)) cancel.abort();
  };
  const text = await run({ ...request(LONG, 8), cachePrompt: true }, 1, undefined, cancel.signal);
  onBatch = undefined;
  assert.equal(text, "");
  const read = batches.reduce((a, b) => a + b.filter(([seq]) => seq === 1).reduce((x, [, n]) => x + n, 0), 0);
  // The first slice (512 tokens) at most, not the whole prompt.
  assert.ok(read > 0 && read <= 512, `prompt tokens read after the cancel: ${read}`);
  // The same prompt again on that slot, its cache kept: the stopped prompt's tokens are reused, and
  // the answer is the one given when the prompt was read whole.
  assert.equal(await run({ ...request(LONG, 8), cachePrompt: true }, 1), aloneLong);
});

test("with log probabilities too (of the answer, or of the prompt itself for echo), a cancel stops the prompt within a slice, and the slot then answers as before", async () => {
  // Prompts no earlier test left in a slot, so the cancelled run has the whole prompt to read.
  const long = (topic: string) => Array.from({ length: 110 }, (_, i) => `entry ${i} about the ${topic}`).join("; ");
  const variants: Array<[string, GenerationRequest & { maxTokens: number }]> = [
    ["logprobs of the answer", { ...request(long("harbour"), 8), logprobs: 2, cachePrompt: true }],
    ["echo with the prompt's logprobs", { ...request("", 8), prompt: { kind: "text", text: long("orchard") }, echo: true, logprobs: 1, cachePrompt: false }],
  ];
  for (const [name, req] of variants) {
    const cancel = new AbortController();
    batches.length = 0;
    onBatch = (b) => {
      if (b.some(([seq, n]) => seq === 1 && n > 1)) cancel.abort();
    };
    const text = await run(req, 1, undefined, cancel.signal);
    onBatch = undefined;
    assert.equal(text, "", name);
    const read = batches.reduce((a, b) => a + b.filter(([seq]) => seq === 1).reduce((x, [, n]) => x + n, 0), 0);
    assert.ok(read > 0 && read <= 512, `${name}: prompt tokens read after the cancel: ${read}`);
    // The same request on that slot (reusing what the cancel left, where the cache is on) and on the
    // other slot from scratch answer alike.
    const after = await run(req, 1);
    assert.ok(after.length > 0, name);
    assert.equal(after, await run({ ...req, cachePrompt: false }, 0), name);
  }
});
