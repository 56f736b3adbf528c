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
