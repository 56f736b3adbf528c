/**
 * What a decode loop of our own would gain at one stream (issue 14, decision 0002): node-llama-cpp's
 * `sequence.evaluate` against the same decode and sampling driven through the context's own batch
 * calls (`initBatch`, `addToBatch`, `decodeBatch`, `sampleToken`, one sampler configured once), in
 * this process, no HTTP, one sequence, greedy, end tokens banned, rounds alternating:
 *
 *   node --import tsx bench/decode-loop-ceiling.ts        (BENCH_ROUNDS, default 6; BENCH_MAX_TOKENS, 128)
 *
 * Not part of `npm run bench`. The second loop reaches into node-llama-cpp 3.21.1's internals (the
 * context's native object, a sequence's id, the sampler class) and is only safe alone: it bypasses
 * the context's batching and lock, which a server with several sequences cannot do.
 */
import { availableParallelism } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { LlamaModel, Token } from "node-llama-cpp";
import { defaultThreads, engineBuild, getRuntime } from "../src/engines/llama-cpp/runtime.ts";
import { buildEvaluateOptions } from "../src/engines/llama-cpp/sampling.ts";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { fmt, median } from "./stats.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
const BANNED = [FIXTURE_TOKENS.endOfSequence, FIXTURE_TOKENS.imEnd] as Token[];

interface NativeContext {
  initBatch(size: number): void;
  addToBatch(sequenceId: number, firstTokenIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  sampleToken(batchLogitIndex: number, sampler: unknown): Promise<number>;
  removeTokenCellsFromSequence(sequenceId: number, start: number, end: number): boolean;
}

// The sampler class is not exported; it sits next to the context in node-llama-cpp's dist folder.
const dist = path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp")));
const { LlamaSampler } = (await import(path.join(dist, "evaluator/LlamaContext/LlamaSampler.js"))) as {
  LlamaSampler: new (model: LlamaModel) => { _sampler: unknown; applyConfig(config: object): void; dispose(): void };
};

const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
const llama = await getRuntime({ gpu: "off", threads: availableParallelism() });
const threads = defaultThreads(availableParallelism(), engineBuild(llama));
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 1024, sequences: 1, threads });
const prompt = model.tokenize("Tell me a long story about a king, a river and a city.");

/** node-llama-cpp's own loop with the options the server's plain decoding passes it. */
async function viaEvaluate(): Promise<number> {
  const sequence = context.getSequence();
  try {
    const sampling = {
      temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1,
      logitBias: new Map(BANNED.map((t) => [t as number, -100])),
    };
    const generated: Token[] = [];
    const started = performance.now();
    for await (const token of sequence.evaluate(prompt, buildEvaluateOptions(model, sampling, generated, TOKENS))) {
      generated.push(token);
      if (generated.length >= TOKENS) break;
    }
    return generated.length / ((performance.now() - started) / 1000);
  } finally {
    sequence.dispose();
  }
}

/** The same work through the context's batch calls: a decode and a sampling per token, nothing else. */
async function viaBatchCalls(): Promise<number> {
  const sequence = context.getSequence();
  const native = (context as unknown as { _ctx: NativeContext })._ctx;
  const id = (sequence as unknown as { _sequenceId: number })._sequenceId;
  const sampler = new LlamaSampler(model);
  sampler.applyConfig({ temperature: 0, tokenBiasKeys: Uint32Array.from(BANNED), tokenBiasValues: Float32Array.from(BANNED.map(() => -Infinity)) });
  try {
    const started = performance.now();
    native.initBatch(prompt.length);
    let logits = native.addToBatch(id, 0, Uint32Array.from(prompt), Uint32Array.from([prompt.length - 1]));
    await native.decodeBatch();
    let position = prompt.length;
    for (let n = 1; ; n++) {
      const token = await native.sampleToken(logits[0], sampler._sampler);
      if (n >= TOKENS) break;
      native.initBatch(1);
      logits = native.addToBatch(id, position++, Uint32Array.from([token]), Uint32Array.from([0]));
      await native.decodeBatch();
    }
    return TOKENS / ((performance.now() - started) / 1000);
  } finally {
    sampler.dispose();
    native.removeTokenCellsFromSequence(id, 0, context.contextSize);
    sequence.dispose();
  }
}

await viaEvaluate();
await viaBatchCalls();
const evaluate: number[] = [];
const batchCalls: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  // Who goes first alternates, so a machine that slows down mid-run hits both.
  if (r % 2 === 0) {
    evaluate.push(await viaEvaluate());
    batchCalls.push(await viaBatchCalls());
  } else {
    batchCalls.push(await viaBatchCalls());
    evaluate.push(await viaEvaluate());
  }
}
const build = engineBuild(llama);
const engine = build.decodeThread ? "engine built on this machine, decode thread" : build.local ? "engine built on this machine" : "prebuilt engine";
console.log(`One sequence, ${TOKENS} tokens, greedy, ${threads} threads, ${engine}, ${ROUNDS} alternating rounds (tok/s):\n`);
console.log("| loop | per round | median |");
console.log("|---|---|---|");
console.log(`| sequence.evaluate | ${evaluate.map((x) => fmt(x)).join(", ")} | ${fmt(median(evaluate))} |`);
console.log(`| context batch calls | ${batchCalls.map((x) => fmt(x)).join(", ")} | ${fmt(median(batchCalls))} |`);
console.log(`\nbatch calls ÷ evaluate: ${fmt(median(batchCalls) / median(evaluate), 3)}`);
await model.dispose();
process.exit(0);
