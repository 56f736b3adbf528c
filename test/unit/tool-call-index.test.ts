import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Environment, Template } from "@huggingface/jinja";
import { toolCallGrammar } from "../../src/grammar/compose.ts";
import { ToolCallParser, type ToolCallEvent } from "../../src/engines/llama-cpp/tool-call-parser.ts";
import { pythonRepr, renderJinjaLikePython } from "../../src/engines/llama-cpp/jinja-python.ts";

// Calls that carry a counter next to their name (Kimi K2's `functions.NAME:N`, Cohere2 MoE's
// `"tool_call_id": "N"` before the name): the grammar lets the model write digits there, and the
// parser leaves them out of the name. And the Python behaviour templates of those families rely on.

const KIMI = {
  sectionPrefix: "<|tool_calls_section_begin|>",
  prefix: "<|tool_call_begin|>functions.",
  paramsPrefix: "<|tool_call_argument_begin|>",
  suffix: "<|tool_call_end|>",
  betweenCalls: "",
  sectionSuffix: "<|tool_calls_section_end|>",
  index: { at: "afterName" as const, separator: ":" },
};

function events(format: ConstructorParameters<typeof ToolCallParser>[0], text: string, step: number) {
  const parser = new ToolCallParser(format);
  const out: ToolCallEvent[] = [];
  for (let i = 0; i < text.length; i += step) out.push(...parser.push(text.slice(i, i + step)));
  const calls: Array<{ name: string; args: string }> = [];
  for (const e of out) {
    if (e.type === "name") calls[e.index] = { name: e.name, args: "" };
    if (e.type === "arguments") calls[e.index].args += e.text;
  }
  return calls;
}

test("a counter after the name: digits between the name and the params prefix in the grammar, left out of the name by the parser, in any chunking", () => {
  const gbnf = toolCallGrammar([{ name: "get_time", argsGbnf: 'root ::= "{}"' }], KIMI, true);
  assert.match(gbnf, /"get_time:" call-index "<\|tool_call_argument_begin\|>" t0-root/);
  assert.match(gbnf, /^call-index ::= \[0-9\]\{1,9\}$/m);
  assert.doesNotMatch(toolCallGrammar([{ name: "get_time", argsGbnf: 'root ::= "{}"' }], { ...KIMI, index: undefined }, true), /call-index/);
  const text = 'get_time:0<|tool_call_argument_begin|>{"zone": "UTC"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:12<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>';
  for (const step of [1, 3, 1000]) {
    assert.deepEqual(events(KIMI, text, step), [
      { name: "get_time", args: '{"zone": "UTC"}' },
      { name: "get_weather", args: "{}" },
    ]);
  }
  // A name that itself ends in a colon and digits loses only the counter.
  assert.deepEqual(events(KIMI, 'v:2:7<|tool_call_argument_begin|>{}<|tool_call_end|>', 2), [{ name: "v:2", args: "{}" }]);
});

test("a counter before the name: digits after the call prefix, then the separator and the name", () => {
  const format = {
    sectionPrefix: "<|START_ACTION|>[\n    ",
    prefix: '{"tool_call_id": "',
    paramsPrefix: '", "parameters": ',
    suffix: "}",
    betweenCalls: ",\n    ",
    sectionSuffix: "\n]<|END_ACTION|>",
    index: { at: "beforeName" as const, separator: '", "tool_name": "' },
  };
  const gbnf = toolCallGrammar([{ name: "f", argsGbnf: 'root ::= "{}"' }], format, false);
  assert.match(gbnf, /call-index "\\", \\"tool_name\\": \\"f\\", \\"parameters\\": " t0-root/);
  const text = '0", "tool_name": "f", "parameters": {"a": 1}},\n    {"tool_call_id": "1", "tool_name": "g", "parameters": {}}\n]';
  assert.deepEqual(events(format, text, 4), [
    { name: "f", args: '{"a": 1}' },
    { name: "g", args: "{}" },
  ]);
});

test("templates run as Python's Jinja runs them: list append/pop in a namespace (Kimi K2), a dict's |string as its repr (Apriel)", () => {
  renderJinjaLikePython();
  const queue = new Template(
    "{%- set q = namespace(ids=[]) -%}{%- for m in messages -%}{%- set _ = q.ids.append('f:' + loop.index0|string) -%}{%- endfor -%}" +
      "{{ q.ids|length }} {{ q.ids.length }} {{ q.ids.pop(0) }} {{ q.ids.pop() }} {{ q.ids|length }}",
  );
  assert.equal(queue.render({ messages: [1, 2, 3] }), "3 3 f:0 f:2 1");
  const repr = new Template("{% for t in tools %}{{ t|string }}{% endfor %}");
  assert.equal(
    repr.render({ tools: [{ type: "function", function: { name: "it's", description: 'say "hi"\n', ok: true, none: null, n: [1, 2.5] } }] }),
    `{'type': 'function', 'function': {'name': "it's", 'description': 'say "hi"\\n', 'ok': True, 'none': None, 'n': [1, 2.5]}}`,
  );
  const env = new Environment();
  env.set("v", { a: "x" });
  assert.equal(pythonRepr(env.lookupVariable("v") as never), "{'a': 'x'}");
});
