/**
 * Where a decode step's time goes inside the engine (no HTTP): `node --import tsx bench/step-profile.ts`.
 * Loads the benchmark model into a LlamaCppEngine, runs N greedy generations at once and wraps the
 * context's native object to time every decode, every sampling call and the gaps between them.
 *
 * Knobs: PROFILE_STREAMS (1,8), PROFILE_VARIANTS (threads:contexts[:gate] triples, e.g.
 * "1:1:0,1:2:1,2:1"; gate 0 turns the batch gate off; default: the server's defaults), PROFILE_TOKENS (96), PROFILE_ROUNDS (2), PROFILE_BATCH (context
 * batch size; library default when unset). Variants alternate round by round, so machine noise hits
 * them alike.
 */
import { availableParallelism, loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { GenerationRequest } from "../src/core/types.ts";
import { serverDefaultThreads } from "./threads.ts";
import { LlamaCppEngine } from "../src/engines/llama-cpp/llama-engine.ts";
import { defaultDecodeContexts } from "../src/engines/llama-cpp/runtime.ts";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { fmt, median } from "./stats.ts";

const STREAMS = (process.env.PROFILE_STREAMS ?? "1,8").split(",").map(Number);
const DEFAULT_THREADS = await serverDefaultThreads();
const VARIANTS = (process.env.PROFILE_VARIANTS ?? `${DEFAULT_THREADS}:${defaultDecodeContexts(availableParallelism(), DEFAULT_THREADS)}`)
  .split(",")
  .map((v) => v.split(":").map(Number) as [number, number, number?]);
const TOKENS = Number(process.env.PROFILE_TOKENS ?? 96);
const ROUNDS = Number(process.env.PROFILE_ROUNDS ?? 2);
const NO_EOG = new Map([
  [FIXTURE_TOKENS.endOfSequence, -100],
  [FIXTURE_TOKENS.imEnd, -100],
]);

interface Counters {
  decodes: number;
  decodeMs: number;
  decodedTokens: number;
  batches: number[];
  samples: number;
  sampleMs: number;
  /** Time from a decode's end to the next decode's start (sampling, JS, idle). */
  betweenMs: number;
  /** Part of betweenMs with at least one sampling call in flight. */
  samplingSpanMs: number;
}

function fresh(): Counters {
  return { decodes: 0, decodeMs: 0, decodedTokens: 0, batches: [], samples: 0, sampleMs: 0, betweenMs: 0, samplingSpanMs: 0 };
}

// The addon's methods are read-only properties of its prototype; an own property shadows them.
const set = (o: object, name: string, fn: (...a: unknown[]) => unknown) =>
  Object.defineProperty(o, name, { value: fn, writable: true, configurable: true });

/** Wraps the native context object's methods so every call is timed into `c`. */
function instrument(engine: LlamaCppEngine, get: () => Counters): () => void {
  const resets = (engine as unknown as { contexts: Array<{ _ctx: Record<string, (...a: unknown[]) => unknown> }> }).contexts.map((c) =>
    instrumentContext(c._ctx, get),
  );
  return () => resets.forEach((r) => r());
}

/** One context's native object; returns a function that forgets the last decode's end. */
function instrumentContext(ctx: Record<string, (...a: unknown[]) => unknown>, get: () => Counters): () => void {
  const orig = {
    initBatch: ctx.initBatch.bind(ctx),
    addToBatch: ctx.addToBatch.bind(ctx),
    decodeBatch: ctx.decodeBatch.bind(ctx),
    sampleToken: ctx.sampleToken.bind(ctx),
  };
  let lastDecodeEnd = 0;
  let inFlight = 0;
  let spanStart = 0;
  let batchTokens = 0;
  let batchSeqs = 0;
  set(ctx, "initBatch", (...a) => {
    batchTokens = Number(a[0]);
    batchSeqs = 0;
    return orig.initBatch(...a);
  });
  set(ctx, "addToBatch", (...a) => {
    batchSeqs++;
    return orig.addToBatch(...a);
  });
  set(ctx, "decodeBatch", async (...a) => {
    const c = get();
    const t0 = performance.now();
    if (lastDecodeEnd) c.betweenMs += t0 - lastDecodeEnd;
    c.batches.push(batchSeqs);
    c.decodedTokens += batchTokens;
    try {
      return await orig.decodeBatch(...a);
    } finally {
      lastDecodeEnd = performance.now();
      c.decodes++;
      c.decodeMs += lastDecodeEnd - t0;
    }
  });
  set(ctx, "sampleToken", async (...a) => {
    const c = get();
    const t0 = performance.now();
    if (inFlight++ === 0) spanStart = t0;
    try {
      return await orig.sampleToken(...a);
    } finally {
      const t1 = performance.now();
      c.samples++;
      c.sampleMs += t1 - t0;
      if (--inFlight === 0) c.samplingSpanMs += t1 - spanStart;
    }
  });
  // A new measurement starts without a gap carried over from the previous one.
  return () => {
    lastDecodeEnd = 0;
  };
}

function request(i: number): GenerationRequest {
  return {
    model: "bench",
    prompt: { kind: "chat", messages: [{ role: "user", content: `Tell me a long story about a king, a river and a city. (${i})` }] },
    sampling: { temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1, logitBias: NO_EOG },
    maxTokens: TOKENS,
    stop: [],
    n: 1,
    cachePrompt: false,
  };
}

async function one(engine: LlamaCppEngine, slot: number, i: number, t0: number) {
  const prepared = await engine.prepare(request(i));
  let first = 0;
  let tokens = 0;
  const ac = new AbortController();
  for await (const chunk of engine.generate(prepared, { sampling: request(i).sampling, maxTokens: TOKENS, slot }, ac.signal)) {
    if (chunk.kind === "text") {
      if (!first) first = performance.now();
      tokens += chunk.tokens;
    }
  }
  return { ttft: first - t0, tokens, end: performance.now() };
}

async function main() {
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  const maxStreams = Math.max(...STREAMS);
  const batchSize = process.env.PROFILE_BATCH ? Number(process.env.PROFILE_BATCH) : undefined;
  let counters = fresh();
  const engines = [];
  for (const [threads, contexts, gate = 1] of VARIANTS) {
    const engine = await LlamaCppEngine.load({
      id: "bench", modelPath, contextSize: 512, parallel: maxStreams, threads, gpu: "off", cacheRam: 0, decodeContexts: contexts, batchSize, batchGate: gate !== 0,
    });
    const reset = instrument(engine, () => counters);
    await one(engine, 0, 0, performance.now()); // warm-up
    engines.push({ label: `${threads}:${contexts}${gate ? "" : " (no gate)"}`, engine, reset });
  }
  console.log(`${TOKENS} tokens per stream, ${ROUNDS} rounds, ${availableParallelism()} cores, load average ${loadavg()[0].toFixed(1)}\n`);
  console.log("| threads:contexts | streams | tok/s | TTFT p50 ms | decodes | seqs/decode | ms/decode | tokens/decode | sample ms (each) | sampling span ms/step | other between-decode ms/step | event loop busy | CPU ms/token |");
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  for (const streams of STREAMS) {
    for (let r = 0; r < ROUNDS; r++) {
      for (const { label, engine, reset } of engines) {
        counters = fresh();
        reset();
        const elu0 = performance.eventLoopUtilization();
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        const runs = await Promise.all(Array.from({ length: streams }, (_, i) => one(engine, i, r * 100 + i, t0)));
        const wall = Math.max(...runs.map((x) => x.end)) - t0;
        const elu = performance.eventLoopUtilization(elu0);
        const cpu = process.cpuUsage(cpu0);
        const c = counters;
        const tok = runs.reduce((a, x) => a + x.tokens, 0);
        const gens = c.batches.filter((b) => b > 0);
        const steps = Math.max(1, c.decodes - 1);
        console.log(
          `| ${label} | ${streams} | ${fmt(tok / (wall / 1000))} | ${fmt(median(runs.map((x) => x.ttft)))} | ${c.decodes} | ${fmt(gens.reduce((a, b) => a + b, 0) / gens.length, 2)} | ${fmt(c.decodeMs / c.decodes, 2)} | ${fmt(c.decodedTokens / c.decodes, 1)} | ${fmt(c.sampleMs / Math.max(1, c.samples), 2)} | ${fmt(c.samplingSpanMs / steps, 2)} | ${fmt((c.betweenMs - c.samplingSpanMs) / steps, 2)} | ${fmt(elu.utilization * 100, 0)} % | ${fmt((cpu.user + cpu.system) / 1000 / tok, 1)} |`,
        );
      }
    }
  }
  for (const { engine } of engines) await engine.dispose();
}

await main();
