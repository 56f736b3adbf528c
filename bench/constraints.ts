/**
 * Cost of constraints and metadata on decode speed, through the server, side by side in one run:
 * plain greedy streaming, the same with a JSON-schema grammar active on every token, and the same
 * with logprobs (top 5), greedy and sampled. Printed as ratios to plain decoding with the same sampling.
 */
import { FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { streamChat } from "./sse-client.ts";
import { fmt, median } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

/** Decode tokens/s of one streamed request: tokens after the first over the time they took. */
async function decodeRate(url: string, body: Record<string, unknown>): Promise<{ rate: number; tokens: number }> {
  const { first, last, usage } = await streamChat(url, body);
  const tokens = usage.completion_tokens;
  return { rate: (tokens - 1) / ((last - first) / 1000), tokens };
}

export async function constraintsBench(modelPath: string, rounds: number): Promise<void> {
  const server = await startServerProcess(["--model", `bench=${modelPath}`, "--ctx-size", "1024", "--parallel", "1"]);
  try {
    const base = { model: "bench", messages: [{ role: "user", content: "Write a long record about the river." }], max_tokens: 128, temperature: 0 };
    // A long free string inside the schema keeps the grammar engaged for the whole answer.
    const schema = {
      type: "object",
      properties: { title: { type: "string", maxLength: 40 }, body: { type: "string", minLength: 400, maxLength: 2000 } },
      required: ["title", "body"],
      additionalProperties: false,
    };
    const variants: Array<[string, Record<string, unknown>]> = [
      ["plain", { ...base, logit_bias: NO_EOG }],
      ["json_schema", { ...base, response_format: { type: "json_schema", json_schema: { name: "record", schema, strict: true } } }],
      ["logprobs, top 5", { ...base, logit_bias: NO_EOG, logprobs: true, top_logprobs: 5 }],
      // Under a grammar the reported distribution is masked by it, which costs grammar passes over
      // the whole vocabulary.
      ["json_schema + logprobs, top 5", { ...base, response_format: { type: "json_schema", json_schema: { name: "record", schema, strict: true } }, logprobs: true, top_logprobs: 5 }],
      // Sampling from the whole distribution: most sampled tokens then fall outside the top 5.
      ["plain, temperature 1", { ...base, logit_bias: NO_EOG, temperature: 1, seed: 1 }],
      ["logprobs, top 5, temperature 1", { ...base, logit_bias: NO_EOG, temperature: 1, seed: 1, logprobs: true, top_logprobs: 5 }],
    ];
    const rates = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    const tokens = new Map<string, number>();
    for (const [, body] of variants) await decodeRate(server.url, body); // warm-up
    for (let i = 0; i < rounds; i++) {
      for (const [name, body] of variants) {
        const r = await decodeRate(server.url, body);
        rates.get(name)!.push(r.rate);
        tokens.set(name, r.tokens);
      }
    }
    // Each variant is compared with plain decoding under the same sampling.
    const baseline = (name: string) => median(rates.get(name.endsWith("temperature 1") ? "plain, temperature 1" : "plain")!);
    console.log(`\nConstraints and logprobs (--parallel 1, ${rounds} rounds, alternating):\n`);
    console.log("| variant | tokens | decode tok/s | ÷ plain (same sampling) |");
    console.log("|---|---|---|---|");
    for (const [name] of variants) {
      const r = median(rates.get(name)!);
      console.log(`| ${name} | ${tokens.get(name)} | ${fmt(r)} | ${fmt(r / baseline(name), 3)} |`);
    }
    console.log("\ntargets: json_schema ÷ plain ≥ 0.8; logprobs (top 5) ÷ plain ≥ 0.8");
  } finally {
    await server.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { BENCH_SPEC, ensureFixtureModel } = await import("../test/fixtures/models.ts");
  const { fileURLToPath } = await import("node:url");
  const path = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await constraintsBench(path, Number(process.env.BENCH_ROUNDS ?? 3));
}
