import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";
import { testStore } from "../helpers/test-store.ts";
import { useTestServer } from "../helpers/server.ts";

// A function tool's `parameters` must be the schema of a JSON object (OpenAI: "schema must be a JSON
// Schema of 'type: \"object\"'"): a call's arguments are one object, and a schema of a bare value gave
// arguments that were not JSON (`false)||call:f(false)`). Every dialect that takes function tools
// refuses any other schema by its own name for the field; typeless schemas (`{}`, a bare
// `properties`, as many clients send them) still work, and their calls' arguments are objects.

const NOT_OBJECTS: Array<[string, Record<string, unknown>]> = [
  ["boolean", { type: "boolean" }],
  ["number", { type: "number" }],
  ["string", { type: "string" }],
  ["array", { type: "array", items: { type: "integer" } }],
  ["a list of types with null", { type: ["object", "null"], properties: {} }],
  ["anyOf with a string branch", { anyOf: [{ type: "object", properties: {} }, { type: "string" }] }],
  ["oneOf with a number branch", { oneOf: [{ properties: { a: { type: "string" } } }, { type: "number" }] }],
  ["a $ref to a string", { $ref: "#/$defs/s", $defs: { s: { type: "string" } } }],
];

/** Each dialect's route, a body with one function tool of the given parameters, and where it names them. */
const DIALECTS: Array<{ name: string; url: string; body: (p: unknown) => Record<string, unknown>; param: string; databricks?: boolean }> = [
  {
    name: "OpenAI chat",
    url: "/v1/chat/completions",
    body: (p) => ({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 8, tool_choice: "required", tools: [{ type: "function", function: { name: "f", parameters: p } }] }),
    param: "tools[0].function.parameters",
  },
  {
    name: "Responses",
    url: "/v1/responses",
    body: (p) => ({ model: "tiny", input: "hi", max_output_tokens: 16, store: false, tool_choice: "required", tools: [{ type: "function", name: "f", parameters: p }] }),
    param: "tools[0].parameters",
  },
  {
    name: "Konan (/v3)",
    url: "/v3/chat/completions",
    body: (p) => ({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_completion_tokens: 8, tools: [{ type: "function", function: { name: "f", parameters: p } }] }),
    param: "tools[0].function.parameters",
  },
  {
    name: "SpAk (DeepSeek style)",
    url: "/chat/completions",
    body: (p) => ({ model: "SpAk-Aster-V1-MOE", messages: [{ role: "user", content: "hi" }], max_tokens: 8, thinking: { type: "disabled" }, tools: [{ type: "function", function: { name: "f", parameters: p } }] }),
    param: "tools[0].function.parameters",
  },
  {
    name: "Databricks invocations",
    url: "/serving-endpoints/tiny/invocations",
    body: (p) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 8, tool_choice: "required", tools: [{ type: "function", function: { name: "f", description: "d", parameters: p } }] }),
    param: "tools[0].function.parameters",
    databricks: true,
  },
];

