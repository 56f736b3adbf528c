import assert from "../helpers/assert.ts";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  ChatMLChatWrapper,
  getLlama,
  LlamaLogLevel,
  readGgufFileInfo,
  resolveChatWrapper,
  type LlamaContext,
  type LlamaModel,
  type Token,
  HarmonyChatWrapper,
} from "node-llama-cpp";
import { float16ToFloat32, float32ToFloat16 } from "../../src/models/gguf-writer.ts";
import {
  byteTokenId,
  ensureFixtureModel,
  FIXTURE_TOKENS,
  FIXTURE_VOCAB_SIZE,
  fixtureFileName,
  fixtureParameterCount,
  fixtureVocabulary,
  HARMONY_SPEC,
  HARMONY_TOKENS,
  TINY_SPEC,
  type FixtureSpec,
} from "../fixtures/models.ts";

const run = promisify(execFile);
const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

let scratch: string;
let modelPath: string;
let model: LlamaModel;
let context: LlamaContext;

before(async () => {
  scratch = await mkdtemp(join(tmpdir(), "plinth-fixture-"));
  const started = performance.now();
  modelPath = await ensureFixtureModel(TINY_SPEC, scratch);
  const ms = performance.now() - started;
  assert.ok(ms < 5000, `tiny fixture took ${ms.toFixed(0)} ms to generate`);

  const llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
  model = await llama.loadModel({ modelPath });
  // One thread: with two threads ggml's spin barrier collapses to ~70 tok/s on a 2-core box
  // whenever anything else is running; one thread decodes this model at >2000 tok/s.
  context = await model.createContext({ contextSize: 512, sequences: 2, threads: 1 });
});

