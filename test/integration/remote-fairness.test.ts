import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { RemoteEngine } from "../../src/engines/remote/remote-engine.ts";
import { postJson, startTestServer, type TestServer, waitFor } from "../helpers/server.ts";

// A router's requests wait in its fair scheduler, as a local model's do: the model runs what its
// replicas run at once (what each reports), so a burst past that queues where end users take turns
// and where one request's `n` is capped, not in the pool's first-come-first-served wait for a
// replica slot (where one user's burst held every other user's request behind all of it, and the
// `n` cap was 64 per replica). The upstreams are stand-ins (small real HTTP servers) that say they
// run two requests at once and take a while over each answer, recording the order requests reach them.

interface StandIn {
  url: string;
  server: http.Server;
  /** Generation requests running now, and the most at once. */
  running: number;
  most: number;
}

/** The `content` of each generation request, in the order they reached any stand-in. */
const arrivals: string[] = [];
const standIns: StandIn[] = [];
let router: TestServer;

async function standIn(parallel: number, answerMs: number): Promise<StandIn> {
  const me: StandIn = { url: "", server: undefined as unknown as http.Server, running: 0, most: 0 };
  me.server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      if (req.url === "/v1/models") {
        res.setHeader("content-type", "application/json");
        return void res.end(JSON.stringify({ object: "list", data: [{ id: "m", object: "model", max_model_len: 4096, parallel }] }));
      }
      if (req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      arrivals.push(JSON.parse(raw).messages[0].content);
      me.running++;
      me.most = Math.max(me.most, me.running);
      res.on("close", () => me.running--);
      const chunk = (choice: object, extra: object = {}) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [choice], ...extra })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ index: 0, delta: { role: "assistant", content: "hi" }, finish_reason: null }));
      setTimeout(() => {
        res.end(chunk({ index: 0, delta: {}, finish_reason: "stop" }, { usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }) + "data: [DONE]\n\n");
      }, answerMs);
    });
  });
  await new Promise<void>((resolve) => me.server.listen(0, "127.0.0.1", resolve));
  me.url = `http://127.0.0.1:${(me.server.address() as AddressInfo).port}`;
  standIns.push(me);
  return me;
}

before(async () => {
  const a = await standIn(2, 400);
  const b = await standIn(2, 400);
  router = await startTestServer({ upstream: [{ name: "r", url: [a.url, b.url], model: "m", tokenize: false }], "health-interval": "0", "queue-timeout": "60" });
});
after(async () => {
  await router?.close();
  for (const s of standIns) {
    s.server.closeAllConnections();
    await new Promise<void>((resolve) => s.server.close(() => resolve()));
  }
});

const ask = (user: string, content: string, extra: Record<string, unknown> = {}) =>
  postJson(`${router.url}/v1/chat/completions`, { model: "r", user, messages: [{ role: "user", content }], max_tokens: 4, ...extra });

test("the router's scheduler runs what its replicas run, and says so", async () => {
  const { scheduler } = router.registry.resolve("r");
  assert.equal(scheduler.slots, 4, "two replicas of two");
  const listed = await (await fetch(`${router.url}/v1/models`)).json();
  assert.equal(listed.data.find((m: { id: string }) => m.id === "r").parallel, 4);
});

test("one user's burst through a router does not hold another user's request behind all of it", async () => {
  arrivals.length = 0;
  const { scheduler, engine } = router.registry.resolve("r");
  const remote = engine as RemoteEngine;
  // Alice: 16 at once, 4 run and 12 wait (wherever they wait). Bob comes once they all do.
  let done = 0;
  const burst = Array.from({ length: 16 }, (_, i) => ask("alice", `alice ${i}`, { stream: i % 2 === 0 }).finally(() => done++));
  await waitFor(() => scheduler.queued + scheduler.busy + remote.waitingToOpen() + done >= 16 && arrivals.length >= 4, 10_000);
  const sentAt = arrivals.length;
  const bobStarted = Date.now();
  const bob = await ask("bob", "bob");
  const bobMs = Date.now() - bobStarted;
  const answers = await Promise.all(burst);
  for (const res of [bob, ...answers]) assert.equal(res.status, 200, res.text);
  const bobAt = arrivals.indexOf("bob");
  // Bob's turn comes after the next of alice's (hers was first in turn): not after all 16 (the
  // pool's FIFO had him reach an upstream 17th, some 1.6 s after he asked; here about 0.8 s).
  assert.ok(bobAt >= 0 && bobAt <= sentAt + 2, `bob reached an upstream in place ${bobAt + 1} (${sentAt} had when he asked; he waited ${bobMs} ms): ${arrivals.join(", ")}`);
  for (const s of standIns) assert.ok(s.most <= 2, `a replica ran ${s.most} at once`);
  assert.equal(remote.pool.replicas.reduce((n, r) => n + r.failed, 0), 0);
});

test("one request's n is capped by what the replicas run, not 64 per replica: a 400 naming n", async () => {
  // 4 run at once and half of the 64-request queue: at most 36 (it was 64 × 2 + 32 = 160).
  const big = await ask("carol", "many", { n: 37 });
  assert.equal(big.status, 400, big.text);
  assert.equal(big.json.error.param, "n");
  assert.equal(big.json.error.code, "too_many_choices");
  assert.match(big.json.error.message, /at most 36/);
});
