import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { RemoteEngine } from "../../src/engines/remote/remote-engine.ts";
import { faultyReplica, spawnUpstream, type FaultyReplica } from "../helpers/replicas.ts";
import { NO_EOG, postJson, startTestServer, type TestServer, waitFor } from "../helpers/server.ts";
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

// Real upstreams (two in-process Plinth servers), faulty replicas in front of them (small HTTP
// servers that break generation on demand), and a router per test configured with --upstream.
let a: TestServer;
let b: TestServer;
const cleanup: Array<() => Promise<void>> = [];

before(async () => {
  a = await startTestServer();
  b = await startTestServer();
});
after(async () => {
  for (const c of cleanup.reverse()) await c();
  await a?.close();
  await b?.close();
});

async function router(urls: string[], settings: Record<string, unknown> = {}): Promise<TestServer> {
  const r = await startTestServer({ upstream: [{ name: "r", url: urls, model: "tiny" }], "health-interval": "0", ...settings });
  cleanup.push(() => r.close());
  return r;
}
async function faulty(mode: FaultyReplica["mode"], target = a.url): Promise<FaultyReplica> {
  const f = await faultyReplica(target, mode);
  cleanup.push(() => f.close());
  return f;
}
const pool = (r: TestServer) => (r.registry.resolve("r").engine as RemoteEngine).pool;
const replicaOf = (r: TestServer, url: string) => pool(r).replicas.find((x) => x.name === url)!;
const ask = (r: TestServer, extra: Record<string, unknown> = {}) =>
  postJson(`${r.url}/v1/chat/completions`, { model: "r", messages: [{ role: "user", content: "Tell me about the river." }], max_tokens: 6, logit_bias: NO_EOG, ...extra });

test("a replica that answers 500 is failed over and ejected: every request succeeds, and it gets no more traffic", async () => {
  const bad = await faulty("500");
  const r = await router([a.url, bad.url], { balance: "round-robin", "eject-after": "2", "eject-time": "60" });
  for (let i = 0; i < 8; i++) {
    const res = await ask(r);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.choices[0].finish_reason, "length");
    // Even a request that went to the bad replica first names only the one that served it.
    assert.equal(res.headers.get("x-plinth-upstream"), a.url);
  }
  assert.equal(replicaOf(r, bad.url).state, "ejected");
  const hits = bad.hits["500"];
  assert.ok(hits >= 1 && hits <= 2, `bad replica saw ${hits} generation requests`);
  for (let i = 0; i < 4; i++) assert.equal((await ask(r)).status, 200);
  assert.equal(bad.hits["500"], hits, "an ejected replica gets no traffic");
  const metrics = await (await fetch(`${r.url}/metrics`)).text();
  assert.match(metrics, new RegExp(`plinth_upstream_replica_state\\{model_name="r",replica="${bad.url}",state="ejected"\\} 1`));
  assert.match(metrics, new RegExp(`plinth_upstream_replica_requests_total\\{model_name="r",replica="${a.url}",result="served"\\} 12`));
});

