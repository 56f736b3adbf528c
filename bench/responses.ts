/**
 * The Responses API against Chat Completions on the same request, through the same server, side by
 * side in alternating rounds: both are one request path, so their decode speed should match (target
 * Responses ÷ Chat ≥ 0.95). The Responses stream sends more events per token, which is what this
 * measures.
 */
import { FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { streamChat, streamResponse } from "./sse-client.ts";
import { fmt, median } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const PROMPT = "Tell me a long story about a river.";

export async function responsesBench(modelPath: string, rounds: number, maxTokens = 128): Promise<void> {
  const server = await startServerProcess(["--model", `bench=${modelPath}`, "--ctx-size", "1024", "--parallel", "1"]);
  const rate = (t: { first: number; last: number; usage: { completion_tokens: number } }) => (t.usage.completion_tokens - 1) / ((t.last - t.first) / 1000);
  try {
    const chat = () =>
      streamChat(server.url, { model: "bench", messages: [{ role: "user", content: PROMPT }], max_tokens: maxTokens, temperature: 0, logit_bias: NO_EOG });
    const responses = () => streamResponse(server.url, { model: "bench", input: PROMPT, max_output_tokens: maxTokens, temperature: 0, logit_bias: NO_EOG });
    await chat();
    await responses();
    const c: number[] = [];
    const r: number[] = [];
    for (let i = 0; i < rounds; i++) {
      c.push(rate(await chat()));
      r.push(rate(await responses()));
    }
    console.log("\nResponses API vs Chat Completions, same request, streaming, greedy (decode tok/s, medians):\n");
    console.log("| Chat Completions | Responses | Responses ÷ Chat |");
    console.log("|---|---|---|");
    console.log(`| ${fmt(median(c))} | ${fmt(median(r))} | ${fmt(median(r) / median(c), 3)} |`);
    console.log("target: Responses ÷ Chat ≥ 0.95");
  } finally {
    await server.stop();
  }
}

if (process.argv[1]?.endsWith("responses.ts")) {
  const { BENCH_SPEC, ensureFixtureModel } = await import("../test/fixtures/models.ts");
  const { fileURLToPath } = await import("node:url");
  const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await responsesBench(modelPath, Number(process.env.BENCH_ROUNDS ?? 5));
}
