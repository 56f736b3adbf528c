import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { getLlama, LlamaLogLevel, readGgufFileInfo, type LlamaModel, type Token } from "node-llama-cpp";
import { TokenPieces, unfinishedTail } from "../../src/engines/llama-cpp/token-pieces.ts";
import { TokenTextDecoder } from "../../src/engines/llama-cpp/token-text.ts";
import {
  BPE_SPEC,
  bpePiece,
  byteTokenId,
  ensureFixtureModel,
  FIXTURE_TOKENS,
  fixtureFileName,
  SPM_SPEC,
  TINY_SPEC,
} from "../fixtures/models.ts";

// The SentencePiece (Llama 2 style) and byte-level BPE (GPT-2 style) fixtures: they load, tokenize
// words into "▁word" / "Ġword" pieces, and TokenPieces spells their tokens as the text shows them.

let spm: LlamaModel;
let bpe: LlamaModel;
let tiny: LlamaModel;

before(async () => {
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  spm = await llama.loadModel({ modelPath: await ensureFixtureModel(SPM_SPEC), vocabOnly: true });
  bpe = await llama.loadModel({ modelPath: await ensureFixtureModel(BPE_SPEC), vocabOnly: true });
  tiny = await llama.loadModel({ modelPath: await ensureFixtureModel(TINY_SPEC), vocabOnly: true });
});
after(async () => {
  await spm?.dispose();
  await bpe?.dispose();
  await tiny?.dispose();
});

const pieceTexts = (model: LlamaModel, tokens: readonly Token[]) =>
  tokens.map((t) => (model.fileInfo.metadata.tokenizer.ggml.tokens as string[])[t]);

test("the fixtures declare the tokenizers they imitate", async () => {
  const s = (await readGgufFileInfo(await ensureFixtureModel(SPM_SPEC))).metadata.tokenizer.ggml;
  assert.equal(s.model, "llama");
  assert.equal(s.add_space_prefix, true);
  const b = (await readGgufFileInfo(await ensureFixtureModel(BPE_SPEC))).metadata.tokenizer.ggml as Record<string, unknown>;
  assert.equal(b.model, "gpt2");
  assert.equal(b.pre, "gpt-2");
  assert.ok(Array.isArray(b.merges) && b.merges.length > 500, "a merges list");
  assert.notEqual(fixtureFileName(SPM_SPEC), fixtureFileName(BPE_SPEC));
  for (const model of [spm, bpe]) {
    assert.equal(model.tokens.eos, FIXTURE_TOKENS.imEnd);
    assert.ok(model.isEogToken(FIXTURE_TOKENS.endOfSequence as Token), "the end-of-sequence token ends generation");
  }
});

test('SentencePiece: " Flor" is a "▁Flor" piece, the text gets a space in front, and llama.cpp drops it alone', () => {
  const tokens = spm.tokenize("Hello Flor, the café", false);
  assert.deepEqual(pieceTexts(spm, tokens), ["▁Hello", "▁Flor", ",", "▁the", "▁café"]);
  // Detokenized alone, a text's first piece loses its space: the bug this fixture reproduces.
  assert.equal(spm.detokenize([tokens[1]], false), "Flor");
  assert.equal(spm.detokenize(tokens, false), "Hello Flor, the café");
  // Characters it has no piece for fall back to bytes.
  const emoji = spm.tokenize("🎉", false);
  assert.deepEqual(emoji.slice(-4), [0xf0, 0x9f, 0x8e, 0x89].map((b) => byteTokenId(b) as Token));
});

test('byte-level BPE: " Flor" is a "ĠFlor" piece built by merges; no space is added or dropped', () => {
  const tokens = bpe.tokenize("Hello Flor, the café —", false);
  assert.deepEqual(pieceTexts(bpe, tokens), ["Hello", "ĠFlor", ",", "Ġthe", bpePiece(" café"), "Ġ", bpePiece("—")]);
  assert.equal(bpe.detokenize([tokens[1]], false), " Flor");
  assert.equal(bpe.detokenize(tokens, false), "Hello Flor, the café —");
  // Byte pieces sit at the same ids as the SentencePiece fixtures' <0xNN> tokens.
  assert.deepEqual(bpe.tokenize("🎉", false), [0xf0, 0x9f, 0x8e, 0x89].map((b) => byteTokenId(b) as Token));
});

