import { randomInt } from "node:crypto";
/**
 * Seeded random numbers in [0, 1) (mulberry32): small, fast and the same on every platform, for
 * whatever must replay exactly (a traffic split in a test, a fixture's weights).
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A seed for the stream named `label` under `seed`: the same for the same pair on every run, and
 * unrelated for different labels, so each named stream replays on its own whatever the others draw.
 * FNV-1a over both, then murmur3's finaliser to spread nearby inputs.
 */
export function derivedSeed(seed: number, label: string): number {
  let h = 0x811c9dc5;
  for (const ch of `${seed}\u0000${label}`) {
    h ^= ch.codePointAt(0)!;
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * Sampler seeds are 32 bits, and 2^32 − 1 is the one value llama.cpp (LLAMA_DEFAULT_SEED) and
 * llama-server read as "draw a random seed": canonical seeds stay below it.
 */
export const SEED_SPACE = 2 ** 32 - 1;

/**
 * A client's seed (any integer up to 64 bits, which JSON hands over as a double) as a canonical
 * sampler seed in [0, 2^32 − 2]. Seeds in that range stay as they are, so a seed means here what it
 * means to llama.cpp. Any other is folded from all 64 bits of its double: reducing it modulo 2^32
 * made 2^32 − 1 a random seed, and every seed from 2^84 up (2^63 − 1, a common "largest" seed, is
 * read as 2^63) the same seed, 0.
 */
export function samplerSeed(seed: number): number {
  if (Number.isInteger(seed) && seed >= 0 && seed < SEED_SPACE) return seed;
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, seed);
  let h = view.getUint32(0) ^ Math.imul(view.getUint32(4), 0x9e3779b1);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) % SEED_SPACE;
}

/** The seed of choice `offset` of a request (n > 1): the next seeds, within the canonical range. */
export function choiceSeed(seed: number, offset: number): number {
  return (seed + offset) % SEED_SPACE;
}

/** A seed for a request that gave none. */
export function drawnSeed(): number {
  return randomInt(SEED_SPACE);
}
