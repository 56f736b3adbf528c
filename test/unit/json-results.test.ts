import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Template } from "@huggingface/jinja";
import { jsonStringBody, writesResultsAsJsonStrings } from "../../src/engines/llama-cpp/json-results.ts";

// Which templates write a tool result as a JSON string (json-results.ts): those get each result's
// text escaped before node-llama-cpp puts it back where the template's `tojson` quoted a placeholder.

const render = (source: string) => {
  const template = new Template(source);
  return (params: Record<string, unknown>) => template.render(params);
};
const TOOL_TURNS = (write: string) => `{%- for m in messages %}{%- if m.role == 'tool' %}<result>${write}</result>{%- else %}<${"{{ m.role }}"}>{%- endif %}{%- endfor %}`;

test("a result written with tojson (alone, in a dict, or as Llama 3 writes an iterable) is written as a JSON string; one written as it is, or between quotes of the template's own, is not", () => {
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS("{{ m.content|tojson }}"))), true);
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS('{{ {"content": m.content}|tojson }}'))), true);
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS("{%- if m.content is iterable %}{{ m.content|tojson }}{%- else %}{{ m.content }}{%- endif %}"))), true);
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS("{{ m.content }}"))), false);
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS('"{{ m.content }}"'))), false);
  // Written both ways: neither escaping suits both places, so the text is left as it is.
  assert.equal(writesResultsAsJsonStrings(render(TOOL_TURNS("{{ m.content|tojson }} {{ m.content }}"))), false);
  // A template that cannot render the probe conversation is left alone.
  assert.equal(writesResultsAsJsonStrings(render("{{ raise_exception('no tools') }}")), false);
});

test("a text's JSON string body is what tojson writes between its quotes, non-ASCII kept as it is", () => {
  const text = 'é "x" <b>&\' \\ \n\t\u0001 ☃';
  assert.equal(jsonStringBody(text), 'é \\"x\\" <b>&\' \\\\ \\n\\t\\u0001 ☃');
  assert.equal(`"${jsonStringBody(text)}"`, new Template("{{ v|tojson }}").render({ v: text }));
});
