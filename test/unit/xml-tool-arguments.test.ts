import assert from "../helpers/assert.ts";
import { before, test } from "node:test";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { type ToolCallEvent, ToolCallParser } from "../../src/engines/llama-cpp/tool-call-parser.ts";
import { xmlLayoutOf } from "../../src/engines/llama-cpp/xml-tool-calls.ts";
import { closeFreeLang, isRawString, rawStringGrammar, resolveLocalRef, xmlArgumentsGrammar } from "../../src/grammar/xml-arguments.ts";
import { langMatcher } from "../../src/grammar/automaton.ts";
import { LIBRARY_FORMAT_PATTERNS } from "../../src/grammar/json-schema-to-gbnf.ts";

// Qwen3-Coder's XML parameters read back into JSON arguments, and the raw-string grammar's
// exclusion of the closing tag. (The integration tests run both against a model: chat-tool-xml-args.)

const qwen = xmlLayoutOf("<tool_call> <function= <parameter=")!;

/** The calls in `text` (after the opening), fed `piece` characters at a time. */
function read(text: string, raw: Record<string, string[]>, piece: number, layout = qwen) {
  const p = new ToolCallParser({ ...layout.format, xml: { tags: layout.tags, rawParams: new Map(Object.entries(raw).map(([k, v]) => [k, new Set(v)])) } });
  const events: ToolCallEvent[] = [];
  for (let i = 0; i < text.length; i += piece) events.push(...p.push(text.slice(i, i + piece)));
  const calls: Array<{ name: string; args: string }> = [];
  for (const e of events) {
    if (e.type === "name") calls[e.index] = { name: e.name, args: "" };
    if (e.type === "arguments") calls[e.index].args += e.text;
  }
  return { calls, done: events.filter((e) => e.type === "done").length };
}

test("Qwen3-Coder parameters become a JSON object: strings as strings (tags and quotes inside kept), other values as JSON or, when not JSON, as strings", () => {
  const text =
    'get_weather>\n<parameter=city>\nSaint "E" <b>\n</parameter\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{"a": [1]}\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n</function>\n</tool_call>' +
    "\n<tool_call>\n<function=now>\n</function>\n</tool_call>";
  for (const piece of [1, 2, 3, 7, 1000]) {
    const { calls, done } = read(text, { get_weather: ["city"] }, piece);
    assert.equal(done, 2);
    assert.deepEqual(calls.map((c) => c.name), ["get_weather", "now"]);
    assert.deepEqual(JSON.parse(calls[0].args), { city: 'Saint "E" <b>\n</parameter', days: 3, opts: { a: [1] }, flag: "True" });
    assert.equal(calls[1].args, "{}");
  }
});

test("a raw string value never contains the closing tag, nor ends where the tag would close it early", () => {
  const close = "\n</parameter>\n";
  const { gbnf } = rawStringGrammar({ type: "string" }, close, true, "");
  assert.match(gbnf, /^root ::= /);
  // The language the grammar is written from (as an automaton).
  const allowed = langMatcher(closeFreeLang(close));
  for (const s of ["", "a", "\n</parameter", "<b>\n</b>", "\n</parameter>x"]) assert.ok(allowed(s), JSON.stringify(s));
  for (const s of ["a\n</parameter>", "x\n</parameter>\ny", close]) assert.ok(!allowed(s), JSON.stringify(s));
  // Enums keep their values; one that holds the tag cannot be written and is left out.
  assert.match(rawStringGrammar({ enum: ["a", `b${close}`] }, close, true, "").gbnf, /^root ::= "a"$/m);
  assert.throws(() => rawStringGrammar({ type: "string", minLength: 3, maxLength: 2 }, close, true, "properties.x"), /maxLength is below minLength/);
});

let llama: Llama;
before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

/** Whether llama.cpp's grammar for `schema` as a raw Qwen parameter accepts each text (strict compile). */
async function rawAccepts(schema: unknown, texts: string[]): Promise<boolean[]> {
  const { gbnf, relaxed } = rawStringGrammar(schema, "\n</parameter>\n", true, "properties.x");
  assert.deepEqual(relaxed, []);
  const grammar = await llama.createGrammar({ grammar: gbnf });
  return texts.map((t) => (grammar as unknown as { _testText(t: string): boolean })._testText(t));
}

