/**
 * Scale-out overhead: the same streaming chat load straight to one upstream Plinth and through a
 * second Plinth that fronts it with `--upstream` (one replica, so only the router's own cost is
 * measured). Rounds alternate between the two paths so machine noise hits both alike.
 */
import { startServerProcess } from "./server-process.ts";
import { chatRound } from "./sse-client.ts";
import { FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { fmt, median, percentile } from "./stats.ts";

const PROMPT = "Tell me a long story about a king, a river and a city.";
const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

/** Short requests per path before measuring (BENCH_ROUTER_WARMUP). */
const WARMUP = Number(process.env.BENCH_ROUTER_WARMUP ?? 200);
/** Sequential short requests per path behind the one-stream TTFT figures (BENCH_ROUTER_TTFT_SAMPLES). */
const TTFT_SAMPLES = Number(process.env.BENCH_ROUTER_TTFT_SAMPLES ?? 100);

/** A round of `concurrency` streams of this benchmark's request. */
const round = (url: string, concurrency: number, maxTokens: number) =>
  chatRound(url, concurrency, { messages: [{ role: "user", content: PROMPT }], max_tokens: maxTokens, temperature: 0, logit_bias: NO_EOG });

/**
 * With `baseline` (the path of another checkout, e.g. main's), a router built from it runs too and
 * takes its turn in every round, so a change to the router is measured before/after side by side.
 */
export async function routerBench(modelPath: string, threads: number, rounds: number, maxTokens = 128, baseline = process.env.BENCH_ROUTER_BASELINE): Promise<void> {
  // BENCH_UPSTREAM_CPUS / BENCH_ROUTER_CPUS pin the two servers apart (taskset lists), so the router's
  // own cost is measured without the upstream's decode threads taking its core.
  const upstream = await startServerProcess(["--model", `bench=${modelPath}`, "--threads", String(threads), "--ctx-size", "512", "--parallel", "8"], undefined, process.env.BENCH_UPSTREAM_CPUS);
  const router = await startServerProcess(["--upstream", `bench=${upstream.url}`, "--health-interval", "0"], undefined, process.env.BENCH_ROUTER_CPUS);
  const before = baseline ? await startServerProcess(["--upstream", `bench=${upstream.url}`, "--health-interval", "0"], baseline) : undefined;
  try {
    console.log(`\nScale-out: streaming through a router (--upstream) vs straight to the upstream, ${maxTokens} tokens, medians of ${rounds} rounds, after ${WARMUP} warm-up requests per path; one-stream TTFT from ${TTFT_SAMPLES} alternating 2-token requests per path:\n`);
    if (before) console.log(`(baseline router from ${baseline} alternates with this checkout's in every round)\n`);
    console.log(`| concurrency | direct tok/s | router tok/s | router ÷ direct | direct TTFT p50 ms | router TTFT p50 ms | added TTFT p50 ms |${before ? " baseline ÷ direct | baseline added TTFT p50 ms |" : ""}`);
    console.log(`|---|---|---|---|---|---|---|${before ? "---|---|" : ""}`);
    // Warm-up, alternating: a fresh Node process runs its first few hundred requests before V8 has
    // optimised the request path (parsing, validation, the HTTP client), each about a millisecond
    // slower on the router (measured with bench/router-profile.ts). The figures below are for a
    // server that has been up a while.
    const paths = [upstream.url, router.url, ...(before ? [before.url] : [])];
    for (let i = 0; i < WARMUP; i++) for (const url of paths) await round(url, 1, 1);
    for (const c of [1, 8]) {
      const direct: number[] = [];
      const routed: number[] = [];
      const based: number[] = [];
      const directTtft: number[] = [];
      const routedTtft: number[] = [];
      const basedTtft: number[] = [];
      for (let i = 0; i < rounds; i++) {
        const d = await round(upstream.url, c, maxTokens);
        const r = await round(router.url, c, maxTokens);
        direct.push(d.aggregate);
        routed.push(r.aggregate);
        directTtft.push(...d.ttfts);
        routedTtft.push(...r.ttfts);
        if (before) {
          const b = await round(before.url, c, maxTokens);
          based.push(b.aggregate);
          basedTtft.push(...b.ttfts);
        }
      }
      if (c === 1) {
        // A TTFT p50 from one request per round moves by milliseconds between runs: the one-stream
        // figure comes from TTFT_SAMPLES short requests per path, alternating, one at a time.
        directTtft.length = routedTtft.length = basedTtft.length = 0;
        for (let i = 0; i < TTFT_SAMPLES; i++) {
          directTtft.push(...(await round(upstream.url, 1, 2)).ttfts);
          routedTtft.push(...(await round(router.url, 1, 2)).ttfts);
          if (before) basedTtft.push(...(await round(before.url, 1, 2)).ttfts);
        }
      }
      const d50 = percentile(directTtft, 50);
      const r50 = percentile(routedTtft, 50);
      const extra = before ? ` ${fmt(median(based) / median(direct), 3)} | ${fmt(percentile(basedTtft, 50) - d50)} |` : "";
      console.log(`| ${c} | ${fmt(median(direct))} | ${fmt(median(routed))} | ${fmt(median(routed) / median(direct), 3)} | ${fmt(d50)} | ${fmt(r50)} | ${fmt(r50 - d50)} |${extra}`);
    }
    console.log("\ntargets: router ÷ direct ≥ 0.97; added TTFT p50 ≤ 3 ms");
  } finally {
    await before?.stop();
    await router.stop();
    await upstream.stop();
  }
}
