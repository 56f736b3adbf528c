/**
 * Plinth against llama-server on the same model, side by side in one run: `npm run bench` runs it
 * when LLAMA_SERVER_BIN names a llama-server binary (alone: `LLAMA_SERVER_BIN=… node --import tsx
 * bench/llama-server.ts`). Both servers keep their default thread counts and get the same number of
 * sequences (the largest concurrency) and the same context per sequence; rounds alternate between
 * them at each concurrency so machine noise hits both alike. Streaming chat, greedy, end tokens
 * banned so every request decodes exactly BENCH_MAX_TOKENS tokens.
 *
 * Building llama-server from the llama.cpp that node-llama-cpp bundles: see docs/benchmarks.md.
 */
import { fileURLToPath } from "node:url";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { type LlamaServer, startLlamaServer } from "../test/helpers/llama-server.ts";
import { startServerProcess } from "./server-process.ts";
import { type ChatRound, chatRound } from "./sse-client.ts";
import { fmt, median, percentile } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const PROMPT = "Tell me a long story about a king, a river and a city.";

/** Requests a one-stream round sends one after another (BENCH_SEQUENTIAL); the figure is their total. */
const SEQUENTIAL = Math.max(1, Number(process.env.BENCH_SEQUENTIAL ?? 4));

/** One-stream rounds per server before measuring (BENCH_WARMUP). */
const WARMUP = Math.max(1, Number(process.env.BENCH_WARMUP ?? 10));

/**
 * Unmeasured rounds a server runs right before each of its measured rounds (BENCH_SETTLE; 0: none).
 * Alternating two servers on two cores makes each one's round after the other's slow at its start:
 * 30 alternating rounds of eight streams gave first tokens at 33 / 56–60 ms (first request / the
 * rest) for Plinth after its own round and 63 / 90 ms after llama-server's, and llama-server
 * 33 / 54–62 after its own and 67 / 80–91 after Plinth's (docs/benchmarks.md). A user runs one
 * server, so each is measured after a round of its own.
 */
const SETTLE = Math.max(0, Number(process.env.BENCH_SETTLE ?? 1));

/**
 * A round of `concurrency` streams of this benchmark's request. At one stream a single request of
 * ~1 s was the noisiest figure of the table (its ratio moved 0.77–0.91 between rounds), so a
 * one-stream round is SEQUENTIAL requests back to back: tok/s over the whole round, a TTFT each.
 */
async function round(url: string, concurrency: number, maxTokens: number): Promise<ChatRound> {
  const body = { messages: [{ role: "user", content: PROMPT }], max_tokens: maxTokens, temperature: 0, logit_bias: NO_EOG };
  if (concurrency > 1) return chatRound(url, concurrency, body);
  let busy = 0;
  const ttfts: number[] = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const r = await chatRound(url, 1, body);
    // Every request decodes exactly maxTokens (end tokens are banned), so this is its wall time.
    busy += maxTokens / r.aggregate;
    ttfts.push(...r.ttfts);
  }
  // The client's own time between requests is left out: the servers are compared, not the client.
  return { aggregate: (maxTokens * SEQUENTIAL) / busy, ttfts };
}

export async function llamaServerBench(bin: string, modelPath: string, opts: { rounds: number; maxTokens: number; concurrency: number[]; ctx: number }) {
  const parallel = Math.max(...opts.concurrency);
  console.log(`\nSide by side with llama-server (${bin}), both with default threads, ${parallel} sequences of ${opts.ctx} tokens, ${opts.maxTokens} tokens per request, ${opts.rounds} alternating rounds (${SEQUENTIAL} requests one after another per one-stream round), each after ${SETTLE} unmeasured round(s) of the same server:\n`);
  // BENCH_PLINTH_ARGS adds server flags (e.g. "--threads 2 --decode-contexts 1") to compare settings.
  const extra = (process.env.BENCH_PLINTH_ARGS ?? "").split(/\s+/).filter(Boolean);
  const plinth = await startServerProcess(["--model", `bench=${modelPath}`, "--ctx-size", String(opts.ctx), "--parallel", String(parallel), "--max-queue", String(parallel), ...extra]);
  let llama: LlamaServer | undefined;
  try {
    // -c is the whole KV cache, shared out over the slots.
    llama = await startLlamaServer(bin, modelPath, ["-np", String(parallel), "-c", String(opts.ctx * parallel)]);
    // Warm-up, the same for both: first-touch costs, and for Plinth the JIT. A fresh Node process
    // runs its request and streaming path unoptimised for its first few dozen requests: the
    // JavaScript thread's CPU per streamed token fell from 0.94 to 0.43 ms over the first 36
    // requests of 96 tokens (docs/benchmarks.md). A long-running server is measured, not a cold one.
    for (let i = 0; i < WARMUP; i++) {
      await round(plinth.url, 1, opts.maxTokens);
      await round(llama.url, 1, opts.maxTokens);
    }
    console.log("| streams | Plinth tok/s | llama-server tok/s | tok/s ratio | Plinth TTFT p50 / p99 ms | llama-server TTFT p50 / p99 ms | TTFT p50 ratio |");
    console.log("|---|---|---|---|---|---|---|");
    for (const c of opts.concurrency) {
      const p: ChatRound[] = [];
      const l: ChatRound[] = [];
      const measured = async (url: string) => {
        for (let s = 0; s < SETTLE; s++) await round(url, c, opts.maxTokens);
        return round(url, c, opts.maxTokens);
      };
      for (let i = 0; i < opts.rounds; i++) {
        // Who goes first alternates too: a machine that slows down mid-run hits both.
        if (i % 2 === 0) {
          p.push(await measured(plinth.url));
          l.push(await measured(llama.url));
        } else {
          l.push(await measured(llama.url));
          p.push(await measured(plinth.url));
        }
      }
      const pAgg = median(p.map((r) => r.aggregate));
      const lAgg = median(l.map((r) => r.aggregate));
      const pT = p.flatMap((r) => r.ttfts);
      const lT = l.flatMap((r) => r.ttfts);
      const ratios = p.map((r, i) => fmt(r.aggregate / l[i].aggregate, 2)).join(", ");
      console.log(
        `| ${c} | ${fmt(pAgg)} | ${fmt(lAgg)} | ${fmt(pAgg / lAgg, 2)} (rounds: ${ratios}) | ${fmt(percentile(pT, 50))} / ${fmt(percentile(pT, 99))} | ${fmt(percentile(lT, 50))} / ${fmt(percentile(lT, 99))} | ${fmt(percentile(pT, 50) / percentile(lT, 50), 2)} |`,
      );
    }
    console.log("\ntargets: tok/s ratio ≥ 1.0 at 1 and 8 streams; TTFT p50 ratio ≤ 1.0");
  } finally {
    await llama?.close();
    await plinth.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const bin = process.env.LLAMA_SERVER_BIN;
  if (!bin) throw new Error("LLAMA_SERVER_BIN must name a llama-server binary");
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await llamaServerBench(bin, modelPath, {
    rounds: Number(process.env.BENCH_ROUNDS ?? 3),
    maxTokens: Number(process.env.BENCH_MAX_TOKENS ?? 96),
    concurrency: (process.env.BENCH_CONCURRENCY ?? "1,8,32").split(",").map(Number),
    ctx: Number(process.env.BENCH_CTX ?? 512),
  });
}
