import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { getLlama, LlamaLogLevel, type LlamaModel, type Token } from "node-llama-cpp";
import { TokenTextDecoder } from "../../src/engines/llama-cpp/token-text.ts";
import { byteTokenId, ensureFixtureModel } from "../fixtures/models.ts";

let model: LlamaModel;
before(async () => {
  const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never", logLevel: LlamaLogLevel.error });
  model = await llama.loadModel({ modelPath: await ensureFixtureModel(), vocabOnly: true });
});
after(async () => {
  await model.dispose();
});

test("multi-byte characters split over byte tokens are emitted whole, never as fragments", () => {
  const text = "héllo 世界 🎉 done";
  const tokens = model.tokenize(text, false);
  assert.ok(tokens.length > text.length / 2, "the fixture should fall back to byte tokens here");
  const decoder = new TokenTextDecoder(model);
  const pieces = tokens.map((t) => decoder.push(t));
  pieces.push(decoder.flush());
  for (const p of pieces) assert.ok(!p.includes("\uFFFD"), `fragment emitted: ${JSON.stringify(p)}`);
  assert.equal(pieces.join(""), text);
  // The 4-byte emoji arrives as four byte tokens: three pushes hold, the fourth releases it.
  const emoji = [0xf0, 0x9f, 0x8e, 0x89].map((b) => byteTokenId(b) as Token);
  const d2 = new TokenTextDecoder(model);
  assert.deepEqual(emoji.map((t) => d2.push(t)), ["", "", "", "🎉"]);
});

test("a byte sequence that never completes is emitted once as U+FFFD instead of stalling", () => {
  const decoder = new TokenTextDecoder(model);
  const out = [decoder.push(byteTokenId(0xe4) as Token), decoder.push(byteTokenId(0x41) as Token)];
  assert.equal(out.join(""), "\uFFFDA");
});