test("a raw string's pattern is a search, as JSON Schema reads it, where a full match leaves no value", async () => {
  // A full match of `[A-Z]` is one character, which minLength 8 rules out; the search allows any
  // 8 characters with a capital among them.
  assert.deepEqual(await rawAccepts({ type: "string", minLength: 8, pattern: "[A-Z]" }, ["abcdefgH", "Abcdefgh", "abcdefgh", "ABC"]), [true, true, false, false]);
  assert.deepEqual(await rawAccepts({ type: "string", minLength: 5, pattern: "\\d{3}" }, ["ab123", "12345", "abcde", "123"]), [true, true, false, false]);
  // A full match still wins where it has values: the pattern's own text, not padded.
  assert.deepEqual(await rawAccepts({ type: "string", pattern: "[a-z]{2}", minLength: 2 }, ["ab", "xaby"]), [true, false]);
});

test("a raw string's format holds beside its pattern, and a format that cannot be enforced is refused in strict mode, not ignored", async () => {
  // The format was dropped whenever a pattern was present: "^2" alone gave the value "2", no date.
  assert.deepEqual(await rawAccepts({ type: "string", format: "date", pattern: "^2" }, ["2024-01-31", "2", "2024-13-01"]), [true, false, false]);
  assert.throws(() => rawStringGrammar({ type: "string", format: "date", pattern: "^x" }, "\n</parameter>\n", true, "properties.x"), /properties\.x\.format: no string satisfies/);
  // zod's z.iso.duration() pattern (lookaheads inside) is implied by the format, enforced alone.
  const duration = { type: "string", format: "duration", pattern: LIBRARY_FORMAT_PATTERNS.duration[0] };
  assert.deepEqual(await rawAccepts(duration, ["P3D", "PT1H30M", "P", "3D"]), [true, true, false, false]);
  // zod's own format names defined by their pattern, and formats that allow any string, add nothing.
  assert.deepEqual(await rawAccepts({ type: "string", format: "starts_with", pattern: "^ab.*" }, ["abc", "xab"]), [true, false]);
  assert.deepEqual(await rawAccepts({ type: "string", format: "password", minLength: 2 }, ["pw", "p"]), [true, false]);
  // An unknown format was silently ignored, strict or not.
  assert.throws(() => rawStringGrammar({ type: "string", format: "hostname" }, "\n</parameter>\n", true, "properties.x"), /properties\.x\.format: format "hostname" is not supported/);
  assert.deepEqual(rawStringGrammar({ type: "string", format: "hostname" }, "\n</parameter>\n", false, "properties.x").relaxed.map((r) => r.path), ["properties.x.format"]);
});

test("a raw string's enum or const keeps only the values its other keywords allow, and names the keyword that leaves none", async () => {
  // The values were written as given whatever the pattern, lengths or format beside them said.
  assert.deepEqual(await rawAccepts({ enum: ["xay", "b"], pattern: "a" }, ["xay", "b"]), [true, false]);
  assert.deepEqual(await rawAccepts({ type: "string", enum: ["ab", "abcd", "a"], minLength: 2, maxLength: 3 }, ["ab", "abcd", "a"]), [true, false, false]);
  assert.deepEqual(await rawAccepts({ type: "string", enum: ["2024-01-31", "soon"], format: "date" }, ["2024-01-31", "soon"]), [true, false]);
  assert.throws(() => rawStringGrammar({ const: "b", pattern: "a" }, "\n</parameter>\n", true, "properties.x"), /properties\.x\.pattern: no value of const satisfies it/);
  assert.throws(() => rawStringGrammar({ enum: ["b", "c"], maxLength: 0 }, "\n</parameter>\n", false, "properties.x"), /properties\.x\.maxLength: no value of enum/);
});

test("a raw email or uri with a maxLength takes the bounded subset of the format, as the JSON path does, rather than failing in strict mode", async () => {
  // Strict compiles failed with "needs more than 4000 automaton states"; relaxed ones dropped the maxLength.
  const email = { type: "string", format: "email", maxLength: 40 };
  assert.deepEqual(await rawAccepts(email, ["ann@example.org", "not-an-email", `${"a".repeat(40)}@b.co`]), [true, false, false]);
  assert.deepEqual(rawStringGrammar(email, "\n</parameter>\n", false, "properties.x").relaxed, []);
  assert.deepEqual(await rawAccepts({ type: "string", format: "uri", maxLength: 30, minLength: 12 }, ["https://ex.org/a", "a://b", "https://example.org/" + "x".repeat(20)]), [true, false, false]);
});

