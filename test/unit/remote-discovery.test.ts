import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { ModelSettings } from "../../src/core/engine-factory.ts";
import { remoteFactory, UpstreamNotReady } from "../../src/engines/remote/factory.ts";
import type { RemoteEngine } from "../../src/engines/remote/remote-engine.ts";
import type { RemoteSource } from "../../src/engines/remote/source.ts";
import { isLlamaServerModel } from "../../src/engines/remote/llama-server.ts";
import { modelToWire } from "../../src/dialects/openai/models.ts";

// Discovery against an upstream whose model list is hostile: its ids become parts of log lines and
// load errors (which the server prints and answers with), its numbers the model's context.

let list: unknown = { data: [] };
let props: unknown = {};
let status = 200;
let upstream: http.Server;
let url = "";

before(async () => {
  upstream = http.createServer((req, res) => {
    req.resume();
    if (req.url === "/v1/models") {
      if (status !== 200) return void res.writeHead(status, { location: "http://127.0.0.1:1/" }).end("<html>moved</html>");
      return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(list));
    }
    if (req.url === "/props") return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(props));
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});
after(async () => {
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

async function discover(urls = [url], connectTimeoutMs = 2_000, learnSlots = false): Promise<{ engine?: RemoteEngine; error?: Error; lines: string[] }> {
  const source: RemoteSource = {
    kind: "remote",
    name: "r",
    urls,
    slots: 4,
    learnSlots,
    queueTimeoutMs: 0,
    balance: "least",
    attempts: 1,
    connectTimeoutMs,
    firstTokenTimeoutMs: 2_000,
    idleTimeoutMs: 2_000,
    healthIntervalMs: 0,
    ejectAfter: 3,
    ejectMs: 1_000,
    tokenize: false,
    unsupported: [],
  };
  const lines: string[] = [];
  try {
    const engine = (await remoteFactory()({ id: "r", kind: "remote", source, settings: { parallel: 4 } as ModelSettings }, (l) => lines.push(l))) as RemoteEngine;
    await engine.dispose();
    return { engine, lines };
  } catch (err) {
    return { error: err as Error, lines };
  }
}

test("an upstream model id with line breaks and control characters is logged escaped, on one line", async () => {
  list = { data: [{ id: "m\nplinth: forged line\u001b[31m\u0000" }] };
  const { engine, lines } = await discover();
  assert.equal(engine?.upstreamModel, "m\nplinth: forged line\u001b[31m\u0000", "the id itself is used as the upstream's");
  const ready = lines.find((l) => l.includes("ready"))!;
  assert.ok(!/[\n\u001b\u0000]/.test(ready), ready);
  assert.match(ready, /'m\\u000aplinth: forged line\\u001b\[31m\\u0000'/);
});

test("a list of 100,000 models (ids of 10 KB among them) makes a short load error, not a megabyte", async () => {
  list = { data: [{ id: "x".repeat(10_000) }, ...Array.from({ length: 100_000 }, (_, i) => ({ id: `model-${i}` })), { id: { toString: 1 } }, { id: null }] };
  const { error } = await discover();
  assert.ok(error);
  assert.ok(error.message.length < 2_000, `${error.message.length} characters`);
  assert.match(error.message, /serves 100001 models .*and 99991 more/);
});

test("a context length that is not a whole number of tokens is not the model's context", async () => {
  for (const bad of [0.5, 1e300, -4096, "4096"]) {
    list = { data: [{ id: "m", max_model_len: bad }] };
    const { engine } = await discover();
    assert.equal(engine?.describe().contextSize, 0, `max_model_len ${bad}`);
  }
  list = { data: [{ id: "m", max_model_len: 4096 }] };
  assert.equal((await discover()).engine?.describe().contextSize, 4096);
});

test("a model list answered with a redirect says so (not 'a body that is not JSON')", async () => {
  status = 302;
  try {
    const { error } = await discover();
    assert.match(error!.message, /GET \/v1\/models answered 302/);
  } finally {
    status = 200;
  }
});

test("every replica is asked at once: one that never answers does not hold the model's start for the connect timeout", async () => {
  list = { data: [{ id: "m" }] };
  // Takes the connection and the request, and never answers (a host whose server hangs).
  const silent = http.createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  try {
    const started = Date.now();
    const { engine, error } = await discover([`http://127.0.0.1:${(silent.address() as AddressInfo).port}`, url], 10_000);
    assert.equal(error, undefined);
    assert.equal(engine?.upstreamModel, "m");
    // The connect timeout here is 10 s; the answering replica's list came at once.
    assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
  } finally {
    silent.closeAllConnections();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  }
});

test("each replica's slot count is what it reports: a Plinth's model list `parallel`, llama-server's /props `total_slots`", async () => {
  // A Plinth upstream: its entry for the model says how many requests it runs at once.
  list = { data: [{ id: "other", parallel: 99 }, { id: "r", parallel: 3 }] };
  let { engine, lines, error } = await discover([url], 2_000, true);
  assert.equal(error, undefined);
  assert.equal(engine!.pool.replicas[0].slots, 3);
  assert.equal(engine!.describe().parallel, 3, "a router in front of this one is told the replicas' total");
  // The core runs what the replicas run: the rest wait in its fair queue, not in the pool's.
  assert.equal(engine!.slots, 3);
  assert.match(lines.find((l) => l.includes("ready"))!, /3 slots each \(as reported; 4 where not\)/);
  // llama-server (its model list has `meta.n_ctx`): /props.
  list = { data: [{ id: "m", owned_by: "llamacpp", meta: { n_ctx: 512 } }] };
  props = { total_slots: 6 };
  ({ engine } = await discover([url], 2_000, true));
  assert.equal(engine!.pool.replicas[0].slots, 6);
  assert.equal(engine!.slots, 6, "a replica that runs more than the default is admitted in full");
  // Configured slots win: nothing is asked.
  ({ engine } = await discover([url], 2_000, false));
  assert.equal(engine!.pool.replicas[0].slots, 4);
});

test("a Plinth upstream, which answers llama-server's /props too, is still read as a Plinth: its model list's entry, never /props", async () => {
  // The entry exactly as a Plinth lists a model it runs in process.
  const served = { id: "r", status: "ready" as const, engine: { describe: () => ({ id: "r", created: 1, ownedBy: "plinth", contextSize: 4096, parallel: 3, reasoning: false }) } };
  list = { object: "list", data: [modelToWire(served as never)] };
  assert.equal(isLlamaServerModel((list as { data: unknown[] }).data[0]), false);
  // What its /props says (another slot count, no vision) must change nothing here.
  props = { total_slots: 9, modalities: { vision: false, audio: false, video: false }, default_generation_settings: { n_ctx: 4096, params: {} }, model_path: "r" };
  const { engine, error } = await discover([url], 2_000, true);
  assert.equal(error, undefined);
  assert.equal((engine as unknown as { info: { flavor?: string } }).info.flavor, "openai");
  assert.equal(engine!.pool.replicas[0].slots, 3, "slots from the model list's parallel, not /props' total_slots");
  assert.equal(engine!.describe().contextSize, 4096);
});

test("a reported slot count that is not a whole number from 1 up is not believed; a huge one is capped", async () => {
  for (const bad of [0, -2, 2.5, "8", null, 1e300, Number.MAX_SAFE_INTEGER + 2]) {
    list = { data: [{ id: "m", parallel: bad }] };
    const { engine } = await discover([url], 2_000, true);
    assert.equal(engine!.pool.replicas[0].slots, 4, `parallel ${bad}`);
  }
  list = { data: [{ id: "m", parallel: 1_000_000 }] };
  assert.equal((await discover([url], 2_000, true)).engine!.pool.replicas[0].slots, 4096);
});

test("a Plinth upstream still loading the model is not ready here either: the model waits instead of starting without its context and slots", async () => {
  list = { data: [{ id: "r", status: "loading" }] };
  const { error } = await discover([url], 2_000, true);
  assert.ok(error instanceof UpstreamNotReady, String(error));
  list = { data: [{ id: "r", status: "ready", parallel: 2, max_model_len: 512 }] };
  const { engine } = await discover([url], 2_000, true);
  assert.equal(engine!.pool.replicas[0].slots, 2);
  assert.equal(engine!.describe().contextSize, 512);
});
