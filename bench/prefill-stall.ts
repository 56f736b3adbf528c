/**
 * What running streams see while a long prompt arrives (issue 14: "prompt chunks of new requests
 * mixed into decode steps without stalling running streams"). A round: BENCH_STALL_STREAMS streams
 * are generating; once each has a few tokens, one more request arrives whose prompt is about
 * BENCH_STALL_WORDS words (new text each round, so no cache helps) and asks for a few tokens.
 * Measured per round: the newcomer's time to first token, and for the running streams, over the
 * window from the newcomer's arrival to its first token, the longest gap between two of a stream's
 * tokens and the tokens they got per second. With LLAMA_SERVER_BIN set, llama-server on the same
 * model runs the same rounds, alternating.
 *
 * `node --import tsx bench/prefill-stall.ts` (also a section of `npm run bench`).
 */
import { fileURLToPath } from "node:url";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { type LlamaServer, startLlamaServer } from "../test/helpers/llama-server.ts";
import { startServerProcess } from "./server-process.ts";
import { fmt, median } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const WORDS = ["river", "king", "city", "bridge", "market", "lantern", "harbour", "tower", "garden", "winter", "merchant", "stone", "road", "festival", "letter", "mountain"];

interface Timed {
  /** performance.now() of each content delta. */
  times: number[];
  promptTokens: number;
}

/** Streams a chat, calling `onToken` at each content delta; resolves with the delta times. */
async function timedChat(url: string, body: Record<string, unknown>, onToken?: () => void): Promise<Timed> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "bench", ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  const times: number[] = [];
  let promptTokens = 0;
  let pending = "";
  for await (const bytes of res.body) {
    pending += decoder.decode(bytes, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n\n")) !== -1) {
      const event = pending.slice(0, at);
      pending = pending.slice(at + 2);
      if (event.includes('"delta":{"content":"')) {
        times.push(performance.now());
        onToken?.();
      }
      const usage = /"prompt_tokens":(\d+)/.exec(event);
      if (usage) promptTokens = Number(usage[1]);
    }
  }
  return { times, promptTokens };
}

/** About `words` words of text that no earlier round sent (the nonce leads, so no cached prefix matches). */
function longPrompt(words: number, nonce: number): string {
  let x = (nonce * 2654435761) >>> 0 || 1;
  const out = [`Round ${nonce}: summarise the following notes.`];
  for (let i = 0; i < words; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(WORDS[x % WORDS.length]);
  }
  return out.join(" ");
}

export interface StallRound {
  ttftMs: number;
  /** Longest gap between two tokens of any running stream inside the window. */
  maxGapMs: number;
  /** Tokens the running streams got per second inside the window, all together. */
  runningTokPerSec: number;
  /** Median gap between a running stream's tokens before the newcomer arrived. */
  steadyGapMs: number;
  promptTokens: number;
}

async function stallRound(url: string, streams: number, words: number, nonce: number, runTokens: number): Promise<StallRound> {
  const counts = new Array<number>(streams).fill(0);
  let ready!: () => void;
  const allStarted = new Promise<void>((r) => (ready = r));
  const running = counts.map((_, i) =>
    timedChat(
      url,
      { messages: [{ role: "user", content: `Stream ${i} of round ${nonce}: tell me a long story.` }], max_tokens: runTokens, temperature: 0, logit_bias: NO_EOG },
      () => {
        counts[i]++;
        if (counts.every((c) => c >= 8)) ready();
      },
    ),
  );
  await allStarted;
  const sent = performance.now();
  const newcomer = await timedChat(url, { messages: [{ role: "user", content: longPrompt(words, nonce) }], max_tokens: 4, temperature: 0, logit_bias: NO_EOG });
  const firstToken = newcomer.times[0];
  const results = await Promise.all(running);
  let maxGap = 0;
  let inWindow = 0;
  const steady: number[] = [];
  for (const { times } of results) {
    if (times[times.length - 1] < firstToken) throw new Error(`a running stream ended before the newcomer's first token; raise its max_tokens (${runTokens})`);
    for (let k = 1; k < times.length; k++) {
      if (times[k] <= sent) steady.push(times[k] - times[k - 1]);
      // A gap that overlaps the window counts: it is what the stream's reader waited.
      else if (times[k - 1] < firstToken) maxGap = Math.max(maxGap, times[k] - times[k - 1]);
      if (times[k] > sent && times[k] <= firstToken) inWindow++;
    }
  }
  return {
    ttftMs: firstToken - sent,
    maxGapMs: maxGap,
    runningTokPerSec: inWindow / ((firstToken - sent) / 1000),
    steadyGapMs: median(steady),
    promptTokens: newcomer.promptTokens,
  };
}

