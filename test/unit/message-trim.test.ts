import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { Message } from "../../src/core/types.ts";
import { MessageTrim } from "../../src/engines/llama-cpp/message-trim.ts";
import { CHATML_TEMPLATE } from "../fixtures/models.ts";
import { COMMAND_R_PLUS_TOOL_USE_TEMPLATE, GEMMA_2_TEMPLATE, GLM_4_6_TEMPLATE, LLAMA_2_CHAT_TEMPLATE } from "../fixtures/real-templates.ts";

// Which ends of each message's text a template trims, found by rendering the conversation's shape
// with probe texts (message-trim.ts); the texts are trimmed before rendering as the template would.

const texts = (trim: MessageTrim | undefined, messages: Message[]) => (trim ? trim.apply(messages) : messages).map((m) => m.content);
const msg = (role: Message["role"], content: string): Message => ({ role, content });

test("Llama 2: every text is stripped, except the first user text after a system message, which only loses its end", () => {
  const trim = MessageTrim.of(LLAMA_2_CHAT_TEMPLATE);
  assert.deepEqual(texts(trim, [msg("user", "  a \n")]), ["a"]);
  assert.deepEqual(texts(trim, [msg("user", " a "), msg("assistant", " b "), msg("user", " c ")]), ["a", "b", "c"]);
  // `('<<SYS>>\n' + system + '\n<</SYS>>\n\n' + user).strip()`: the system text is inside, the user's start too.
  assert.deepEqual(texts(trim, [msg("system", " s "), msg("user", " a "), msg("assistant", " b "), msg("user", " c ")]), [" s ", " a", "b", "c"]);
  // Tool turns cannot be probed: each role loses the ends it loses in every fixed probe (a user
  // text its end, an answer both).
  const calling: Message = { role: "assistant", content: " b ", toolCalls: [{ id: "c", name: "f", arguments: "{}" }] };
  assert.deepEqual(texts(trim, [msg("user", " a "), calling]), [" a", "b"]);
});

test("Command R+ (tool_use template, which needs `tools` to render at all): user, system and assistant texts are trimmed", () => {
  const trim = MessageTrim.of(COMMAND_R_PLUS_TOOL_USE_TEMPLATE);
  assert.deepEqual(texts(trim, [msg("user", "  naïve \n\n  indented\tTab  ")]), ["naïve \n\n  indented\tTab"]);
  // The first system message is the preamble's text, written as it is; later ones are trimmed.
  assert.deepEqual(texts(trim, [msg("system", " s "), msg("user", " a "), msg("assistant", " b "), msg("user", " c ")]), [" s ", "a", "b", "c"]);
});

test("templates trimming whole roles keep doing so; a template refusing a probe shape falls back to the roles", () => {
  // Gemma 2 refuses a system role: its system text is merged later, untrimmed as before.
  const gemma = MessageTrim.of(GEMMA_2_TEMPLATE);
  assert.deepEqual(texts(gemma, [msg("system", " s "), msg("user", " a ")]), [" s ", "a"]);
  assert.deepEqual(texts(gemma, [msg("user", " a "), msg("assistant", " b ")]), ["a", "b"]);
  // GLM 4.6 strips answers only (and `.lstrip('\n')` is no trim).
  const glm = MessageTrim.of(GLM_4_6_TEMPLATE);
  assert.deepEqual(texts(glm, [msg("user", "\n a \n"), msg("assistant", "\n b \n"), msg("user", " c ")]), ["\n a \n", "b", " c "]);
  // A template that trims nothing is not probed at all.
  assert.equal(MessageTrim.of(CHATML_TEMPLATE), undefined);
});
