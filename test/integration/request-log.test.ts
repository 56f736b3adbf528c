import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { serve, type RunningServer } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { namespaceHash } from "../../src/observability/request-log.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { NO_EOG, streamThenCancel, waitFor } from "../helpers/server.ts";

// The real server with its request log captured: one JSON object per line.
const lines: Array<Record<string, any>> = [];
let server: RunningServer;
let dataDir: string;

before(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "plinth-log-"));
  let pending = "";
  const logStream = new Writable({
    write(chunk: Buffer, _enc, done) {
      pending += chunk.toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) !== -1) {
        lines.push(JSON.parse(pending.slice(0, nl)));
        pending = pending.slice(nl + 1);
      }
      done();
    },
  });
  const config = loadConfig(
    { model: [`tiny=${await ensureFixtureModel()}`], port: "0", threads: "1", "data-dir": dataDir, "log-format": "json", "ctx-size": "512" },
    {},
  );
  server = await serve(config, { log: () => {}, logStream });
  await server.loaded;
});

after(async () => {
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const SECRET_PROMPT = "purple elephant marmalade";
const post = (body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
const chat = { model: "tiny", messages: [{ role: "user", content: SECRET_PROMPT }], max_tokens: 3, user: "alice@example.com" };
const logOf = async (id: string) => {
  await waitFor(() => lines.some((l) => l.request_id === id && l.msg === "request"));
  return lines.find((l) => l.request_id === id && l.msg === "request")!;
};

test("a request id the client sends comes back, on a 200, a 4xx and a stream", async () => {
  const ok = await post(chat, { "x-request-id": "client-id.1_A" });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get("x-request-id"), "client-id.1_A");
  await ok.text();

  const bad = await post({ model: "tiny", messages: [] }, { "x-request-id": "client-id-400" });
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get("x-request-id"), "client-id-400");
  await bad.text();

  const stream = await post({ ...chat, stream: true }, { "x-request-id": "client-stream" });
  assert.equal(stream.status, 200);
  assert.equal(stream.headers.get("x-request-id"), "client-stream");
  await stream.text();

  const missing = await fetch(`${server.url}/no/such/route`, { headers: { "x-request-id": "client-404" } });
  assert.equal(missing.status, 404);
  assert.equal(missing.headers.get("x-request-id"), "client-404");
});

test("a missing or invalid request id is replaced by one the server makes", async () => {
  for (const given of [undefined, "has space", "x".repeat(129), "semi;colon"]) {
    const res = await post(chat, given === undefined ? {} : { "x-request-id": given });
    await res.text();
    const id = res.headers.get("x-request-id");
    assert.ok(id && id !== given && /^[A-Za-z0-9._-]{1,128}$/.test(id), `${given} → ${id}`);
  }
  const stream = await post({ ...chat, stream: true });
  assert.match(stream.headers.get("x-request-id") ?? "", /^req_/);
  await stream.text();
});

test("one log line per request with its facts and no prompt text", async () => {
  const res = await post(chat, { "x-request-id": "log-me" });
  const answer = await res.json();
  const line = await logOf("log-me");
  assert.equal(lines.filter((l) => l.request_id === "log-me").length, 1);
  assert.equal(line.dialect, "openai");
  assert.equal(line.route, "/v1/chat/completions");
  assert.equal(line.model, "tiny");
  assert.equal(line.status, 200);
  assert.equal(line.namespace, namespaceHash(JSON.stringify(["alice@example.com", null])));
  assert.equal(line.prompt_tokens, answer.usage.prompt_tokens);
  assert.equal(line.completion_tokens, answer.usage.completion_tokens);
  assert.equal(line.cached_tokens, answer.usage.prompt_tokens_details.cached_tokens);
  assert.equal(line.finish_reason, answer.choices[0].finish_reason);
  assert.equal(typeof line.ttft_ms, "number");
  assert.equal(typeof line.duration_ms, "number");

  const bad = await post({ model: "tiny", messages: [{ role: "user", content: SECRET_PROMPT }], max_tokens: -3 }, { "x-request-id": "log-400" });
  await bad.text();
  const badLine = await logOf("log-400");
  assert.equal(badLine.status, 400);
  assert.equal(badLine.model, "tiny");
  assert.equal(typeof badLine.error_code, "string");

  // A path no route takes is refused too, and its line says with what (it had no error_code).
  const wrongMethod = await fetch(`${server.url}/v1/chat/completions`, { method: "PUT", headers: { "x-request-id": "log-405" } });
  assert.equal(wrongMethod.status, 405);
  await wrongMethod.text();
  assert.equal((await logOf("log-405")).error_code, "method_not_allowed");
  const unknown = await fetch(`${server.url}/v1/no-such-route`, { headers: { "x-request-id": "log-404" } });
  await unknown.text();
  assert.equal((await logOf("log-404")).error_code, "not_found");

  // The model a refused request names is the client's text: the line keeps as much as the ledger.
  const huge = await post({ ...chat, model: "m".repeat(100_000) }, { "x-request-id": "log-huge-model" });
  assert.equal(huge.status, 404);
  await huge.text();
  assert.equal((await logOf("log-huge-model")).model, "m".repeat(200));

  const stream = await post({ ...chat, stream: true }, { "x-request-id": "log-stream" });
  await stream.text();
  const streamLine = await logOf("log-stream");
  assert.equal(streamLine.status, 200);
  assert.ok(streamLine.completion_tokens > 0);

  const all = lines.map((l) => JSON.stringify(l)).join("\n");
  assert.ok(!all.includes("purple elephant"), "a prompt reached the log");
  assert.ok(!all.includes("alice@example.com"), "a raw user reached the log");
});

test("a stream the client cancels midway is logged once, with what it had generated, and counted as client_closed", async () => {
  const metric = async (pattern: RegExp) => Number(pattern.exec(await (await fetch(`${server.url}/metrics`)).text())?.[1] ?? 0);
  const generatedBefore = await metric(/^vllm:generation_tokens_total\{model_name="tiny"\} (\d+)/m);
  const closedBefore = await metric(/^plinth_generation_failures_total\{model_name="tiny",code="client_closed"\} (\d+)/m);
  const answered = /^plinth_http_requests_total\{dialect="openai",route="\/v1\/chat\/completions",method="POST",status="200"\} (\d+)/m;
  const answeredBefore = await metric(answered);
  await streamThenCancel(`${server.url}/v1/chat/completions`, { ...chat, max_tokens: 400, stream: true, logit_bias: NO_EOG }, { headers: { "x-request-id": "log-cancelled" } });
  const line = await logOf("log-cancelled");
  assert.equal(line.error_code, "client_closed");
  assert.equal(line.status, 200, "the stream's head had gone out");
  assert.ok(line.completion_tokens >= 4 && line.completion_tokens < 400, `completion_tokens ${line.completion_tokens}`);
  assert.ok(line.prompt_tokens > 0);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(lines.filter((l) => l.request_id === "log-cancelled").length, 1);
  // Its tokens were generated all the same; the cancellation is the client's, not a server error.
  assert.ok((await metric(/^vllm:generation_tokens_total\{model_name="tiny"\} (\d+)/m)) >= generatedBefore + line.completion_tokens);
  assert.equal(await metric(/^plinth_generation_failures_total\{model_name="tiny",code="client_closed"\} (\d+)/m), closedBefore + 1);
  // Its answer had started (200), and is counted with the others.
  assert.equal(await metric(answered), answeredBefore + 1);
});
