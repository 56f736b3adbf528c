import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { type ChildUpstream, spawnUpstream } from "../helpers/replicas.ts";
import { NO_EOG } from "../helpers/server.ts";

// The engine npm ci builds queues each decode on its decode thread straight from JavaScript
// (scripts/engine/plinth-direct-decode.h); PLINTH_DIRECT_DECODE=0 puts the stock libuv worker back.
// Two real servers, one of each, must answer every request with the same tokens: the edit moves
// where a decode is queued from, not what is decoded or sampled. (With the prebuilt engine both run
// the stock worker, and the comparison holds trivially.)
let direct: ChildUpstream;
let stock: ChildUpstream;

before(async () => {
  const model = await ensureFixtureModel();
  [direct, stock] = await Promise.all([spawnUpstream(model), spawnUpstream(model, [], { PLINTH_DIRECT_DECODE: "0" })]);
});
after(async () => {
  await Promise.all([direct?.close(), stock?.close()]);
});

type Body = Record<string, unknown>;

async function answer(url: string, body: Body): Promise<{ content: string; finish: string; completion: number }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", ...body }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const json = (await res.json()) as { choices: Array<{ message: { content: string }; finish_reason: string }>; usage: { completion_tokens: number } };
  return { content: json.choices[0].message.content, finish: json.choices[0].finish_reason, completion: json.usage.completion_tokens };
}

const ask = (content: string, extra: Body = {}): Body => ({ messages: [{ role: "user", content }], max_tokens: 32, ...extra });

test("greedy, seeded sampling with penalties, and a JSON-object grammar: the same answer with and without direct decode", async () => {
  const bodies = [
    ask("Tell me about the river.", { temperature: 0, logit_bias: NO_EOG }),
    ask("Tell me about the city.", { temperature: 1.3, seed: 11, frequency_penalty: 0.8, presence_penalty: 0.4, logit_bias: NO_EOG }),
    ask("Reply with a JSON object.", { temperature: 0.9, seed: 5, response_format: { type: "json_object" } }),
  ];
  for (const body of bodies) {
    const [a, b] = [await answer(direct.url, body), await answer(stock.url, body)];
    assert.deepEqual(a, b);
    assert.ok(a.completion > 0);
  }
});

test("four seeded streams decoded in one batch: each the same answer with and without direct decode", async () => {
  const bodies = [1, 2, 3, 4].map((seed) => ask(`Story number ${seed}.`, { temperature: 1, seed, max_tokens: 24, logit_bias: NO_EOG }));
  const together = (url: string) => Promise.all(bodies.map((b) => answer(url, b)));
  const [a, b] = [await together(direct.url), await together(stock.url)];
  assert.deepEqual(a, b);
  for (const r of a) assert.equal(r.completion, 24);
});
