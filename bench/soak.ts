/**
 * Memory under a long mixed load: the server (its own process, the tiny fixture model) answers
 * 10,000 requests — short chats, chats with distinct JSON schemas, completions, embeddings and
 * refusals — and its resident memory is printed after 1k, 5k and 10k. Target: flat after warm-up
 * (within 30 MB between 1k and 10k), i.e. every cache is bounded.
 *
 *   node --import tsx bench/soak.ts            (SOAK_REQUESTS=… to change the count)
 */
import { readFileSync } from "node:fs";
import { ensureFixtureModel } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";

const TOTAL = Number(process.env.SOAK_REQUESTS ?? 10_000);
const CHECKPOINTS = [1000, 5000, 10_000].filter((n) => n <= TOTAL);
const CONCURRENCY = 4;
/** Only these kinds of request (0 chat, 1 json_schema chat, 2 completions with logprobs, 3 embeddings, 4 refusals); default all. */
const KINDS = (process.env.SOAK_KINDS ?? "0,1,2,3,4").split(",").map(Number);

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

/** The i-th request of the mix. Schemas differ per request so the grammar cache sees new keys. */
function request(i: number): { path: string; body: unknown } {
  const user = [{ role: "user", content: `question ${i}` }];
  switch (KINDS[i % KINDS.length]) {
    case 0:
      return { path: "/v1/chat/completions", body: { model: "tiny", messages: user, max_tokens: 4, user: `u${i % 50}` } };
    case 1:
      return {
        path: "/v1/chat/completions",
        body: {
          model: "tiny",
          messages: user,
          max_tokens: 8,
          response_format: {
            type: "json_schema",
            json_schema: { name: "r", strict: true, schema: { type: "object", properties: { [`k${i}`]: { type: "integer" } }, required: [`k${i}`], additionalProperties: false } },
          },
        },
      };
    case 2:
      return { path: "/v1/completions", body: { model: "tiny", prompt: `text ${i}`, max_tokens: 4, logprobs: 2 } };
    case 3:
      return { path: "/v1/embeddings", body: { model: "tiny", input: [`a ${i}`, `b ${i}`] } };
    default:
      return { path: "/v1/chat/completions", body: { model: "tiny", messages: user, temperature: 9 } };
  }
}

const modelPath = await ensureFixtureModel();
const server = await startServerProcess(["--model", `tiny=${modelPath}`, "--threads", "1", "--parallel", "4", "--ctx-size", "512"]);
try {
  const pid = server.child.pid!;
  console.log(`soak: ${TOTAL} mixed requests, ${CONCURRENCY} at a time; RSS at start ${rssMb(pid).toFixed(1)} MB\n`);
  console.log("| requests | RSS MB | failures (5xx or network) |");
  console.log("|---|---|---|");
  let next = 0;
  let done = 0;
  let failures = 0;
  const marks = new Map<number, number>();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < TOTAL) {
        const { path, body } = request(next++);
        try {
          const r = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
          await r.arrayBuffer();
          if (r.status >= 500) failures++;
        } catch {
          failures++;
        }
        done++;
        if (CHECKPOINTS.includes(done)) {
          marks.set(done, rssMb(pid));
          console.log(`| ${done} | ${rssMb(pid).toFixed(1)} | ${failures} |`);
        }
      }
    }),
  );
  const first = marks.get(CHECKPOINTS[0]);
  const last = marks.get(CHECKPOINTS.at(-1)!);
  if (first !== undefined && last !== undefined)
    console.log(`\ngrowth from ${CHECKPOINTS[0]} to ${CHECKPOINTS.at(-1)} requests: ${(last - first).toFixed(1)} MB (target: within 30 MB)`);
} finally {
  await server.stop();
}
