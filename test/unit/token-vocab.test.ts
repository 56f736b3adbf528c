import assert from "../helpers/assert.ts";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { getLlama, LlamaLogLevel, type LlamaModel, type Token } from "node-llama-cpp";
import { TokenPieces, type SpellState } from "../../src/engines/llama-cpp/token-pieces.ts";
import { TokenTextDecoder } from "../../src/engines/llama-cpp/token-text.ts";

// Generated text and logprob token texts on llama.cpp's real vocabularies (its vocab-only GGUFs,
// when the llama.cpp sources are at hand): the text a decoder emits token by token is what the
// logprob entries spell for the same tokens, so the entries concatenate to the content.

const VOCABS = fileURLToPath(new URL("../../node_modules/node-llama-cpp/llama/llama.cpp/models/", import.meta.url));
const noVocab = (file: string) => (existsSync(VOCABS + file) ? false : `llama.cpp's ${file} is not at hand`);

const models: LlamaModel[] = [];
async function load(file: string): Promise<LlamaModel> {
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: VOCABS + file, vocabOnly: true });
  models.push(model);
  return model;
}
after(async () => {
  for (const model of models) await model.dispose();
});

/** Each token's text as the decoder emits it (the flush added to the last), and as the logprob entries spell it. */
function both(model: LlamaModel, tokens: number[]): { emitted: string[]; listed: string[] } {
  const decoder = new TokenTextDecoder(model);
  const emitted = tokens.map((t) => decoder.push(t as Token));
  emitted[emitted.length - 1] += decoder.flush();
  const pieces = TokenPieces.of(model);
  let state: SpellState | undefined;
  const listed = tokens.map((t) => {
    const p = pieces.spell(state ?? pieces.stateAfterTokens([]), t);
    state = p.state;
    return p.text;
  });
  listed[listed.length - 1] += pieces.unfinishedText(state!);
  return { emitted, listed };
}

test("Gemma 4's vocabulary (BPE over ▁ pieces and <0xNN> byte tokens): text emitted token by token is what logprobs list", { skip: noVocab("ggml-vocab-gemma-4.gguf") }, async () => {
  const model = await load("ggml-vocab-gemma-4.gguf");
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens as string[];
  const byte = (b: number) => vocab.indexOf(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const omega = Array.from(model.tokenize("Ω", false));
  // Lone continuation bytes are U+FFFD at once, each (not held back and flushed together at the end).
  const stray = [...omega, byte(0x9f), byte(0x99), byte(0x9f)];
  assert.deepEqual(both(model, stray), { emitted: ["Ω", "\uFFFD", "\uFFFD", "\uFFFD"], listed: ["Ω", "\uFFFD", "\uFFFD", "\uFFFD"] });
  // A character split over byte tokens comes with the token completing it; an unfinished one ends as one U+FFFD.
  const llama = [0xf0, 0x9f, 0xa6, 0x99].map(byte);
  assert.deepEqual(both(model, llama), { emitted: ["", "", "", "🦙"], listed: ["", "", "", "🦙"] });
  assert.deepEqual(both(model, [...omega, ...llama.slice(0, 3)]), { emitted: ["Ω", "", "", "\uFFFD"], listed: ["Ω", "", "", "\uFFFD"] });
  // A ▁ piece is a space, also first (Gemma 4 adds no space prefix, so none is taken away).
  const words = Array.from(model.tokenize(" hello world", false));
  const { emitted, listed } = both(model, words);
  assert.deepEqual(emitted, listed);
  assert.equal(emitted.join(""), " hello world");
  assert.equal(TokenPieces.of(model).textOf(words, true), " hello world");
  // A piece's own spelling, not llama.cpp's cleaned-up detokenizing ("▁?" is " ?", not "?"), so an
  // echoed prompt's tokens spell the prompt.
  const question = "How are you ?";
  const asked = both(model, Array.from(model.tokenize(question, false)));
  assert.equal(asked.listed.join(""), question);
  assert.equal(asked.emitted.join(""), question);
});

test("a Unigram vocabulary (nomic-embed-text-v2-moe's, ▁ pieces): each listed token keeps its space, as the text emitted for it does", { skip: noVocab("ggml-vocab-nomic-bert-moe.gguf") }, async () => {
  const model = await load("ggml-vocab-nomic-bert-moe.gguf");
  const tokens = Array.from(model.tokenize("keeping qol тендер phái", false));
  const { emitted, listed } = both(model, tokens);
  assert.deepEqual(listed, emitted);
  // The text's first word loses the space the tokenizer put before it (add_space_prefix), later ones keep theirs.
  assert.equal(listed.join(""), "keeping qol тендер phái");
  // Continuing a text (an answer after its prompt), the first word keeps its space too.
  const pieces = TokenPieces.of(model);
  assert.equal(pieces.after(pieces.stateAfterTokens(Array.from(model.tokenize("Hi", false))), tokens[0]).text, " keeping");
});
