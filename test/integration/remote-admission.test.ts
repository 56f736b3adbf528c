import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { recordingUpstream, type RecordingUpstream } from "../helpers/recording-upstream.ts";
import { parsePrometheus, sum } from "../helpers/prometheus.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// How a router orders its own admission (key token limits, the queue) and the upstream's work: a
// request is counted first where its key needs the count, admitted, and only then sent upstream to
// generate, with the client's abort reaching the upstream request. Recording upstreams (whose
// /tokenize counts UTF-8 bytes, see recording-upstream.ts) show what the router sent.
const ADMIN = "admin-secret-for-admission-tests";
const cleanup: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of cleanup.reverse()) await c();
});

async function upstream(opts: Parameters<typeof recordingUpstream>[1] = {}): Promise<RecordingUpstream> {
  const up = await recordingUpstream("rec", { contextSize: 4096, ...opts });
  cleanup.push(() => up.close());
  return up;
}
async function server(settings: Record<string, unknown>): Promise<TestServer> {
  const s = await startTestServer({ "health-interval": "0", ...settings });
  cleanup.push(() => s.close());
  return s;
}
async function limitedKey(s: TestServer, limits: Record<string, unknown>): Promise<Record<string, string>> {
  const r = await postJson(`${s.url}/admin/keys`, { name: "limited", ...limits }, { authorization: `Bearer ${ADMIN}` });
  assert.equal(r.status, 201, r.text);
  return { authorization: `Bearer ${r.json.key}` };
}
const chat = (s: TestServer, content: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  postJson(`${s.url}/v1/chat/completions`, { model: "rec", messages: [{ role: "user", content }], ...extra }, headers);

test("a key's token-per-minute limit counts a remote model's prompt: the request whose prompt would pass it is refused", async () => {
  const up = await upstream();
  const s = await server({ upstream: [{ name: "rec", url: [up.url] }], "admin-key": ADMIN });
  const key = await limitedKey(s, { tpm: 600 });
  // 2 + 500 tokens fit the 600; the upstream's usage (47) is what stays booked.
  const small = await chat(s, "hi", { max_tokens: 500 }, key);
  assert.equal(small.status, 200, small.text);
  // 200 + 500 do not, though the prompt's bound alone would have skipped the count.
  const tokenizeBefore = up.tokenizeBodies.length;
  const big = await chat(s, "x".repeat(200), { max_tokens: 500 }, key);
  assert.equal(big.status, 429, big.text);
  assert.match(big.json.error.message, /needs up to 700 tokens/);
  assert.equal(up.tokenizeBodies.length, tokenizeBefore + 1, "the prompt was counted for the key's limit");
});

test("a request refused by its key's limits never reaches the upstream's generation", async () => {
  const up = await upstream();
  const s = await server({ upstream: [{ name: "rec", url: [up.url] }], "admin-key": ADMIN });
  const key = await limitedKey(s, { tpm: 100 });
  for (const stream of [false, true]) {
    const r = await chat(s, "hello", { max_tokens: 200, stream }, key);
    assert.equal(r.status, 429, r.text);
  }
  const spent = await limitedKey(s, { budget_tokens: 50 });
  assert.equal((await chat(s, "hello", { max_tokens: 100 }, spent)).status, 429);
  assert.deepEqual(up.bodies, [], "no chat request went upstream");
});

test("a client that leaves before the first token closes the upstream request at once: no failure, no failover", async () => {
  const first = await upstream({ hold: true });
  const second = await upstream({ hold: true });
  const s = await server({ upstream: [{ name: "rec", url: [first.url, second.url] }], "first-token-timeout": "20", balance: "round-robin" });
  const abort = new AbortController();
  const sent = fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "rec", messages: [{ role: "user", content: "hello" }], max_tokens: 8, stream: true }),
    signal: abort.signal,
  }).catch((err: Error) => err);
  const reached = () => first.bodies.length + second.bodies.length;
  const deadline = Date.now() + 5_000;
  while (reached() === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.equal(reached(), 1, "the request reached one replica");
  const abortedAt = Date.now();
  abort.abort();
  assert.equal(((await sent) as Error).name, "AbortError");
  const closed = () => first.chatClosedAt.length + second.chatClosedAt.length;
  while (closed() === 0 && Date.now() - abortedAt < 5_000) await new Promise((r) => setTimeout(r, 20));
  assert.equal(closed(), 1, "the upstream request was closed");
  const closedAt = Math.max(...first.chatClosedAt, ...second.chatClosedAt);
  assert.ok(closedAt - abortedAt < 2_000, `closed ${closedAt - abortedAt} ms after the abort (first-token timeout 20 s)`);
  // Nothing was tried on the other replica, and neither counts a failure.
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(reached(), 1, "no failover for a client that is gone");
  const metrics = parsePrometheus(await (await fetch(`${s.url}/metrics`)).text());
  assert.equal(sum(metrics, "plinth_upstream_replica_requests_total", { result: "failed" }), 0);
});

test("input_tokens through a router counts the prompt as the upstream does and generates nothing", async () => {
  const direct = await server({ "ctx-size": "512" });
  const router = await server({ upstream: [{ name: "rec", url: [direct.url], model: "tiny" }] });
  const body = { input: [{ role: "user", content: "Tell me about the river, please." }], instructions: "Be brief." };
  const want = await postJson(`${direct.url}/v1/responses/input_tokens`, { model: "tiny", ...body });
  assert.equal(want.status, 200, want.text);
  assert.ok(want.json.input_tokens > 5, want.text);
  const got = await postJson(`${router.url}/v1/responses/input_tokens`, { model: "rec", ...body });
  assert.equal(got.status, 200, got.text);
  assert.equal(got.json.input_tokens, want.json.input_tokens);

  const up = await upstream();
  const counting = await server({ upstream: [{ name: "rec", url: [up.url] }] });
  const counted = await postJson(`${counting.url}/v1/responses/input_tokens`, { model: "rec", input: "hello there" });
  assert.equal(counted.status, 200, counted.text);
  assert.equal(counted.json.input_tokens, "hello there".length);
  assert.deepEqual(up.bodies, [], "no generation went upstream");
});