after(async () => {
  await context?.dispose();
  await model?.dispose();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

test("f16 encoding rounds to nearest even and handles the edges", () => {
  assert.equal(float32ToFloat16(1), 0x3c00);
  assert.equal(float32ToFloat16(-2), 0xc000);
  assert.equal(float32ToFloat16(65504), 0x7bff);
  assert.equal(float32ToFloat16(70000), 0x7c00);
  assert.equal(float32ToFloat16(0.1), 0x2e66);
  assert.equal(float32ToFloat16(2 ** -24), 0x0001); // smallest subnormal
  assert.equal(float32ToFloat16(2 ** -26), 0x0000);
  assert.equal(float32ToFloat16(1 + 2 ** -11), 0x3c00); // tie, even stays
  assert.equal(float32ToFloat16(1 + 3 * 2 ** -11), 0x3c02); // tie, odd rounds up
  for (const v of [0.5, -0.0234375, 3.140625, 1024, 2 ** -20]) assert.equal(float16ToFloat32(float32ToFloat16(v)), v);
});

test("the file is a well-formed GGUF v3 llama model with the expected metadata", async () => {
  assert.equal(modelPath, join(scratch, fixtureFileName(TINY_SPEC)));
  const info = await readGgufFileInfo(modelPath);
  assert.equal(info.version, 3);
  assert.equal(info.metadata.general.architecture, "llama");
  assert.equal(info.metadata.general.alignment, 32);
  const meta = info.metadata as any;
  assert.equal(meta.llama.embedding_length, TINY_SPEC.nEmbd);
  assert.equal(meta.llama.block_count, TINY_SPEC.nLayer);
  assert.equal(meta.llama.attention.head_count_kv, TINY_SPEC.nHeadKv);
  assert.equal(meta.llama.rope.dimension_count, TINY_SPEC.nEmbd / TINY_SPEC.nHead);
  assert.equal(meta.tokenizer.ggml.model, "llama");
  assert.equal(meta.tokenizer.ggml.tokens.length, FIXTURE_VOCAB_SIZE);
  assert.equal(meta.tokenizer.chat_template, TINY_SPEC.chatTemplate);
  const tensors = info.tensorInfo ?? [];
  assert.equal(tensors.length, 3 + 9 * TINY_SPEC.nLayer);
  const params = tensors.reduce((sum, t) => sum + t.dimensions.reduce((a: number, b) => a * Number(b), 1), 0);
  assert.equal(params, fixtureParameterCount(TINY_SPEC));
  for (const t of tensors) assert.equal(Number(t.offset) % 32, 0, `${t.name} is not aligned`);
  assert.deepEqual(tensors.find((t) => t.name === "blk.0.attn_k.weight")?.dimensions.map(Number), [64, 32]);
});

test("generation is cached, deduplicated in-process, and keyed by the spec", async () => {
  const again = await Promise.all([ensureFixtureModel(TINY_SPEC, scratch), ensureFixtureModel(TINY_SPEC, scratch)]);
  assert.deepEqual(again, [modelPath, modelPath]);
  const other: FixtureSpec = { ...TINY_SPEC, seed: TINY_SPEC.seed + 1 };
  assert.notEqual(fixtureFileName(other), fixtureFileName(TINY_SPEC));
  assert.equal(fixtureFileName({ ...TINY_SPEC }), fixtureFileName(TINY_SPEC));
});

test("two processes racing to create the same file both succeed and leave one complete file", async () => {
  const dir = join(scratch, "race");
  const cli = join(repoRoot, "test/fixtures/cli.ts");
  const runs = await Promise.all(
    [0, 1].map(() => run(process.execPath, ["--import", "tsx", cli, "tiny", dir], { cwd: repoRoot })),
  );
  const paths = runs.map((r) => r.stdout.trim());
  assert.equal(paths[0], join(dir, fixtureFileName(TINY_SPEC)));
  assert.equal(paths[1], paths[0]);
  assert.deepEqual(await readdir(dir), [fixtureFileName(TINY_SPEC)]); // no temp files left behind
  assert.equal((await stat(paths[0])).size, (await stat(modelPath)).size);
});

test("special tokens: BOS, EOS/EOT on <|im_end|>, </s> is also end-of-generation", () => {
  assert.equal(model.tokens.bos, FIXTURE_TOKENS.bos);
  assert.equal(model.tokens.eos, FIXTURE_TOKENS.imEnd);
  assert.equal(model.tokens.eot, FIXTURE_TOKENS.imEnd);
  assert.equal(model.tokens.eosString, "<|im_end|>");
  assert.equal(model.tokens.nl, FIXTURE_TOKENS.newline);
  assert.equal(model.tokens.shouldPrependBosToken, true);
  assert.ok(model.isEogToken(FIXTURE_TOKENS.imEnd as Token));
  assert.ok(model.isEogToken(FIXTURE_TOKENS.endOfSequence as Token));
  assert.ok(!model.isEogToken(FIXTURE_TOKENS.imStart as Token));
  assert.ok(!model.isEogToken(FIXTURE_TOKENS.bos as Token));
  const vocab = fixtureVocabulary();
  assert.equal(vocab.tokens[FIXTURE_TOKENS.imStart], "<|im_start|>");
  assert.equal(vocab.tokens[byteTokenId(0x0a)], "<0x0A>");
});

test("special token text is parsed only when asked", () => {
  assert.deepEqual(model.tokenize("<|im_start|>", true), [FIXTURE_TOKENS.imStart]);
  assert.deepEqual(model.tokenize("<|im_end|>", true), [FIXTURE_TOKENS.imEnd]);
  assert.deepEqual(model.tokenize("<s></s>", true), [FIXTURE_TOKENS.bos, FIXTURE_TOKENS.endOfSequence]);
  const plain = model.tokenize("<|im_start|>", false);
  assert.ok(plain.length > 1);
  assert.ok(!plain.includes(FIXTURE_TOKENS.imStart as Token));
  assert.equal(model.detokenize(plain), "<|im_start|>");
  assert.equal(model.detokenize([FIXTURE_TOKENS.imEnd as Token], false), "");
  assert.equal(model.detokenize([FIXTURE_TOKENS.imEnd as Token], true), "<|im_end|>");
});

test("tokenize/detokenize round-trips exactly, English uses multi-character pieces, the rest falls back to bytes", () => {
  const samples = [
    "Hello world, the quick brown fox jumps over the lazy dog.",
    " leading space",
    "  two  spaces and trailing ",
    "line one\nline two\n\n\ttabbed\r\n",
    "héllo 世界 🎉",
    "emoji 👩‍💻 and ZWJ",
    "numbers 0123456789 and symbols ~!@#$%^&*()_+{}|:\"<>?",
    "The answer is 42.",
  ];
  for (const text of samples) assert.equal(model.detokenize(model.tokenize(text)), text, JSON.stringify(text));

  const english = "The quick brown fox jumps over the lazy dog and the cat.";
  const englishTokens = model.tokenize(english);
  assert.ok(englishTokens.length <= english.length / 3, `${englishTokens.length} tokens for ${english.length} chars`);
  assert.ok(englishTokens.every((t) => t >= FIXTURE_TOKENS.firstPiece), "English should need no byte tokens");

  const unicode = model.tokenize("世界");
  assert.deepEqual(unicode, [...Buffer.from("世界")].map(byteTokenId));
});

test("the chat template resolves to node-llama-cpp's ChatML wrapper", () => {
  const wrapper = resolveChatWrapper(model);
  assert.ok(wrapper instanceof ChatMLChatWrapper, `resolved to ${wrapper.wrapperName}`);
  const { contextText } = wrapper.generateContextState({
    chatHistory: [
      { type: "system", text: "Be brief." },
      { type: "user", text: "Hi <|im_end|>" },
      { type: "model", response: [] },
    ],
  });
  const tokens = contextText.tokenize(model.tokenizer);
  assert.equal(tokens[0], FIXTURE_TOKENS.bos);
  assert.equal(tokens[1], FIXTURE_TOKENS.imStart);
  // user text is never parsed as special tokens
  assert.equal(tokens.filter((t) => t === FIXTURE_TOKENS.imEnd).length, 2);
  assert.equal(
    model.detokenize(tokens, true),
    "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\n",
  );
});

async function generate(prompt: string, maxTokens: number, options: { temperature: number; seed?: number }) {
  const sequence = context.getSequence();
  try {
    const input = [model.tokens.bos!, ...model.tokenize(prompt, true)];
    const out: Token[] = [];
    for await (const token of sequence.evaluate(input, { ...options, topK: 0, topP: 1, yieldEogToken: true })) {
      out.push(token);
      if (out.length >= maxTokens || model.isEogToken(token)) break;
    }
    return out;
  } finally {
    sequence.dispose();
  }
}

const chatPrompt = "<|im_start|>user\nTell me a story about a king.<|im_end|>\n<|im_start|>assistant\n";

test("greedy decoding is deterministic, runs the full length, and does not get stuck on one token", async () => {
  const a = await generate(chatPrompt, 64, { temperature: 0 });
  const b = await generate(chatPrompt, 64, { temperature: 0 });
  assert.equal(a.length, 64);
  assert.deepEqual(b, a);
  assert.ok(!a.some((t) => model.isEogToken(t)));
  assert.ok(new Set(a).size >= 16, `only ${new Set(a).size} distinct tokens`);
  for (let i = 1; i < a.length; i++) assert.notEqual(a[i], a[i - 1], "a token repeated back to back");
  const text = model.detokenize(a);
  assert.ok(!text.includes("\uFFFD"));
});

test("sampling at temperature 1 depends on the seed and is reproducible for a fixed seed", async () => {
  const s1 = await generate(chatPrompt, 48, { temperature: 1, seed: 1 });
  const s2 = await generate(chatPrompt, 48, { temperature: 1, seed: 2 });
  const s1again = await generate(chatPrompt, 48, { temperature: 1, seed: 1 });
  assert.deepEqual(s1again, s1);
  assert.notDeepEqual(s1, s2);
  // Samples are drawn from the whole vocabulary; control and raw-byte tokens (other than
  // newline) are weighted out, so generated text is always valid UTF-8.
  for (const t of [...s1, ...s2]) {
    if (model.isEogToken(t)) continue;
    assert.ok(t >= FIXTURE_TOKENS.firstPiece || t === FIXTURE_TOKENS.newline, `unexpected token ${t}`);
  }
});

test("most sampled generations run past 30 tokens without hitting <|im_end|>", async () => {
  let long = 0;
  const trials = 12;
  for (let seed = 100; seed < 100 + trials; seed++) {
    const out = await generate(chatPrompt, 32, { temperature: 1, seed });
    if (out.length === 32 && !out.some((t) => model.isEogToken(t))) long++;
  }
  assert.ok(long >= trials - 3, `${long}/${trials} ran to the limit`);
});

test("a padded vocabulary tokenizes text exactly as the base one; fillers only come from sampling", async () => {
  const padded = await model.llama.loadModel({ modelPath: await ensureFixtureModel({ ...TINY_SPEC, name: "plinth-tiny-pad", vocabSize: 2000 }, scratch) });
  try {
    assert.equal(padded.tokens.bos, model.tokens.bos);
    const text = "Hello the quick brown fox jumps over zq the lazy dog, zq0001 and <|im_end|> 123";
    assert.deepEqual(padded.tokenize(text), model.tokenize(text));
    assert.equal(padded.detokenize([(FIXTURE_VOCAB_SIZE + 1) as Token]), "zq0001");
    assert.equal(fixtureVocabulary({ vocabSize: 2000 }).tokens.length, 2000);
  } finally {
    await padded.dispose();
  }
});

test("the harmony variant: gpt-oss's tokens, <|return|> as EOS, and node-llama-cpp's Harmony format by name", async () => {
  const oss = await model.llama.loadModel({ modelPath: await ensureFixtureModel(HARMONY_SPEC, scratch) });
  try {
    assert.equal(oss.tokens.eos, HARMONY_TOKENS.return);
    assert.ok(oss.isEogToken(HARMONY_TOKENS.call as Token));
    // llama.cpp renders the structural tokens as text; <|end|> stays an (invisible) end token.
    assert.equal(oss.detokenize([HARMONY_TOKENS.channel as Token]), "<|channel|>");
    assert.ok(oss.isEogToken(HARMONY_TOKENS.end as Token));
    assert.ok(resolveChatWrapper(oss) instanceof HarmonyChatWrapper);
  } finally {
    await oss.dispose();
  }
});
