import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { scriptedApp, sseEvents, type ScriptedApp } from "../helpers/scripted-app.ts";

// vLLM's SageMaker routes over the SCRIPTED engine (no model): POST /invocations picks the OpenAI
// route by what the body holds; /ping answers as /health; /version names Plinth's version. Real
// inference through the same route bodies is tested on their /v1 paths.

let s: ScriptedApp;
before(async () => {
  s = await scriptedApp({ id: "m", script: () => [{ kind: "text", text: "Hello", tokens: 1 }, { kind: "end", reason: "stop" }] });
});
after(async () => {
  await s.app.close();
});

const invoke = (payload: unknown) => s.app.inject({ method: "POST", url: "/invocations", payload: payload as object });

test("POST /invocations: messages make a chat completion, prompt a completion, each as its /v1 route answers", async () => {
  const chat = await invoke({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
  assert.equal(chat.statusCode, 200, chat.body);
  assert.equal(chat.json().object, "chat.completion");
  assert.equal(chat.json().choices[0].message.content, "Hello");
  const completion = await invoke({ model: "m", prompt: "hi", max_tokens: 4 });
  assert.equal(completion.statusCode, 200, completion.body);
  assert.equal(completion.json().object, "text_completion");
  assert.equal(completion.json().choices[0].text, "Hello");
  const streamed = await invoke({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4, stream: true });
  assert.equal(streamed.statusCode, 200, streamed.body);
  assert.match(String(streamed.headers["content-type"]), /text\/event-stream/);
  const chunks = sseEvents(streamed.body);
  assert.equal(chunks.at(-1)?.data, "[DONE]");
  assert.equal((chunks[0].data as { object: string }).object, "chat.completion.chunk");
});

test("POST /invocations: each kind's checks apply, in OpenAI's envelope; a body of no kind is a 400 saying what it takes", async () => {
  const chat = await invoke({ model: "m", messages: [{ role: "user", content: "hi" }], max_output_tokens: 3 });
  assert.equal(chat.statusCode, 400);
  assert.equal(chat.json().error.param, "max_output_tokens");
  const embeddings = await invoke({ model: "m", input: "hi", dimension: 8 });
  assert.equal(embeddings.statusCode, 400);
  assert.equal(embeddings.json().error.param, "dimension");
  for (const body of ['{"model": "m"}', "[1, 2]", '"text"']) {
    const r = await s.app.inject({ method: "POST", url: "/invocations", payload: body, headers: { "content-type": "application/json" } });
    assert.equal(r.statusCode, 400, r.body);
    assert.match(r.json().error.message, /'messages'.*'prompt'.*'input'/);
  }
});

test("GET and POST /ping answer as /health; GET /version gives the package's version", async () => {
  const health = await s.app.inject({ method: "GET", url: "/health" });
  for (const method of ["GET", "POST"] as const) {
    const ping = await s.app.inject({ method, url: "/ping" });
    assert.equal(ping.statusCode, health.statusCode);
    assert.deepEqual(ping.json(), health.json());
  }
  const version = await s.app.inject({ method: "GET", url: "/version" });
  assert.equal(version.statusCode, 200);
  assert.match(version.json().version, /^\d+\.\d+\.\d+/);
});
