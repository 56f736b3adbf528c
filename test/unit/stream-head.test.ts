import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { ApiError } from "../../src/core/errors.ts";
import { afterFirstEvent } from "../../src/core/stream-head.ts";
import { scriptedApp, sseData, sseEvents } from "../helpers/scripted-app.ts";

// A stream's head (its 200) waits for the generation's first event, so a failure before it is
// answered with its own status in the dialect's envelope, as the same request unstreamed is; a
// failure after it is still said inside the stream. Real app, SCRIPTED engine (no model).

type Route = { name: string; url: string; body: Record<string, unknown>; code: (json: any) => unknown };
const chat = { messages: [{ role: "user", content: "hi" }], stream: true };
const routes: Route[] = [
  { name: "chat", url: "/v1/chat/completions", body: { model: "scripted", ...chat }, code: (j) => j.error.code },
  { name: "completions", url: "/v1/completions", body: { model: "scripted", prompt: "hi", stream: true }, code: (j) => j.error.code },
  { name: "responses", url: "/v1/responses", body: { model: "scripted", input: "hi", stream: true }, code: (j) => j.error.code },
  { name: "databricks chat", url: "/serving-endpoints/scripted/invocations", body: chat, code: (j) => j.error_code },
  { name: "databricks completions", url: "/serving-endpoints/scripted/invocations", body: { prompt: "hi", stream: true }, code: (j) => j.error_code },
];

test("a failure before the first event is the route's own status and envelope, not a 200 stream", async () => {
  const { app } = await scriptedApp({ script: () => [new ApiError(503, "No replica could serve the request.", { code: "upstream_unavailable", headers: { "retry-after": "2" } })] });
  try {
    for (const r of routes) {
      const res = await app.inject({ method: "POST", url: r.url, payload: r.body });
      assert.equal(res.statusCode, 503, `${r.name}: ${res.body}`);
      assert.match(String(res.headers["content-type"]), /application\/json/, r.name);
      assert.equal(res.headers["retry-after"], "2", r.name);
      assert.ok(r.code(res.json()), `${r.name}: ${res.body}`);
    }
  } finally {
    await app.close();
  }
});

test("a fault of the server's before the first event is a 500 naming the request, not a stream", async () => {
  const { app } = await scriptedApp({ script: () => [new Error("the engine broke")] });
  try {
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: routes[0].body });
    assert.equal(res.statusCode, 500, res.body);
    assert.equal(res.json().error.type, "server_error");
    assert.ok(!res.body.includes("the engine broke"), "the engine's own message stays in the log");
  } finally {
    await app.close();
  }
});

test("Konan's streams (000) say every failure in band, one before the first token too", async () => {
  const { app } = await scriptedApp({ script: () => [new ApiError(503, "No replica could serve the request.", { code: "upstream_unavailable" })] });
  try {
    for (const extra of [{}, { output_parser: "responses" }]) {
      const res = await app.inject({ method: "POST", url: "/v3/chat/completions", payload: { model: "scripted", ...chat, ...extra } });
      assert.equal(res.statusCode, 200, res.body);
      if ("output_parser" in extra) assert.ok(sseEvents(res.body).some((e) => e.event === "response.failed"), res.body);
      else {
        const data = sseData(res.body) as any[];
        assert.equal(data.at(-2).choices[0].finish_reason, "error", res.body);
        assert.match(data.at(-2).choices[0].delta.content, /^upstream_unavailable: /);
      }
    }
  } finally {
    await app.close();
  }
});

test("a failure after the first event is still said inside the stream", async () => {
  const { app } = await scriptedApp({ script: () => [{ kind: "text", text: "Hel", tokens: 1 }, new ApiError(503, "The model was unloaded.", { code: "model_unloaded" })] });
  try {
    const chatRes = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: routes[0].body });
    assert.equal(chatRes.statusCode, 200);
    const data = sseData(chatRes.body) as any[];
    assert.equal(data.at(-1).error.code, "model_unloaded", chatRes.body);
    assert.ok(chatRes.body.includes('"content":"Hel"'), chatRes.body);
    const resp = await app.inject({ method: "POST", url: "/v1/responses", payload: routes[2].body });
    assert.equal(resp.statusCode, 200);
    assert.ok(sseEvents(resp.body).some((e) => e.event === "response.failed"), resp.body);
  } finally {
    await app.close();
  }
});

test("a stream that waited past the queue timeout is a 503 with Retry-After on every dialect that has the status", async () => {
  const busy = await scriptedApp({ slots: 1, delayMs: 60, queueTimeoutMs: 80, script: () => Array.from({ length: 10 }, () => ({ kind: "text" as const, text: "a", tokens: 1 })) });
  try {
    for (const r of routes) {
      const occupier = busy.app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: "scripted", messages: [{ role: "user", content: "go" }] } });
      await new Promise((ok) => setTimeout(ok, 20));
      const res = await busy.app.inject({ method: "POST", url: r.url, payload: r.body });
      assert.equal(res.statusCode, 503, `${r.name}: ${res.body}`);
      assert.ok(res.headers["retry-after"], `${r.name}: ${JSON.stringify(res.headers)}`);
      assert.equal((await occupier).statusCode, 200);
    }
  } finally {
    await busy.app.close();
  }
});

test("a stored streamed response that failed before its first event answers with the status too", async () => {
  let fail = true;
  const { app } = await scriptedApp({
    script: () => (fail ? [new ApiError(503, "No replica could serve the request.", { code: "upstream_unavailable" })] : [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }]),
  });
  try {
    const res = await app.inject({ method: "POST", url: "/v1/responses", payload: { ...routes[2].body, store: true } });
    assert.equal(res.statusCode, 503, res.body);
    assert.equal(res.json().error.code, "upstream_unavailable");
    fail = false;
    const next = await app.inject({ method: "POST", url: "/v1/responses", payload: { ...routes[2].body, store: true } });
    assert.equal(next.statusCode, 200);
    const done = sseEvents(next.body).find((e) => e.event === "response.completed")?.data as any;
    assert.equal(done?.response.output_text ?? done?.response.output[0].content[0].text, "ok", next.body);
  } finally {
    await app.close();
  }
});

test("afterFirstEvent passes every event on and closes the source when its reader leaves", async () => {
  let closed = false;
  async function* source() {
    try {
      yield 1;
      yield 2;
      yield 3;
    } finally {
      closed = true;
    }
  }
  const all: number[] = [];
  for await (const x of await afterFirstEvent(source())) all.push(x);
  assert.deepEqual(all, [1, 2, 3]);
  closed = false;
  for await (const x of await afterFirstEvent(source())) if (x === 1) break;
  assert.equal(closed, true);
  async function* empty() {}
  const none: unknown[] = [];
  for await (const x of await afterFirstEvent(empty())) none.push(x);
  assert.deepEqual(none, []);
  async function* failing(): AsyncGenerator<number> {
    throw new Error("before any");
  }
  await assert.rejects(afterFirstEvent(failing()), /before any/);
});
