import assert from "../helpers/assert.ts";
import { test } from "node:test";
import fc from "fast-check";
import type { BatchItem } from "node-llama-cpp";
import { generationFirstStrategy } from "../../src/engines/llama-cpp/batch-strategy.ts";

const item = (tokens: number, evaluationPriority = 5): BatchItem => ({
  tokens: Array.from({ length: tokens }, (_, i) => i) as unknown as BatchItem["tokens"],
  logits: new Array(tokens).fill(undefined),
  evaluationPriority: evaluationPriority as BatchItem["evaluationPriority"],
});

test("a long prompt queued ahead of generating sequences leaves each of them its token", () => {
  // The case node-llama-cpp's default got wrong: the prompt was given more than the batch and,
  // first in the queue, filled it.
  const prompt = item(952);
  const steps = [item(1), item(1), item(1), item(1)];
  const out = generationFirstStrategy({ items: [prompt, ...steps], size: 512 });
  assert.deepEqual(
    out.map((o) => o.processAmount),
    [508, 1, 1, 1, 1],
  );
  // Queue order is kept: the batch gate queues a step in ascending sequence order.
  assert.deepEqual(
    out.map((o) => o.item),
    [prompt, ...steps],
  );
});

test("prompts share what is left of the batch evenly, higher priority first for the remainder", () => {
  const out = generationFirstStrategy({ items: [item(1), item(1000, 1), item(1000, 9)], size: 100 });
  assert.deepEqual(
    out.map((o) => o.processAmount),
    [1, 49, 50],
  );
});

test("property: the batch is never overfilled, every item that fits gets a token, and none gets more than it has", () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ tokens: fc.integer({ min: 1, max: 3000 }), priority: fc.integer({ min: 1, max: 10 }) }), { minLength: 1, maxLength: 40 }),
      fc.integer({ min: 1, max: 2048 }),
      (specs, size) => {
        const items = specs.map((s) => item(s.tokens, s.priority));
        const out = generationFirstStrategy({ items, size });
        const total = out.reduce((a, o) => a + o.processAmount, 0);
        assert.ok(total <= size, `total ${total} > size ${size}`);
        for (const o of out) {
          assert.ok(o.processAmount >= 1 && o.processAmount <= o.item.tokens.length);
        }
        // The first `size` items in queue order each get at least their one token.
        const given = new Set(out.map((o) => o.item));
        for (const it of items.slice(0, Math.min(size, items.length))) assert.ok(given.has(it));
        // Nothing is left over while some item still wants tokens.
        const wanted = items.reduce((a, it) => a + it.tokens.length, 0);
        assert.equal(total, Math.min(size, wanted));
        // Queue order is kept.
        const order = out.map((o) => items.indexOf(o.item));
        assert.deepEqual(order, [...order].sort((a, b) => a - b));
      },
    ),
    { numRuns: 500 },
  );
});
