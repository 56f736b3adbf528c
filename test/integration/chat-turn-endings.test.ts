import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { GenerationRequest } from "../../src/core/types.ts";
import { ensureFixtureModel, FIXTURE_TOKENS, type FixtureSpec, SPM_SPEC } from "../fixtures/models.ts";
import { LLAMA_2_CHAT_TEMPLATE, ZEPHYR_TEMPLATE } from "../fixtures/real-templates.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";
import { templateRenderers } from "../helpers/template-renderers.ts";

// What a template writes after an answer becomes node-llama-cpp's stop triggers: Llama 2's
// `' ' + eos_token` the trigger " " + EOS, Zephyr's `eos_token` + "\n" the trigger EOS + "\n". Each
// became a text stop of its text parts alone, so every Llama 2 answer ended at its first space and
// every Zephyr answer at its first newline (content "", finish_reason "stop"). The fixture is the
// SentencePiece one (Llama 2 style) with each real template; its EOS is <|im_end|>.

const L2_SPEC: FixtureSpec = { ...SPM_SPEC, name: "plinth-spm-llama-2", chatTemplate: LLAMA_2_CHAT_TEMPLATE };
const ZEPHYR_SPEC: FixtureSpec = { ...SPM_SPEC, name: "plinth-spm-zephyr", chatTemplate: ZEPHYR_TEMPLATE };
/** Ignores its input: every next token is " the", a lone space or EOS, so answers end with " " + EOS often. */
const L2_SPACES_SPEC: FixtureSpec = {
  ...L2_SPEC,
  name: "plinth-spm-llama-2-spaces",
  fixedNext: { "\u2581the": 0.5, "\u2581": 0.25, "<|im_end|>": 0.25 },
};

const load = templateRenderers(SPM_SPEC);

let s: TestServer;
let the: number;
before(async () => {
  s = await startTestServer({
    model: [
      `l2=${await ensureFixtureModel(L2_SPEC)}`,
      `zephyr=${await ensureFixtureModel(ZEPHYR_SPEC)}`,
      `spaces=${await ensureFixtureModel(L2_SPACES_SPEC)}`,
    ],
  });
  const t = await postJson(`${s.url}/tokenize`, { model: "l2", prompt: "the", add_special_tokens: false });
  assert.equal(t.json.tokens.length, 1, t.text);
  the = t.json.tokens[0];
});
after(async () => {
  await s?.close();
});

const HI = [{ role: "user", content: "Hi" }];

test("the triggers' text parts alone are no stop: Llama 2's ' ' before EOS is its turn ending, Zephyr's '\\n' after EOS is never reached", async () => {
  const split = async (name: string, template: string) => {
    const { renderer } = await load(name, template);
    const { stopTokens, formatStops, formatEndings } = renderer.render({ prompt: { kind: "chat", messages: HI } } as GenerationRequest);
    return { stopTokens: [...stopTokens], formatStops, formatEndings: formatEndings ?? [] };
  };
  assert.deepEqual(await split(L2_SPEC.name, LLAMA_2_CHAT_TEMPLATE), { stopTokens: [FIXTURE_TOKENS.eos], formatStops: [], formatEndings: [" "] });
  assert.deepEqual(await split(ZEPHYR_SPEC.name, ZEPHYR_TEMPLATE), { stopTokens: [FIXTURE_TOKENS.eos], formatStops: [], formatEndings: [] });
});

test("Llama 2: an answer goes on past its spaces (chat, streamed, Responses)", async () => {
  const body = { model: "l2", messages: HI, max_tokens: 5, seed: 6, logit_bias: { [the]: 100 } };
  const r = await postJson(`${s.url}/v1/chat/completions`, body);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, " the the the the the");
  assert.equal(r.json.choices[0].finish_reason, "length");
  assert.equal(r.json.usage.completion_tokens, 5);
  const streamed = await s.http.chatStream(body as never);
  assert.equal(streamed.content, " the the the the the");
  const resp = await postJson(`${s.url}/v1/responses`, { model: "l2", input: "Hi", max_output_tokens: 5, logit_bias: { [the]: 100 } });
  assert.equal(resp.status, 200, resp.text);
  assert.equal(resp.json.output[0].content[0].text, " the the the the the");
});

test("Zephyr: an answer goes on past its newlines", async () => {
  const r = await postJson(`${s.url}/v1/chat/completions`, { model: "zephyr", messages: HI, max_tokens: 5, seed: 6, logit_bias: { [FIXTURE_TOKENS.newline]: 100 } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, "\n\n\n\n\n");
  assert.equal(r.json.choices[0].finish_reason, "length");
});

test("Llama 2: a space right before EOS is the template's, cut from the answer; one before more text is the answer's", async () => {
  // The same seed on the same prompt tokens samples the same tokens; completions of the token
  // prompt have no template, so their text is what the model wrote, EOS aside.
  const prompt = (await postJson(`${s.url}/tokenize`, { model: "spaces", messages: HI })).json.tokens as number[];
  let cut = 0;
  let inner = 0;
  for (let seed = 1; seed <= 16; seed++) {
    const raw = await postJson(`${s.url}/v1/completions`, { model: "spaces", prompt, max_tokens: 8, seed });
    const text = raw.json.choices[0].text as string;
    const ended = raw.json.choices[0].finish_reason === "stop";
    const expected = ended && text.endsWith(" ") ? text.slice(0, -1) : text;
    if (expected !== text) cut++;
    // A lone space the model wrote before more text.
    if (expected.includes("  ")) inner++;
    const body = { model: "spaces", messages: HI, max_tokens: 8, seed, logprobs: true };
    const r = await postJson(`${s.url}/v1/chat/completions`, body);
    assert.equal(r.json.choices[0].message.content, expected, `seed ${seed}: ${JSON.stringify(text)}`);
    assert.equal(r.json.choices[0].finish_reason, raw.json.choices[0].finish_reason);
    // The cut space's token is counted, not listed.
    assert.equal(r.json.choices[0].logprobs.content.map((e: { token: string }) => e.token).join(""), expected);
    assert.equal(r.json.usage.completion_tokens, raw.json.usage.completion_tokens);
    const streamed = await s.http.chatStream(body as never);
    assert.equal(streamed.content, expected, `seed ${seed} streamed`);
  }
  assert.ok(cut > 0 && inner > 0, `cut ${cut}, inner ${inner}`);
});