test("a raw string's allOf parts of string keywords are folded in, and other keywords are relaxed (listed) or refused (strict), never ignored", async () => {
  const close = "\n</parameter>\n";
  // zod's several regexes: every part must hold (each a search, as JSON Schema reads a pattern).
  const password = { type: "string", minLength: 8, allOf: [{ pattern: "[A-Z]" }, { pattern: "[0-9]" }] };
  assert.deepEqual(await rawAccepts(password, ["abcdefG1", "abcdefgh", "abcdefgH", "abcdefg1", "aB1"]), [true, false, false, false, false]);
  assert.deepEqual(await rawAccepts({ type: "string", allOf: [{ maxLength: 4, description: "short" }, { allOf: [{ minLength: 2 }] }] }, ["ab", "abcd", "a", "abcde"]), [true, true, false, false]);
  assert.deepEqual(await rawAccepts({ enum: ["ab1", "ab", "1"], allOf: [{ pattern: "[a-z]" }, { pattern: "\\d" }] }, ["ab1", "ab", "1"]), [true, false, false]);
  // Keywords of other types say nothing about a string.
  assert.deepEqual(await rawAccepts({ type: "string", minimum: 3, items: {}, maxLength: 1 }, ["a", "ab"]), [true, false]);
  for (const [schema, at] of [
    [{ type: "string", not: { const: "x" } }, "properties.x.not"],
    [{ type: "string", anyOf: [{ maxLength: 1 }, { pattern: "^a" }] }, "properties.x.anyOf"],
    [{ type: "string", allOf: [{ pattern: "a" }, { anyOf: [{ maxLength: 1 }] }] }, "properties.x.allOf.1.anyOf"],
    [{ type: "string", allOf: [{ format: "date" }, { format: "email" }] }, "properties.x.allOf.1.format"],
    [{ type: "string", minLenght: 3 }, "properties.x.minLenght"],
  ] as const) {
    assert.throws(() => rawStringGrammar(schema, close, true, "properties.x"), (e: Error) => e.message.startsWith(`${at}:`), at);
    const { relaxed } = rawStringGrammar(schema, close, false, "properties.x");
    assert.deepEqual(relaxed.map((r) => r.path), [at]);
  }
  assert.throws(() => rawStringGrammar({ type: "string", allOf: [{ type: "integer" }] }, close, false, "properties.x"), /properties\.x\.allOf\.0\.type: no string satisfies it/);
});

test("a raw string behind a $ref keeps the keywords beside the $ref, the tighter of two holding", async () => {
  // Only the definition was returned: {$ref: S, maxLength: 3} let a value of any length through.
  const root = { $defs: { S: { type: "string", maxLength: 5, pattern: "^a.*" }, N: { type: "number" } } };
  const short = resolveLocalRef({ $ref: "#/$defs/S", maxLength: 3, description: "d" }, root);
  assert.deepEqual(await rawAccepts(short, ["abc", "abcd", "xbc"]), [true, false, false]);
  const loose = resolveLocalRef({ $ref: "#/$defs/S", maxLength: 9, pattern: "c$" }, root);
  assert.deepEqual(await rawAccepts(loose, ["abc", "abcdc", "abcdefc", "ab"]), [true, true, false, false]);
  assert.deepEqual(await rawAccepts(resolveLocalRef({ $ref: "#/$defs/S", enum: ["ab", "b", "abcdef"] }, root), ["ab", "b", "abcdef"]), [true, false, false]);
  // A bare $ref is the definition itself; keywords of another type beside it leave it JSON.
  assert.equal(resolveLocalRef({ $ref: "#/$defs/S" }, root), root.$defs.S);
  assert.ok(!isRawString({ $ref: "#/$defs/N", maxLength: 3 }, root));
});

const dsml = xmlLayoutOf("{%- set dsml_token = '｜DSML｜' -%} function_calls")!;

test("DeepSeek V3.2's DSML parameters (string=\"true\" raw, string=\"false\" JSON) become a JSON object, and its grammar marks each kind", () => {
  assert.equal(dsml.name, "deepseek-v3.2");
  const text =
    'get_weather">\n<｜DSML｜parameter name="city" string="true">Rome "x"</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n' +
    '<｜DSML｜invoke name="now">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>';
  for (const piece of [1, 3, 1000]) {
    const { calls, done } = read(text, { get_weather: ["city"] }, piece, dsml);
    assert.equal(done, 2);
    assert.deepEqual(calls.map((c) => c.name), ["get_weather", "now"]);
    assert.deepEqual(JSON.parse(calls[0].args), { city: 'Rome "x"', days: 3 });
    assert.equal(calls[1].args, "{}");
  }
  const g = xmlArgumentsGrammar(dsml.tags, [{ name: "city", required: true, gbnf: "root ::= [a-z]*", raw: true }, { name: "days", required: false, gbnf: "root ::= [0-9]+" }]);
  assert.match(g, /name=\\"city\\" string=\\"true\\">/);
  assert.match(g, /name=\\"days\\" string=\\"false\\">/);
  assert.equal(xmlLayoutOf("{%- set dsml_token = '｜DSML｜' -%} tool_calls")?.name, "deepseek-v4");
});
