import assert from "../helpers/assert.ts";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { Template } from "@huggingface/jinja";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { CHATML_TEMPLATE, ensureFixtureModel, type FixtureSpec, SPM_SPEC } from "../fixtures/models.ts";
import { LLAMA_2_CHAT_TEMPLATE, LLAMA_3_1_TEMPLATE, PHI_3_5_TEMPLATE, ZEPHYR_TEMPLATE } from "../fixtures/real-templates.ts";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// A chat prompt is tokenized as llama.cpp tokenizes the rendered prompt (prompt-runs.ts): cut at
// the template's special tokens, each run of text between them tokenized as one string, so on a
// SentencePiece vocabulary with a space prefix a word after the template's text is one piece
// ("▁Hi"), not a stray "▁" and "Hi". Checked against node-llama-cpp's own tokenizing of the
// template's rendering (`model.tokenize(text, true)`, llama.cpp's tokenizer with special parsing,
// which llama-server uses), on the "spm" fixture with three templates and, where llama.cpp's vocab
// files are at hand, on Llama 2's and Phi 3's real vocabularies.

const TEMPLATES: Record<string, string> = { spm: CHATML_TEMPLATE, l2: LLAMA_2_CHAT_TEMPLATE, zephyr: ZEPHYR_TEMPLATE };
const SPECS: Record<string, FixtureSpec> = {
  spm: SPM_SPEC,
  l2: { ...SPM_SPEC, name: "plinth-spm-llama2-chat", chatTemplate: LLAMA_2_CHAT_TEMPLATE },
  zephyr: { ...SPM_SPEC, name: "plinth-spm-zephyr", chatTemplate: ZEPHYR_TEMPLATE },
};

