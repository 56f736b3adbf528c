/**
 * `npm run bench`: generates the benchmark model, starts the server in its own process and measures,
 * in one run, HTTP streaming decode speed at several concurrencies against node-llama-cpp's raw
 * decode loop on the same model and settings, what running streams see while a long prompt arrives
 * (bench/prefill-stall.ts), then API keys and the ledger on ÷ off on short requests
 * (bench/tenancy.ts), what storing a large Responses input holds the event loop for (bench/store-input.ts), the overhead of a router in front of an upstream (bench/router.ts) and
 * embeddings throughput (bench/embeddings.ts).
 * Absolute numbers depend on the machine; the ratios are what to compare between runs.
 */
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { getLlama, type LlamaContextSequence, LlamaLogLevel, type Token } from "node-llama-cpp";
import { serverDefaultThreads } from "./threads.ts";
import { buildEvaluateOptions } from "../src/engines/llama-cpp/sampling.ts";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS, TINY_SPEC } from "../test/fixtures/models.ts";
import { constraintsBench } from "./constraints.ts";
import { embeddingsBenchmark, embeddingsBesideGeneration } from "./embeddings.ts";
import { llamaServerBench } from "./llama-server.ts";
import { threadCpuBench } from "./thread-cpu.ts";
import { metricsBench } from "./metrics.ts";
import { prefillStallBench } from "./prefill-stall.ts";
import { promptCacheBench } from "./prompt-cache.ts";
import { responsesBench } from "./responses.ts";
import { storeInputBench } from "./store-input.ts";
import { routerBench } from "./router.ts";
import { tenancyBench } from "./tenancy.ts";
import { startServerProcess } from "./server-process.ts";
import { streamChat } from "./sse-client.ts";
import { fmt, median, percentile } from "./stats.ts";

const args = new Set(process.argv.slice(2));
const spec = args.has("--tiny") ? TINY_SPEC : BENCH_SPEC;
const cores = availableParallelism();
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,8,32").split(",").map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CTX = 512;
const PROMPT = "Tell me a long story about a king, a river and a city.";
// Both end-of-generation tokens are banned so every run decodes exactly MAX_TOKENS tokens.
const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

interface StreamResult {
  ttftMs: number;
  tokens: number;
  decodeTokPerSec: number;
  endMs: number;
}

async function streamOnce(url: string, t0: number): Promise<StreamResult> {
  const { first, last, usage } = await streamChat(url, {
    model: "bench",
    messages: [{ role: "user", content: PROMPT }],
    max_tokens: MAX_TOKENS,
    temperature: 0,
    logit_bias: NO_EOG,
  });
  const tokens = usage.completion_tokens;
  return { ttftMs: first - t0, tokens, decodeTokPerSec: (tokens - 1) / ((last - first) / 1000), endMs: last };
}

async function httpRound(url: string, concurrency: number) {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: concurrency }, () => streamOnce(url, t0)));
  const wall = (Math.max(...results.map((r) => r.endMs)) - t0) / 1000;
  const total = results.reduce((a, r) => a + r.tokens, 0);
  return { results, aggregate: total / wall };
}

