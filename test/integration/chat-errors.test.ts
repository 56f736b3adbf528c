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

/** [description, body, expected status, expected param, expected code (optional)] */
const cases: Array<[string, unknown, number, string | null, string?]> = [
  ["malformed JSON", "{\"model\": \"tiny\", ", 400, null, "invalid_json"],
  ["body is not an object", "[1,2]", 400, null],
  ["missing model", { messages: ok.messages }, 400, "model"],
  ["unknown model", { ...ok, model: "no-such-model" }, 404, "model", "model_not_found"],
  ["missing messages", { model: "tiny" }, 400, "messages"],
  ["empty messages", { ...ok, messages: [] }, 400, "messages"],
  ["messages is a string", { ...ok, messages: "hello" }, 400, "messages"],
  ["unknown role", { ...ok, messages: [{ role: "wizard", content: "x" }] }, 400, "messages[0].role"],
  ["content of the wrong type", { ...ok, messages: [{ role: "user", content: 42 }] }, 400, "messages[0].content"],
  [
    "image content part",
    { ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }] },
    400,
    "messages[0].content[0].type",
  ],
  ["tool message without a matching call", { ...ok, messages: [{ role: "tool", content: "r", tool_call_id: "call_1" }] }, 400, "messages[0].tool_call_id"],
  ["temperature above 2", { ...ok, temperature: 2.5 }, 400, "temperature"],
  ["temperature as a string", { ...ok, temperature: "hot" }, 400, "temperature"],
  ["top_p of 0", { ...ok, top_p: 0 }, 400, "top_p"],
  ["n of 0", { ...ok, n: 0 }, 400, "n"],
  ["fractional n", { ...ok, n: 1.5 }, 400, "n"],
  ["max_tokens of 0", { ...ok, max_tokens: 0 }, 400, "max_tokens"],
  ["frequency_penalty out of range", { ...ok, frequency_penalty: -3 }, 400, "frequency_penalty"],
  ["presence_penalty out of range", { ...ok, presence_penalty: 2.5 }, 400, "presence_penalty"],
  ["repetition_penalty of 0", { ...ok, repetition_penalty: 0 }, 400, "repetition_penalty"],
  ["logit_bias key not a token id", { ...ok, logit_bias: { hello: 1 } }, 400, "logit_bias.hello"],
  ["logit_bias value out of range", { ...ok, logit_bias: { "5": 150 } }, 400, "logit_bias.5"],
  ["logit_bias token outside the vocabulary", { ...ok, logit_bias: { "999999": 5 } }, 400, "logit_bias"],
  ["too many stop strings", { ...ok, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, 400, "stop"],
  ["stop_options without stream", { ...ok, stream_options: { include_usage: true } }, 400, "stream_options"],
  ["tools that are not a list", { ...ok, tools: { type: "function" } }, 400, "tools"],
  ["response_format json_schema without its schema object", { ...ok, response_format: { type: "json_schema" } }, 400, "response_format.json_schema"],
  ["response_format of an unknown type", { ...ok, response_format: { type: "yaml" } }, 400, "response_format.type"],
  ["tool_choice without tools", { ...ok, tool_choice: "auto" }, 400, "tool_choice"],
  ["top_logprobs above 20", { ...ok, logprobs: true, top_logprobs: 21 }, 400, "top_logprobs"],
  ["top_logprobs without logprobs", { ...ok, top_logprobs: 2 }, 400, "top_logprobs"],
  ["reasoning_effort not served yet", { ...ok, reasoning_effort: "high" }, 400, "reasoning_effort"],
  ["store: true", { ...ok, store: true }, 400, "store"],
  ["prompt longer than the context", { ...ok, messages: [{ role: "user", content: "word ".repeat(400) }] }, 400, "messages", "context_length_exceeded"],
  ["max_tokens that cannot fit", { ...ok, max_tokens: 250 }, 400, "max_tokens", "context_length_exceeded"],
  ["max_completion_tokens that cannot fit", { ...ok, max_tokens: undefined, max_completion_tokens: 5000 }, 400, "max_completion_tokens", "context_length_exceeded"],
];

for (const [name, body, status, param, code] of cases) {
  test(`${name} → ${status} naming ${param ?? "no param"}`, async () => {
    const r = await postJson(`${s.url}/v1/chat/completions`, body);
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json?.error?.message, "string", r.text);
    assert.ok(r.json.error.message.length > 10);
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

test("unknown extra fields are ignored (clients send vendor extras)", async () => {
  const r = await postJson(`${s.url}/v1/chat/completions`, { ...ok, some_vendor_extra: { a: 1 } });
  assert.equal(r.status, 200, r.text);
});

test("JSON sent without a JSON content type is still understood", async () => {
  for (const type of ["application/x-www-form-urlencoded", "text/plain;charset=UTF-8"]) {
    const r = await postJson(`${s.url}/v1/chat/completions`, JSON.stringify(ok), { "content-type": type });
    assert.equal(r.status, 200, r.text);
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