type Turn = { role: "system" | "user" | "assistant"; content: string };
const CONVERSATIONS: Turn[][] = [
  [{ role: "user", content: "Hi" }],
  [{ role: "user", content: "Tell me about Flor and the café" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "Hi there" }],
  [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello!" }, { role: "user", content: "More please" }],
  [{ role: "user", content: "line one\nline two" }],
];

/** llama.cpp's tokens for the template's rendering of the messages: special tokens parsed, BOS once where the model wants it. */
function llamaCppTokens(model: LlamaModel, template: string, messages: Turn[]): number[] {
  const text = new Template(template).render({ messages, add_generation_prompt: true, bos_token: model.tokens.bosString ?? "", eos_token: model.tokens.eosString ?? "" });
  const tokens = model.tokenize(text, true);
  return model.tokens.shouldPrependBosToken && tokens[0] !== model.tokens.bos ? [model.tokens.bos!, ...tokens] : tokens;
}

let server: TestServer;
let llama: Llama;
const models: Record<string, LlamaModel> = {};
before(async () => {
  const paths = Object.fromEntries(await Promise.all(Object.entries(SPECS).map(async ([id, spec]) => [id, await ensureFixtureModel(spec)] as const)));
  server = await startTestServer({ model: Object.entries(paths).map(([id, path]) => `${id}=${path}`) });
  llama = await getLlama({ gpu: false });
  for (const [id, path] of Object.entries(paths)) models[id] = await llama.loadModel({ modelPath: path, vocabOnly: true });
});
after(async () => {
  for (const model of Object.values(models)) await model.dispose();
  await server?.close();
});

test("SentencePiece chat prompts (ChatML, Llama 2 Chat, Zephyr): /tokenize and usage.prompt_tokens are llama.cpp's tokens of the rendered prompt", async () => {
  for (const [id, template] of Object.entries(TEMPLATES))
    for (const messages of CONVERSATIONS) {
      const what = `${id} ${JSON.stringify(messages.map((m) => m.content))}`;
      const expected = llamaCppTokens(models[id], template, messages);
      const t = await postJson(`${server.url}/tokenize`, { model: id, messages });
      assert.equal(t.status, 200, `${what}: ${JSON.stringify(t.json)}`);
      assert.deepEqual(t.json.tokens, expected, what);
      const c = await postJson(`${server.url}/v1/chat/completions`, { model: id, messages, max_tokens: 1, temperature: 0 });
      assert.equal(c.status, 200, `${what}: ${JSON.stringify(c.json)}`);
      assert.equal(c.json.usage.prompt_tokens, expected.length, what);
    }
});

test("Llama 2 Chat on SentencePiece: a message's special-token text joins its run as plain text, never the token", async () => {
  const model = models.l2;
  const t = await postJson(`${server.url}/tokenize`, { model: "l2", messages: [{ role: "user", content: "say <s> or </s>" }] });
  assert.equal(t.status, 200, JSON.stringify(t.json));
  // One run from `[INST]` to `[/INST]`, tokenized without special parsing, after the template's BOS.
  assert.deepEqual(t.json.tokens, [model.tokens.bos, ...model.tokenize("[INST] say <s> or </s> [/INST]", false)]);
});

const VOCABS = fileURLToPath(new URL("../../node_modules/node-llama-cpp/llama/llama.cpp/models/", import.meta.url));

/** The renderer of a llama.cpp vocab file (vocabulary only, no weights) given a chat template, as a chat model's GGUF carries one. */
async function vocabRenderer(file: string, template: string): Promise<{ model: LlamaModel; render: (messages: Turn[]) => number[] }> {
  const model = await llama.loadModel({ modelPath: VOCABS + file, vocabOnly: true });
  (model.fileInfo.metadata.tokenizer as { chat_template?: string }).chat_template = template;
  const renderer = new PromptRenderer(model, { id: file, vocabSize: model.fileInfo.metadata.tokenizer.ggml.tokens.length });
  return { model, render: (messages) => renderer.render({ prompt: { kind: "chat", messages: messages as Message[] } } as GenerationRequest).tokens };
}

const noVocab = (file: string) => (existsSync(VOCABS + file) ? false : `llama.cpp's ${file} is not in node_modules/node-llama-cpp/llama/llama.cpp/models`);

test("Llama 2's real vocabulary with Llama 2 Chat's template: the tokens llama.cpp and Hugging Face give", { skip: noVocab("ggml-vocab-llama-spm.gguf") }, async () => {
  const { model, render } = await vocabRenderer("ggml-vocab-llama-spm.gguf", LLAMA_2_CHAT_TEMPLATE);
  try {
    // <s> ▁[ INST ] ▁Hi ▁[ / INST ] (it was <s> ▁[ INST ] ▁ Hi ▁ ▁[ / INST ]: 11).
    assert.deepEqual(render(CONVERSATIONS[0]), [1, 518, 25580, 29962, 6324, 518, 29914, 25580, 29962]);
    assert.equal(render(CONVERSATIONS[2]).length, 28); // system + user (was 30)
    assert.equal(render(CONVERSATIONS[3]).length, 23); // three turns (was 28)
    for (const messages of CONVERSATIONS) assert.deepEqual(render(messages), llamaCppTokens(model, LLAMA_2_CHAT_TEMPLATE, messages), JSON.stringify(messages));
  } finally {
    await model.dispose();
  }
});

test("Phi 3's real vocabulary, whose special tokens strip the whitespace after them (llama.cpp's rstrip): llama.cpp's tokens", { skip: noVocab("ggml-vocab-phi-3.gguf") }, async () => {
  const { model, render } = await vocabRenderer("ggml-vocab-phi-3.gguf", PHI_3_5_TEMPLATE);
  try {
    // `<|user|>\nHi`: the newline goes with the token's rstrip, and "Hi" gets the space prefix (▁Hi).
    for (const messages of CONVERSATIONS) assert.deepEqual(render(messages), llamaCppTokens(model, PHI_3_5_TEMPLATE, messages), JSON.stringify(messages));
  } finally {
    await model.dispose();
  }
});

test("Llama 3.1's real vocabulary keeps its template's tool layout (its space before the arguments' `{` is one token with it)", { skip: noVocab("ggml-vocab-llama-bpe.gguf") }, async () => {
  const model = await llama.loadModel({ modelPath: VOCABS + "ggml-vocab-llama-bpe.gguf", vocabOnly: true });
  try {
    (model.fileInfo.metadata.tokenizer as { chat_template?: string }).chat_template = LLAMA_3_1_TEMPLATE;
    const renderer = new PromptRenderer(model, { id: "llama-3.1", vocabSize: model.fileInfo.metadata.tokenizer.ggml.tokens.length });
    const functions = { get_weather: { description: "Weather of a city", params: { type: "object" as const, properties: { city: { type: "string" as const } } } } };
    const req = { prompt: { kind: "chat", messages: [{ role: "user", content: "Weather in Paris?" }] } } as GenerationRequest;
    const text = model.detokenize(renderer.render(req, functions).tokens, true);
    // The template's own layout: the tools in the user turn, a call as {"name": …, "parameters": …}
    // (it was node-llama-cpp's generic one: "||call: getSomeInfo(…)" described in the system turn).
    assert.match(text, /Environment: ipython/);
    assert.match(text, /"parameters": dict/);
    assert.doesNotMatch(text, /\|\|call:/);
  } finally {
    await model.dispose();
  }
});