function summary(name: string, rounds: StallRound[]): string {
  const m = (f: (r: StallRound) => number) => fmt(median(rounds.map(f)));
  return `| ${name} | ${m((r) => r.promptTokens)} | ${m((r) => r.ttftMs)} | ${m((r) => r.steadyGapMs)} | ${m((r) => r.maxGapMs)} (${rounds.map((r) => fmt(r.maxGapMs, 0)).join(", ")}) | ${m((r) => r.runningTokPerSec)} |`;
}

export async function prefillStallBench(modelPath: string, opts: { rounds: number; streams: number; words: number; llamaServerBin?: string; plinthArgs?: string[] }) {
  const parallel = opts.streams + 1;
  const ctx = 4096;
  // The running streams must outlast the newcomer's prompt; at ~100 tokens/s a stream's 600 tokens
  // are several seconds, longer than a few thousand prompt tokens take on a small CPU.
  const runTokens = Number(process.env.BENCH_STALL_RUN_TOKENS ?? 600);
  console.log(`\nRunning streams while a long prompt arrives: ${opts.streams} streams generating, then one request of ~${opts.words} words (new text each round), ${opts.rounds} rounds${opts.llamaServerBin ? ", alternating with llama-server" : ""}; medians over rounds (max gap per round in brackets):\n`);
  const plinth = await startServerProcess(["--model", `bench=${modelPath}`, "--ctx-size", String(ctx), "--parallel", String(parallel), ...(opts.plinthArgs ?? [])]);
  let llama: LlamaServer | undefined;
  try {
    if (opts.llamaServerBin) llama = await startLlamaServer(opts.llamaServerBin, modelPath, ["-np", String(parallel), "-c", String(ctx * parallel)]);
    const servers: Array<[string, string]> = [["Plinth", plinth.url]];
    if (llama) servers.push(["llama-server", llama.url]);
    const results = new Map<string, StallRound[]>(servers.map(([n]) => [n, []]));
    // One unmeasured round each first: first-touch costs, and for Plinth the JIT.
    for (const [, url] of servers) await stallRound(url, opts.streams, Math.min(opts.words, 200), 1_000_000, runTokens);
    for (let i = 0; i < opts.rounds; i++) {
      const order = i % 2 === 0 ? servers : [...servers].reverse();
      for (const [name, url] of order) results.get(name)!.push(await stallRound(url, opts.streams, opts.words, i + 1, runTokens));
    }
    console.log("| server | prompt tokens | newcomer TTFT ms | running streams' gap before, ms | longest gap while it is read, ms | running streams' tok/s while it is read |");
    console.log("|---|---|---|---|---|---|");
    for (const [name] of servers) console.log(summary(name, results.get(name)!));
  } finally {
    await llama?.close();
    await plinth.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await prefillStallBench(modelPath, {
    rounds: Number(process.env.BENCH_ROUNDS ?? 3),
    streams: Number(process.env.BENCH_STALL_STREAMS ?? 4),
    words: Number(process.env.BENCH_STALL_WORDS ?? 600),
    llamaServerBin: process.env.LLAMA_SERVER_BIN,
    plinthArgs: (process.env.BENCH_PLINTH_ARGS ?? "").split(/\s+/).filter(Boolean),
  });
}
