import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

let s: TestServer;
before(async () => {
  // A small context and body limit so overflow and oversize bodies are cheap to provoke.
  s = await startTestServer({ "ctx-size": "256", "body-limit": "65536" });
});
after(async () => {
  await s.close();
});

const ok = { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 };

// The validation cases that need no model run in milliseconds in test/unit/chat-errors.test.ts over
// the scripted engine. These are the ones whose answer comes from the real engine: its tokenizer,
// vocabulary, chat-history rendering and context.

/** [description, body, expected status, expected param, expected code (optional)] */
const cases: Array<[string, unknown, number, string | null, string?]> = [
  ["tool message without a matching call", { ...ok, messages: [{ role: "tool", content: "r", tool_call_id: "call_1" }] }, 400, "messages[0].tool_call_id"],
  // Tool-call arguments that are not JSON are accepted (kept as their text): chat-tools.test.ts.
  ["logit_bias token outside the vocabulary", { ...ok, logit_bias: { "999999": 5 } }, 400, "logit_bias"],
  ["reasoning control on a model without a thinking section", { ...ok, reasoning_effort: "high" }, 400, "reasoning_effort", "unsupported_parameter"],
  ["reasoning object on a model without a thinking section", { ...ok, reasoning: { budget_tokens: 5 } }, 400, "reasoning", "unsupported_parameter"],
  ["prompt longer than the context", { ...ok, messages: [{ role: "user", content: "word ".repeat(400) }] }, 400, "messages", "context_length_exceeded"],
  ["one message that could never fit by itself", { ...ok, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "x".repeat(60_000) }] }, 400, "messages[1].content", "context_length_exceeded"],
  ["max_tokens that cannot fit", { ...ok, max_tokens: 250 }, 400, "max_tokens", "context_length_exceeded"],
  ["max_completion_tokens that cannot fit", { ...ok, max_tokens: undefined, max_completion_tokens: 5000 }, 400, "max_completion_tokens", "context_length_exceeded"],
];

for (const [name, body, status, param, code] of cases) {
  test(`${name} → ${status} naming ${param ?? "no param"}`, async () => {
    const r = await postJson(`${s.url}/v1/chat/completions`, body);
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json?.error?.message, "string", r.text);
    assert.ok(r.json.error.message.length > 10);
    assert.ok(!r.json.error.message.includes("{field}"), r.json.error.message);
    assert.equal(typeof r.json.error.type, "string");
    assert.equal(r.json.error.param, param, r.text);
    if (code) assert.equal(r.json.error.code, code);
    assert.ok("code" in r.json.error);
  });
}

test("a body over the size limit → 413 in the error envelope", async () => {
  const r = await postJson(`${s.url}/v1/chat/completions`, { ...ok, messages: [{ role: "user", content: "x".repeat(100_000) }] });
  assert.equal(r.status, 413);
  assert.equal(typeof r.json.error.message, "string");
});

test("an unknown route → 404 in the error envelope", async () => {
  const r = await postJson(`${s.url}/v1/nothing-here`, {});
  assert.equal(r.status, 404);
  assert.equal(typeof r.json.error.message, "string");
});

test("an unknown top-level field is a 400 naming it, as OpenAI answers (the other servers' fields are read, not refused)", async () => {
  const r = await postJson(`${s.url}/v1/chat/completions`, { ...ok, some_vendor_extra: { a: 1 } });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.param, "some_vendor_extra");
  assert.equal(r.json.error.code, "unknown_field");
  const vllm = await postJson(`${s.url}/v1/chat/completions`, { ...ok, top_k: 40, skip_special_tokens: true, cache_salt: "x" });
  assert.equal(vllm.status, 200, vllm.text);
});

test("asked not to think, a model without a thinking section answers as it is (clients send enable_thinking: false to every model)", async () => {
  for (const extra of [{ chat_template_kwargs: { enable_thinking: false } }, { reasoning_effort: "none" }, { reasoning: { enabled: false } }]) {
    const r = await postJson(`${s.url}/v1/chat/completions`, { ...ok, ...extra });
    assert.equal(r.status, 200, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.choices[0].message.reasoning_content ?? null, null);
  }
  // Asking it to think stays a 400 (the cases above): it cannot.
});

test("a body without a JSON content type → 415 in the error envelope", async () => {
  for (const type of ["application/x-www-form-urlencoded", "text/plain;charset=UTF-8"]) {
    const r = await postJson(`${s.url}/v1/chat/completions`, JSON.stringify(ok), { "content-type": type });
    assert.equal(r.status, 415, r.text);
    assert.equal(r.json.error.code, "unsupported_media_type");
  }
});

test("the openai client surfaces the error with status and param", async () => {
  await assert.rejects(
    s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], temperature: 9 }),
    (e: any) => e.status === 400 && e.error?.param === "temperature" && e.error?.type === "invalid_request_error",
  );
});

test("the server is still healthy after all of that", async () => {
  const r = await fetch(`${s.url}/health`);
  assert.equal(r.status, 200);
});
