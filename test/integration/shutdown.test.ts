import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { NO_EOG, startTestServer } from "../helpers/server.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { childServerUrl } from "../helpers/child-server.ts";

const MAIN = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
const STORE = fileURLToPath(new URL("../../src/store/sqlite-store.ts", import.meta.url));

// Graceful shutdown on the real server: running streams in three dialects are given the drain
// time, then ended in each dialect's own mid-stream form; new requests meanwhile get 503 with
// Retry-After and /health says draining.

/** Starts a stream and resolves once its first bytes arrived; `rest` resolves to the whole body. */
async function openStream(url: string, body: unknown): Promise<{ rest: Promise<string> }> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const first = await reader.read();
  text += decoder.decode(first.value, { stream: true });
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text;
      text += decoder.decode(value, { stream: true });
    }
  })();
  return { rest };
}

test("shutdown drains, then ends each dialect's stream in its own form; new requests get 503", async () => {
  // The DeepSeek-style dialect's one model name beside "tiny", on the same file.
  const s = await startTestServer({ model: [`tiny=${await ensureFixtureModel()}`, `SpAk-Aster-V1-MOE=${await ensureFixtureModel()}`] });
  const long = { model: "tiny", messages: [{ role: "user", content: "go on" }], stream: true };
  const openai = await openStream(`${s.url}/v1/chat/completions`, { ...long, logit_bias: NO_EOG });
  const spak = await openStream(`${s.url}/chat/completions`, { ...long, model: "SpAk-Aster-V1-MOE", thinking: { type: "disabled" } });
  const konan = await openStream(`${s.url}/v3/chat/completions`, { ...long, temperature: 1, seed: 1 });

  const t0 = performance.now();
  const stopped = s.shutdown(300);
  const refused = await fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
  });
  assert.equal(refused.status, 503);
  assert.ok(Number(refused.headers.get("retry-after")) >= 1);
  assert.equal((await refused.json()).error.code, "server_shutting_down");
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 503);
  assert.equal((await health.json()).status, "draining");

  const [o, k, d] = await Promise.all([openai.rest, konan.rest, spak.rest]);
  await stopped;
  assert.ok(performance.now() - t0 >= 280, "the running streams were given the drain time");
  // OpenAI: a final data event holding the error envelope.
  assert.match(o, /"code":"server_shutting_down"/);
  // Konan: a chunk with finish_reason "error" whose content holds the code, then [DONE] — unless
  // the random model happened to end its answer within the drain time.
  assert.ok(/"finish_reason":"error"/.test(k) && /server_shutting_down/.test(k) && k.trimEnd().endsWith("[DONE]") || /"finish_reason":"(stop|length)"/.test(k), k.slice(-400));
  // SpAk: the request ends with finish_reason insufficient_system_resource.
  assert.ok(/"finish_reason":"insufficient_system_resource"/.test(d) || /"finish_reason":"(stop|length)"/.test(d), d.slice(-400));
});

test("shutdown ends the requests still waiting for a sequence at once, not after the drain time", async () => {
  const s = await startTestServer({ parallel: "1" });
  const running = await openStream(`${s.url}/v1/chat/completions`, { model: "tiny", messages: [{ role: "user", content: "go on" }], stream: true, logit_bias: NO_EOG });
  const queued = fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "and me" }], max_tokens: 4 }),
  });
  await new Promise((r) => setTimeout(r, 200));
  const t0 = performance.now();
  const stopped = s.shutdown(3000);
  const answer = await queued;
  assert.ok(performance.now() - t0 < 2000, `the queued request waited ${Math.round(performance.now() - t0)} ms`);
  assert.equal(answer.status, 503);
  assert.equal((await answer.json()).error.code, "server_shutting_down");
  await running.rest;
  await stopped;
});

