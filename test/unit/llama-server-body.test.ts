import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { ApiError } from "../../src/core/errors.ts";
import { toLlamaServerBody } from "../../src/engines/remote/llama-server.ts";
import { patternGrammar } from "../../src/grammar/schema-grammar.ts";

test("a regex answer format reaches llama-server as the GBNF grammar it takes, with llama-server's own field names", () => {
  const out = toLlamaServerBody({ model: "m", structured_outputs: { regex: "[0-9]{2}" }, repetition_penalty: 1.1, reasoning: { budget_tokens: 8 } });
  assert.equal(out.structured_outputs, undefined);
  assert.equal(typeof out.grammar, "string");
  assert.match(out.grammar as string, /^root ::=/m);
  assert.equal(out.repeat_penalty, 1.1);
  assert.equal(out.thinking_budget_tokens, 8);
  // A body without one gets no grammar.
  assert.equal(toLlamaServerBody({ model: "m" }).grammar, undefined);
});

test("a pattern that cannot become a grammar is a 400 about the answer format", () => {
  assert.throws(
    () => patternGrammar("(a"),
    (err: unknown) => err instanceof ApiError && err.status === 400 && err.field === "responseFormat.pattern",
  );
});
