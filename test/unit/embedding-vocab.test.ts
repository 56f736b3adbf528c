import assert from "../helpers/assert.ts";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { LlamaEmbedder } from "../../src/engines/llama-cpp/embedder.ts";

// The tokens an embedding input is fed with on llama.cpp's real vocabularies (its vocab-only GGUFs,
// when the llama.cpp sources are at hand): what llama.cpp's tokenizer gives with its special
// tokens added (llama-server's /embeddings, llama-embedding), whatever the vocabulary type.

const VOCABS = fileURLToPath(new URL("../../node_modules/node-llama-cpp/llama/llama.cpp/models/", import.meta.url));
const noVocab = (file: string) => (existsSync(VOCABS + file) ? false : `llama.cpp's ${file} is not at hand`);

let llama: Llama;
const models: LlamaModel[] = [];
before(async () => {
  llama = await getLlama({ gpu: false });
});
after(async () => {
  for (const model of models) await model.dispose();
});

async function embedderFor(file: string): Promise<{ model: LlamaModel; embedder: LlamaEmbedder }> {
  const model = await llama.loadModel({ modelPath: VOCABS + file, vocabOnly: true });
  models.push(model);
  // Only tokenizing is asked of it: no context is created.
  const embedder = LlamaEmbedder.create(model, { contexts: 1, contextSize: 512, threads: 1 }, { declaredPooling: "mean", embeddingOnly: true }, Number.MAX_SAFE_INTEGER);
  assert.ok(embedder);
  return { model, embedder };
}

test("nomic-embed-text-v2-moe's vocabulary (Unigram, add_bos_token and add_eos_token set): a text is embedded as <s> … </s>, as llama.cpp tokenizes it", { skip: noVocab("ggml-vocab-nomic-bert-moe.gguf") }, async () => {
  const { model, embedder } = await embedderFor("ggml-vocab-nomic-bert-moe.gguf");
  assert.equal(model.tokens.bos, 0);
  assert.equal(model.tokens.eos, 2);
  for (const text of ["Hello world", " this is 🦙.cpp", "нещо на Български", ""]) {
    const body = Array.from(model.tokenize(text, false));
    assert.deepEqual(await embedder.tokenize({ kind: "text", text }), [0, ...body, 2], JSON.stringify(text));
  }
  // Token ids get the begin and end tokens where they lack them, as a text does.
  const ids = Array.from(model.tokenize("Hello world", false));
  assert.deepEqual(await embedder.tokenize({ kind: "tokens", tokens: ids }), [0, ...ids, 2]);
  assert.deepEqual(await embedder.tokenize({ kind: "tokens", tokens: [0, ...ids, 2] }), [0, ...ids, 2]);
});

test("BGE's vocabulary (WordPiece): a text is embedded as [CLS] … [SEP]", { skip: noVocab("ggml-vocab-bert-bge.gguf") }, async () => {
  const { model, embedder } = await embedderFor("ggml-vocab-bert-bge.gguf");
  for (const text of ["Hello world", "Cửa Việt", " discards"]) {
    const body = Array.from(model.tokenize(text, false));
    assert.deepEqual(await embedder.tokenize({ kind: "text", text }), [101, ...body, 102], JSON.stringify(text));
  }
});
