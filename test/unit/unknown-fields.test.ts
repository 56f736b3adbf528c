import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import { ApiError } from "../../src/core/errors.ts";
import { refuseUnknownFields } from "../../src/dialects/unknown-fields.ts";
import { scriptedApp, type ScriptedApp } from "../helpers/scripted-app.ts";

// Unknown top-level fields on OpenAI's routes, over the SCRIPTED engine (the refusal comes before
// any generation). Chat's and the Responses API's cases are in chat-errors and responses-dialect.

describe("refuseUnknownFields", () => {
  const known = new Set(["model", "max_tokens", "temperature", "dimensions"]);
  const refusal = (body: unknown, hints = {}) => {
    try {
      refuseUnknownFields(body, known, hints);
    } catch (err) {
      assert.ok(err instanceof ApiError);
      return err;
    }
    return undefined;
  };

  test("known fields and bodies that are not objects pass (the schema reports the latter)", () => {
    assert.equal(refusal({ model: "m", max_tokens: 1 }), undefined);
    for (const body of [null, undefined, "x", 5, [1]]) assert.equal(refusal(body), undefined);
  });
  test("the first unknown key is named, with a hint where one is given, else the closest field", () => {
    const hinted = refusal({ model: "m", max_output_tokens: 1 }, { max_output_tokens: "Use 'max_tokens'." });
    assert.equal(hinted?.param, "max_output_tokens");
    assert.equal(hinted?.status, 400);
    assert.equal(hinted?.message, `Unrecognized request argument supplied: "max_output_tokens". Use 'max_tokens'.`);
    assert.match(refusal({ dimension: 8 })?.message ?? "", /Did you mean 'dimensions'\?$/);
    assert.match(refusal({ TEMPERATURE: 1 })?.message ?? "", /Did you mean 'temperature'\?$/);
    // Nothing close: no guess.
    assert.equal(refusal({ frobnicate: true })?.message, `Unrecognized request argument supplied: "frobnicate".`);
  });
  test("a very long key is shortened in the message and the param; a key with quotes stays readable", () => {
    const long = refusal({ ["k".repeat(5000)]: 1 });
    assert.ok((long?.message.length ?? 0) < 200);
    assert.equal(long?.param, `${"k".repeat(64)}…`);
    assert.equal(refusal({ 'a"b': 1 })?.message, `Unrecognized request argument supplied: "a\\"b".`);
    // Invisible characters are spelled out, so the name does not read as a known field's.
    assert.equal(refusal({ "mo\u200bdel": 1 })?.message, `Unrecognized request argument supplied: "mo\\u200bdel". Did you mean 'model'?`);
    assert.match(refusal({ "x\u{F0000}": 1 })?.message ?? "", /"x\\udb80\\udc00"/);
  });
});

describe("OpenAI's Completions and Embeddings routes", () => {
  let s: ScriptedApp;
  before(async () => {
    s = await scriptedApp({ id: "m", script: () => [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }] });
  });
  after(async () => {
    await s.app.close();
  });
  const post = (url: string, payload: object) => s.app.inject({ method: "POST", url, payload });

  test("Completions: Chat's fields say what Completions takes; vLLM's are still read", async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ max_completion_tokens: 3 }, "max_completion_tokens", /Completions takes 'max_tokens'/],
      [{ messages: [{ role: "user", content: "x" }] }, "messages", /takes 'prompt'/],
      [{ top_logprobs: 2 }, "top_logprobs", /takes 'logprobs'/],
      [{ tools: [] }, "tools", /Chat Completions/],
      [{ service_tier: "flex" }, "service_tier", /^Unrecognized request argument supplied: "service_tier"\.$/],
    ];
    for (const [extra, param, message] of cases) {
      const r = await post("/v1/completions", { model: "m", prompt: "hi", ...extra });
      assert.equal(r.statusCode, 400, r.body);
      assert.equal(r.json().error.param, param);
      assert.equal(r.json().error.code, "unknown_field");
      assert.match(r.json().error.message, message);
    }
    const vllm = await post("/v1/completions", { model: "m", prompt: "hi", max_tokens: 1, top_k: 1, ignore_eos: false, skip_special_tokens: true });
    assert.equal(vllm.statusCode, 200, vllm.body);
  });

  test("Embeddings: a misspelt or foreign field is refused by name before anything is embedded", async () => {
    const dimension = await post("/v1/embeddings", { model: "m", input: "hi", dimension: 8 });
    assert.equal(dimension.statusCode, 400, dimension.body);
    assert.equal(dimension.json().error.param, "dimension");
    assert.match(dimension.json().error.message, /Did you mean 'dimensions'\?/);
    const prompt = await post("/v1/embeddings", { model: "m", prompt: "hi" });
    assert.equal(prompt.json().error.param, "prompt");
    assert.match(prompt.json().error.message, /Embeddings takes 'input'/);
  });
});
