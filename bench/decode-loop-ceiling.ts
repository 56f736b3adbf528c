/**
 * What the engine's per-token loop costs at one stream (issue 14, decision 0002), in this process, no
 * HTTP, one sequence, greedy, end tokens banned, rounds alternating, three ways:
 * - node-llama-cpp's `sequence.evaluate` (the engine's step source before direct-steps.ts);
 * - direct steps, the engine's step source now (the sequence's decode queue, one sampler configured
 *   when its configuration changes);
 * - the context's own batch calls (`initBatch`, `addToBatch`, `decodeBatch`, `sampleToken`): the
 *   ceiling, a decode and a sampling per token and nothing else.
 *
 *   node --import tsx bench/decode-loop-ceiling.ts        (BENCH_ROUNDS, default 6; BENCH_MAX_TOKENS, 128)
 *
 * Not part of `npm run bench`. The third loop reaches into node-llama-cpp 3.21.1's internals (the
 * context's native object, a sequence's id, the sampler class) and is only safe alone: it bypasses
 * the context's batching and lock, which a server with several sequences cannot do.
 */
import { availableParallelism } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { LlamaModel, Token } from "node-llama-cpp";
import { defaultThreads, engineBuild, getRuntime } from "../src/engines/llama-cpp/runtime.ts";
import { evaluateSteps } from "../src/engines/llama-cpp/decode-steps.ts";
import { directSteps } from "../src/engines/llama-cpp/direct-steps.ts";
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

const sequence = context.getSequence();
const sampling = {
  temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1,
  logitBias: new Map(BANNED.map((t) => [t as number, -100])),
};

/** One of the server's step sources (decode-steps.ts) with the options the server's plain decoding passes it. */
async function viaSteps(source: typeof evaluateSteps): Promise<number> {
  await sequence.clearHistory();
  const generated: Token[] = [];
  const started = performance.now();
  const steps = source(sequence, prompt, buildEvaluateOptions(model, sampling, generated, TOKENS));
  try {
    for (let step = await steps.next(undefined); !step.done; step = await steps.next(undefined)) {
      generated.push(step.value.token);
      if (generated.length >= TOKENS) break;
    }
  } finally {
    await steps.return(undefined);
  }
  return generated.length / ((performance.now() - started) / 1000);
}

/** The same work through the context's batch calls: a decode and a sampling per token, nothing else. */
async function viaBatchCalls(): Promise<number> {
  await sequence.clearHistory();
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
    // Bypassed, the sequence's own bookkeeping does not know these cells: they are removed here.
    native.removeTokenCellsFromSequence(id, 0, context.contextSize);
  }
}

const loops = [
  { name: "sequence.evaluate", run: () => viaSteps(evaluateSteps), rates: [] as number[] },
  { name: "direct steps (the server's)", run: () => viaSteps(directSteps), rates: [] as number[] },
  { name: "context batch calls", run: viaBatchCalls, rates: [] as number[] },
];
for (const loop of loops) await loop.run();
for (let r = 0; r < ROUNDS; r++) {
  // The order turns every round, so a machine that slows down mid-run hits all of them.
  for (let i = 0; i < loops.length; i++) {
    const loop = loops[(i + r) % loops.length];
    loop.rates.push(await loop.run());
  }
}
const build = engineBuild(llama);
const engine = build.decodeThread ? "engine built on this machine, decode thread" : build.local ? "engine built on this machine" : "prebuilt engine";
console.log(`One sequence, ${TOKENS} tokens, greedy, ${threads} threads, ${engine}, ${ROUNDS} alternating rounds (tok/s):\n`);
console.log("| loop | per round | median | ÷ evaluate |");
console.log("|---|---|---|---|");
for (const loop of loops)
  console.log(`| ${loop.name} | ${loop.rates.map((x) => fmt(x)).join(", ")} | ${fmt(median(loop.rates))} | ${fmt(median(loop.rates) / median(loops[0].rates), 3)} |`);
await model.dispose();
process.exit(0);