test("TokenPieces spells the SentencePiece space prefix away only at the start of a text", () => {
  const pieces = new TokenPieces(spm);
  assert.ok(pieces.exact && pieces.stripsLeadingSpace);
  const [hello, flor] = spm.tokenize("Hello Flor", false);
  // First in the text: no space (an echoed "Hello Flor" starts with "Hello").
  assert.deepEqual(pieces.get(hello), { text: "Hello", bytes: [...Buffer.from("Hello")] });
  const afterBos = pieces.stateAfterTokens([FIXTURE_TOKENS.bos]);
  assert.deepEqual(pieces.after(afterBos, hello).text, "Hello");
  // After anything with text (a prompt, an earlier word): the space is part of the token.
  const state = pieces.stateAfterTokens([FIXTURE_TOKENS.bos, hello]);
  assert.deepEqual(pieces.after(state, flor), { text: " Flor", bytes: [32, 70, 108, 111, 114] });
  const chat = spm.tokenize("<|im_start|>assistant\n", true);
  assert.equal(pieces.after(pieces.stateAfterTokens(chat), flor).text, " Flor");
});

test("TokenPieces gives a split character to the token that completes it; texts and bytes both add up", () => {
  for (const model of [spm, bpe, tiny]) {
    const pieces = new TokenPieces(model);
    const text = "naïve 🎉 — ok";
    const tokens = model.tokenize(text, false);
    let state = pieces.stateAfterTokens(model.tokens.bos == null ? [] : [model.tokens.bos]);
    const spelled = tokens.map((t) => {
      const p = pieces.spell(state, t);
      state = p.state;
      return p;
    });
    assert.equal(spelled.map((p) => p.text).join(""), text, model.fileInfo.metadata.general.name);
    assert.deepEqual(spelled.flatMap((p) => p.bytes), [...Buffer.from(text)]);
    assert.ok(spelled.some((p) => p.text === "" && p.bytes.length > 0), "some token ends inside a character");
    for (const p of spelled) assert.ok(!p.text.includes("\uFFFD"));
    // The same from each token's own context, as the logprob reader sees it.
    spelled.forEach((p, i) => {
      const ctx = [...(model.tokens.bos == null ? [] : [model.tokens.bos]), ...tokens.slice(0, i)];
      assert.deepEqual(pieces.after(pieces.stateAfterTokens(ctx), tokens[i]), { text: p.text, bytes: p.bytes });
    });
  }
});

test("TokenTextDecoder spells generated text exactly as TokenPieces does", () => {
  for (const model of [spm, bpe]) {
    const prompt = model.tokenize("<|im_start|>assistant\n", true);
    const out = model.tokenize(" Flor, café — 🎉 done.", false);
    const decoder = new TokenTextDecoder(model, prompt);
    const pieces = TokenPieces.of(model);
    let state = pieces.stateAfterTokens(prompt);
    for (const t of out) {
      const expected = pieces.spell(state, t);
      state = expected.state;
      assert.equal(decoder.push(t), expected.text);
    }
    assert.equal(decoder.flush(), "");
  }
  // A character cut off at the end of the output reads as U+FFFD, once, as a whole decode reads it.
  const decoder = new TokenTextDecoder(spm, [FIXTURE_TOKENS.bos as Token]);
  assert.deepEqual([0xe2, 0x80].map((b) => decoder.push(byteTokenId(b) as Token)), ["", ""]);
  assert.equal(decoder.flush(), "\ufffd");
  assert.equal(decoder.flush(), "");
});

test("unfinishedTail holds only what can still become a character", () => {
  assert.deepEqual(unfinishedTail([0x41, 0xe2, 0x80]), [0xe2, 0x80]);
  assert.deepEqual(unfinishedTail([0xf0, 0x9f, 0x8e]), [0xf0, 0x9f, 0x8e]);
  assert.deepEqual(unfinishedTail([0xe2, 0x80, 0x94]), []);
  assert.deepEqual(unfinishedTail([0xe0, 0x80]), []); // E0 needs A0..BF next: already invalid
  assert.deepEqual(unfinishedTail([0x80, 0x80]), []);
  assert.deepEqual(unfinishedTail([]), []);
});
