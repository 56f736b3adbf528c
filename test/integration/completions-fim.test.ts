import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { ensureFixtureModel, EXTRA_TOKENS, THINKING_SPEC } from "../fixtures/models.ts";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

const s = useTestServer({}, { think: true });

test("suffix on a model with FIM tokens fills the middle: prefix, suffix, middle order", async () => {
  const body = { model: "think", prompt: "def add(a, b):", suffix: "    return c", max_tokens: 6, temperature: 0, logit_bias: NO_EOG };
  const r = await s.http.post("/v1/completions", body);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, "length");

  // The same generation from the token layout llama.cpp's infill uses, sent as token ids.
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: await ensureFixtureModel(THINKING_SPEC), vocabOnly: true });
  const ids = [
    model.tokens.bos!,
    EXTRA_TOKENS.fimPrefix,
    ...model.tokenize("def add(a, b):"),
    EXTRA_TOKENS.fimSuffix,
    ...model.tokenize("    return c"),
    EXTRA_TOKENS.fimMiddle,
  ];
  await model.dispose();
  const same = await s.http.post("/v1/completions", { ...body, suffix: undefined, prompt: ids });
  assert.equal(r.json.usage!.prompt_tokens, ids.length);
  assert.equal(r.json.choices[0].text, same.json.choices[0].text);
});

test("suffix with token-id prompts is refused", async () => {
  const r = await s.http.post("/v1/completions", { model: "think", prompt: [1, 2, 3], suffix: "x" });
  assert.equal(r.status, 400);
  assert.equal(r.error?.param, "suffix");
});

test("echo + logprobs with a suffix lists the echoed prefix's tokens only, so text_offset indexes the text", async () => {
  // The echo is the prefix; the suffix and the FIM tokens around it were listed too, so the tokens
  // spelled text the answer does not hold and every generated token's offset ran past its place.
  const body = { model: "think", prompt: "def add(a, b):", suffix: "    return c", max_tokens: 3, temperature: 0, logit_bias: NO_EOG, echo: true, logprobs: 1 };
  for (const maxTokens of [3, 0]) {
    const r = await s.http.post("/v1/completions", { ...body, max_tokens: maxTokens });
    assert.equal(r.status, 200, r.text);
    const text = r.json.choices[0].text;
    const logprobs = r.json.choices[0].logprobs!;
    assert.ok(text.startsWith("def add(a, b):"), JSON.stringify(text));
    assert.equal(logprobs.tokens.join(""), text);
    let at = 0;
    logprobs.tokens.forEach((t: string, i: number) => {
      assert.equal(logprobs.text_offset[i], at, `text_offset[${i}] of ${JSON.stringify(logprobs.tokens)}`);
      at += Array.from(t).length;
    });
    assert.equal(r.json.usage!.completion_tokens, maxTokens);
    // The prefix's own tokens (and the BOS the model adds), not the FIM prefix token before them.
    const prefix = await s.http.post("/tokenize", { model: "think", prompt: "def add(a, b):" });
    assert.equal(logprobs.tokens.length - maxTokens, prefix.json.count, JSON.stringify(logprobs.tokens));
  }
});