/** node-llama-cpp's own decode loop: same model file, thread count, context size and sampling. */
async function rawDecoder(modelPath: string) {
  const llama = await getLlama({ gpu: "auto", build: "never", maxThreads: cores, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const prompt = model.tokenize(`<|im_start|>user\n${PROMPT}<|im_end|>\n<|im_start|>assistant\n`, true);
  const sampling = {
    temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1,
    logitBias: new Map(Object.entries(NO_EOG).map(([k, v]) => [Number(k), v])),
  };
  const contexts = new Map<number, LlamaContextSequence>();
  const run = async (threads: number) => {
    let sequence = contexts.get(threads);
    if (!sequence) {
      sequence = (await model.createContext({ contextSize: CTX, sequences: 1, threads })).getSequence();
      contexts.set(threads, sequence);
    }
    await sequence.clearHistory();
    const generated: Token[] = [];
    let first = 0;
    for await (const token of sequence.evaluate([model.tokens.bos!, ...prompt], buildEvaluateOptions(model, sampling, generated, MAX_TOKENS))) {
      if (!first) first = performance.now();
      generated.push(token);
      if (generated.length >= MAX_TOKENS) break;
    }
    return (generated.length - 1) / ((performance.now() - first) / 1000);
  };
  return { run, dispose: () => model.dispose() };
}

type Raw = Awaited<ReturnType<typeof rawDecoder>>;

/** `threads` undefined: the server's own default. */
const serverArgs = (modelPath: string, threads: number | undefined, parallel: number) => [
  "--model", `bench=${modelPath}`, ...(threads === undefined ? [] : ["--threads", String(threads)]), "--ctx-size", String(CTX),
  "--parallel", String(parallel), "--max-queue", String(parallel),
];

/** Single-stream HTTP decode against the raw loop, alternating rounds so machine noise hits both alike. */
async function singleStreamRatio(modelPath: string, raw: Raw, threads: number) {
  const server = await startServerProcess(serverArgs(modelPath, threads, 1));
  try {
    // Warm both paths once so first-touch page faults land in neither measurement.
    await raw.run(threads);
    await httpRound(server.url, 1);
    const rawRates: number[] = [];
    const httpRates: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      rawRates.push(await raw.run(threads));
      httpRates.push((await httpRound(server.url, 1)).results[0].decodeTokPerSec);
    }
    return { raw: median(rawRates), http: median(httpRates) };
  } finally {
    await server.stop();
  }
}

async function concurrencySweep(modelPath: string, threads: number | undefined) {
  const maxC = Math.max(...CONCURRENCY);
  const server = await startServerProcess(serverArgs(modelPath, threads, maxC));
  const rows: Array<{ c: number; aggregate: number; perStream: number; ttft50: number; ttft99: number }> = [];
  try {
    await httpRound(server.url, 1);
    for (const c of CONCURRENCY) {
      const ttfts: number[] = [];
      const perStream: number[] = [];
      const agg: number[] = [];
      for (let i = 0; i < ROUNDS; i++) {
        const r = await httpRound(server.url, c);
        agg.push(r.aggregate);
        for (const x of r.results) {
          ttfts.push(x.ttftMs);
          perStream.push(x.decodeTokPerSec);
        }
      }
      rows.push({ c, aggregate: median(agg), perStream: median(perStream), ttft50: percentile(ttfts, 50), ttft99: percentile(ttfts, 99) });
    }
  } finally {
    await server.stop();
  }
  return rows;
}

async function main() {
  const dir = fileURLToPath(new URL("./.models/", import.meta.url));
  const genStart = performance.now();
  const modelPath = await ensureFixtureModel(spec, dir);
  console.log(`model: ${spec.name} (${modelPath}), ready in ${fmt((performance.now() - genStart) / 1000)} s`);
  console.log(`${cores} cores, context ${CTX}/sequence, ${MAX_TOKENS} tokens per request, greedy, ${ROUNDS} rounds\n`);
  // `npm run bench -- --router`: only the scale-out overhead.
  if (args.has("--router")) return routerBench(modelPath, await serverDefaultThreads(cores), ROUNDS, MAX_TOKENS);

  const raw = await rawDecoder(modelPath);
  try {
    // All cores, and one core fewer (the server's default), which leaves the HTTP side a core.
    const threadSettings = [...new Set([cores, Math.max(1, cores - 1)])];
    console.log("Single stream, HTTP vs node-llama-cpp's raw evaluate loop (decode tok/s, medians):\n");
    console.log("| threads | raw tok/s | HTTP streaming tok/s | HTTP ÷ raw |");
    console.log("|---|---|---|---|");
    for (const t of threadSettings) {
      const r = await singleStreamRatio(modelPath, raw, t);
      console.log(`| ${t} | ${fmt(r.raw)} | ${fmt(r.http)} | ${fmt(r.http / r.raw, 3)} |`);
    }

    console.log(`\nConcurrency sweep, HTTP streaming, default --threads and --decode-contexts, --parallel ${Math.max(...CONCURRENCY)}:\n`);
    console.log("| concurrency | aggregate tok/s | per-stream decode tok/s | TTFT p50 ms | TTFT p99 ms | aggregate ÷ single |");
    console.log("|---|---|---|---|---|---|");
    const rows = await concurrencySweep(modelPath, undefined);
    const single = rows.find((r) => r.c === 1)?.aggregate ?? NaN;
    for (const r of rows)
      console.log(`| ${r.c} | ${fmt(r.aggregate)} | ${fmt(r.perStream)} | ${fmt(r.ttft50)} | ${fmt(r.ttft99)} | ${fmt(r.aggregate / single, 2)} |`);
    console.log("\ntargets: HTTP ÷ raw ≥ 0.95 at concurrency 1; aggregate at 8 ≥ 2× single");
  } finally {
    await raw.dispose();
  }

  const llamaServer = process.env.LLAMA_SERVER_BIN;
  if (llamaServer) await llamaServerBench(llamaServer, modelPath, { rounds: ROUNDS, maxTokens: MAX_TOKENS, concurrency: CONCURRENCY, ctx: CTX });
  else console.log("\n(LLAMA_SERVER_BIN unset: no side-by-side with llama-server; see docs/benchmarks.md)");
  // `npm run bench -- --decode`: only the decode sections above (a quick look at a new machine or GPU).
  if (args.has("--decode")) return;
  // Where each server's CPU goes per token (Plinth alone when LLAMA_SERVER_BIN is unset).
  await threadCpuBench(modelPath, {
    bin: llamaServer,
    concurrency: CONCURRENCY.filter((c) => c <= 8),
    rounds: ROUNDS,
    maxTokens: MAX_TOKENS,
    ctx: CTX,
    requestRounds: Number(process.env.BENCH_REQUEST_ROUNDS ?? 200),
  });
  await prefillStallBench(modelPath, {
    rounds: ROUNDS,
    streams: Number(process.env.BENCH_STALL_STREAMS ?? 4),
    words: Number(process.env.BENCH_STALL_WORDS ?? 600),
    llamaServerBin: llamaServer,
  });

  await promptCacheBench(modelPath, ROUNDS);
  await constraintsBench(modelPath, ROUNDS);
  await responsesBench(modelPath, ROUNDS, MAX_TOKENS);
  await storeInputBench();
  await metricsBench(modelPath, ROUNDS, MAX_TOKENS);
  await tenancyBench(modelPath, ROUNDS);
  await routerBench(modelPath, await serverDefaultThreads(cores), ROUNDS, MAX_TOKENS);
  await embeddingsBenchmark(modelPath, await serverDefaultThreads(cores));
  await embeddingsBesideGeneration(modelPath, await serverDefaultThreads(cores));
}

await main();
