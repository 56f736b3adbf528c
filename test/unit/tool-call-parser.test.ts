import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { type ToolCallEvent, type ToolCallFormat, ToolCallParser } from "../../src/engines/llama-cpp/tool-call-parser.ts";

/** Layouts as node-llama-cpp's wrappers describe them (text parts; turn-ending tokens dropped). */
const HERMES: ToolCallFormat = { sectionPrefix: "", prefix: '<tool_call>\n{"name": "', paramsPrefix: '", "arguments": ', suffix: "}\n</tool_call>", betweenCalls: "\n", sectionSuffix: "" };
const MISTRAL: ToolCallFormat = { sectionPrefix: "[TOOL_CALLS][", prefix: '{"name": "', paramsPrefix: '", "arguments": ', suffix: "}", betweenCalls: ", ", sectionSuffix: "]" };
const LLAMA31: ToolCallFormat = { sectionPrefix: "", prefix: "<function=", paramsPrefix: ">", suffix: "</function>", betweenCalls: "", sectionSuffix: "" };

/** Feeds text after the opening in small pieces, as tokens would arrive. */
function parse(format: ToolCallFormat, text: string, piece = 3) {
  const p = new ToolCallParser(format);
  const events: ToolCallEvent[] = [];
  for (let i = 0; i < text.length; i += piece) events.push(...p.push(text.slice(i, i + piece)));
  const calls: Array<{ name: string; args: string }> = [];
  for (const e of events) {
    if (e.type === "name") calls[e.index] = { name: e.name, args: "" };
    if (e.type === "arguments") calls[e.index].args += e.text;
  }
  return { calls, count: p.callCount, done: events.filter((e) => e.type === "done").length };
}

test("Hermes/Qwen: two calls separated by a newline", () => {
  const r = parse(HERMES, 'get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>');
  assert.deepEqual(r.calls, [
    { name: "get_weather", args: '{"city": "Paris"}' },
    { name: "get_time", args: '{"tz": "CET"}' },
  ]);
  assert.equal(r.count, 2);
  assert.equal(r.done, 2);
});

test("Mistral: a bracketed group of calls closed by the section suffix", () => {
  const r = parse(MISTRAL, 'a", "arguments": {"x": [1, {"y": "}"}]}}, {"name": "b", "arguments": {}}]', 2);
  assert.deepEqual(r.calls, [
    { name: "a", args: '{"x": [1, {"y": "}"}]}' },
    { name: "b", args: "{}" },
  ]);
  assert.equal(r.done, 2);
});

test("Llama 3.1: <function=name>{...}</function>", () => {
  const r = parse(LLAMA31, 'search>{"q": "a \\"quoted\\" word"}</function>', 1);
  assert.deepEqual(r.calls, [{ name: "search", args: '{"q": "a \\"quoted\\" word"}' }]);
});

test("Mistral Nemo: the id written after the arguments is the call's, given with its name; a call cut short before it comes out without one", () => {
  const NEMO: ToolCallFormat = { ...MISTRAL, suffix: '"}', callId: { prefix: ', "id": "' } };
  const text = 'get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}, {"name": "get_time", "arguments": {}, "id": "abc123XYZ"}]';
  for (const piece of [1, 3, 200]) {
    const p = new ToolCallParser(NEMO);
    const events: ToolCallEvent[] = [];
    for (let i = 0; i < text.length; i += piece) events.push(...p.push(text.slice(i, i + piece)));
    assert.deepEqual(
      events.filter((e) => e.type !== "arguments"),
      [
        { type: "name", index: 0, name: "get_weather", id: "abc123XYZ" },
        { type: "done", index: 0 },
        // The same id again would leave the client two calls it cannot tell apart: left to Plinth.
        { type: "name", index: 1, name: "get_time" },
        { type: "done", index: 1 },
      ],
    );
    assert.equal(events.filter((e) => e.type === "arguments" && e.index === 0).map((e) => (e as { text: string }).text).join(""), '{"city": "Paris"}');
    assert.deepEqual(p.push(""), []);
  }
  const cut = new ToolCallParser(NEMO);
  assert.deepEqual(cut.push('get_time", "arguments": {"zone": "U'), []);
  assert.equal(cut.callCount, 1);
  assert.deepEqual(cut.flush(), [
    { type: "name", index: 0, name: "get_time" },
    { type: "arguments", index: 0, text: '{"zone": "U' },
  ]);
});
