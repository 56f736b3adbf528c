import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import OpenAI from "openai";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { sseData } from "../helpers/scripted-app.ts";
import { NO_EOG, startTestServer } from "../helpers/server.ts";

// A request that ends in error tells its client the usage of what was used by then, the same the
// ledger books: its prompt only once it had started. One that timed out waiting for a sequence
// evaluated nothing, so its client is told 0 prompt tokens, not the prompt it would have run.

test("requests that time out in the queue report 0 prompt tokens, as the ledger books them (Konan, SpAk)", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-interrupted-"));
  const file = await ensureFixtureModel();
  const s = await startTestServer({ model: [`tiny=${file}`, `SpAk-Aster-V1-MOE=${file}`], parallel: "1", "queue-timeout": "0.3", "data-dir": dataDir });
  // Both names share the model file but not their sequences: each is held by a long generation.
  const holders = new AbortController();
  const hold = async (model: string) => {
    const res = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "go on" }], max_tokens: 4000, stream: true, logit_bias: NO_EOG }),
      signal: holders.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    return reader;
  };
  try {
    await Promise.all([hold("tiny"), hold("SpAk-Aster-V1-MOE")]);
    const post = async (route: string, body: unknown, id: string) => {
      const r = await fetch(`${s.url}${route}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-request-id": id },
        body: JSON.stringify(body),
      });
      return { status: r.status, text: await r.text() };
    };
    const messages = [{ role: "user", content: "Tell me about the river." }];
    // The openai SDK pointed at Databricks' routes, as that dialect's users do: the error must reach
    // it as an error (an HTTP status, or a stream event with an `error` key), not as a chunk.
    const sdk = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
    const sdkStream = (async () => {
      const chunks: unknown[] = [];
      try {
        const stream = await sdk.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Tell me about the river." }], stream: true });
        for await (const chunk of stream) chunks.push(chunk);
      } catch (err) {
        return { err, chunks };
      }
      return { err: undefined, chunks };
    })();
    const [konan, spakStream, spakJson, dbxResponses, dbxChat, dbxCompletions, sdkResult] = await Promise.all([
      post("/v3/chat/completions", { model: "tiny", messages, stream: true }, "queued-konan"),
      post("/chat/completions", { model: "SpAk-Aster-V1-MOE", messages, stream: true, stream_options: { include_usage: true } }, "queued-spak-stream"),
      post("/chat/completions", { model: "SpAk-Aster-V1-MOE", messages }, "queued-spak-json"),
      post("/serving-endpoints/tiny/invocations", { model: "tiny", input: "Tell me about the river.", stream: true }, "queued-dbx-responses"),
      post("/serving-endpoints/chat/completions", { model: "tiny", messages, stream: true }, "queued-dbx-chat"),
      post("/serving-endpoints/tiny/invocations", { prompt: "Tell me about the river.", stream: true }, "queued-dbx-completions"),
      sdkStream,
    ]);
    holders.abort();

    const k = sseData(konan.text) as any[];
    const last = k.at(-2);
    assert.equal(last.choices[0].finish_reason, "error", konan.text.slice(-400));
    assert.match(last.choices[0].delta.content, /^queue_timeout: /);
    assert.deepEqual(last.usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, reasoning_tokens: 0 });
    const d = sseData(spakStream.text) as any[];
    assert.equal(d.at(-3).choices[0].finish_reason, "insufficient_system_resource", spakStream.text.slice(-400));
    assert.equal(d.at(-2).usage.prompt_tokens, 0, JSON.stringify(d.at(-2)));
    assert.equal(d.at(-2).usage.total_tokens, 0);
    const j = JSON.parse(spakJson.text);
    assert.equal(j.choices[0].finish_reason, "insufficient_system_resource", spakJson.text);
    assert.equal(j.usage.prompt_tokens, 0);
    assert.equal(j.usage.prompt_cache_miss_tokens, 0);

    // Databricks' streams hold their head until the first event: a wait past the queue timeout is
    // the HTTP answer the same request unstreamed gets, 503 with the data plane's envelope (its
    // `error` object too), which clients retry by status; the SDK raises it before any chunk.
    for (const r of [dbxResponses, dbxChat, dbxCompletions]) {
      assert.equal(r.status, 503, r.text.slice(-400));
      const failure = JSON.parse(r.text);
      assert.equal(failure.error_code, "TEMPORARILY_UNAVAILABLE", r.text);
      assert.deepEqual(failure.error, { code: "TEMPORARILY_UNAVAILABLE", message: failure.message });
    }
    assert.ok(sdkResult.err instanceof OpenAI.APIError, `the SDK did not raise; it yielded ${JSON.stringify(sdkResult.chunks)}`);
    assert.equal((sdkResult.err as InstanceType<typeof OpenAI.APIError>).status, 503);
    assert.equal((sdkResult.err as InstanceType<typeof OpenAI.APIError>).code, "TEMPORARILY_UNAVAILABLE");
    assert.deepEqual(sdkResult.chunks, []);

    // The ledger books the same.
    const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true, fileMustExist: true });
    try {
      const ids = ["queued-konan", "queued-spak-stream", "queued-spak-json"];
      let rows: Array<{ request_id: string; prompt_tokens: number; completion_tokens: number }> = [];
      for (let i = 0; i < 100 && rows.length < ids.length; i++) {
        await new Promise((r) => setTimeout(r, 50));
        rows = db.prepare(`SELECT request_id, prompt_tokens, completion_tokens FROM usage_ledger WHERE request_id IN (?, ?, ?)`).all(...ids) as typeof rows;
      }
      assert.equal(rows.length, ids.length, JSON.stringify(rows));
      for (const row of rows) assert.deepEqual([row.prompt_tokens, row.completion_tokens], [0, 0], row.request_id);
    } finally {
      db.close();
    }
  } finally {
    holders.abort();
    await s.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
