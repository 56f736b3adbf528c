import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { EXTRA_TOKENS, ensureFixtureModel, type FixtureSpec, TINY_SPEC } from "../fixtures/models.ts";
import { QWEN_3_TEMPLATE } from "../fixtures/real-templates.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// Qwen 3's template writes a call as "\n<tool_call>\n{...}\n</tool_call>" after an answer's text,
// and the model writes `<tool_call>` first when it calls at once (and after a thinking section,
// whose trailing newlines are not the answer's). The call must start at the marker itself: with
// the template's newline in the trigger, a tool_choice "auto" call stayed text in `content`. The
// fixture is the tiny model with Qwen 3's real template and <tool_call>/<think> as single tokens
// (as in Qwen's vocabulary); a logit bias makes it choose to call.

const QWEN3_SPEC: FixtureSpec = { ...TINY_SPEC, name: "plinth-qwen3", seed: 3142, chatTemplate: QWEN_3_TEMPLATE, extraTokens: true };

let server: TestServer;
before(async () => {
  server = await startTestServer({ model: [`qwen3=${await ensureFixtureModel(QWEN3_SPEC)}`] });
});
after(async () => {
  await server?.close();
});

const weather = { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false };
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: weather } }];

const chat = async (extra: Record<string, unknown>) => {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "qwen3",
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: TOOLS,
      max_tokens: 60,
      // The model's choice to call: its first answer token is the call marker.
      logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 },
      ...extra,
    }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text);
};

test("qwen3: a call the model opens with <tool_call> at the answer's start is a tool call in auto mode, not text", async () => {
  for (const off of [{ reasoning_effort: "none" }, { chat_template_kwargs: { enable_thinking: false } }]) {
    for (let seed = 1; seed <= 3; seed++) {
      const r = await chat({ ...off, seed });
      const message = r.choices[0].message;
      assert.doesNotMatch(message.content ?? "", /tool_call/, JSON.stringify(r));
      assert.ok(message.tool_calls?.length >= 1, JSON.stringify(r));
      assert.equal(message.tool_calls[0].function.name, "get_weather");
      if (r.choices[0].finish_reason === "tool_calls") assert.equal(typeof JSON.parse(message.tool_calls[0].function.arguments).city, "string");
    }
  }
});
