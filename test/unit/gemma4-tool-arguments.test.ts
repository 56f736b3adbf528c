import assert from "../helpers/assert.ts";
import { before, test } from "node:test";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { type ToolCallEvent, ToolCallParser } from "../../src/engines/llama-cpp/tool-call-parser.ts";
import { Gemma4ArgumentsReader, isGemma4Template, toolResponsesOnTurn, wantsToolResponses } from "../../src/engines/llama-cpp/gemma4-tool-calls.ts";
import { gemma4ArgumentsGrammar } from "../../src/grammar/gemma4-arguments.ts";
import { literal } from "../../src/grammar/gbnf.ts";
import { UnsupportedSchemaError } from "../../src/grammar/json-schema-to-gbnf.ts";
import { GEMMA_4_INTERLEAVED_TEMPLATE, GEMMA_4_TEMPLATE } from "../fixtures/real-templates.ts";

// Gemma 4's call notation (gemma4-tool-calls.ts, grammar/gemma4-arguments.ts): reading a call's
// arguments back into JSON, whole or a piece at a time, and the grammar built from a schema.

const Q = '<|"|>';
const CALL = `{city:${Q}Pa"ris\\n${Q},days:3,opts:{a:[1,${Q}x${Q},-2.5e3],b:true,c:null},empty:{},list:[]}`;
const JSON_ARGS = '{"city":"Pa\\"ris\\\\n","days":3,"opts":{"a":[1,"x",-2.5e3],"b":true,"c":null},"empty":{},"list":[]}';

