/**
 * Embeddings throughput: 256 short inputs through POST /v1/embeddings (requests of 16 inputs, at
 * request concurrency 1 and 4) next to node-llama-cpp's own single-context loop over the same
 * inputs; then a chat stream beside a request of long inputs (embeddingsBesideGeneration). Run by
 * `npm run bench` after the generation benchmark, or alone:
 * `node --import tsx bench/embeddings.ts [--tiny] [--beside-only]`.
 */
import { availableParallelism } from "node:os";
import { serverDefaultThreads } from "./threads.ts";
import { fileURLToPath, pathToFileURL } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS, TINY_SPEC } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { fmt } from "./stats.ts";

const INPUTS = Number(process.env.BENCH_EMBED_INPUTS ?? 256);
const PER_REQUEST = 16;
const CONTEXTS = Number(process.env.BENCH_EMBED_CONTEXTS ?? 2);
const CTX = 512;

const SUBJECTS = ["the king", "a river", "the old city", "my friend", "a blue star", "the lazy dog", "a small house", "the quick fox"];
const VERBS = ["found", "tells", "wants", "made", "will see", "could help", "came to", "looks at"];
const OBJECTS = ["the moon", "a long story", "the sea", "some water", "a happy day", "the night sky", "a new world", "the answer"];

/** Short, all different: "the king found the moon 0", … (about ten tokens each). */
export function benchInputs(n = INPUTS): string[] {
  return Array.from({ length: n }, (_, i) => `${SUBJECTS[i % 8]} ${VERBS[(i >> 3) % 8]} ${OBJECTS[(i >> 6) % 8]} ${i}`);
}

/**
 * node-llama-cpp directly, `contexts` embedding contexts each taking the next input as it frees up
 * (one context: the inputs one after another).
 */
