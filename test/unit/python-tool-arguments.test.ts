import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Template } from "@huggingface/jinja";
import { type ToolCallEvent, ToolCallParser } from "../../src/engines/llama-cpp/tool-call-parser.ts";
import { isLfm2Template, PythonArgumentsReader } from "../../src/engines/llama-cpp/python-tool-calls.ts";
import { renderJinjaLikePython } from "../../src/engines/llama-cpp/jinja-python.ts";
import { pythonArgumentsGrammar, pythonLiterals } from "../../src/grammar/python-arguments.ts";
import { LFM2_5_TEMPLATE, LFM2_TEMPLATE, GEMMA_4_TEMPLATE } from "../fixtures/real-templates.ts";

// LFM2's Python-call notation (python-tool-calls.ts, grammar/python-arguments.ts): reading keyword
// arguments back into JSON, whole or a piece at a time, the grammar built from them, and the
// Python spellings the template writes.

const CALL = `city="Pa\\"ris\\n", days=3, ok=True, none=None, x=false, opts={"a": [1, 'it\\'s', -2.5e3], "b": true}, l=['a', True, None])`;
const JSON_ARGS = '{"city": "Pa\\"ris\\n", "days": 3, "ok": true, "none": null, "x": false, "opts": {"a": [1, "it\'s", -2.5e3], "b": true}, "l": ["a", true, null]}';

function readAll(text: string, step: number): { json: string; rest: string } {
  const reader = new PythonArgumentsReader();
  let json = "";
  let pending = "";
  for (let i = 0; i < text.length; i += step) {
    pending += text.slice(i, i + step);
    const r = reader.read(pending);
    json += r.json;
    pending = pending.slice(r.used);
    if (r.done) return { json, rest: pending + text.slice(i + step) };
  }
  return { json, rest: pending };
}

test("lfm2 reader: keyword arguments become a JSON object (Python's literals and quotes turned into JSON's), the same whole and a character at a time", () => {
  for (const step of [CALL.length + 2, 1, 2, 3, 7]) {
    const { json, rest } = readAll(`${CALL}]`, step);
    assert.equal(json, JSON_ARGS, `step ${step}`);
    assert.equal(rest, ")]");
    assert.deepEqual(JSON.parse(json), { city: 'Pa"ris\n', days: 3, ok: true, none: null, x: false, opts: { a: [1, "it's", -2500], b: true }, l: ["a", true, null] });
  }
  assert.deepEqual(readAll(")", 1), { json: "{}", rest: ")" });
  assert.equal(readAll(`s='say "hi"')`, 1).json, '{"s": "say \\"hi\\""}');
});

test("lfm2 reader: a string is passed on as it comes; only a word cut by the end of the text is held back", () => {
  const reader = new PythonArgumentsReader();
  assert.deepEqual(reader.read('text="Hello wor'), { json: '{"text": "Hello wor', used: 15, done: false });
  assert.deepEqual(reader.read('ld", flag=Tr'), { json: 'ld", "flag": ', used: 10, done: false });
  // (The caller passes what was not used again, with what came since.)
  assert.deepEqual(reader.read("True)"), { json: "true}", used: 4, done: true });
});

test("lfm2 parser: a turn's calls are one list, each name ending at its `(`, `, ` between calls", () => {
  const parser = new ToolCallParser({
    sectionPrefix: "<|tool_call_start|>[",
    prefix: "",
    paramsPrefix: "(",
    suffix: ")",
    betweenCalls: ", ",
    sectionSuffix: "]<|tool_call_end|>",
    encoded: { nameEnd: "(", reader: () => new PythonArgumentsReader() },
  });
  const events: ToolCallEvent[] = [];
  for (const ch of `get_weather(${CALL}, get_time(zone="UTC"), ping()]<|tool_call_end|>`) events.push(...parser.push(ch));
  const calls: Array<{ name: string; args: string }> = [];
  for (const e of events) {
    if (e.type === "name") calls[e.index] = { name: e.name, args: "" };
    else if (e.type === "arguments") calls[e.index].args += e.text;
  }
  assert.deepEqual(calls, [
    { name: "get_weather", args: JSON_ARGS },
    { name: "get_time", args: '{"zone": "UTC"}' },
    { name: "ping", args: "{}" },
  ]);
  assert.equal(events.filter((e) => e.type === "done").length, 3);
});

test("lfm2 grammar: arguments in the schema's order, the required ones present, Python's literals where the schema allows them", () => {
  const gbnf = pythonArgumentsGrammar([
    { name: "city", required: true, gbnf: 'root ::= "\\"P\\""', literals: [] },
    { name: "metric", required: false, gbnf: 'root ::= "true" | "false"', literals: ["True", "False"] },
    { name: "note", required: false, gbnf: 'root ::= "null"', literals: ["None"] },
  ]);
  assert.match(gbnf, /^root ::= k\d+$/m);
  assert.match(gbnf, /"city=" \( p0-root \)/);
  assert.match(gbnf, /"metric=" \( p1-root \| "True" \| "False" \)/);
  assert.match(gbnf, /"note=" \( p2-root \| "None" \)/);
  assert.match(gbnf, /", "/);
  assert.equal(pythonArgumentsGrammar([]), 'root ::= ""');
  assert.deepEqual(pythonLiterals({ type: "boolean" }, {}), ["True", "False"]);
  assert.deepEqual(pythonLiterals({ type: ["string", "null"] }, {}), ["None"]);
  assert.deepEqual(pythonLiterals({ anyOf: [{ type: "integer" }, { const: false }] }, {}), ["False"]);
  assert.deepEqual(pythonLiterals({ $ref: "#/$defs/b" }, { $defs: { b: { type: "boolean" } } }), ["True", "False"]);
  assert.deepEqual(pythonLiterals({}, {}), ["True", "False", "None"]);
  assert.deepEqual(pythonLiterals({ type: "string", maxLength: 3 }, {}), []);
  assert.deepEqual(pythonLiterals({ items: { type: "integer" } }, {}), []);
});

test("lfm2 templates are recognised as llama.cpp recognises them", () => {
  assert.ok(isLfm2Template(LFM2_TEMPLATE));
  assert.ok(isLfm2Template(LFM2_5_TEMPLATE));
  assert.ok(!isLfm2Template(GEMMA_4_TEMPLATE));
});

test("jinja: `|string` of a list, a boolean and None is Python's, as the LFM2.5 template needs", () => {
  renderJinjaLikePython();
  const t = new Template("{{ l | string }} {{ b | string }} {{ n | string }} {{ 3 | string }}");
  assert.equal(t.render({ l: ["a", true, null, 2.5, { k: "v" }], b: false, n: null }), "['a', True, None, 2.5, {'k': 'v'}] False None 3");
});

test("a list's min and max render as Python's (MiniCPM5's template counts calls with `[a, b]|min`)", () => {
  renderJinjaLikePython();
  const t = new Template("{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'a'] | min }} {% set n = [x, y]|min %}{{ n + 1 }}");
  assert.equal(t.render({ x: 4, y: 0 }), "1 3 a 1");
});
