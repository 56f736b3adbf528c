/**
 * Prompt-cache benchmark: time to first token for a request sharing a ~2,000-token prefix, cold
 * (nothing cached) against warm (prefix reused), and the cache hit rate of a simulated 10-turn chat.
 */
import { startServerProcess } from "./server-process.ts";
import { streamChat } from "./sse-client.ts";
import { fmt, median } from "./stats.ts";

const SYSTEM_SENTENCE = "The river runs past the old city where the king keeps his records of every harvest and trade. ";

async function ttft(url: string, body: Record<string, unknown>): Promise<{ ms: number; cached: number; prompt: number }> {
  const t0 = performance.now();
  const { first, usage } = await streamChat(url, body);
  return { ms: first - t0, cached: usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: usage.prompt_tokens };
}

export async function promptCacheBench(modelPath: string, rounds: number): Promise<void> {
  const server = await startServerProcess([
    "--model", `bench=${modelPath}`, "--ctx-size", "4096", "--parallel", "2",
  ]);
  try {
    // Size the shared prefix to about 2,000 tokens of this model's tokenizer.
    const counted = await fetch(`${server.url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "bench", prompt: SYSTEM_SENTENCE.repeat(10), add_special_tokens: false }),
    });
    const perSentence = ((await counted.json()) as { count: number }).count / 10;
    const system = SYSTEM_SENTENCE.repeat(Math.round(2000 / perSentence));
    const ask = (question: string, extra: Record<string, unknown> = {}) =>
      ttft(server.url, {
        model: "bench",
        messages: [
          { role: "system", content: system },
          { role: "user", content: question },
        ],
        max_tokens: 4,
        temperature: 0,
        ...extra,
      });
    await ask("warm-up", { cache_prompt: false });
    const cold: number[] = [];
    const warm: number[] = [];
    let promptTokens = 0;
    let cachedTokens = 0;
    for (let i = 0; i < rounds; i++) {
      // A fresh user name per round makes a namespace nothing has cached yet: a true cold start.
      const user = `bench-${i}-${Date.now()}`;
      const c = await ask(`Question ${i}?`, { user });
      const w = await ask(`Another question ${i}?`, { user });
      cold.push(c.ms);
      warm.push(w.ms);
      promptTokens = w.prompt;
      cachedTokens = w.cached;
    }
    console.log(`\nPrompt cache (--ctx-size 4096, --parallel 2), shared system prompt of ${promptTokens} tokens, ${rounds} rounds:\n`);
    console.log("| | TTFT median ms | cached tokens |");
    console.log("|---|---|---|");
    console.log(`| cold | ${fmt(median(cold))} | 0 |`);
    console.log(`| warm | ${fmt(median(warm))} | ${cachedTokens} |`);
    console.log(`\nTTFT warm ÷ cold: ${fmt(median(warm) / median(cold), 3)} (target ≤ 0.2)`);

    // A 10-turn chat: each turn resends the whole history plus one new user message.
    const messages: Array<{ role: string; content: string }> = [{ role: "system", content: SYSTEM_SENTENCE.repeat(Math.round(300 / perSentence)) }];
    let sumPrompt = 0;
    let sumCached = 0;
    const perTurn: string[] = [];
    for (let turn = 1; turn <= 10; turn++) {
      messages.push({ role: "user", content: `Turn ${turn}: tell me more about the harvest.` });
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "bench", messages, max_tokens: 24, temperature: 0.7, seed: turn, user: "chat-sim" }),
      });
      const r: any = await res.json();
      messages.push({ role: "assistant", content: r.choices[0].message.content });
      sumPrompt += r.usage.prompt_tokens;
      sumCached += r.usage.prompt_tokens_details.cached_tokens;
      perTurn.push(`${r.usage.prompt_tokens_details.cached_tokens}/${r.usage.prompt_tokens}`);
    }
    console.log(`\n10-turn chat: cached/prompt tokens per turn ${perTurn.join(", ")}`);
    console.log(`hit rate over all turns: ${fmt((100 * sumCached) / sumPrompt)} % of prompt tokens reused`);
  } finally {
    await server.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { BENCH_SPEC, ensureFixtureModel } = await import("../test/fixtures/models.ts");
  const { fileURLToPath } = await import("node:url");
  const path = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
  await promptCacheBench(path, Number(process.env.BENCH_ROUNDS ?? 3));
}
