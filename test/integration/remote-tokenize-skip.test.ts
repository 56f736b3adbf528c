import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { recordingUpstream, type RecordingUpstream } from "../helpers/recording-upstream.ts";
import { parsePrometheus, sum } from "../helpers/prometheus.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// The router counts a prompt through the upstream's /tokenize only when its cheap upper bound
// (src/engines/remote/prompt-bound.ts) cannot show that the request fits. A recording upstream
// with a 4096-token context and a vLLM-style /tokenize logs every request the router makes.
const CONTEXT = 4096;
let up: RecordingUpstream;
let s: TestServer;
before(async () => {
  up = await recordingUpstream("counted", { contextSize: CONTEXT });
  s = await startTestServer({ upstream: [{ name: "counted", url: [up.url] }], "health-interval": "0" });
});
after(async () => {
  await s?.close();
  await up?.close();
});

/** The requests the upstream got while `fn` ran. */
async function upstreamCalls(fn: () => Promise<void>): Promise<string[]> {
  const from = up.requests.length;
  await fn();
  return up.requests.slice(from);
}

const chat = (body: Record<string, unknown>) => postJson(`${s.url}/v1/chat/completions`, { model: "counted", messages: [{ role: "user", content: "Hello there" }], ...body });

test("a prompt whose bound fits goes straight to generation, streamed or not", async () => {
  for (const stream of [false, true]) {
    const calls = await upstreamCalls(async () => {
      const r = await chat({ max_tokens: 64, stream });
      assert.equal(r.status, 200, r.text);
    });
    assert.deepEqual(calls, ["POST /v1/chat/completions"]);
  }
});

test("a budget that leaves the bound no room is counted, and served when the count fits", async () => {
  const calls = await upstreamCalls(async () => {
    // bound ≈ 256 + 16 + 12 tokens, so 3900 more cannot be shown to fit without counting.
    const r = await chat({ max_tokens: 3900 });
    assert.equal(r.status, 200, r.text);
  });
  assert.deepEqual(calls.sort(), ["POST /tokenize", "POST /v1/chat/completions"]);
});

test("a prompt the count shows cannot fit is refused with a 400", async () => {
  const calls = await upstreamCalls(async () => {
    const r = await chat({ messages: [{ role: "user", content: "a".repeat(CONTEXT) }], max_tokens: 16 });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, "context_length_exceeded");
  });
  assert.ok(calls.includes("POST /tokenize"), calls.join(", "));
});

test("tools make the template's length unknown: such prompts are always counted", async () => {
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
  const calls = await upstreamCalls(async () => {
    const r = await chat({ max_tokens: 16, tools });
    assert.equal(r.status, 200, r.text);
  });
  assert.deepEqual(calls.sort(), ["POST /tokenize", "POST /v1/chat/completions"]);
});

test("a prompt counted only by the upstream's usage still reaches the prompt-token metrics", async () => {
  const promptTotal = async () => sum(parsePrometheus(await (await fetch(`${s.url}/metrics`)).text()), "vllm:prompt_tokens_total", { model_name: "counted" });
  const before = await promptTotal();
  const calls = await upstreamCalls(async () => {
    const r = await chat({ max_tokens: 64 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.prompt_tokens, 42); // the recording upstream's usage
  });
  assert.deepEqual(calls, ["POST /v1/chat/completions"], "admitted without a count");
  assert.equal((await promptTotal()) - before, 42);
});

test("the count is of what the generation renders: the request's tools and thinking switch go to /tokenize too", async () => {
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
  const from = up.tokenizeBodies.length;
  const r = await chat({ max_tokens: 3900, tools, tool_choice: "required", chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.status, 200, r.text);
  const counted = up.tokenizeBodies.slice(from);
  assert.equal(counted.length, 1);
  assert.equal(counted[0].tools?.[0]?.function?.name, "f", JSON.stringify(counted[0]));
  assert.equal(counted[0].tool_choice, "required");
  assert.deepEqual(counted[0].chat_template_kwargs, { enable_thinking: false });
});
