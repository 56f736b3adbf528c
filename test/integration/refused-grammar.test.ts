import assert from "../helpers/assert.ts";
import { afterEach, test } from "node:test";
import type { CompiledSchema } from "../../src/grammar/json-schema-to-gbnf.ts";
import { schemaCompiler } from "../../src/grammar/schema-compiler.ts";
import { useTestServer } from "../helpers/server.ts";

// A grammar llama.cpp's parser refuses, fed to the real engine in place of a schema's grammar: the
// request is a 400 naming the field the schema came in, never a 500. The converter builds grammars
// llama.cpp parses (1,000 optional prefixItems once nested their groups past its limit, a 500);
// this is the defence should another shape reach one of the parser's own limits.

const s = useTestServer({ "ctx-size": "1024" });

/** What the converter once made of 1,500 optional integer prefixItems: optional groups nested 1,500 deep. */
function refusedGrammar(): string {
  let rest = "";
  for (let i = 0; i < 1500; i++) rest = `(ws "," ws integer ${rest})?`;
  return `root ::= "[" ws (integer ${rest} ws)? "]"\nws ::= [ \\t\\n]{0,2}\ninteger ::= "-"? [0-9]{1,15}\n`;
}

const compile = schemaCompiler.compile.bind(schemaCompiler);
afterEach(() => {
  schemaCompiler.compile = compile;
});

/** The compiler answers every schema with the refused grammar. */
function feedRefusedGrammar(): void {
  schemaCompiler.compile = async (): Promise<CompiledSchema> => ({ gbnf: refusedGrammar(), relaxed: [], loadCost: 0 });
}

const schema = { type: "array", items: { type: "integer" } };
const tool = { name: "f", parameters: { type: "object", properties: { a: schema }, required: ["a"] } };

test("a grammar llama.cpp refuses is a 400 naming the schema's field, in every dialect and for tools", async () => {
  feedRefusedGrammar();
  const cases: Array<[string, string, unknown, string]> = [
    ["chat response_format", "/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: 4, response_format: { type: "json_schema", json_schema: { name: "x", schema } } }, "response_format.json_schema.schema"],
    ["responses text.format", "/v1/responses", { model: "tiny", input: "x", max_output_tokens: 4, text: { format: { type: "json_schema", name: "x", schema } } }, "text.format.schema"],
    ["a chat tool", "/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: 4, tools: [{ type: "function", function: tool }], tool_choice: "required" }, "tools[0].function.parameters"],
    ["a responses tool", "/v1/responses", { model: "tiny", input: "x", max_output_tokens: 4, tools: [{ type: "function", ...tool }], tool_choice: "required" }, "tools[0].parameters"],
    ["two chat tools (one grammar)", "/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: 4, tools: [{ type: "function", function: tool }, { type: "function", function: { ...tool, name: "g" } }], tool_choice: "required" }, "tools"],
  ];
  for (const [name, path, body, param] of cases) {
    const r = await s.http.postRaw(path, body);
    assert.equal(r.status, 400, `${name}: ${r.text.slice(0, 300)}`);
    assert.equal(r.error?.param, param, name);
    assert.match(r.error?.message ?? "", /cannot be enforced: the engine refused the grammar made of it/, name);
  }
  // The engine carries on: the same schema, compiled for real, is answered.
  schemaCompiler.compile = compile;
  const ok = await s.http.postRaw("/v1/chat/completions", cases[0][2]);
  assert.equal(ok.status, 200, ok.text.slice(0, 300));
});
