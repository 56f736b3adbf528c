/**
 * What API keys, limits and the usage ledger cost: short chat requests (a few tokens each, so the
 * per-request work, not decoding, dominates) through two servers side by side in alternating
 * rounds, one open with no ledger, one that checks a managed key with limits on every request
 * (hashed lookup, rate windows, token reservation) and writes a ledger row for each. Target: the
 * throughput ratio on ÷ off ≥ 0.97.
 */
import { availableParallelism } from "node:os";
import { startServerProcess } from "./server-process.ts";
import { fmt, median } from "./stats.ts";

const ADMIN = "bench-admin-key-0123456789";
const REQUESTS = Number(process.env.BENCH_TENANCY_REQUESTS ?? 200);
const CONCURRENCY = 8;

async function round(url: string, headers: Record<string, string>): Promise<number> {
  let next = 0;
  const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, temperature: 0 });
  const worker = async () => {
    while (next < REQUESTS) {
      next++;
      const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
      if (res.status !== 200) throw new Error(`bench request failed: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return REQUESTS / ((performance.now() - t0) / 1000);
}

export async function tenancyBench(modelPath: string, rounds: number): Promise<void> {
  // One core fewer than the machine has, so the HTTP side (where this overhead lives) has a core.
  const threads = Math.max(1, availableParallelism() - 1);
  const common = ["--model", `bench=${modelPath}`, "--threads", String(threads), "--ctx-size", "256", "--parallel", String(CONCURRENCY), "--log-level", "warn"];
  const off = await startServerProcess([...common, "--ledger", "off"]);
  const on = await startServerProcess([...common, "--ledger", "on", "--admin-key", ADMIN]);
  try {
    const created = await fetch(`${on.url}/admin/keys`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ name: "bench", rpm: 1_000_000_000, tpm: 1_000_000_000, max_concurrency: 1000, budget_tokens: 1_000_000_000_000 }),
    });
    const { key } = (await created.json()) as { key: string };
    const keyed = { authorization: `Bearer ${key}` };
    await round(off.url, {});
    await round(on.url, keyed);
    const offRates: number[] = [];
    const onRates: number[] = [];
    for (let i = 0; i < rounds; i++) {
      offRates.push(await round(off.url, {}));
      onRates.push(await round(on.url, keyed));
    }
    console.log(`\nAPI keys + limits + usage ledger, ${REQUESTS} short chat requests (max_tokens 2) at concurrency ${CONCURRENCY} (requests/s, medians):\n`);
    console.log("| off (open, no ledger) | on (managed key with limits, ledger) | on ÷ off |");
    console.log("|---|---|---|");
    console.log(`| ${fmt(median(offRates))} | ${fmt(median(onRates))} | ${fmt(median(onRates) / median(offRates), 3)} |`);
    console.log("target: on ÷ off ≥ 0.97");
  } finally {
    await off.stop();
    await on.stop();
  }
}

if (process.argv[1]?.endsWith("tenancy.ts")) {
  const { BENCH_SPEC, TINY_SPEC, ensureFixtureModel } = await import("../test/fixtures/models.ts");
  const { fileURLToPath } = await import("node:url");
  const spec = process.argv.includes("--tiny") ? TINY_SPEC : BENCH_SPEC;
  const modelPath = await ensureFixtureModel(spec, fileURLToPath(new URL("./.models/", import.meta.url)));
  await tenancyBench(modelPath, Number(process.env.BENCH_ROUNDS ?? 5));
}
