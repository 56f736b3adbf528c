/**
 * CPU time per generated token, thread by thread, for Plinth and (when LLAMA_SERVER_BIN names a
 * binary) llama-server on the same model and load: `node --import tsx bench/thread-cpu.ts`.
 *
 * Throughput on a shared machine moves ±15 % between rounds; the CPU a token costs each thread moves
 * far less, and it tells the decode (llama.cpp's threads, the same code in both servers) from the
 * serving around it (Plinth's JavaScript thread; llama-server's HTTP threads). Read from
 * /proc/<pid>/task/<tid>/stat before and after the measured rounds, so it costs the servers nothing.
 *
 * A second table does the same with one-token requests (BENCH_REQUEST_ROUNDS rounds, 200 by
 * default; 0 leaves it out), whose figures are then per request: what reading a request, starting
 * its generation and ending its stream cost each thread. Plinth does all of that on its one
 * JavaScript thread, so at eight simultaneous requests it decides how soon the last one is read
 * (docs/benchmarks.md, twenty-first session).
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startLlamaServer } from "../test/helpers/llama-server.ts";
import { startServerProcess } from "./server-process.ts";
import { chatRound } from "./sse-client.ts";
import { fmt } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const PROMPT = "Tell me a long story about a king, a river and a city.";
const CLOCK_TICK_MS = 1000 / Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim() || 100);

/** CPU milliseconds (user + system) of each thread of a process, by thread id. */
function threadCpu(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(Number(tid), (Number(fields[11]) + Number(fields[12])) * CLOCK_TICK_MS);
    } catch {
      // A thread that ended between the listing and the read.
    }
  }
  return out;
}

interface ThreadFigures {
  tokPerS: number;
  /** CPU ms per token of the threads that decode (each above a third of the busiest one), summed. */
  decode: number;
  /** The same for every other thread: the serving around the decode. */
  serving: number;
  /** Every thread that used CPU, busiest first, in ms per token. */
  threads: number[];
}

/**
 * `servingThread`: a thread known not to decode (Plinth's JavaScript thread, the process's main
 * thread), which the threshold below could otherwise count as one when requests are short.
 */
async function measure(url: string, pid: number, concurrency: number, rounds: number, maxTokens: number, servingThread?: number): Promise<ThreadFigures> {
  const body = { messages: [{ role: "user", content: PROMPT }], max_tokens: maxTokens, temperature: 0, logit_bias: NO_EOG };
  // Warm-up: first-touch costs, and for Plinth the JIT (see bench/llama-server.ts).
  for (let i = 0; i < 10; i++) await chatRound(url, 1, body);
  const before = threadCpu(pid);
  const started = performance.now();
  for (let i = 0; i < rounds; i++) await chatRound(url, concurrency, body);
  const elapsed = performance.now() - started;
  const after = threadCpu(pid);
  const tokens = rounds * concurrency * maxTokens;
  const used = [...after].map(([tid, ms]) => ({ tid, ms: (ms - (before.get(tid) ?? 0)) / tokens })).filter((t) => t.ms > 0);
  const perToken = used.map((t) => t.ms).sort((a, b) => b - a);
  const busiest = Math.max(0, ...used.filter((t) => t.tid !== servingThread).map((t) => t.ms));
  const decode = used.filter((t) => t.tid !== servingThread && t.ms > busiest / 3).reduce((a, t) => a + t.ms, 0);
  const all = perToken.reduce((a, b) => a + b, 0);
  return { tokPerS: (tokens / elapsed) * 1000, decode, serving: all - decode, threads: perToken };
}

export async function threadCpuBench(modelPath: string, opts: { bin?: string; concurrency: number[]; rounds: number; maxTokens: number; ctx: number; requestRounds?: number }) {
  const parallel = Math.max(...opts.concurrency);
  console.log(`\nCPU per generated token by thread (${opts.rounds} rounds per figure, ${opts.maxTokens} tokens per request, ${parallel} sequences of ${opts.ctx} tokens):\n`);
  await table(modelPath, opts, opts.rounds, opts.maxTokens, "tok/s", "ms/token");
  const requestRounds = opts.requestRounds ?? 200;
  if (requestRounds <= 0) return;
  console.log(`\nCPU per one-token request by thread (${requestRounds} rounds per figure; each request is read, decodes one token and ends its stream):\n`);
  await table(modelPath, opts, requestRounds, 1, "requests/s", "ms/request");
}

async function table(modelPath: string, opts: { bin?: string; concurrency: number[]; ctx: number }, rounds: number, maxTokens: number, rate: string, unit: string) {
  const parallel = Math.max(...opts.concurrency);
  console.log(`| streams | server | ${rate} | decode threads ${unit} | other threads ${unit} | busiest threads ${unit} |`);
  console.log("|---|---|---|---|---|---|");
  const row = (c: number, name: string, f: ThreadFigures) =>
    console.log(`| ${c} | ${name} | ${fmt(f.tokPerS)} | ${fmt(f.decode, 3)} | ${fmt(f.serving, 3)} | ${f.threads.slice(0, 4).map((v) => fmt(v, 3)).join(", ")} |`);
  for (const c of opts.concurrency) {
    // One server at a time: the other would take CPU from it.
    const plinth = await startServerProcess(["--model", `bench=${modelPath}`, "--ctx-size", String(opts.ctx), "--parallel", String(parallel), "--max-queue", String(parallel)]);
    try {
      row(c, "Plinth", await measure(plinth.url, plinth.child.pid!, c, rounds, maxTokens, plinth.child.pid));
    } finally {
      await plinth.stop();
    }
    if (!opts.bin) continue;
    const llama = await startLlamaServer(opts.bin, modelPath, ["-np", String(parallel), "-c", String(opts.ctx * parallel)]);
    try {
      row(c, "llama-server", await measure(llama.url, llama.pid, c, rounds, maxTokens));
    } finally {
      await llama.close();
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await threadCpuBench(modelPath, {
    bin: process.env.LLAMA_SERVER_BIN,
    concurrency: (process.env.BENCH_CONCURRENCY ?? "1,8").split(",").map(Number),
    rounds: Number(process.env.BENCH_ROUNDS ?? 6),
    maxTokens: Number(process.env.BENCH_MAX_TOKENS ?? 96),
    ctx: Number(process.env.BENCH_CTX ?? 1024),
    requestRounds: Number(process.env.BENCH_REQUEST_ROUNDS ?? 200),
  });
}
