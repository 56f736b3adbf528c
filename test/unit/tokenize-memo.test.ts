import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { getLlama, LlamaLogLevel, LlamaText, type LlamaModel, SpecialToken, SpecialTokensText } from "node-llama-cpp";
import { memoTokenizer } from "../../src/engines/llama-cpp/tokenize-memo.ts";
import { BPE_SPEC, ensureFixtureModel, SPM_SPEC, TINY_SPEC } from "../fixtures/models.ts";

// The prompt renderer's remembering tokenizer (tokenize-memo.ts) must give exactly the tokens the
// model's own tokenizer gives, for any text, on the SentencePiece, byte-level BPE and tiny fixtures,
// whether the answer was kept or not.

const models: Array<[string, LlamaModel]> = [];

before(async () => {
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  for (const [name, spec] of [["spm", SPM_SPEC], ["bpe", BPE_SPEC], ["tiny", TINY_SPEC]] as const)
    models.push([name, await llama.loadModel({ modelPath: await ensureFixtureModel(spec), vocabOnly: true })]);
});
after(async () => {
  for (const [, m] of models) await m.dispose();
});

// Text with what tokenizers are touchy about: leading spaces and newlines, special-token text,
// multi-byte characters, repeated words.
const piece = fc.oneof(
  fc.constantFrom(" ", "  ", "\n", "\n\n", "\t", "hello", " world", "▁", "Ġ", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "é", "世界", "🎉", "a"),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "grapheme", maxLength: 6 }),
);
const text = fc.array(piece, { maxLength: 8 }).map((p) => p.join(""));

test("the remembering tokenizer gives the model's tokens for any text, kept or not (property)", () => {
  for (const [name, model] of models) {
    // Small limits, so the property also runs through evictions.
    const memo = memoTokenizer(model, { maxEntries: 16, maxChars: 400 });
    fc.assert(
      fc.property(text, fc.boolean(), fc.boolean(), (t, special, trim) => {
        const options = trim ? ("trimLeadingSpace" as const) : undefined;
        const expected = model.tokenizer(t, special, options);
        assert.deepEqual(memo(t, special, options), expected, `${name}: first call`);
        assert.deepEqual(memo(t, special, options), expected, `${name}: second call`);
      }),
      { numRuns: 300 },
    );
  }
});

test("a chat template's LlamaText tokenizes the same through the remembering tokenizer", () => {
  for (const [name, model] of models) {
    const memo = memoTokenizer(model);
    fc.assert(
      fc.property(fc.array(text, { minLength: 1, maxLength: 6 }), (messages) => {
        const values = messages.flatMap((m, i) => [new SpecialTokensText(`<|im_start|>${i % 2 ? "assistant" : "user"}\n`), m, new SpecialTokensText("<|im_end|>\n")]);
        const chat = LlamaText([new SpecialToken("BOS"), ...values]);
        const expected = chat.tokenize(model.tokenizer);
        assert.deepEqual(chat.tokenize(memo), expected, `${name}: first render`);
        assert.deepEqual(chat.tokenize(memo), expected, `${name}: rendered again`);
      }),
      { numRuns: 100 },
    );
  }
});

test("what a caller does to returned tokens does not change what is kept", () => {
  const [, model] = models[0];
  const memo = memoTokenizer(model);
  const first = memo(" kept text", false, "trimLeadingSpace");
  const expected = first.slice();
  first.length = 0;
  const again = memo(" kept text", false, "trimLeadingSpace");
  again.push(again[0]);
  assert.deepEqual(memo(" kept text", false, "trimLeadingSpace"), expected);
});

test("the kept answers stay within their limits, least recently used out first", () => {
  const [, model] = models[0];
  let calls = 0;
  const counting = Object.assign((t: string, s?: boolean, o?: "trimLeadingSpace") => {
    calls++;
    return model.tokenizer(t, s, o);
  }, { detokenize: model.detokenize, isSpecialToken: model.isSpecialToken, isEogToken: model.isEogToken });
  const memo = memoTokenizer({ tokenizer: counting } as unknown as LlamaModel, { maxEntries: 3, maxChars: 1000, maxEntryChars: 50 });
  for (const t of ["one", "two", "three"]) memo(t, false);
  assert.equal(calls, 3);
  memo("one", false); // "one" is now the most recent; "two" the oldest
  assert.equal(calls, 3, "a kept answer is not tokenized again");
  memo("four", false); // evicts "two"
  memo("one", false);
  memo("three", false);
  assert.equal(calls, 4, "the recently used ones are still kept");
  memo("two", false);
  assert.equal(calls, 5, "the least recently used one was evicted");
  const long = "x".repeat(51);
  memo(long, false);
  memo(long, false);
  assert.equal(calls, 7, "a stretch over the per-entry limit is never kept");
  // The option and special flag are part of what is kept.
  memo("one", true);
  memo("one", false, "trimLeadingSpace");
  assert.equal(calls, 9);
});
