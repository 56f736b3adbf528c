import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { choiceSeed, drawnSeed, samplerSeed, SEED_SPACE } from "../../src/core/random.ts";

const inRange = (s: number) => Number.isInteger(s) && s >= 0 && s < SEED_SPACE;

describe("canonical sampler seeds", () => {
  it("keep the seeds llama.cpp takes as they are", () => {
    for (const seed of [0, 1, 1234, 2 ** 31, SEED_SPACE - 1]) assert.equal(samplerSeed(seed), seed);
  });
  it("never reach 2^32 − 1, llama.cpp's random seed, whatever the client sends or n adds", () => {
    fc.assert(
      fc.property(fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }), fc.integer({ min: 0, max: 200 }), (seed, n) => {
        const s = samplerSeed(seed);
        return inRange(s) && inRange(choiceSeed(s, n));
      }),
    );
    assert.ok(inRange(samplerSeed(2 ** 32 - 1)));
    assert.equal(choiceSeed(SEED_SPACE - 1, 1), 0);
    for (let i = 0; i < 1000; i++) assert.ok(inRange(drawnSeed()));
  });
  it("fold large seeds from all their bits, so they do not collapse onto one", () => {
    const large = [2 ** 63, -(2 ** 63), 2 ** 62, 2 ** 53, 2 ** 53 + 2, 2 ** 32, 2 ** 33, 2 ** 84, -1, -2];
    const folded = large.map(samplerSeed);
    assert.ok(folded.every(inRange));
    assert.equal(new Set(folded).size, large.length);
    assert.ok(!folded.includes(0));
  });
});
