import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { RemoteEngine } from "../../src/engines/remote/remote-engine.ts";
import { sseData } from "../helpers/databricks.ts";
import { postJson, startTestServer, type TestServer, waitFor } from "../helpers/server.ts";

// What a router answers while replicas are ejected, and how soon it takes them back. The upstreams
// are stand-ins (small real HTTP servers speaking just enough of OpenAI's chat API), each answering
// generation as its `mode` says.

type Mode = "ok" | "500" | "429" | "down" | "hello-stall";

interface StandIn {
  url: string;
  mode: Mode;
  /** What its model list says it runs at once. */
  parallel: number;
  server: http.Server;
  /** Generation requests answered 200 (whatever came after). */
  served: number;
}

const standIns: StandIn[] = [];
const routers: TestServer[] = [];

async function standIn(mode: Mode, parallel = 4): Promise<StandIn> {
  const me: StandIn = { url: "", mode, parallel, server: undefined as unknown as http.Server, served: 0 };
  const chunk = (delta: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  me.server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
        res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));
      if (req.url === "/v1/models") return json(200, { object: "list", data: [{ id: "m", object: "model", max_model_len: 4096, parallel: me.parallel }] });
      if (req.url === "/health") return me.mode === "down" ? json(503, { status: "down" }) : json(200, { status: "ok" });
      if (req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      if (me.mode === "500" || me.mode === "down") return json(500, { error: { message: "replica on fire", type: "server_error" } });
      if (me.mode === "429") return json(429, { error: { message: "slow down", type: "rate_limit_error" } }, { "retry-after": "7" });
      me.served++;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: "" }));
      res.write(chunk({ content: "Hello" }));
      // Then nothing more, for as long as the router keeps the connection.
      if (me.mode === "hello-stall") return;
      res.write(chunk({}, "stop"));
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise<void>((resolve) => me.server.listen(0, "127.0.0.1", resolve));
  me.url = `http://127.0.0.1:${(me.server.address() as AddressInfo).port}`;
  standIns.push(me);
  return me;
}

let limited: StandIn;
let failing: StandIn;
let stalled: StandIn;
let watched: StandIn;
/** Runs one request at once; its health checks fail while it is "down". */
let single: StandIn;
/** No active checks (only requests say how a replica does), --eject-after 3, --eject-time 5. */
let passive: TestServer;
/** Active checks every 0.2 s, and a long ejection: only a passing check can bring a replica back soon. */
let active: TestServer;
/** The same checks, in front of `single` under SpAk's model name. */
let checked: TestServer;

before(async () => {
  limited = await standIn("429");
  failing = await standIn("500");
  stalled = await standIn("hello-stall");
  watched = await standIn("ok");
  single = await standIn("hello-stall", 1);
  passive = await startTestServer({
    upstream: [
      { name: "m429", url: [limited.url], model: "m", tokenize: false },
      { name: "m500", url: [failing.url], model: "m", tokenize: false },
      { name: "SpAk-Aster-V1-MOE", url: [stalled.url], model: "m", tokenize: false, "idle-timeout": 1 },
      { name: "stalled", url: [stalled.url], model: "m", tokenize: false, "idle-timeout": 1 },
    ],
    "health-interval": "0",
    "eject-after": "3",
    "eject-time": "5",
  });
  routers.push(passive);
  active = await startTestServer({
    upstream: [{ name: "watched", url: [watched.url], model: "m", tokenize: false }],
    "health-interval": "0.2",
    "eject-after": "2",
    "eject-time": "30",
  });
  routers.push(active);
  checked = await startTestServer({
    upstream: [{ name: "SpAk-Aster-V1-MOE", url: [single.url], model: "m", tokenize: false }],
    "health-interval": "0.2",
    "eject-after": "2",
    "eject-time": "30",
  });
  routers.push(checked);
});
after(async () => {
  for (const r of routers) await r.close();
  for (const s of standIns) {
    s.server.closeAllConnections();
    await new Promise<void>((resolve) => s.server.close(() => resolve()));
  }
});

const ask = (r: TestServer, model: string, extra: Record<string, unknown> = {}) =>
  postJson(`${r.url}/v1/chat/completions`, { model, messages: [{ role: "user", content: "hi" }], max_tokens: 5, ...extra });
const replicaOf = (r: TestServer, model: string) => (r.registry.resolve(model).engine as RemoteEngine).pool.replicas[0];

