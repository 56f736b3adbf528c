import type { SamplingParams } from "../../core/types.ts";

/**
 * Samples from a full next-token distribution in JavaScript, following llama.cpp's chain order
 * (top-k → top-p → min-p → temperature → draw). Used when log probabilities are requested: the
 * engine then decodes greedily to get the untruncated distribution, reports it, and this picks the
 * token that actually follows.
 */
export class JsSampler {
  private state: number;

  constructor(private readonly s: SamplingParams) {
    this.state = s.seed >>> 0 || 0x9e3779b9;
  }

  /** `probs` must be sorted by probability, highest first (node-llama-cpp returns it so). */
  pick(probs: ReadonlyMap<number, number>): number {
    const first = probs.keys().next().value as number;
    if (this.s.temperature <= 0) return first;

    let candidates = [...probs];
    if (this.s.topK > 0) candidates = candidates.slice(0, this.s.topK);
    if (this.s.topP < 1) {
      const total = candidates.reduce((a, [, p]) => a + p, 0);
      let cum = 0;
      let keep = candidates.length;
      for (let i = 0; i < candidates.length; i++) {
        cum += candidates[i][1] / total;
        if (cum >= this.s.topP) {
          keep = i + 1;
          break;
        }
      }
      candidates = candidates.slice(0, keep);
    }
    if (this.s.minP > 0) {
      const floor = candidates[0][1] * this.s.minP;
      candidates = candidates.filter(([, p]) => p >= floor);
    }
    const weights = candidates.map(([, p]) => Math.pow(p, 1 / this.s.temperature));
    const total = weights.reduce((a, w) => a + w, 0);
    let r = this.next() * total;
    for (let i = 0; i < candidates.length; i++) {
      r -= weights[i];
      if (r <= 0) return candidates[i][0];
    }
    return candidates[candidates.length - 1][0];
  }

  /** mulberry32: small, fast and reproducible for a given seed. */
  private next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}
