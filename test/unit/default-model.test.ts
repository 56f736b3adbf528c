import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import { scriptedApp, type ScriptedApp } from "../helpers/scripted-app.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";

// A body without `model` on the OpenAI routes, as vLLM and llama-server take it: the one model the
// server could mean, or a 400 naming `model` when there are several. Scripted engine (no model file).

const chat = { messages: [{ role: "user", content: "hi" }], max_tokens: 2 };

describe("one model served: a body without model is for it", () => {
  let s: ScriptedApp;
  before(async () => {
    s = await scriptedApp({ id: "only" });
  });
  after(() => s.app.close());

  for (const [url, body] of [
    ["/v1/chat/completions", chat],
    ["/v1/chat/completions", { ...chat, model: null }],
    ["/v1/completions", { prompt: "hi", max_tokens: 2 }],
    ["/v1/responses", { input: "hi", max_output_tokens: 2 }],
    ["/invocations", chat],
  ] as const) {
    test(`${url} ${"model" in body ? "with model null" : "without model"}`, async () => {
      const r = await s.app.inject({ method: "POST", url, payload: body });
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().model, "only");
    });
  }

  test("the tokenizer routes too (vLLM's shapes make model optional)", async () => {
    const t = await s.app.inject({ method: "POST", url: "/tokenize", payload: { prompt: "hi" } });
    assert.equal(t.statusCode, 200, t.body);
    assert.equal(t.json().count, 2);
    const d = await s.app.inject({ method: "POST", url: "/detokenize", payload: { tokens: t.json().tokens } });
    assert.equal(d.statusCode, 200, d.body);
    assert.equal(d.json().prompt, "hi");
    const counted = await s.app.inject({ method: "POST", url: "/v1/responses/input_tokens", payload: { input: "hi" } });
    assert.equal(counted.statusCode, 200, counted.body);
  });

  test("a model that is named is still checked: another name is a 404 naming model", async () => {
    const r = await s.app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...chat, model: "nope" } });
    assert.equal(r.statusCode, 404, r.body);
    assert.equal(r.json().error.param, "model");
  });
});

describe("several models served: model is required", () => {
  let s: ScriptedApp;
  before(async () => {
    s = await scriptedApp({ id: "first" });
    const second = new ScriptedEngine({ id: "second" });
    s.registry.register(second.id);
    s.registry.ready(second);
  });
  after(() => s.app.close());

  for (const [name, body, message] of [
    ["model missing", chat, /this field is required/],
    ["model null", { ...chat, model: null }, /expected a string, got null/],
  ] as const) {
    for (const url of ["/v1/chat/completions", "/tokenize"]) {
      test(`${name} on ${url}: a 400 naming model`, async () => {
        const payload = url === "/tokenize" ? { ...body, messages: undefined, prompt: "hi" } : body;
        const r = await s.app.inject({ method: "POST", url, payload });
        assert.equal(r.statusCode, 400, r.body);
        assert.equal(r.json().error.param, "model");
        assert.match(r.json().error.message, message);
      });
    }
  }

  test("named, each answers", async () => {
    for (const model of ["first", "second"]) {
      const r = await s.app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...chat, model } });
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().model, model);
    }
  });
});
