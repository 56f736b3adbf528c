import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { PrefixStore } from "../../src/engines/llama-cpp/prefix-store.ts";
import { SlotCache } from "../../src/engines/llama-cpp/slot-cache.ts";

const tokens = (...ids: number[]) => ids as Token[];

/**
 * A stand-in for node-llama-cpp's sequence with the members the slot cache uses; it records what was
 * asked of it. The real sequence is exercised by test/integration/prompt-cache.test.ts.
 */
function fakeSequence(load: (path: string) => Promise<void>) {
  const calls: string[] = [];
  let context: Token[] = [];
  const sequence = {
    get contextTokens() {
      return context.slice();
    },
    get nextTokenIndex() {
      return context.length;
    },
    async clearHistory() {
      calls.push("clear");
      context = [];
    },
    async loadStateFromFile(path: string) {
      calls.push("load");
      await load(path);
    },
    async eraseContextTokenRanges(ranges: Array<{ start: number; end: number }>) {
      calls.push("erase");
      context = context.slice(0, ranges[0].start);
    },
    async saveStateToFile(path: string) {
      writeFileSync(path, "state");
      return { fileSize: 5 };
    },
  };
  return { sequence: sequence as unknown as LlamaContextSequence, calls, setContext: (t: Token[]) => (context = t) };
}

test("a saved state that cannot be read back is forgotten and the prompt is evaluated, not failed", async () => {
  const base = mkdtempSync(join(tmpdir(), "plinth-slot-cache-"));
  const store = new PrefixStore(1_000_000, 1, "unit-slot", { baseDir: base });
  try {
    // Saved from sequence 0 after evaluating a prompt; sequence 1 then looks for it.
    const donor = fakeSequence(async () => {});
    donor.setContext(tokens(1, 2, 3, 4, 5));
    const reader = fakeSequence(async (path) => {
      throw new Error(`Failed to load state from file ${path}`);
    });
    const cache = new SlotCache([donor.sequence, reader.sequence], store);
    await store.save("ns", donor.sequence);
    assert.equal(store.size, 1);

    const cached = await cache.prepare(1, "ns", tokens(1, 2, 3, 4, 5, 6), true);
    assert.equal(cached, 0, "nothing is reused, so the whole prompt is evaluated");
    assert.deepEqual(reader.calls, ["clear", "load", "clear"], "the failed load is followed by a clean start");
    assert.equal(store.size, 0, "the unreadable entry is dropped");
    assert.equal(store.bytesUsed, 0);
  } finally {
    store.dispose();
    rmSync(base, { recursive: true, force: true });
  }
});