function readAll(text: string, step: number): { json: string; rest: string } {
  const reader = new Gemma4ArgumentsReader();
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

test("gemma 4 reader: arguments become compact JSON (keys quoted, strings escaped), the same whole and a character at a time", () => {
  for (const step of [CALL.length, 1, 2, 3, 7]) {
    const { json, rest } = readAll(CALL + "<tool_call|>", step);
    assert.equal(json, JSON_ARGS, `step ${step}`);
    assert.equal(rest, "<tool_call|>");
    assert.deepEqual(JSON.parse(json), { city: 'Pa"ris\\n', days: 3, opts: { a: [1, "x", -2500], b: true, c: null }, empty: {}, list: [] });
  }
  assert.equal(readAll("{}", 1).json, "{}");
});

test("gemma 4 reader: a string is passed on as it comes, holding back only what may be the closing quote", () => {
  const reader = new Gemma4ArgumentsReader();
  assert.deepEqual(reader.read(`{text:${Q}Hello wor`), { json: '{"text":"Hello wor', used: 20, done: false });
  assert.deepEqual(reader.read("ld<|"), { json: "ld", used: 2, done: false });
  assert.deepEqual(reader.read(`<|"|>}`), { json: '"}', used: 6, done: true });
});

test("gemma 4 parser: names end at the arguments' brace, several calls follow each other", () => {
  const parser = new ToolCallParser({
    sectionPrefix: "",
    prefix: "<|tool_call>call:",
    paramsPrefix: "",
    suffix: "<tool_call|>",
    betweenCalls: "",
    sectionSuffix: "",
    encoded: { nameEnd: "{", reader: () => new Gemma4ArgumentsReader() },
  });
  const events: ToolCallEvent[] = [];
  const text = `get_weather${CALL}<tool_call|><|tool_call>call:get_time{zone:${Q}UTC${Q}}<tool_call|>`;
  for (const ch of text) events.push(...parser.push(ch));
  const calls: Array<{ name: string; args: string }> = [];
  for (const e of events) {
    if (e.type === "name") calls[e.index] = { name: e.name, args: "" };
    if (e.type === "arguments") calls[e.index].args += e.text;
  }
  assert.deepEqual(calls, [{ name: "get_weather", args: JSON_ARGS }, { name: "get_time", args: '{"zone":"UTC"}' }]);
  assert.equal(events.filter((e) => e.type === "done").length, 2);
});

const opts = { quote: "<[99]>", quoteText: Q, strict: true };

test("gemma 4 grammar: bare keys in the schema's order, required ones present, strings between quote tokens", () => {
  const { gbnf } = gemma4ArgumentsGrammar(
    { type: "object", properties: { city: { type: "string", maxLength: 5 }, days: { type: "integer", minimum: 1, maximum: 7 }, unit: { enum: ["c", "f"] } }, required: ["days"] },
    opts,
  );
  assert.match(gbnf, /^root ::= /);
  assert.ok(gbnf.includes('"city:"') && gbnf.includes('"days:"') && gbnf.includes('"unit:"'), gbnf);
  assert.ok(gbnf.includes("<[99]>"), gbnf);
  assert.ok(gbnf.indexOf('"city:"') < gbnf.indexOf('"days:"'));
  // No property at all: only `{}`.
  assert.equal(gemma4ArgumentsGrammar({ type: "object", properties: {}, additionalProperties: false }, opts).gbnf, 'root ::= "{}"');
});

test("gemma 4 grammar: what cannot be written is refused when strict and relaxed (and listed) when not", () => {
  const schema = { type: "object", properties: { "a:b": { type: "string" }, n: { type: "string", not: { const: "x" } } }, required: ["n"] };
  assert.throws(() => gemma4ArgumentsGrammar(schema, opts), UnsupportedSchemaError);
  const { relaxed } = gemma4ArgumentsGrammar(schema, { ...opts, strict: false });
  assert.deepEqual(relaxed.map((r) => r.path).sort(), ["properties.a:b", "properties.n.not"]);
  assert.throws(() => gemma4ArgumentsGrammar({ type: "object", properties: { "a:b": { type: "string" } }, required: ["a:b"] }, { ...opts, strict: false }), UnsupportedSchemaError);
});

let llama: Llama;
before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

/** Whether llama.cpp's grammar for `{x: <schema>}` (strict) accepts each argument text. */
async function argsAccept(x: unknown, texts: string[]): Promise<boolean[]> {
  const { gbnf, relaxed } = gemma4ArgumentsGrammar({ type: "object", properties: { x }, required: ["x"] }, { quote: literal(Q), quoteText: Q, strict: true });
  assert.deepEqual(relaxed, []);
  const grammar = await llama.createGrammar({ grammar: gbnf });
  return texts.map((t) => (grammar as unknown as { _testText(t: string): boolean })._testText(t));
}
const str = (v: string) => `{x:${Q}${v}${Q}}`;

test("gemma 4 grammar: enum and const values are held to the keywords beside them, as the JSON path holds them", async () => {
  // The values were written as given before any string keyword was read: "b" passed pattern "a".
  assert.deepEqual(await argsAccept({ type: "string", enum: ["xay", "b"], pattern: "a" }, [str("xay"), str("b")]), [true, false]);
  assert.deepEqual(await argsAccept({ enum: ["ab", "abcd"], maxLength: 3 }, [str("ab"), str("abcd")]), [true, false]);
  assert.deepEqual(await argsAccept({ enum: ["x", 1, 5, null], pattern: "y", maximum: 3 }, [str("x"), "{x:1}", "{x:5}", "{x:null}"]), [false, true, false, true]);
  assert.deepEqual(await argsAccept({ type: "integer", enum: [1, 1.5, "1"] }, ["{x:1}", "{x:1.5}", str("1")]), [true, false, false]);
  assert.throws(() => gemma4ArgumentsGrammar({ type: "object", properties: { x: { const: "b", pattern: "a" } } }, opts), /properties\.x\.pattern: no value of const satisfies it/);
  // const and enum together: the const only if the enum has it.
  assert.deepEqual(await argsAccept({ const: "a", enum: ["a", "b"] }, [str("a"), str("b")]), [true, false]);
  assert.throws(() => gemma4ArgumentsGrammar({ type: "object", properties: { x: { const: "c", enum: ["a", "b"] } } }, opts), /properties\.x\.const/);
});

test("gemma 4 grammar: allOf parts are combined, every pattern and the tightest bounds held, not the last part's alone", async () => {
  // The merge let a later part replace earlier keywords: only "b$" was kept, and compiled to "b".
  assert.deepEqual(await argsAccept({ type: "string", allOf: [{ pattern: "^a" }, { pattern: "b$" }] }, [str("ab"), str("axxb"), str("b"), str("a")]), [true, true, false, false]);
  assert.deepEqual(await argsAccept({ allOf: [{ type: "string", maxLength: 3 }, { maxLength: 5, minLength: 2 }] }, [str("ab"), str("abcd"), str("a")]), [true, false, false]);
  assert.deepEqual(await argsAccept({ allOf: [{ type: "integer", maximum: 3 }, { type: "number", maximum: 9, minimum: 2 }] }, ["{x:3}", "{x:5}", "{x:1}", "{x:2.5}"]), [true, false, false, false]);
  const obj = { allOf: [{ type: "object", properties: { a: { type: "string", maxLength: 1 } }, required: ["a"] }, { properties: { a: { minLength: 1 } } }] };
  assert.deepEqual(await argsAccept(obj, [`{x:{a:${Q}z${Q}}}`, `{x:{a:${Q}${Q}}}`, `{x:{a:${Q}zz${Q}}}`]), [true, false, false]);
  // What cannot be combined is refused when strict, listed when not.
  const clash = { type: "object", properties: { x: { allOf: [{ enum: [1, 2] }, { enum: [2, 3] }] } } };
  assert.throws(() => gemma4ArgumentsGrammar(clash, opts), /properties\.x\.allOf\.1\.enum/);
  assert.deepEqual(gemma4ArgumentsGrammar(clash, { ...opts, strict: false }).relaxed.map((r) => r.path), ["properties.x.allOf.1.enum"]);
  assert.throws(() => gemma4ArgumentsGrammar({ type: "object", properties: { x: { allOf: [{ type: "string" }, { type: "integer" }] } } }, opts), /properties\.x\.allOf\.1\.type/);
});

test("gemma 4 grammar: an anyOf branch is held to the keywords beside it as well, not written over them", async () => {
  // Each branch was {...beside, ...branch}: the branch's maxLength 9 replaced the 2 beside it.
  assert.deepEqual(await argsAccept({ type: "string", maxLength: 2, anyOf: [{ maxLength: 9 }, { pattern: "^z" }] }, [str("ab"), str("abcd"), str("z"), str("zzz")]), [true, false, true, false]);
  assert.deepEqual(await argsAccept({ type: "integer", maximum: 5, oneOf: [{ minimum: 3 }, { maximum: 9 }] }, ["{x:4}", "{x:7}", "{x:-1}"]), [true, false, true]);
  // A branch no value of which the keywords beside it allow is left out; the others stay.
  assert.deepEqual(await argsAccept({ type: "string", anyOf: [{ type: "integer" }, { minLength: 1 }] }, [str("a"), str(""), "{x:3}"]), [true, false, false]);
  // Annotations beside anyOf (pydantic's title) change nothing.
  assert.deepEqual(await argsAccept({ title: "X", anyOf: [{ type: "string" }, { type: "null" }] }, [str("a"), "{x:null}"]), [true, true]);
});

test("gemma 4 templates: recognised as llama.cpp recognises them; the earlier one gets results on the assistant's turn", () => {
  assert.ok(isGemma4Template(GEMMA_4_TEMPLATE) && isGemma4Template(GEMMA_4_INTERLEAVED_TEMPLATE));
  assert.ok(!wantsToolResponses(GEMMA_4_TEMPLATE) && wantsToolResponses(GEMMA_4_INTERLEAVED_TEMPLATE));
  const calls = [{ id: "c1", type: "function", function: { name: "f", arguments: {} } }, { id: "c2", type: "function", function: { name: "g", arguments: {} } }];
  const out = toolResponsesOnTurn(
    [
      { role: "user", content: "u" },
      { role: "assistant", content: "", tool_calls: calls },
      { role: "tool", tool_call_id: "c1", content: "ID1" },
      { role: "tool", tool_call_id: "c2", content: "ID2" },
      { role: "assistant", content: "done" },
    ],
    [{ t: 1 }, undefined],
  );
  assert.deepEqual(out, [
    { role: "user", content: "u" },
    { role: "assistant", tool_calls: calls, tool_responses: [{ name: "fID1", response: { t: 1 } }, { name: "g", response: "ID2" }], content: "done" },
  ]);
});
