import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { sseData } from "../helpers/databricks.ts";
import { RECORDED_ANSWER, recordingUpstream, type RecordingUpstream } from "../helpers/recording-upstream.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// An upstream that gives an answer up for lack of capacity ends it with finish_reason
// "insufficient_system_resource" (DeepSeek's API, and a DeepSeek-style server behind the router).
// It is not a finished answer: the DeepSeek-style dialect reports that finish reason (003-56), the
// OpenAI dialect an error, as for a local request that ran out of capacity. The upstream is a
// recording stand-in (a small real HTTP server speaking OpenAI chat SSE, see the helper); its second
// model counts cache hits only DeepSeek's way.
let short: RecordingUpstream;
let cached: RecordingUpstream;
let normal: RecordingUpstream;
let silent: RecordingUpstream;
let s: TestServer;
before(async () => {
  short = await recordingUpstream("short-upstream", { finishReason: "insufficient_system_resource" });
  normal = await recordingUpstream("short-upstream");
  silent = await recordingUpstream("silent-upstream", { finishReason: "insufficient_system_resource", silent: true });
  cached = await recordingUpstream("cached-upstream", {
    usage: { prompt_tokens: 40, completion_tokens: 5, total_tokens: 45, prompt_cache_hit_tokens: 32, prompt_cache_miss_tokens: 8 },
  });
  s = await startTestServer({
    upstream: [
      { name: "SpAk-Aster-V1-MOE", url: [short.url], model: "short-upstream" },
      { name: "short", url: [short.url], model: "short-upstream" },
      { name: "cached", url: [cached.url], model: "cached-upstream" },
      // One replica out of room, one not.
      { name: "mixed", url: [short.url, normal.url], model: "short-upstream" },
      // Gives every answer up before any text.
      { name: "silent", url: [silent.url], model: "silent-upstream" },
    ],
    "health-interval": "0",
  });
});
after(async () => {
  await s?.close();
  await short?.close();
  await cached?.close();
  await normal?.close();
  await silent?.close();
});

const messages = [{ role: "user", content: "Say something." }];
const finishes = (text: string) => sseData(text).filter((e) => e !== "[DONE]" && e.choices?.[0]?.finish_reason).map((e) => e.choices[0].finish_reason);

test("003-56 an upstream's insufficient_system_resource stays that finish reason, streamed and not, with the text it gave", async () => {
  const body = { model: "SpAk-Aster-V1-MOE", messages, max_tokens: 20, thinking: { type: "disabled" } };
  const json = await postJson(`${s.url}/chat/completions`, body);
  assert.equal(json.status, 200, json.text);
  assert.equal(json.json.choices[0].finish_reason, "insufficient_system_resource");
  assert.equal(json.json.choices[0].message.content, RECORDED_ANSWER);
  // What the upstream counted for the answer it gave up (its usage chunk: 42 prompt, 5 completion).
  assert.equal(json.json.usage.prompt_tokens, 42);
  assert.equal(json.json.usage.completion_tokens, 5);
  const stream = await postJson(`${s.url}/chat/completions`, { ...body, stream: true });
  assert.equal(stream.status, 200, stream.text);
  assert.deepEqual(finishes(stream.text), ["insufficient_system_resource"]);
  assert.ok(stream.text.trimEnd().endsWith("data: [DONE]"), stream.text);
});

test("OpenAI chat: an answer the upstream gave up is a 503 with Retry-After, not a complete answer ending in stop", async () => {
  const json = await postJson(`${s.url}/v1/chat/completions`, { model: "short", messages, max_tokens: 20 });
  assert.equal(json.status, 503, json.text);
  assert.equal(json.json.error.code, "upstream_overloaded");
  assert.ok(json.headers.get("retry-after"), "Retry-After is set");
  const stream = await postJson(`${s.url}/v1/chat/completions`, { model: "short", messages, max_tokens: 20, stream: true });
  const events = sseData(stream.text).filter((e) => e !== "[DONE]");
  assert.deepEqual(finishes(stream.text), []);
  assert.equal(events.at(-1).error.code, "upstream_overloaded", stream.text);
});

test("cache hits an upstream counts only as prompt_cache_hit_tokens reach the usage", async () => {
  const openai = await postJson(`${s.url}/v1/chat/completions`, { model: "cached", messages, max_tokens: 20 });
  assert.equal(openai.status, 200, openai.text);
  assert.equal(openai.json.usage.prompt_tokens, 40);
  assert.equal(openai.json.usage.prompt_tokens_details.cached_tokens, 32);
});

test("an answer given up for lack of capacity, before any of it reached the client, is tried on another replica", async () => {
  for (let i = 0; i < 6; i++) {
    const r = await postJson(`${s.url}/v1/chat/completions`, { model: "mixed", messages, max_tokens: 20 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].finish_reason, "stop");
    assert.equal(r.json.choices[0].message.content, RECORDED_ANSWER);
  }
});

test("every replica giving up before any text is the shortage too, not a replica failure", async () => {
  const openai = await postJson(`${s.url}/v1/chat/completions`, { model: "silent", messages, max_tokens: 20 });
  assert.equal(openai.status, 503, openai.text);
  assert.equal(openai.json.error.code, "upstream_overloaded");
});
