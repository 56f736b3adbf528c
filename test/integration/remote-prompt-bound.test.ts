import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { chatPromptBound } from "../../src/engines/remote/prompt-bound.ts";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import { postJson, useTestServer } from "../helpers/server.ts";

// The bound that lets a router skip the upstream's /tokenize must never be below the real count.
// Checked against the fixture models' real tokenizers (SentencePiece pieces, Llama 2 style
// SentencePiece with byte fallback, GPT-2 style byte-level BPE) through /tokenize, on texts that
// are hard for each: unknown scripts (byte fallback), emoji, combining marks, NFKC-expanding
// characters, runs of spaces and newlines, and the longest of them near a whole context.
const s = useTestServer({}, { tokenizers: true });

const TEXTS = [
  "Hello, world!",
  "   leading spaces and\n\n\nnewlines\t\ttabs   ",
  "😀🙈🚀 emoji 👩‍👩‍👧‍👦 family",
  "Ελληνικά, русский, 中文, 日本語, 한국어, العربية",
  "e\u0301 a\u0308 combining marks; ﷺ ㍿ ﬁ NFKC expanders",
  "x",
  "",
  Array.from({ length: 200 }, (_, i) => `word${i} ${String.fromCodePoint(0x4e00 + i)}`).join(" "),
];

function request(messages: Message[]): GenerationRequest {
  return { model: "m", prompt: { kind: "chat", messages }, sampling: {} as GenerationRequest["sampling"], stop: [], n: 1 };
}

for (const model of ["tiny", "spm", "bpe"]) {
  test(`the prompt bound is at least the real token count on '${model}'`, async () => {
    for (const text of TEXTS) {
      const messages: Message[] = [
        { role: "system", content: text },
        { role: "user", content: text, name: "ann" },
        { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "lookup", arguments: JSON.stringify({ q: text }) }] },
        { role: "tool", content: text, toolCallId: "call_1" },
        { role: "user", content: text },
      ];
      const wire = [
        { role: "system", content: text },
        { role: "user", content: text, name: "ann" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: JSON.stringify({ q: text }) } }] },
        { role: "tool", content: text, tool_call_id: "call_1" },
        { role: "user", content: text },
      ];
      const r = await postJson(`${s.url}/tokenize`, { model, messages: wire });
      assert.equal(r.status, 200, r.text);
      const bound = chatPromptBound(request(messages))!;
      assert.ok(bound >= r.json.count, `${model}: bound ${bound} < ${r.json.count} tokens for ${JSON.stringify(text.slice(0, 40))}`);
    }
  });
}

test("no bound where the template's own text can be long: tools, schemas, thinking switches, images", () => {
  const base = request([{ role: "user", content: "hi" }]);
  assert.ok(chatPromptBound(base)! > 0);
  assert.equal(chatPromptBound({ ...base, tools: [{ name: "f", parameters: {}, strict: false }] }), undefined);
  assert.equal(chatPromptBound({ ...base, responseFormat: { type: "json_object" } }), undefined);
  assert.equal(chatPromptBound({ ...base, reasoning: { enabled: false } }), undefined);
  assert.equal(chatPromptBound(request([{ role: "user", content: "", parts: [{ type: "image", url: "https://x/y.png" }] }])), undefined);
  assert.equal(chatPromptBound({ ...base, prompt: { kind: "text", text: "hi" } }), undefined);
});