async function rawLoop(modelPath: string, inputs: string[], threads: number, contexts: number): Promise<{ rate: number; tokens: number }> {
  // A budget for every context at once: held to the cores, node-llama-cpp makes contexts wait for
  // each other's threads (with 2-thread contexts on 2 cores, two ran at 0.7x of one).
  const llama = await getLlama({ gpu: "auto", build: "never", maxThreads: Math.max(availableParallelism(), threads * contexts), logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  try {
    const pool = await Promise.all(Array.from({ length: contexts }, () => model.createEmbeddingContext({ contextSize: CTX, threads })));
    await Promise.all(pool.map((c) => c.getEmbeddingFor("warm up")));
    let tokens = 0;
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      pool.map(async (context) => {
        while (next < inputs.length) {
          const input = inputs[next++];
          tokens += context.calculateInputLength(input);
          await context.getEmbeddingFor(input);
        }
      }),
    );
    const rate = inputs.length / ((performance.now() - t0) / 1000);
    await Promise.all(pool.map((c) => c.dispose()));
    return { rate, tokens };
  } finally {
    await model.dispose();
  }
}

async function postEmbeddings(url: string, input: string[]): Promise<number> {
  const res = await fetch(`${url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    // base64 is what the openai SDK asks for by default.
    body: JSON.stringify({ model: "bench", input, encoding_format: "base64" }),
  });
  const body = (await res.json()) as { data?: unknown[]; usage?: { prompt_tokens: number } };
  if (!res.ok || body.data?.length !== input.length) throw new Error(`HTTP ${res.status}: ${JSON.stringify(body).slice(0, 300)}`);
  return body.usage!.prompt_tokens;
}

/** All inputs in requests of PER_REQUEST, `concurrency` requests in flight at a time. */
async function httpPass(url: string, inputs: string[], concurrency: number): Promise<{ rate: number; tokens: number }> {
  const requests: string[][] = [];
  for (let i = 0; i < inputs.length; i += PER_REQUEST) requests.push(inputs.slice(i, i + PER_REQUEST));
  let next = 0;
  let tokens = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests.length) {
        const embedded = await postEmbeddings(url, requests[next++]);
        tokens += embedded;
      }
    }),
  );
  return { rate: inputs.length / ((performance.now() - t0) / 1000), tokens };
}

export async function embeddingsBenchmark(modelPath: string, threads = availableParallelism()): Promise<void> {
  const inputs = benchInputs();
  console.log(
    `\nEmbeddings: ${inputs.length} short inputs, requests of ${PER_REQUEST}, --threads ${threads}, ` +
      `--embedding-contexts ${CONTEXTS}; node-llama-cpp directly with the same threads per context:\n`,
  );
  const raw = await rawLoop(modelPath, inputs, threads, 1);
  const rawPool = await rawLoop(modelPath, inputs, threads, CONTEXTS);
  const server = await startServerProcess([
    "--model", `bench=${modelPath}`, "--threads", String(threads), "--ctx-size", String(CTX),
    "--embedding-contexts", String(CONTEXTS), "--parallel", "1",
  ]);
  const rows: Array<[string, { rate: number; tokens: number }]> = [
    ["node-llama-cpp, 1 context, sequential", raw],
    [`node-llama-cpp, ${CONTEXTS} contexts in parallel`, rawPool],
  ];
  try {
    // The first request creates the embedding contexts; it is not measured.
    await postEmbeddings(server.url, inputs.slice(0, PER_REQUEST));
    for (const c of [1, 4]) rows.push([`HTTP, ${c} request${c > 1 ? "s" : ""} in flight`, await httpPass(server.url, inputs, c)]);
  } finally {
    await server.stop();
  }
  console.log("| path | inputs/s | tokens embedded | ÷ node-llama-cpp single context |");
  console.log("|---|---|---|---|");
  for (const [name, r] of rows) console.log(`| ${name} | ${fmt(r.rate)} | ${r.tokens} | ${fmt(r.rate / raw.rate, 2)} |`);
  console.log(`\ntarget: HTTP at 4 in flight ≥ 1.5× the single context (the pool of ${CONTEXTS} embeds inputs in parallel)`);
}

/** Tokens the chat is asked for beside the embeddings, and the long inputs' shape. */
const BESIDE_TOKENS = Number(process.env.BENCH_BESIDE_TOKENS ?? 128);
const BESIDE_INPUTS = Number(process.env.BENCH_BESIDE_INPUTS ?? 8);
const BESIDE_WORDS = Number(process.env.BENCH_BESIDE_WORDS ?? 300);
const BESIDE_CTX = 2048;

/**
 * Streams a chat of BESIDE_TOKENS tokens: its tokens per second from the request to its last token,
 * and the longest wait for a token (the first one's, from the request, included).
 */
async function timedStream(url: string, nonce: number): Promise<{ rate: number; longestGapMs: number }> {
  const sent = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "bench",
      messages: [{ role: "user", content: `Story ${nonce}: tell me a long one.` }],
      max_tokens: BESIDE_TOKENS,
      temperature: 0,
      logit_bias: { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 },
      stream: true,
    }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times: number[] = [];
  const decoder = new TextDecoder();
  let pending = "";
  for await (const bytes of res.body) {
    pending += decoder.decode(bytes, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n\n")) !== -1) {
      if (pending.slice(0, at).includes('"content":"')) times.push(performance.now());
      pending = pending.slice(at + 2);
    }
  }
  let longestGapMs = 0;
  for (let i = 0; i < times.length; i++) longestGapMs = Math.max(longestGapMs, times[i] - (i === 0 ? sent : times[i - 1]));
  return { rate: times.length / ((times.at(-1)! - sent) / 1000), longestGapMs };
}

/** BESIDE_INPUTS inputs of about BESIDE_WORDS words each, new text each round (no cache helps). */
function longInputs(nonce: number): string[] {
  return Array.from({ length: BESIDE_INPUTS }, (_, i) => Array.from({ length: BESIDE_WORDS }, (_, j) => `${SUBJECTS[(i + j + nonce) % 8]} ${j}`).join(" "));
}

async function timedEmbeddings(url: string, input: string[]): Promise<{ seconds: number; tokens: number }> {
  const t0 = performance.now();
  const tokens = await postEmbeddings(url, input);
  return { seconds: (performance.now() - t0) / 1000, tokens };
}

/**
 * A chat stream and one request of long embedding inputs on the same model, each alone and then at
 * the same time (decode-share.ts: the embedding inputs take turns with generation). Per round: the
 * stream's tokens/s beside the embeddings ÷ alone, its longest wait for a token, and the embedding
 * request's time alone ÷ beside the stream.
 */
export async function embeddingsBesideGeneration(
  modelPath: string,
  threads = availableParallelism(),
  rounds = Number(process.env.BENCH_ROUNDS ?? 3),
  /** Another checkout (say, the commit before a change) measured in the same rounds, alternating. */
  baseline = process.env.BENCH_EMBED_BASELINE,
): Promise<void> {
  console.log(
    `\nEmbeddings beside generation: a ${BESIDE_TOKENS}-token chat stream and a request of ${BESIDE_INPUTS} inputs of ${BESIDE_WORDS} words ` +
      `(new text each round), alone and at once; --threads ${threads}, ${rounds} rounds` +
      (baseline ? `; the same rounds on a server from ${baseline}, alternating` : "") +
      ":\n",
  );
  const args = ["--model", `bench=${modelPath}`, "--threads", String(threads), "--ctx-size", String(BESIDE_CTX), "--parallel", "1"];
  const servers: Array<[string, Awaited<ReturnType<typeof startServerProcess>>]> = [["this checkout", await startServerProcess(args)]];
  if (baseline) servers.push(["baseline", await startServerProcess(args, baseline)]);
  console.log("| server | round | stream alone tok/s | beside tok/s | ÷ | longest wait alone / beside ms | embeddings alone s | beside s | alone ÷ beside | tokens embedded |");
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  try {
    for (const [, server] of servers) {
      await postEmbeddings(server.url, ["warm up"]);
      await timedStream(server.url, -1);
    }
    for (let round = 0; round < rounds; round++) {
      for (const [name, server] of servers) {
        const streamAlone = await timedStream(server.url, round * 3);
        const embedAlone = await timedEmbeddings(server.url, longInputs(round * 3));
        const [stream, embed] = await Promise.all([timedStream(server.url, round * 3 + 1), timedEmbeddings(server.url, longInputs(round * 3 + 1))]);
        console.log(
          `| ${name} | ${round + 1} | ${fmt(streamAlone.rate)} | ${fmt(stream.rate)} | ${fmt(stream.rate / streamAlone.rate, 2)} | ` +
            `${Math.round(streamAlone.longestGapMs)} / ${Math.round(stream.longestGapMs)} | ${fmt(embedAlone.seconds, 2)} | ${fmt(embed.seconds, 2)} | ` +
            `${fmt(embedAlone.seconds / embed.seconds, 2)} | ${embed.tokens} |`,
        );
      }
    }
  } finally {
    for (const [, server] of servers) await server.stop();
  }
  console.log("\ntarget: each side keeps at least 0.4 of its speed alone while they overlap (a fair share is half)");
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const spec = process.argv.includes("--tiny") ? TINY_SPEC : BENCH_SPEC;
  const modelPath = await ensureFixtureModel(spec, fileURLToPath(new URL("./.models/", import.meta.url)));
  console.log(`model: ${spec.name} (${modelPath}), ${availableParallelism()} cores`);
  // The server's default threads for the engine binary installed, as `npm run bench` uses.
  const threads = await serverDefaultThreads();
  if (!process.argv.includes("--beside-only")) await embeddingsBenchmark(modelPath, threads);
  await embeddingsBesideGeneration(modelPath, threads);
}