test("malformed SSE and a first-token timeout fail over before any output; the client sees a clean answer", async () => {
  const broken = await faulty("malformed");
  const stalled = await faulty("stall");
  const r = await router([broken.url, stalled.url, b.url], { balance: "round-robin", "first-token-timeout": "1", "eject-after": "5" });
  for (let i = 0; i < 3; i++) {
    const res = await ask(r, { stream: true });
    assert.equal(res.status, 200);
    // The stream's head is sent after failover, so it names the replica that really served.
    assert.equal(res.headers.get("x-plinth-upstream"), b.url);
    assert.ok(!res.text.includes('"error"'), res.text);
    assert.ok(res.text.trimEnd().endsWith("data: [DONE]"));
    assert.match(res.text, /"finish_reason":"length"/);
  }
  const json = await ask(r);
  assert.equal(json.status, 200, json.text);
  assert.equal(json.headers.get("x-plinth-upstream"), b.url);
  // The Responses stream announces itself before any output, yet also names the serving replica.
  const rsp = await fetch(`${r.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "r", input: "Tell me about the river.", max_output_tokens: 6, stream: true, store: false }),
  });
  assert.equal(rsp.headers.get("x-plinth-upstream"), b.url);
  const rspText = await rsp.text();
  assert.match(rspText, /response\.(completed|incomplete)/);
  assert.ok(!rspText.includes("response.failed"), rspText);
  assert.ok((broken.hits.malformed ?? 0) >= 1, "the malformed replica was tried");
  assert.ok((stalled.hits.stall ?? 0) >= 1, "the stalled replica was tried");
  assert.ok(replicaOf(r, broken.url).failed >= 1 && replicaOf(r, stalled.url).failed >= 1);
});

test("an upstream event that never ends fails over at once, and the router keeps serving meanwhile", async () => {
  const endless = await faulty("endless");
  const r = await router([endless.url, b.url], { balance: "round-robin", "eject-after": "10" });
  const started = Date.now();
  const answers = Promise.all([ask(r, { stream: true }), ask(r, { stream: true })]);
  // While it reads, other requests get answers: the reader does not rescan the event on every read.
  const models = await fetch(`${r.url}/v1/models`);
  assert.equal(models.status, 200);
  for (const res of await answers) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get("x-plinth-upstream"), b.url);
    assert.ok(!res.text.includes('"error"'), res.text.slice(0, 400));
    assert.ok(res.text.trimEnd().endsWith("data: [DONE]"));
  }
  assert.ok((endless.hits.endless ?? 0) >= 1, "the endless replica was tried");
  assert.ok(replicaOf(r, endless.url).failed >= 1);
  // Refused after its first 16 Mi characters, not at the first-token timeout (120 s by default).
  assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
});

test("a count whose body drips in is given up after the idle timeout, not waited for", async () => {
  const endless = await faulty("endless");
  const r = await router([endless.url], { "idle-timeout": "1" });
  // Too long to fit surely without a count, so the router asks the replica's /tokenize.
  const started = Date.now();
  const res = await ask(r, { messages: [{ role: "user", content: "word ".repeat(4_000) }] });
  assert.equal(res.status, 503, res.text);
  assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
});

test("a health answer whose body never ends is cut, not read on one more socket each interval", async () => {
  const endless = await faulty("endless");
  const r = await router([endless.url], { "health-interval": "0.1" });
  await new Promise((resolve) => setTimeout(resolve, 4_000));
  // Forty checks in four seconds; each body is cut two seconds after its head.
  const open = await endless.connections();
  assert.ok(open <= 30, `${open} connections open to the replica`);
  assert.equal(replicaOf(r, endless.url).state, "up");
});

test("an upstream's own tool-call numbers and impossible token counts do not reach the client or the ledger", async () => {
  const odd = await faulty("odd");
  const r = await router([odd.url]);
  const tools = [{ type: "function", function: { name: "first", parameters: { type: "object" } } }, { type: "function", function: { name: "second", parameters: { type: "object" } } }];
  const started = Date.now();
  const json = await ask(r, { tools });
  assert.equal(json.status, 200, json.text);
  const calls = json.json.choices[0].message.tool_calls;
  assert.deepEqual(calls.map((c: any) => c.function.name), ["first", "second"]);
  const usage = json.json.usage;
  // Counts that are not counts are left out, as if the upstream had not sent them.
  assert.ok(Number.isSafeInteger(usage.prompt_tokens) && usage.prompt_tokens >= 0 && usage.prompt_tokens < 1e9, JSON.stringify(usage));
  assert.ok(Number.isSafeInteger(usage.completion_tokens) && usage.completion_tokens >= 0, JSON.stringify(usage));
  assert.equal(usage.prompt_tokens_details.cached_tokens, 0);
  const s = await ask(r, { tools, stream: true });
  assert.equal(s.status, 200);
  const indices = s.text.split("\n\n").filter((e) => e.startsWith("data: {")).flatMap((e) => JSON.parse(e.slice(6)).choices?.[0]?.delta?.tool_calls ?? []).map((c: any) => c.index);
  assert.deepEqual([...new Set(indices)], [0, 1]);
  // An embedding's count sizes the array that stands for its tokens: a billion of them was 8 GB.
  const emb = await fetch(`${r.url}/v1/embeddings`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "r", input: "a few words" }) });
  const embJson = (await emb.json()) as any;
  assert.equal(emb.status, 200, JSON.stringify(embJson));
  assert.ok(embJson.usage.prompt_tokens >= 1 && embJson.usage.prompt_tokens <= Buffer.byteLength("a few words") + 16, JSON.stringify(embJson.usage));
  // A billion-long array of calls took the router's thread for longer than the client waited.
  assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
});

test("a stream cut after its first token ends in the dialect's mid-stream error form; a JSON answer is redone elsewhere", async () => {
  const cut = await faulty("midstream");
  const r = await router([cut.url]);
  const s = await ask(r, { stream: true });
  assert.equal(s.status, 200);
  const events = s.text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)));
  assert.ok(events.some((e) => e.choices?.[0]?.delta?.content === "Hello"), s.text);
  const last = events.at(-1);
  assert.equal(last.error.code, "upstream_error", s.text);
  // Databricks chat and completions streams (a pay-per-token prompt runs as chat): the envelope as
  // the last data event, then [DONE], as every stream of that dialect ends.
  for (const body of [{ messages: [{ role: "user", content: "Tell me about the river." }] }, { prompt: "Tell me about the river." }]) {
    const d = await postJson(`${r.url}/serving-endpoints/r/invocations`, { ...body, max_tokens: 6, stream: true });
    assert.equal(d.status, 200, d.text);
    const data = d.text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
    assert.equal(data.at(-1), "[DONE]", d.text);
    const failure = JSON.parse(data.at(-2)!);
    assert.equal(failure.error_code, "INTERNAL_ERROR", d.text);
    assert.match(failure.message, /failed mid-answer/);
  }
  // A JSON answer is held back until it is whole, so a cut one is never half-sent: with no other
  // replica it is a 503; with one, it is redone there and the client sees a clean answer.
  const j = await ask(r);
  assert.equal(j.status, 503, j.text);
  assert.equal(j.json.error.code, "upstream_unavailable");
  const r2 = await router([cut.url, a.url], { balance: "round-robin", "eject-after": "10" });
  const cutBefore = cut.hits.midstream;
  for (let i = 0; i < 2; i++) {
    const ok = await ask(r2);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.choices[0].finish_reason, "length");
    assert.equal(ok.headers.get("x-plinth-upstream"), a.url);
  }
  assert.ok(cut.hits.midstream > cutBefore, "the cutting replica was tried first and cut the answer");
});

test("an answer cut mid-stream is booked with its prompt, counted by the upstream's tokenizer, and the tokens the client got (SpAk, Konan, OpenAI; the ledger)", async () => {
  const cut = await faulty("ok");
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-cut-usage-"));
  cleanup.push(async () => rmSync(dataDir, { recursive: true, force: true }));
  const r = await startTestServer({
    upstream: [
      { name: "r", url: [cut.url], model: "tiny" },
      { name: "SpAk-Aster-V1-MOE", url: [cut.url], model: "tiny" },
    ],
    "health-interval": "0",
    "eject-after": "100",
    "data-dir": dataDir,
  });
  cleanup.push(() => r.close());
  const messages = [{ role: "user", content: "Tell me about the river." }];
  // What the upstream counts for this prompt when it finishes (the router does not count a prompt
  // that surely fits: it takes the upstream's usage).
  const whole = await postJson(`${r.url}/v1/chat/completions`, { model: "r", messages, max_tokens: 6 });
  assert.equal(whole.status, 200, whole.text);
  const prompt = whole.json.usage.prompt_tokens;
  assert.ok(prompt > 0);
  // Now the upstream sends "Hello" (one delta) and its connection drops: no usage ever comes.
  cut.mode = "midstream";
  const post = async (route: string, body: unknown, id: string) => {
    const res = await fetch(`${r.url}${route}`, { method: "POST", headers: { "content-type": "application/json", "x-request-id": id }, body: JSON.stringify(body) });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.match(text, /Hello/);
    return text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)));
  };
  const spak = await post("/chat/completions", { model: "SpAk-Aster-V1-MOE", messages, max_tokens: 6, thinking: { type: "disabled" }, stream: true, stream_options: { include_usage: true } }, "cut-spak");
  assert.equal(spak.at(-2).error.code, "upstream_error");
  // It was prompt_tokens 0: the router had skipped the count and relied on the usage that never came.
  assert.equal(spak.at(-1).usage.prompt_tokens, prompt, JSON.stringify(spak.at(-1)));
  assert.equal(spak.at(-1).usage.completion_tokens, 1);
  assert.equal(spak.at(-1).usage.prompt_cache_miss_tokens, prompt);
  const konan = await post("/v3/chat/completions", { model: "r", messages, max_tokens: 6, stream: true }, "cut-konan");
  assert.equal(konan.at(-1).choices[0].finish_reason, "error");
  assert.equal(konan.at(-1).usage.prompt_tokens, prompt, JSON.stringify(konan.at(-1)));
  assert.equal(konan.at(-1).usage.completion_tokens, 1);
  const openai = await post("/v1/chat/completions", { model: "r", messages, max_tokens: 6, stream: true }, "cut-openai");
  assert.equal(openai.at(-1).error.code, "upstream_error");
  // The ledger books each with the same numbers the client was told.
  const ids = ["cut-spak", "cut-konan", "cut-openai"];
  const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true });
  try {
    const rows = () => db.prepare(`SELECT request_id, prompt_tokens, completion_tokens FROM usage_ledger WHERE request_id IN (${ids.map(() => "?").join(",")})`).all(...ids) as any[];
    await waitFor(() => rows().length === ids.length, 5_000);
    for (const row of rows()) assert.deepEqual({ ...row }, { request_id: row.request_id, prompt_tokens: prompt, completion_tokens: 1 });
  } finally {
    db.close();
  }
});

test("ejection after consecutive failures, re-admission through a half-open trial and through active health checks", async () => {
  const flaky = await faulty("500");
  const r = await router([flaky.url, a.url], { balance: "least", "eject-after": "2", "eject-time": "0.4" });
  for (let i = 0; i < 4; i++) assert.equal((await ask(r)).status, 200);
  const replica = replicaOf(r, flaky.url);
  assert.equal(replica.state, "ejected");
  flaky.mode = "ok";
  await new Promise((res) => setTimeout(res, 500));
  // Due for a trial: the next requests try it, it succeeds, and it is back.
  for (let i = 0; i < 4; i++) assert.equal((await ask(r)).status, 200);
  assert.equal(replica.state, "up");
  assert.ok((flaky.hits.ok ?? 0) >= 1, "the re-admitted replica served");

  // Active checks eject a replica whose /health fails with no traffic at all, and bring it back.
  const watched = await faulty("ok");
  const r2 = await router([watched.url, a.url], { "health-interval": "0.1", "eject-after": "2", "eject-time": "0.2" });
  watched.mode = "down";
  const w = replicaOf(r2, watched.url);
  for (let i = 0; i < 50 && w.state !== "ejected"; i++) await new Promise((res) => setTimeout(res, 50));
  assert.equal(w.state, "ejected");
  watched.mode = "ok";
  for (let i = 0; i < 50 && (w.state as string) !== "up"; i++) await new Promise((res) => setTimeout(res, 50));
  assert.equal(w.state as string, "up");
});

test("a request that needs a token count is the trial that re-admits a lone replica (the count does not wait for the trial's slot)", async () => {
  const lone = await faulty("500");
  const r = await router([lone.url], { "eject-after": "2", "eject-time": "0.3" });
  for (let i = 0; i < 2; i++) assert.equal((await ask(r)).status, 503);
  const replica = replicaOf(r, lone.url);
  assert.equal(replica.state, "ejected");
  lone.mode = "ok";
  await new Promise((res) => setTimeout(res, 400));
  // Tools make the prompt's size unknown to the router's bound, so it asks the replica's /tokenize
  // beside the generation, which holds the half-open replica's one slot. The count used to wait for
  // that slot, and the trial for the count: the model hung for good.
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { q: { type: "string" } } } } }];
  const answer = await Promise.race([ask(r, { tools }), new Promise<"hung">((res) => setTimeout(() => res("hung"), 15_000))]);
  assert.notEqual(answer, "hung", "the request hung");
  assert.equal((answer as Awaited<ReturnType<typeof ask>>).status, 200);
  assert.equal(replica.state, "up");
  assert.equal((await ask(r)).status, 200);
});

test("kill -9 of a replica during 200 concurrent requests, half streamed: none fails that had not started streaming", async () => {
  // The child decodes 4 requests at once; the rest of what the router sent it waits in its queue.
  const child = await spawnUpstream(a.modelPath, ["--parallel", "4"]);
  cleanup.push(() => child.close());
  // One request straight to the child first: a cold process on a busy machine can be slow enough
  // on its first answer for the router to count a failure and eject it before the kill.
  const warm = await fetch(`${child.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "warm up" }], max_tokens: 2 }),
  });
  assert.equal(warm.status, 200);
  // Ejected after two failures: the kill makes many at once; one slow answer before it does not.
  // Slots set: a replica that does not report its own (vLLM, SGLang) is sent up to 64 requests,
  // which queue in it; what it held there when killed must fail over too.
  const r = await router([child.url, a.url, b.url], { balance: "round-robin", "eject-after": "2", "eject-time": "30", "upstream-slots": "64" });
  const dead = replicaOf(r, child.url);
  // The child is stopped while the requests go out, so its share piles up as it would on a replica
  // slower than its traffic: on its own it answers these 8-token requests as fast as the test can
  // send them, and then holds nothing to fail over.
  child.child.kill("SIGSTOP");
  const TOTAL = 200;
  let streaming = 0;
  const requests = Array.from({ length: TOTAL }, async (_, i) => {
    const stream = i % 2 === 0;
    const res = await fetch(`${r.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "r", messages: [{ role: "user", content: `Story number ${i} about the king.` }], max_tokens: 8, logit_bias: NO_EOG, stream, seed: i }),
    });
    let text = "";
    let started = false;
    const decoder = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      if (stream && !started && /"delta":\{"content":"/.test(text)) {
        started = true;
        streaming++;
      }
    }
    return { stream, status: res.status, text };
  });
  // Once streams are under way and the child holds more requests than it decodes, it resumes and
  // takes up what it holds (some of its own streams may start), then is killed.
  for (let t = 0; t < 1000 && !(streaming > 0 && dead.outstanding > 8); t++) await new Promise((res) => setTimeout(res, 10));
  child.child.kill("SIGCONT");
  await new Promise((res) => setTimeout(res, 30));
  const heldAtKill = dead.outstanding;
  child.child.kill("SIGKILL");
  const results = await Promise.all(requests);

  assert.ok(heldAtKill > 4, `the killed replica held ${heldAtKill} requests`);
  const failed = results.filter((x) => x.status !== 200 || x.text.includes('"error"') || (x.stream && !x.text.trimEnd().endsWith("data: [DONE]")));
  // Only streams the child was decoding can have started; each failure is one of those, ended in
  // OpenAI's mid-stream error form after its first tokens. Everything it held in its queue, every
  // JSON answer (held back until whole, so redone elsewhere) and everything sent to it after it
  // died failed over and finished.
  assert.ok(failed.length <= 4, `${failed.length} failed: ${failed.map((x) => x.text.slice(-200)).join(" | ")}`);
  for (const x of failed) {
    assert.ok(x.stream, `a JSON answer failed: ${x.status} ${x.text}`);
    assert.equal(x.status, 200);
    const errorAt = x.text.indexOf('"error"');
    assert.ok(errorAt > 0 && /"delta":\{"content":"/.test(x.text.slice(0, errorAt)), x.text.slice(-400));
  }
  const ok = results.filter((x) => !failed.includes(x));
  assert.equal(ok.length, TOTAL - failed.length);
  for (const x of ok) {
    if (x.stream) assert.match(x.text, /"finish_reason":"length"/);
    else assert.equal(JSON.parse(x.text).choices[0].finish_reason, "length");
  }
  assert.equal(dead.state, "ejected");
  assert.ok(dead.failed >= 1);
});

test("a replica is sent only as many requests as it reports running at once: the rest wait in the router, where waiting is no replica failure", async () => {
  const u = await startTestServer({ parallel: "1" });
  cleanup.push(() => u.close());
  // One-second timeouts: a request waiting in the replica's own queue would get no response head
  // (and no first token) for longer than that, and count as the replica's failure.
  const r = await router([u.url], { "connect-timeout": "1", "first-token-timeout": "1", "eject-after": "1" });
  const replica = replicaOf(r, u.url);
  assert.equal(replica.slots, 1, "read from the upstream's model list");
  const listed = await (await fetch(`${r.url}/v1/models`)).json();
  assert.equal(listed.data.find((m: { id: string }) => m.id === "r").parallel, 1);
  const { engine, scheduler } = r.registry.resolve("r");
  const remote = engine as RemoteEngine;
  assert.equal(scheduler.slots, 1, "the router's scheduler runs what the replica runs");
  let most = 0;
  let waited = 0;
  const sampler = setInterval(() => {
    most = Math.max(most, replica.outstanding);
    // Waiting in the core's queue for their turn (or, rarely, inside the engine for the replica's slot).
    waited = Math.max(waited, scheduler.queued + remote.waitingInside() + remote.waitingToOpen());
  }, 5);
  const started = Date.now();
  const burst = Promise.all(Array.from({ length: 10 }, (_, i) => ask(r, { max_tokens: 600, stream: i % 2 === 1 })));
  // Metrics tell running from waiting: the requests held in the router count as waiting.
  let metrics = "";
  const gauge = (name: string) => Number(new RegExp(`^${name}\\{model_name="r"\\} (\\d+)`, "m").exec(metrics)?.[1]);
  for (let t = 0; t < 100 && !(gauge("vllm:num_requests_waiting") >= 5); t++) {
    await new Promise((res) => setTimeout(res, 30));
    metrics = await (await fetch(`${r.url}/metrics`)).text();
  }
  assert.ok(gauge("vllm:num_requests_waiting") >= 5, metrics);
  assert.equal(gauge("vllm:num_requests_running"), 1, metrics);
  assert.match(metrics, new RegExp(`plinth_upstream_replica_slots\\{model_name="r",replica="${u.url}"\\} 1`));
  const answers = await burst;
  const elapsed = Date.now() - started;
  clearInterval(sampler);
  for (const res of answers) {
    assert.equal(res.status, 200, res.text);
    assert.ok(!res.text.includes('"error"'), res.text.slice(-300));
  }
  assert.ok(elapsed > 1_500, `the burst took ${elapsed} ms, not longer than the timeouts: it proves nothing`);
  assert.equal(most, 1, "never more than the replica's one slot upstream");
  assert.ok(waited >= 7, `${waited} requests waited in the router at once`);
  assert.equal(replica.failed, 0);
  assert.equal(replica.state, "up");
});

/** An upstream that says it runs `parallel` requests at once and answers every chat after `delayMs`, streamed. */
async function slowUpstream(parallel: number, delayMs: number): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.url === "/v1/models") {
        res.setHeader("content-type", "application/json");
        return void res.end(JSON.stringify({ object: "list", data: [{ id: "tiny", object: "model", max_model_len: 4096, parallel }] }));
      }
      if (req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      setTimeout(() => {
        res.setHeader("content-type", "text/event-stream");
        const chunk = (choice: object, extra: object = {}) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "tiny", choices: [choice], ...extra })}\n\n`;
        res.write(chunk({ index: 0, delta: { role: "assistant", content: "hi" }, finish_reason: null }));
        res.end(chunk({ index: 0, delta: {}, finish_reason: "stop" }, { usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }) + "data: [DONE]\n\n");
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

test("a request that waits for the router's queue and then for a replica slot is refused after one queue timeout, not two", async () => {
  const up = await slowUpstream(1, 300);
  cleanup.push(up.close);
  // One replica slot (its own report): one request runs, 64 wait in the core's queue (each then
  // takes the replica's slot in its turn), and the rest are refused at once (429).
  const r = await router([up.url], { "queue-timeout": "3" });
  const started = Date.now();
  const answers = await Promise.all(
    Array.from({ length: 70 }, async () => {
      const res = await ask(r, { max_tokens: 2 });
      return { status: res.status, ms: Date.now() - started };
    }),
  );
  const refused = answers.filter((a) => a.status === 503);
  assert.ok(refused.length > 45, `${refused.length} refused`);
  assert.ok(answers.every((a) => a.status === 200 || a.status === 503 || a.status === 429), JSON.stringify(answers.map((a) => a.status)));
  assert.ok(answers.filter((a) => a.status === 429).length <= 5, JSON.stringify(answers.map((a) => a.status)));
  // Each answered within the one limit (3 s) and a little: none waited 3 s twice (~6 s before).
  const slowest = Math.max(...answers.map((a) => a.ms));
  assert.ok(slowest < 4_500, `the slowest answer came after ${slowest} ms`);
});

test("more requests than replica slots queue and all finish: a queued request does not hold a replica slot the running ones need", async () => {
  // Two slots on one replica, twelve requests at once (streamed and not). Queued requests used to
  // keep the replica slot their early upstream request had taken, and the admitted ones waited for
  // it until the queue timeout.
  const r = await router([a.url], { "upstream-slots": "2", "queue-timeout": "30" });
  const started = Date.now();
  const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => ask(r, { max_tokens: 8, stream: i % 2 === 1 })));
  for (const res of answers) assert.equal(res.status, 200, res.text);
  assert.ok(answers.filter((_, i) => i % 2 === 1).every((res) => res.text.trimEnd().endsWith("[DONE]")));
  assert.ok(Date.now() - started < 25_000, `took ${Date.now() - started} ms`);
});
