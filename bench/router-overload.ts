/**
 * A burst far past two upstreams' capacity (two Plinths, `--parallel 4`, on the tiny fixture model),
 * through two routers side by side: one that asks each replica how many requests it runs (the
 * default) and one told `--upstream-slots 64` (what a replica that reports nothing gets), so that
 * requests queue inside the upstreams. Short upstream timeouts (`T` seconds) stand for a machine too
 * starved to answer queued requests in time. Prints, per burst, the streams that finished cleanly,
 * the replica failures the router counted and the replicas ejected after it.
 *
 *   N=80 TOK=300 T=1 ROUNDS=2 node --import tsx bench/router-overload.ts
 */
import { ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";

const N = Number(process.env.N ?? 80);
const TOK = Number(process.env.TOK ?? 300);
const T = process.env.T ?? "1";
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

const model = await ensureFixtureModel();
const upstreams = await Promise.all([0, 1].map(() => startServerProcess(["--model", `tiny=${model}`, "--threads", "1", "--parallel", "4", "--ctx-size", "2048"])));
const pool = `r=${upstreams.map((u) => u.url).join(",")}`;
// The router that asks its replicas runs 8 at once and queues the rest in its own queue, whose bound
// (--max-queue) is set past the burst so that it is queued, not refused (a 429), as the other router's is.
const common = ["--health-interval", "0", "--connect-timeout", T, "--first-token-timeout", T, "--eject-after", "3", "--max-queue", String(Math.max(64, N))];
const learned = await startServerProcess(["--upstream", pool, ...common]);
const told = await startServerProcess(["--upstream", pool, "--upstream-slots", "64", ...common]);

/** Whether one streamed chat finished with every token and no error event. */
async function stream(url: string, i: number): Promise<boolean> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "r", messages: [{ role: "user", content: `Story ${i} about the river` }], max_tokens: TOK, logit_bias: NO_EOG, stream: true }),
  });
  const text = await res.text();
  return res.status === 200 && !text.includes('"error"') && text.trimEnd().endsWith("[DONE]");
}

async function burst(url: string) {
  const started = Date.now();
  const ok = (await Promise.all(Array.from({ length: N }, (_, i) => stream(url, i)))).filter(Boolean).length;
  const metrics = await (await fetch(`${url}/metrics`)).text();
  // Counters since the router started: the figures of later rounds include the earlier ones.
  const failures = [...metrics.matchAll(/plinth_upstream_replica_requests_total\{[^}]*result="failed"\} (\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
  const ejected = [...metrics.matchAll(/plinth_upstream_replica_state\{[^}]*state="ejected"\} 1/g)].length;
  return `${ok}/${N} streams finished, ${((Date.now() - started) / 1000).toFixed(1)} s, replica failures so far ${failures}, ejected now ${ejected}`;
}

try {
  console.log(`\n${N} streams of ${TOK} tokens at once, two upstreams of 4 slots, upstream timeouts ${T} s:\n`);
  for (let round = 0; round < ROUNDS; round++) {
    console.log(`round ${round + 1}, slots asked of the replicas: ${await burst(learned.url)}`);
    console.log(`round ${round + 1}, --upstream-slots 64:          ${await burst(told.url)}`);
  }
} finally {
  for (const s of [learned, told, ...upstreams]) await s.stop();
}
