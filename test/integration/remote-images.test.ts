import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { dbx, sseData } from "../helpers/databricks.ts";
import { RECORDED_ANSWER, recordingUpstream, type RecordingUpstream } from "../helpers/recording-upstream.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// Image parts through a router: a recording upstream (a small HTTP server speaking just enough
// OpenAI chat SSE, see the helper) shows the exact body the router sent, for every dialect that has
// image parts; the same server's local fixture model ("tiny", text only) refuses them by position.
let up: RecordingUpstream;
let s: TestServer;
before(async () => {
  up = await recordingUpstream("vision-upstream");
  s = await startTestServer({ upstream: [{ name: "vision", url: [up.url], model: "vision-upstream" }], "health-interval": "0" });
});
after(async () => {
  await s?.close();
  await up?.close();
});

const PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const HTTPS = "https://example.com/cat.jpg";

test("chat: image_url parts reach the upstream in place, with their detail, streamed and not", async () => {
  const messages = [
    { role: "system", content: "Describe images." },
    { role: "user", content: [{ type: "text", text: "What is in" }, { type: "image_url", image_url: { url: PNG, detail: "high" } }, { type: "text", text: "and in" }, { type: "image_url", image_url: { url: HTTPS } }] },
  ];
  for (const stream of [false, true]) {
    const before = up.bodies.length;
    const r = await postJson(`${s.url}/v1/chat/completions`, { model: "vision", messages, max_tokens: 20, stream });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("x-plinth-upstream"), up.url);
    if (stream) assert.ok(r.text.includes(RECORDED_ANSWER) && r.text.trimEnd().endsWith("data: [DONE]"), r.text);
    else {
      assert.equal(r.json.choices[0].message.content, RECORDED_ANSWER);
      assert.equal(r.json.usage.prompt_tokens, 42, "the upstream's own count, since images cannot be counted here");
    }
    assert.equal(up.bodies.length, before + 1);
    const sent = up.bodies.at(-1);
    assert.equal(sent.model, "vision-upstream");
    assert.deepEqual(sent.messages, [
      { role: "system", content: "Describe images." },
      {
        role: "user",
        content: [
          { type: "text", text: "What is in" },
          { type: "image_url", image_url: { url: PNG, detail: "high" } },
          { type: "text", text: "and in" },
          { type: "image_url", image_url: { url: HTTPS } },
        ],
      },
    ]);
  }
});

test("Responses: input_image parts reach the upstream as image_url parts", async () => {
  const r = await postJson(`${s.url}/v1/responses`, {
    model: "vision",
    instructions: "Be brief.",
    input: [{ role: "user", content: [{ type: "input_image", image_url: HTTPS, detail: "low" }, { type: "input_text", text: "What is this?" }] }],
    store: false,
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.output_text ?? r.json.output[0].content[0].text, RECORDED_ANSWER);
  assert.deepEqual(up.bodies.at(-1).messages, [
    { role: "system", content: "Be brief." },
    { role: "user", content: [{ type: "image_url", image_url: { url: HTTPS, detail: "low" } }, { type: "text", text: "What is this?" }] },
  ]);
});

test("Databricks chat and Responses: image parts pass through on a remote model's endpoint", async () => {
  const c = await dbx(s, "POST", "/serving-endpoints/vision/invocations", {
    messages: [{ role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: PNG } }] }],
    max_tokens: 10,
    stream: true,
  });
  assert.equal(c.status, 200, c.text);
  assert.ok(sseData(c.text).some((e) => e !== "[DONE]" && e.choices?.[0]?.delta?.content === RECORDED_ANSWER), c.text);
  assert.deepEqual(up.bodies.at(-1).messages, [{ role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: PNG } }] }]);

  const rsp = await dbx(s, "POST", "/serving-endpoints/responses", {
    model: "vision",
    input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "Look:" }, { type: "input_image", image_url: HTTPS, detail: "auto" }] }],
  });
  assert.equal(rsp.status, 200, rsp.text);
  assert.deepEqual(up.bodies.at(-1).messages, [{ role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: HTTPS, detail: "auto" } }] }]);
});

test("the local text model refuses an image with a 400 naming the exact part, in chat, Responses and Databricks", async () => {
  const sent = up.bodies.length;
  const chat = await postJson(`${s.url}/v1/chat/completions`, {
    model: "tiny",
    messages: [
      { role: "user", content: "hello" },
      { role: "assistant", content: "hi" },
      { role: "user", content: [{ type: "text", text: "and this?" }, { type: "image_url", image_url: { url: HTTPS } }] },
    ],
    max_tokens: 4,
    stream: true,
  });
  assert.equal(chat.status, 400, chat.text);
  assert.equal(chat.json.error.param, "messages[2].content[1]");
  assert.equal(chat.json.error.code, "unsupported_content");
  assert.match(chat.json.error.message, /^messages\[2\]\.content\[1\] is an image, but the model 'tiny' reads text only/);

  const rsp = await postJson(`${s.url}/v1/responses`, {
    model: "tiny",
    instructions: "Be brief.",
    input: [
      { role: "user", content: "hello" },
      { type: "function_call", call_id: "c1", name: "lookup", arguments: "{}" },
      { type: "function_call_output", call_id: "c1", output: "nothing" },
      { role: "user", content: [{ type: "input_text", text: "and this?" }, { type: "input_image", image_url: PNG, detail: "high" }] },
    ],
    tools: [{ type: "function", name: "lookup", parameters: { type: "object", properties: {} } }],
    stream: true,
  });
  assert.equal(rsp.status, 400, rsp.text);
  assert.equal(rsp.json.error.param, "input[3].content[1]");
  assert.match(rsp.json.error.message, /^input\[3\]\.content\[1\] is an image/);

  // The token counter refuses it the same way (it would otherwise count the text alone).
  const count = await postJson(`${s.url}/v1/responses/input_tokens`, { model: "tiny", input: [{ role: "user", content: [{ type: "input_image", image_url: HTTPS }] }] });
  assert.equal(count.status, 400, count.text);
  assert.equal(count.json.error.param, "input[0].content[0]");

  const d = await dbx(s, "POST", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: PNG } }] }], max_tokens: 4 });
  assert.equal(d.status, 400, d.text);
  assert.equal(d.json.error_code, "INVALID_PARAMETER_VALUE");
  assert.match(d.json.message, /messages\[0\]\.content\[0\] is an image/);
  assert.equal(up.bodies.length, sent, "nothing went upstream");
});

test("a remote model declared without image support refuses images by position, without calling the upstream", async () => {
  const r = await startTestServer({ upstream: [{ name: "blind", url: [up.url], model: "vision-upstream", unsupported: ["images"] }], "health-interval": "0" });
  try {
    const sent = up.bodies.length;
    const res = await postJson(`${r.url}/v1/chat/completions`, {
      model: "blind",
      messages: [{ role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: HTTPS } }] }],
    });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.error.param, "messages[0].content[1]");
    assert.match(res.json.error.message, /reads text only/);
    assert.equal(up.bodies.length, sent);
  } finally {
    await r.close();
  }
});
