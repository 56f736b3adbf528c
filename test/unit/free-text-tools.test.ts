import assert from "../helpers/assert.ts";
import { before, test } from "node:test";
import type { Llama } from "node-llama-cpp";
import { ApiError } from "../../src/core/errors.ts";
import { freeTextArguments } from "../../src/engines/llama-cpp/free-text-tools.ts";
import { getRuntime } from "../../src/engines/llama-cpp/runtime.ts";
import { jsonStringGrammar } from "../../src/grammar/json-string-escape.ts";

// Free-text tool inputs travel as {"input": "…"}: the grammar of the input is rewritten for its
// JSON-escaped spelling. Checked with llama.cpp's own grammar engine (no model): members of the
// original language, JSON-encoded, are accepted; anything else is not.

let llama: Llama;
before(async () => {
  llama = await getRuntime({ gpu: "off", threads: 1 });
});

async function accepts(gbnf: string): Promise<(text: string) => boolean> {
  const grammar = await llama.createGrammar({ grammar: gbnf });
  const internal = grammar as unknown as { _testText(text: string): boolean };
  return (text) => internal._testText(text);
}

/** The arguments object a model writes for an input. */
const args = (input: string) => `{"input": ${JSON.stringify(input)}}`;

test("a Lark grammar: members with quotes, backslashes and newlines pass once JSON-encoded", async () => {
  const lark = 'start: stmt (";" NL stmt)*\nstmt: "SAY " ESCAPED_STRING | "PATH " /[a-z\\\\\\\\]+/\nNL: "\\n"\n%import common.ESCAPED_STRING';
  const check = await accepts(freeTextArguments({ syntax: "lark", definition: lark }, 0));
  for (const member of ['SAY "hi"', 'SAY "a \\" b"', "PATH a\\b", 'SAY "x";\nPATH c'])
    assert.ok(check(args(member)), `accepts ${JSON.stringify(member)}`);
  for (const other of ["SAY hi", "PATH A", 'SAY "x";PATH c'])
    assert.ok(!check(args(other)), `rejects ${JSON.stringify(other)}`);
  assert.ok(!check('{"input": "SAY \\u0022hi\\u0022"}'), "one spelling per character: \\u0022 is not \\\"");
});

test("a regular expression, and plain text", async () => {
  const regex = await accepts(freeTextArguments({ syntax: "regex", definition: "^[0-9]{3}-\\t[a-z]+$" }, 0));
  assert.ok(regex(args("123-\tabc")));
  assert.ok(!regex(args("12-\tabc")));
  const text = await accepts(freeTextArguments({ syntax: "text" }, 0));
  for (const t of ["", "anything \"at\" all\n\\ é 🎉"]) assert.ok(text(args(t)), JSON.stringify(t));
  assert.ok(!text('{"input": 3}'));
});

test("character classes and negations keep their meaning when escaped", async () => {
  const gbnf = `root ::= "\\"" body "\\""\n${jsonStringGrammar('body ::= "<" [^>"]* ">" [\\x00-\\x1f"a]')}`;
  const ok = await accepts(gbnf);
  for (const member of ["<x\\y\n>a", "<>\u0001", '<z>"']) assert.ok(ok(JSON.stringify(member)), `accepts ${JSON.stringify(member)}`);
  for (const other of ['<">a', "<x>b"]) assert.ok(!ok(JSON.stringify(other)), `rejects ${JSON.stringify(other)}`);
});

test("a grammar that cannot be converted is a 400 naming the tool's input", () => {
  assert.throws(
    () => freeTextArguments({ syntax: "lark", definition: "start: a\n%declare X" }, 2),
    (e: unknown) => e instanceof ApiError && e.status === 400 && e.field === "tools[2].input" && /declare/.test(e.message),
  );
});
