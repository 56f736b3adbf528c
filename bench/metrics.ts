/**
 * What watching the server costs: streaming decode at concurrency 4 with a Prometheus-style scraper
 * reading /metrics every second, against the same rounds with nobody scraping, alternating so machine
 * noise hits both alike (target: scraped ÷ unscraped ≥ 0.98). The hooks run per token either way;
 * this measures the scrapes themselves (rendering every family, reading the engines' stats).
 */
import { FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { streamChat } from "./sse-client.ts";
import { fmt, median } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const STREAMS = 4;

export async function metricsBench(modelPath: string, rounds: number, maxTokens = 128): Promise<void> {
  const server = await startServerProcess([
    "--model", `bench=${modelPath}`, "--ctx-size", "512", "--parallel", String(STREAMS),
  ]);
  const round = async () => {
    const t0 = performance.now();
    const runs = await Promise.all(
      Array.from({ length: STREAMS }, (_, i) =>
        streamChat(server.url, {
          model: "bench",
          messages: [{ role: "user", content: `Tell me story number ${i} about a river.` }],
          max_tokens: maxTokens,
          temperature: 0,
          logit_bias: NO_EOG,
        }),
      ),
    );
    const tokens = runs.reduce((a, r) => a + r.usage.completion_tokens, 0);
    return tokens / ((Math.max(...runs.map((r) => r.last)) - t0) / 1000);
  };
  const scraped = async () => {
    let scrapes = 0;
    let bytes = 0;
    const scrape = async () => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      scrapes++;
      bytes = text.length;
    };
    await scrape();
    const timer = setInterval(() => void scrape(), 1000);
    try {
      return { rate: await round(), scrapes, bytes };
    } finally {
      clearInterval(timer);
    }
  };
  try {
    await round();
    const plain: number[] = [];
    const watched: number[] = [];
    let scrapes = 0;
    let bytes = 0;
    for (let i = 0; i < rounds; i++) {
      plain.push(await round());
      const w = await scraped();
      watched.push(w.rate);
      scrapes += w.scrapes;
      bytes = w.bytes;
    }
    console.log(`\nMetrics: ${STREAMS} concurrent streams, /metrics scraped every second vs not at all (aggregate tok/s, medians):\n`);
    console.log("| not scraped | scraped every 1 s | scraped ÷ not | scrapes | exposition size |");
    console.log("|---|---|---|---|---|");
    console.log(`| ${fmt(median(plain))} | ${fmt(median(watched))} | ${fmt(median(watched) / median(plain), 3)} | ${scrapes} | ${fmt(bytes / 1024)} KiB |`);
    console.log("target: scraped ÷ not ≥ 0.98");
  } finally {
    await server.stop();
  }
}

if (process.argv[1]?.endsWith("metrics.ts")) {
  const { BENCH_SPEC, ensureFixtureModel } = await import("../test/fixtures/models.ts");
  const { fileURLToPath } = await import("node:url");
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await metricsBench(modelPath, Number(process.env.BENCH_ROUNDS ?? 5));
}