test("a pool ejected for its 429s answers 429 with the time until it is tried again, not a 503 with Retry-After: 2", async () => {
  for (let i = 0; i < 3; i++) {
    const res = await ask(passive, "m429");
    assert.equal(res.status, 429, res.text);
    assert.equal(res.headers.get("retry-after"), "7");
  }
  assert.equal(replicaOf(passive, "m429").state, "ejected");
  for (let i = 0; i < 3; i++) {
    const res = await ask(passive, "m429", { stream: i === 1 });
    assert.equal(res.status, 429, res.text);
    assert.equal(res.json.error.code, "upstream_overloaded");
    // Tried again no sooner than the upstream asked (7 s), though --eject-time is 5 s.
    const after = Number(res.headers.get("retry-after"));
    assert.ok(after >= 6 && after <= 7, `Retry-After: ${after}`);
  }
});

test("a pool ejected for its 500s answers 503 with Retry-After the rest of the ejection, not 2 s", async () => {
  for (let i = 0; i < 3; i++) assert.equal((await ask(passive, "m500")).status, 503);
  assert.equal(replicaOf(passive, "m500").state, "ejected");
  const res = await ask(passive, "m500");
  assert.equal(res.status, 503, res.text);
  assert.equal(res.json.error.code, "upstream_unavailable");
  const after = Number(res.headers.get("retry-after"));
  assert.ok(after >= 4 && after <= 5, `Retry-After: ${after}`);
});

test("a replica ejected for 30 s is back as soon as its health check passes again", async () => {
  const replica = replicaOf(active, "watched");
  watched.mode = "down";
  await waitFor(() => replica.state === "ejected", 5_000);
  assert.equal((await ask(active, "watched")).status, 503);
  watched.mode = "ok";
  const back = Date.now();
  // The next passing check (0.2 s) makes it half-open; the next request is its trial, and serves.
  await waitFor(() => replica.state !== "ejected", 5_000);
  const res = await ask(active, "watched");
  assert.equal(res.status, 200, res.text);
  assert.ok(Date.now() - back < 3_000, `back after ${Date.now() - back} ms`);
  assert.equal(replica.state, "up");
});

test("an upstream that stalls after its first words is a failure, not a lack of capacity: SpAk answers it as the OpenAI dialect does, streamed or not", async () => {
  const body = { model: "SpAk-Aster-V1-MOE", messages: [{ role: "user", content: "hi" }], max_tokens: 5, thinking: { type: "disabled" } };
  const whole = await postJson(`${passive.url}/chat/completions`, body);
  // It was a 200 with content "" and finish_reason insufficient_system_resource (the text dropped).
  assert.equal(whole.status, 503, whole.text);
  assert.equal(whole.json.error.code, "upstream_unavailable", whole.text);
  assert.doesNotMatch(whole.text, /insufficient_system_resource/);
  const streamed = await postJson(`${passive.url}/chat/completions`, { ...body, stream: true });
  const events = sseData(streamed.text).filter((e) => e !== "[DONE]");
  assert.doesNotMatch(streamed.text, /insufficient_system_resource/);
  assert.equal(events.at(-1).error?.code, "upstream_error", streamed.text);
  const openai = await ask(passive, "stalled");
  assert.equal(openai.status, 503, openai.text);
  assert.equal(openai.json.error.code, "upstream_unavailable");
});

test("a pool ejected by failed health checks is down, not overloaded: a request that waited for it is SpAk's 503, not an empty 200 with insufficient_system_resource", async () => {
  const model = "SpAk-Aster-V1-MOE";
  const { scheduler } = checked.registry.resolve(model);
  const replica = replicaOf(checked, model);
  for (const stream of [false, true]) {
    single.mode = "hello-stall";
    await waitFor(() => replica.state === "up", 5_000);
    // A stream that holds the replica's one slot (its upstream says "Hello" and nothing more) …
    const holder = new AbortController();
    const held = await fetch(`${checked.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hold" }], max_tokens: 50, stream: true }),
      signal: holder.signal,
    });
    await held.body!.getReader().read();
    // … a request that waits behind it in the model's queue …
    const waiting = postJson(`${checked.url}/chat/completions`, {
      model,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 5,
      thinking: { type: "disabled" },
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
    await waitFor(() => scheduler.queued === 1, 5_000);
    // … the upstream goes down, its checks eject it, and the stream ahead leaves.
    single.mode = "down";
    await waitFor(() => replica.state === "ejected", 5_000);
    holder.abort();
    const res = await waiting;
    // It was a 200 with content "" and finish_reason insufficient_system_resource, as if the upstream
    // were busy; a single upstream that is down is a 503 upstream_unavailable in this dialect.
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json.error.code, "upstream_unavailable", res.text);
    assert.doesNotMatch(res.text, /insufficient_system_resource/);
    assert.match(res.json.error.message, /failed its health check: \/health answered 503/);
    // When to ask again: the next check, which may make the replica half-open (every 0.2 s).
    assert.equal(res.headers.get("retry-after"), "1");
  }
  single.mode = "hello-stall";
});