describe("on a scripted engine: schemas that are not of an object are refused by each dialect, naming the field", () => {
  let app: FastifyInstance;
  before(async () => {
    const registry = new ModelRegistry(16);
    for (const id of ["tiny", "SpAk-Aster-V1-MOE"]) {
      const engine = new ScriptedEngine({ id, slots: 4, contextSize: 512 });
      registry.register(engine.id);
      registry.ready(engine);
    }
    const { store, sealer, dispose } = testStore();
    app = buildApp(new GenerationService(registry), { bodyLimit: 1024 * 1024, store, sealer });
    app.addHook("onClose", dispose);
    await app.ready();
  });
  after(() => app.close());

  for (const d of DIALECTS) {
    test(`${d.name}: a 400 naming ${d.param}`, async () => {
      for (const [what, parameters] of NOT_OBJECTS) {
        const r = await app.inject({ method: "POST", url: d.url, payload: d.body(parameters) });
        assert.equal(r.statusCode, 400, `${what}: ${r.body}`);
        const json = JSON.parse(r.body);
        if (d.databricks) {
          assert.equal(json.error_code, "INVALID_PARAMETER_VALUE", r.body);
          assert.ok(json.message.includes(d.param), `${what}: ${json.message}`);
        } else {
          assert.equal(json.error.param, d.param, `${what}: ${r.body}`);
          assert.match(json.error.message, /JSON Schema of type "object"|not an object|any value/, what);
        }
      }
    });

    test(`${d.name}: object schemas as clients write them are accepted`, async () => {
      for (const parameters of [
        { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        { properties: { city: { type: "string" } } },
        {},
        { type: ["object"], properties: {} },
        { anyOf: [{ type: "object", properties: { a: { type: "string" } } }, { properties: { b: { type: "number" } } }] },
        { $ref: "#/$defs/Args", $defs: { Args: { type: "object", properties: { a: { type: "string" } } } } },
      ]) {
        const r = await app.inject({ method: "POST", url: d.url, payload: d.body(parameters) });
        assert.equal(r.statusCode, 200, `${JSON.stringify(parameters)}: ${r.body}`);
      }
    });
  }
});

describe("on the tiny fixture: a typeless schema's calls have arguments that are a JSON object", () => {
  const s = useTestServer();
  const post = async (url: string, body: unknown) => {
    const res = await fetch(`${s.url}${url}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: res.status, json: (await res.json()) as any };
  };

  /** Arguments that are a JSON object; cut short by the token limit, the start of one. */
  const isObjectArguments = (text: string, finished: boolean) => {
    assert.match(text, /^\s*\{/, text);
    if (!finished) return;
    const args = JSON.parse(text);
    assert.ok(args !== null && typeof args === "object" && !Array.isArray(args), text);
  };

  for (const parameters of [{}, { properties: { flag: { type: "boolean" } }, required: ["flag"] }]) {
    test(`parameters ${JSON.stringify(parameters)}: chat and Responses calls carry object arguments`, async () => {
      for (let i = 0; i < 3; i++) {
        const chat = await post("/v1/chat/completions", { ...DIALECTS[0].body(parameters), max_tokens: 200, seed: i });
        assert.equal(chat.status, 200, JSON.stringify(chat.json));
        const choice = chat.json.choices[0];
        assert.ok(choice.message.tool_calls?.length > 0, JSON.stringify(choice));
        for (const call of choice.message.tool_calls) isObjectArguments(call.function.arguments, choice.finish_reason === "tool_calls");
        const resp = await post("/v1/responses", { ...DIALECTS[1].body(parameters), max_output_tokens: 200, seed: i });
        assert.equal(resp.status, 200, JSON.stringify(resp.json));
        const calls = resp.json.output.filter((o: any) => o.type === "function_call");
        assert.ok(calls.length > 0, JSON.stringify(resp.json.output));
        for (const call of calls) isObjectArguments(call.arguments, resp.json.status === "completed");
      }
    });
  }
});

describe("on the tiny fixture: a parameters schema that is no valid JSON Schema", () => {
  const s = useTestServer();
  test("is a 400 naming the tool's parameters, code invalid_function_parameters (OpenAI's code for it)", async () => {
    for (const parameters of [
      { type: "object", properties: { n: { type: "int" } } },
      { type: "object", properties: { n: { type: "integer", minimum: "a" } } },
    ]) {
      for (const d of DIALECTS.slice(0, 2)) {
        const res = await fetch(`${s.url}${d.url}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(d.body(parameters)) });
        const json = (await res.json()) as any;
        assert.equal(res.status, 400, `${d.name}: ${JSON.stringify(json)}`);
        assert.equal(json.error.param, d.param, JSON.stringify(json));
        assert.equal(json.error.code, "invalid_function_parameters", JSON.stringify(json));
      }
    }
  });
});
