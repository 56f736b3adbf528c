import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { commonPrefix, PrefixStore } from "../../src/engines/llama-cpp/prefix-store.ts";

const tokens = (...ids: number[]) => ids as Token[];

/** Only the two members the store uses; the real sequence is exercised by the integration tests. */
function fakeSequence(contextTokens: Token[], save: (path: string) => Promise<{ fileSize: number }>) {
  return { contextTokens, saveStateToFile: save } as unknown as LlamaContextSequence;
}

test("commonPrefix counts the shared leading tokens", () => {
  assert.equal(commonPrefix(tokens(1, 2, 3), tokens(1, 2, 4)), 2);
  assert.equal(commonPrefix(tokens(), tokens(1)), 0);
  assert.equal(commonPrefix(tokens(5, 6), tokens(5, 6)), 2);
});

test("a failed save (a full RAM disk) is skipped, not thrown", async () => {
  const store = new PrefixStore(1_000_000, 1, "unit-fail");
  await store.save("ns", fakeSequence(tokens(1, 2, 3), async () => {
    throw new Error("ENOSPC: no space left on device");
  }));
  assert.equal(store.size, 0);
  store.dispose();
});

test("entries are found only in their own namespace, and evicted oldest first", async () => {
  const { writeFileSync } = await import("node:fs");
  const store = new PrefixStore(250, 1, "unit-lru");
  const save = (path: string) => {
    writeFileSync(path, "x".repeat(100));
    return Promise.resolve({ fileSize: 100 });
  };
  await store.save("a", fakeSequence(tokens(1, 2, 3), save));
  await store.save("a", fakeSequence(tokens(7, 8), save));
  assert.equal(store.best("b", tokens(1, 2, 3)), undefined);
  assert.equal(store.best("a", tokens(1, 2, 9))?.match, 2);
  await store.save("a", fakeSequence(tokens(4, 5), save)); // over budget: the least recently used goes
  assert.equal(store.size, 2);
  assert.equal(store.best("a", tokens(7, 8)), undefined);
  assert.ok(store.bytesUsed <= 250);
  store.dispose();
});
