import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { dbx, sseData } from "../helpers/databricks.ts";
import { RECORDED_ANSWER, recordingUpstream, type RecordingUpstream } from "../helpers/recording-upstream.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// An upstream that withholds output under its own content policy (a hosted or guarded engine behind
// the router) ends its answer with finish_reason "content_filter". A local model never does, so only
// a remote engine can carry it; each dialect must still say it in its own terms rather than turn it
// into a plain "stop". The upstream is a recording stand-in (a small real HTTP server speaking
// OpenAI chat SSE, see the helper) whose answers all end that way.
let up: RecordingUpstream;
let s: TestServer;
before(async () => {
  up = await recordingUpstream("guarded-upstream", { finishReason: "content_filter" });
  s = await startTestServer(
    {
      upstream: [
        { name: "guarded", url: [up.url], model: "guarded-upstream" },
        // The same upstream under the DeepSeek-style dialect's one model name.
        { name: "SpAk-Aster-V1-MOE", url: [up.url], model: "guarded-upstream" },
      ],
      "health-interval": "0",
    },
  );
});
after(async () => {
  await s?.close();
  await up?.close();
});

const messages = [{ role: "user", content: "Say something." }];
const finishes = (text: string) => sseData(text).filter((e) => e !== "[DONE]" && e.choices?.[0]?.finish_reason).map((e) => e.choices[0].finish_reason);

test("OpenAI chat: content_filter, streamed and not", async () => {
  const json = await postJson(`${s.url}/v1/chat/completions`, { model: "guarded", messages, max_tokens: 20 });
  assert.equal(json.status, 200, json.text);
  assert.equal(json.json.choices[0].finish_reason, "content_filter");
  assert.equal(json.json.choices[0].message.content, RECORDED_ANSWER);

  const stream = await postJson(`${s.url}/v1/chat/completions`, { model: "guarded", messages, max_tokens: 20, stream: true });
  assert.equal(stream.status, 200, stream.text);
  assert.deepEqual(finishes(stream.text), ["content_filter"]);
  assert.ok(stream.text.trimEnd().endsWith("data: [DONE]"), stream.text);
});

test("003-55 the DeepSeek-style dialect reports content_filter, streamed and not", async () => {
  const body = { model: "SpAk-Aster-V1-MOE", messages, max_tokens: 20, thinking: { type: "disabled" } };
  const json = await postJson(`${s.url}/chat/completions`, body);
  assert.equal(json.status, 200, json.text);
  assert.equal(json.json.choices[0].finish_reason, "content_filter");
  const stream = await postJson(`${s.url}/chat/completions`, { ...body, stream: true });
  assert.equal(stream.status, 200, stream.text);
  assert.deepEqual(finishes(stream.text), ["content_filter"]);
});

test("Responses: the response is incomplete with reason content_filter, and so is its message", async () => {
  const r = await postJson(`${s.url}/v1/responses`, { model: "guarded", input: "Say something.", store: false });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, "incomplete");
  assert.deepEqual(r.json.incomplete_details, { reason: "content_filter" });
  assert.equal(r.json.output.at(-1).status, "incomplete");

  const stream = await postJson(`${s.url}/v1/responses`, { model: "guarded", input: "Say something.", store: false, stream: true });
  assert.equal(stream.status, 200, stream.text);
  const events = sseData(stream.text);
  const last = events.at(-1);
  assert.equal(last.type, "response.incomplete", stream.text);
  assert.deepEqual(last.response.incomplete_details, { reason: "content_filter" });
});

test("Konan, whose finish_reason is only stop or length, ends a filtered answer with stop", async () => {
  const r = await postJson(`${s.url}/v3/chat/completions`, { model: "guarded", messages, max_tokens: 20 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, "stop");
});

test("Databricks chat on the remote model's endpoint reports content_filter", async () => {
  const r = await dbx(s, "POST", "/serving-endpoints/guarded/invocations", { messages, max_tokens: 20 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, "content_filter");
});
