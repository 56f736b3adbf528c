/**
 * `npm run bench`: generates the benchmark model, starts the server in its own process and measures,
 * in one run, HTTP streaming decode speed at several concurrencies against node-llama-cpp's raw
 * decode loop on the same model and settings. Absolute numbers depend on the machine; the ratios
 * are what to compare between runs.
 */
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { buildEvaluateOptions } from "../src/engines/llama-cpp/sampling.ts";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS, TINY_SPEC } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { fmt, median, percentile } from "./stats.ts";

const args = new Set(process.argv.slice(2));
const spec = args.has("--tiny") ? TINY_SPEC : BENCH_SPEC;
const threads = availableParallelism();
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
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "bench",
      messages: [{ role: "user", content: PROMPT }],
      max_tokens: MAX_TOKENS,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
      logit_bias: NO_EOG,
    }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let first = 0;
  let last = 0;
  let tokens = 0;
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let at: number;
    while ((at = buffer.indexOf("\n\n")) !== -1) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (chunk.choices?.[0]?.delta?.content) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
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
async function rawDecode(modelPath: string) {
  const llama = await getLlama({ gpu: "auto", build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ contextSize: CTX, sequences: 1, threads });
  const sequence = context.getSequence();
  const prompt = model.tokenize(`<|im_start|>user\n${PROMPT}<|im_end|>\n<|im_start|>assistant\n`, true);
  const sampling = {
    temperature: 0, topP: 1, topK: 0, minP: 0, seed: 1, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1,
    logitBias: new Map(Object.entries(NO_EOG).map(([k, v]) => [Number(k), v])),
  };
  const run = async () => {
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

async function main() {
  const dir = fileURLToPath(new URL("./.models/", import.meta.url));
  const genStart = performance.now();
  const modelPath = await ensureFixtureModel(spec, dir);
  console.log(`model: ${spec.name} (${modelPath}), ready in ${fmt((performance.now() - genStart) / 1000)} s`);
  console.log(`threads ${threads}, context ${CTX}/sequence, ${MAX_TOKENS} tokens per request, greedy, ${ROUNDS} rounds\n`);

  const maxC = Math.max(...CONCURRENCY);
  const server = await startServerProcess([
    "--model", `bench=${modelPath}`, "--threads", String(threads), "--ctx-size", String(CTX),
    "--parallel", String(maxC), "--max-queue", String(maxC),
  ]);
  const raw = await rawDecode(modelPath);
  try {
    // Warm both paths once so first-touch page faults land in neither measurement.
    await raw.run();
    await httpRound(server.url, 1);

    // Alternate raw and HTTP single-stream rounds so machine noise hits both alike.
    const rawRates: number[] = [];
    const httpRates: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      rawRates.push(await raw.run());
      httpRates.push((await httpRound(server.url, 1)).results[0].decodeTokPerSec);
    }
    const rawTps = median(rawRates);
    const httpTps = median(httpRates);

    console.log("| path | concurrency | aggregate tok/s | per-stream decode tok/s | TTFT p50 ms | TTFT p99 ms |");
    console.log("|---|---|---|---|---|---|");
    console.log(`| raw node-llama-cpp evaluate loop | 1 | ${fmt(rawTps)} | ${fmt(rawTps)} | | |`);
    const aggregates = new Map<number, number>();
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
      aggregates.set(c, median(agg));
      const stream = c === 1 ? httpTps : median(perStream);
      console.log(`| HTTP streaming | ${c} | ${fmt(median(agg))} | ${fmt(stream)} | ${fmt(percentile(ttfts, 50))} | ${fmt(percentile(ttfts, 99))} |`);
    }
    console.log("");
    console.log(`ratio HTTP ÷ raw decode at concurrency 1: ${fmt(httpTps / rawTps, 3)} (target ≥ 0.95)`);
    const single = aggregates.get(1);
    for (const c of CONCURRENCY.filter((c) => c !== 1)) {
      if (single) console.log(`aggregate at ${c} ÷ aggregate at 1: ${fmt(aggregates.get(c)! / single, 2)}`);
    }
  } finally {
    await raw.dispose();
    await server.stop();
  }
}

await main();
