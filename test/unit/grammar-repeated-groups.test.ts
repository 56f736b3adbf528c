import assert from "../helpers/assert.ts";
import { before, test } from "node:test";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { customToolGrammar } from "../../src/grammar/custom-tool-grammar.ts";
import { compileJsonSchema, jsonSchemaToGbnf } from "../../src/grammar/json-schema-to-gbnf.ts";
import { parsePattern, readsAmbiguously } from "../../src/grammar/regex-to-gbnf.ts";

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

// Repeats nested so that one text reads many ways (`(a{2,9}){2,9}`: which a ends which group?) made
// llama.cpp keep a parse stack for every way: ((((((a{2,9}){2,9}){2,9}){2,9}){2,9}){2,9}) took 10 s
// for a 60-token answer, and every other request on the decode thread waited. Such patterns are
// compiled as a DFA, or refused when the automaton would be too large.

test("which patterns read ambiguously: a repeat inside a repeat whose end its next character does not tell", () => {
  for (const p of ["^(\\w+\\s?)+$", "^(a{2,9}){2,9}$", "((a|b){1,500}){1,500}", "^(a?){1,9}$", "^(a+b?)*$"])
    assert.ok(readsAmbiguously(parsePattern(p)), p);
  for (const p of ["^(\\d{1,3}\\.){3}\\d{1,3}$", "^[a-z]+(-[a-z]+)*$", "^(xd{1,1000}){1,5}$", "^([a-z0-9]+\\.)*[a-z0-9]+$", "^a{2,9}a*$", "^([A-Z][a-z]*)+$", "(x(a|b)+){2}"])
    assert.ok(!readsAmbiguously(parsePattern(p)), p);
});

test("an ambiguous pattern becomes a DFA that llama.cpp reads as the pattern means", async () => {
  const words = await matcher(jsonSchemaToGbnf({ type: "string", pattern: "^(\\w+\\s?)+$" }));
  for (const text of ["a", "ab cd", "ab cd ", "a b\tc"]) assert.ok(words(JSON.stringify(text)), text);
  for (const text of ["", " a", "a  b", "a-b"]) assert.ok(!words(JSON.stringify(text)), text);
  const counted = await matcher(jsonSchemaToGbnf({ type: "string", pattern: "^(a{2,3}){2,3}$" }));
  for (let n = 0; n <= 10; n++) assert.equal(counted(JSON.stringify("a".repeat(n))), n >= 4 && n <= 9, `${n} a's`);
  const tool = await matcher(customToolGrammar({ type: "grammar", syntax: "regex", definition: "((a|b){1,3}){2}" }));
  for (const text of ["ab", "abab", "aaaaaa"]) assert.ok(tool(text), text);
  for (const text of ["a", "aaaaaaa", "abc"]) assert.ok(!tool(text), text);
});

test("an ambiguous pattern too large for an automaton is refused when strict and dropped (said) when not", () => {
  const schema = { type: "string", pattern: "((((((a{2,9}){2,9}){2,9}){2,9}){2,9}){2,9})" };
  assert.throws(() => jsonSchemaToGbnf(schema), /pattern.*automaton states/);
  const relaxed = compileJsonSchema(schema, { strict: false });
  assert.deepEqual(relaxed.relaxed.map((r) => r.path), ["pattern"]);
  assert.throws(() => customToolGrammar({ type: "grammar", syntax: "regex", definition: "((a|b){1,500}){1,500}" }), /automaton states/);
});
