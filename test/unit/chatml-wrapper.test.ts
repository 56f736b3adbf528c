import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { ChatMLChatWrapper, JinjaTemplateChatWrapper, LlamaText, SpecialToken } from "node-llama-cpp";
import type { Message } from "../../src/core/types.ts";
import { type ApiError, withWireParam } from "../../src/core/errors.ts";
import { toChatHistory } from "../../src/engines/llama-cpp/chat-history.ts";
import { FaithfulChatMLChatWrapper } from "../../src/engines/llama-cpp/chatml-wrapper.ts";
import { CHATML_TEMPLATE } from "../fixtures/models.ts";

// The ChatML wrapper Plinth renders with, against the fixture's own Jinja template rendered by
// node-llama-cpp's Jinja wrapper (message for message, as llama-server and vLLM render it). Checked
// against llama-server itself on the same file while it was written: the token ids were equal.

const conversations: Record<string, Message[]> = {
  "system and user": [
    { role: "system", content: "A" },
    { role: "user", content: "Hi" },
  ],
  "two system messages": [
    { role: "system", content: "A" },
    { role: "system", content: "B" },
    { role: "user", content: "Hi" },
  ],
  "an empty user message": [
    { role: "user", content: "" },
    { role: "user", content: "Hi" },
  ],
  "an empty assistant turn": [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "" },
    { role: "user", content: "Again" },
  ],
  "a system message mid-conversation": [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Yo" },
    { role: "system", content: "Be brief" },
    { role: "user", content: "Again" },
  ],
  "an assistant turn last (continued)": [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Yo" },
  ],
};

/** The text without its leading BOS (the renderer keeps it only for models that add one). */
const text = (t: LlamaText) => LlamaText(t.values[0] instanceof SpecialToken ? t.values.slice(1) : t.values).toString();

for (const [name, messages] of Object.entries(conversations)) {
  test(`ChatML as the template writes it: ${name}`, () => {
    const chatHistory = toChatHistory(messages);
    const ours = text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory }).contextText);
    const jinja = new JinjaTemplateChatWrapper({ template: CHATML_TEMPLATE, joinAdjacentMessagesOfTheSameType: false });
    assert.equal(ours, text(jinja.generateContextState({ chatHistory }).contextText));
  });
}

test("node-llama-cpp's own ChatML wrapper differs there (why ours exists); the plain conversation is the same in both", () => {
  const chatHistory = toChatHistory(conversations["two system messages"]);
  assert.notEqual(text(new ChatMLChatWrapper().generateContextState({ chatHistory }).contextText), text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory }).contextText));
  const plain = toChatHistory(conversations["system and user"]);
  assert.equal(text(new ChatMLChatWrapper().generateContextState({ chatHistory: plain }).contextText), text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory: plain }).contextText));
});

test("tools go into the first system block after its text, or a block of their own", () => {
  const functions = { lookup: { description: "Looks a word up", params: { type: "object", properties: { q: { type: "string" } } } } } as const;
  const withSystem = text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory: toChatHistory(conversations["two system messages"]), availableFunctions: functions }).contextText);
  assert.match(withSystem, /^<\|im_start\|>system\nA\n\n[^]*lookup[^]*<\|im_end\|>\n<\|im_start\|>system\nB<\|im_end\|>\n/);
  const without = text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory: toChatHistory([{ role: "user", content: "Hi" }]), availableFunctions: functions }).contextText);
  assert.match(without, /^<\|im_start\|>system\n[^]*lookup[^]*<\|im_end\|>\n<\|im_start\|>user\nHi<\|im_end\|>\n<\|im_start\|>assistant\n$/);
});

test("call arguments and tool results nested thousands deep stay text instead of running the stack out", () => {
  const nested = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
  const history = (text: string) =>
    toChatHistory([
      { role: "user", content: "hi" },
      { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "f", arguments: text }] },
      { role: "tool", toolCallId: "c1", content: "[".repeat(5000) + "]".repeat(5000) },
    ]);
  // 5,000 deep: writing the value out again by recursion (a 500 before) is never tried.
  const deep = history(nested(5000))[1];
  assert.ok(deep.type === "model" && typeof deep.response[0] === "object" && deep.response[0].type === "functionCall");
  assert.equal(deep.response[0].params, nested(5000));
  assert.equal(deep.response[0].result, "[".repeat(5000) + "]".repeat(5000));
  // An ordinary depth still goes in as its value.
  const shallow = history(nested(20))[1];
  assert.ok(shallow.type === "model" && typeof shallow.response[0] === "object" && shallow.response[0].type === "functionCall");
  assert.equal(typeof shallow.response[0].params, "object");
});

test("a call sent back with empty arguments is a call without arguments, rendered as `{}`, not as empty text", () => {
  // Clients send "" for a function that takes no arguments (vLLM's no-args tool test sends both);
  // kept as text, a template wrote `"arguments": }`.
  const functions = { get_time: { description: "The time now", params: { type: "object", properties: {} } } } as const;
  const rendered = (args: string) => {
    const chatHistory = toChatHistory([
      { role: "user", content: "What time is it?" },
      { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "get_time", arguments: args }] },
      { role: "tool", toolCallId: "c1", content: "noon" },
    ]);
    const call = chatHistory[1];
    assert.ok(call.type === "model" && typeof call.response[0] === "object" && call.response[0].type === "functionCall");
    assert.deepEqual(call.response[0].params, {}, JSON.stringify(args));
    return text(new FaithfulChatMLChatWrapper().generateContextState({ chatHistory, availableFunctions: functions }).contextText);
  };
  assert.ok(rendered("{}").includes("get_time"), rendered("{}"));
  assert.equal(rendered(""), rendered("{}"));
  assert.equal(rendered(" \n"), rendered("{}"));
});

test("a tool result that answers no earlier call is refused by its field alone, not by the canonical message's number", () => {
  // Canonical positions are no request's own (a dialect puts instructions first, merges calls):
  // the message says only what the dialect names the field.
  const messages: Message[] = [
    { role: "system", content: "be brief" },
    { role: "user", content: "hi" },
    { role: "tool", content: "x", toolCallId: "c9" },
  ];
  const err = (() => {
    try {
      toChatHistory(messages);
    } catch (e) {
      return e;
    }
  })();
  const named = withWireParam(err, (field) => (field === "prompt.messages[2].toolCallId" ? "input[1].call_id" : null)) as ApiError;
  assert.equal(named.param, "input[1].call_id");
  assert.equal(named.message, "A tool result's call id (input[1].call_id) matches no earlier assistant tool call.");
});
