import assert from "../helpers/assert.ts";
import { before, test } from "node:test";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { customToolGrammar } from "../../src/grammar/custom-tool-grammar.ts";
import { jsonSchemaToGbnf } from "../../src/grammar/json-schema-to-gbnf.ts";

// A repeated group that holds a repetition of its own. llama.cpp counts the rules such a group
// generates against the count applied to it (its limit is 2,000), so `("d" "d"{0,999}){0,4}` was
// refused when the grammar loaded: a pattern like `^(d{1,1000}){1,5}$` or the regex custom tool
// `((a|b){1,500}){1,500}` was a 500 ("Failed to parse grammar"), found by fuzzing a running server.
// The cases below open each repeated group with its own character, so they are unambiguous and
// llama.cpp checks a text in linear time.

let llama: Llama;

before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

/** llama.cpp's own verdict on a whole text (LlamaGrammar's internal `_testText`, as json-schema-to-gbnf.test.ts uses). */
async function matcher(gbnf: string): Promise<(text: string) => boolean> {
  const grammar = (await llama.createGrammar({ grammar: gbnf })) as unknown as { _testText(text: string): boolean };
  assert.equal(typeof grammar._testText, "function", "LlamaGrammar._testText is gone");
  return (text) => grammar._testText(text);
}

test("a pattern whose repeated group holds a long repetition loads in llama.cpp and means what it says", async () => {
  const accepts = await matcher(jsonSchemaToGbnf({ type: "string", pattern: "^(xd{1,1000}){1,5}$" }));
  for (const text of ["xd", `x${"d".repeat(1000)}`, `x${"d".repeat(1000)}`.repeat(5), "xdxdxdxdxd"]) assert.ok(accepts(JSON.stringify(text)), text.slice(0, 20));
  for (const text of ["", "x", `x${"d".repeat(1001)}`, "xd".repeat(6), "xdd x"]) assert.ok(!accepts(JSON.stringify(text)), text.slice(0, 20));
});

test("nested repeated groups load at every depth", async () => {
  const accepts = await matcher(jsonSchemaToGbnf({ type: "string", pattern: "^(x(ab{1,60}){1,40}){1,40}$" }));
  assert.ok(accepts('"xab"'));
  assert.ok(accepts(JSON.stringify(`x${"ab".repeat(40)}`.repeat(40))));
  assert.ok(accepts(JSON.stringify(`xa${"b".repeat(60)}xab`)));
  assert.ok(!accepts(JSON.stringify(`xa${"b".repeat(61)}`)));
  assert.ok(!accepts(JSON.stringify(`x${"ab".repeat(41)}`)));
  assert.ok(!accepts('"x"'));
});

test("a regex custom tool of repeated repetitions loads", async () => {
  const accepts = await matcher(customToolGrammar({ type: "grammar", syntax: "regex", definition: "(x(a|b){1,500}){1,500}" }));
  assert.ok(accepts("xab"));
  assert.ok(accepts(`x${"ab".repeat(250)}`.repeat(3)));
  assert.ok(!accepts(""));
  assert.ok(!accepts(`x${"a".repeat(501)}`));
  assert.ok(!accepts("xabc"));
});

test("a repeated group without inner repetitions stays inline", () => {
  // Nothing to hoist: an alternation in a group generates one rule, within any count.
  const gbnf = jsonSchemaToGbnf({ type: "string", pattern: "^(a|b){0,1500}$" });
  assert.doesNotMatch(gbnf, /^root-pattern ::=/m, gbnf);
});
