import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { NO_EOG, postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// Three real upstreams; one router balances by prompt prefix, another round-robin. Ten multi-turn
// conversations run through each (and straight against one upstream, the baseline): the prompt
// tokens the upstreams report as reused from their caches tell how well each balancing keeps a
// conversation where its earlier turns are cached.
const up: TestServer[] = [];
let prefix: TestServer;
let roundRobin: TestServer;

before(async () => {
  for (let i = 0; i < 3; i++) up.push(await startTestServer({ "ctx-size": "1024", "cache-min-tokens": "16" }));
  const upstream = [{ name: "r", url: up.map((u) => u.url), model: "tiny" }];
  prefix = await startTestServer({ upstream, balance: "prefix", "health-interval": "0" });
  roundRobin = await startTestServer({ upstream, balance: "round-robin", "health-interval": "0" });
});
after(async () => {
  await prefix?.close();
  await roundRobin?.close();
  for (const u of up) await u.close();
});

/** Ten conversations of three turns, turn by turn; the cached and prompt tokens of turns 2 and 3. */
async function conversations(url: string, model: string, tag: string) {
  const history: Array<Array<{ role: "user" | "assistant"; content: string }>> = Array.from({ length: 10 }, (_, c) => [
    { role: "user", content: `${tag} conversation ${c}: tell me a long story about the king, the river and the city, in detail, with names. ${"The river runs by the city. ".repeat(3)}` },
  ]);
  let cached = 0;
  let prompt = 0;
  const replicas = new Map<number, Set<string>>();
  for (let turn = 0; turn < 3; turn++) {
    for (let c = 0; c < 10; c++) {
      const r = await postJson(`${url}/v1/chat/completions`, { model, messages: history[c], max_tokens: 8, temperature: 0, logit_bias: NO_EOG });
      assert.equal(r.status, 200, r.text);
      if (turn > 0) {
        cached += r.json.usage.prompt_tokens_details.cached_tokens;
        prompt += r.json.usage.prompt_tokens;
      }
      const served = r.headers.get("x-plinth-upstream");
      if (served) (replicas.get(c) ?? replicas.set(c, new Set()).get(c)!).add(served);
      history[c].push({ role: "assistant", content: r.json.choices[0].message.content }, { role: "user", content: `And then, in turn ${turn + 2}?` });
    }
  }
  return { cached, prompt, replicas };
}

test("prefix balancing keeps each conversation on one replica and reuses its cache as one server does; round-robin does not", async () => {
  const single = await conversations(up[0].url, "tiny", "single");
  const byPrefix = await conversations(prefix.url, "r", "prefix");
  const byTurns = await conversations(roundRobin.url, "r", "rr");
  const line = (name: string, x: typeof single) => `${name}: ${x.cached} of ${x.prompt} prompt tokens reused`;
  const report = [line("one server", single), line("prefix", byPrefix), line("round-robin", byTurns)].join("; ");
  process.stderr.write(`# ${report}\n`);
  assert.ok(single.cached > 0.5 * single.prompt, report);
  assert.ok(byPrefix.cached >= 0.8 * single.cached, report);
  assert.ok(byTurns.cached < 0.5 * byPrefix.cached, report);
  // Every conversation stayed on one replica, and the conversations spread over the replicas.
  for (const set of byPrefix.replicas.values()) assert.equal(set.size, 1);
  assert.ok(new Set([...byPrefix.replicas.values()].map((s) => [...s][0])).size >= 2, "conversations spread over replicas");
  for (const set of byTurns.replicas.values()) assert.equal(set.size, 3);
});

test("the isolation namespace is part of the affinity and reaches the upstream: another user's identical prompt reuses nothing", async () => {
  const messages = [{ role: "user", content: `Isolation check: ${"the king walks by the river in the city. ".repeat(6)}` }];
  const first = await postJson(`${prefix.url}/v1/chat/completions`, { model: "r", messages, max_tokens: 4, user: "alice" });
  const again = await postJson(`${prefix.url}/v1/chat/completions`, { model: "r", messages, max_tokens: 4, user: "alice" });
  const other = await postJson(`${prefix.url}/v1/chat/completions`, { model: "r", messages, max_tokens: 4, user: "bob" });
  assert.equal(first.status, 200, first.text);
  assert.ok(again.json.usage.prompt_tokens_details.cached_tokens > 0.8 * again.json.usage.prompt_tokens, again.text);
  assert.equal(again.headers.get("x-plinth-upstream"), first.headers.get("x-plinth-upstream"));
  assert.equal(other.json.usage.prompt_tokens_details.cached_tokens, 0, other.text);
});