test("shutdown refuses new embeddings with 503 and waits for the running ones before it closes", async () => {
  const s = await startTestServer({ parallel: "1" });
  const post = (input: string[]) =>
    fetch(`${s.url}/v1/embeddings`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", input }) });
  // Enough inputs that the request is still embedding when the shutdown begins.
  const many = Array.from({ length: 400 }, (_, i) => `The river runs long and wide past the town, number ${i}.`);
  // When the answer's head arrived: the server writes the whole answer before its shutdown can end,
  // while the client may take longer to read and parse the body than the server takes to close.
  let answeredAt = 0;
  const running = post(many).then(async (r) => {
    answeredAt = performance.now();
    return { status: r.status, body: await r.json() };
  });
  const embedder = s.registry.resolve("tiny").embeddingScheduler!;
  const t0 = performance.now();
  while (embedder.busy === 0) {
    if (performance.now() - t0 > 10_000) throw new Error("the embedding request never started");
    await new Promise((r) => setTimeout(r, 5));
  }
  const stopped = s.shutdown(30_000).then(() => performance.now());
  const refused = await post(["hi"]);
  assert.equal(refused.status, 503);
  assert.ok(Number(refused.headers.get("retry-after")) >= 1);
  assert.equal((await refused.json()).error.code, "server_shutting_down");
  const done = await running;
  assert.equal(done.status, 200, JSON.stringify(done.body).slice(0, 300));
  assert.equal(done.body.data.length, many.length);
  assert.ok((await stopped) >= answeredAt, "the shutdown waited for the running embedding");
});

test("SIGTERM while a second model still downloads drains the ready model's streams and exits 0", async () => {
  // A hub that never answers keeps the second model loading for as long as the test runs; the
  // first is ready and serving. The signal used to find no handler yet (they were installed once
  // every model had loaded), so Node's default killed the process under the running stream.
  const hub = createServer(() => {});
  await new Promise<void>((r) => hub.listen(0, "127.0.0.1", r));
  const hubPort = (hub.address() as AddressInfo).port;
  const child = spawn(
    process.execPath,
    ["--import", "tsx", MAIN, "serve", "--model", `tiny=${await ensureFixtureModel()}`, "--model", "big=hf:someone/repo/big.gguf",
      "--port", "0", "--threads", "1", "--drain-timeout", "1", "--log-level", "silent",
      "--data-dir", mkdtempSync(path.join(tmpdir(), "plinth-term-")), "--cache-dir", mkdtempSync(path.join(tmpdir(), "plinth-term-cache-"))],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, PLINTH_HF_ENDPOINT: `http://127.0.0.1:${hubPort}` } },
  );
  const exited = new Promise<number | string | null>((r) => child.once("exit", (code, signal) => r(code ?? signal)));
  try {
    let log = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready model: ${log}`)), 60_000);
      child.stderr!.on("data", (d: Buffer) => {
        log += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(log);
        if (m && /model 'tiny' ready/.test(log)) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
    });
    const health = await (await fetch(`${url}/health`)).json();
    assert.equal(health.models.big, "loading");
    const stream = await openStream(`${url}/v1/chat/completions`, { model: "tiny", messages: [{ role: "user", content: "go on" }], stream: true, logit_bias: NO_EOG });
    child.kill("SIGTERM");
    const text = await stream.rest;
    // The stream ran into the drain time and ended in OpenAI's mid-stream form, not cut off.
    assert.match(text, /"code":"server_shutting_down"/);
    // The download was aborted with the load rather than waited for: the process exits, and cleanly.
    assert.equal(await exited, 0);
  } finally {
    child.kill("SIGKILL");
    hub.closeAllConnections();
    hub.close();
  }
});

test("a client that never finishes its request head or body does not hold the shutdown past the drain time", async () => {
  // Node stops checking its head deadline once the server closes, and the body deadline is
  // --body-timeout (60 s): a half-sent head held the shutdown open for ever, a half-sent body for a minute.
  const s = await startTestServer();
  const port = new URL(s.url).port;
  const halfSent = [
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":"tiny"',
  ].map((text) => {
    const socket = connect(Number(port), "127.0.0.1", () => socket.write(text));
    socket.on("error", () => {});
    return socket;
  });
  await new Promise((r) => setTimeout(r, 300));
  const stopped = s.shutdown(500);
  const inTime = await Promise.race([stopped.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5_000))]);
  // Let a shutdown that is still waiting end, so that a failure does not hang the test run.
  for (const socket of halfSent) socket.destroy();
  await stopped;
  assert.ok(inTime, "the shutdown was still waiting for the half-sent requests 5 s later");
});

test("SIGTERM when a step of the shutdown fails (the store on a full disk) still runs the others and exits, saying why in one line", async () => {
  // The store's close is made to fail as on a full disk, after it has closed the file; before,
  // that rejection skipped releasing the data directory and the exit, and the process lived on.
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-term-full-"));
  const preload = path.join(dir, "failing-close.mjs");
  writeFileSync(
    preload,
    `import { SqliteStore } from ${JSON.stringify(pathToFileURL(STORE).href)};
const close = SqliteStore.prototype.close;
SqliteStore.prototype.close = async function () {
  await close.call(this);
  throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
};
`,
  );
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "--import", preload, MAIN, "serve", "--model", `tiny=${await ensureFixtureModel()}`, "--ctx-size", "256",
      "--port", "0", "--threads", "1", "--log-level", "silent", "--data-dir", path.join(dir, "data")],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise<number | string | null>((r) => child.once("exit", (code, signal) => r(code ?? signal)));
  try {
    let log = "";
    child.stderr!.on("data", (d: Buffer) => (log += d.toString()));
    await childServerUrl(child);
    child.kill("SIGTERM");
    const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r("still running"), 10_000))]);
    assert.equal(code, 1, log);
    const lines = log.split("\n").filter((l) => /not cleanly/.test(l));
    assert.equal(lines.length, 1, log);
    assert.match(lines[0], /closing the store failed: database or disk is full/);
  } finally {
    child.kill("SIGKILL");
  }
});
