import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { commonPrefix, type PrefixStore } from "./prefix-store.ts";

/**
 * Prompt reuse across requests. Each sequence keeps what it last evaluated; a request goes to the
 * free sequence sharing the longest prefix with its prompt inside its namespace and evaluates only
 * the rest. A sequence is wiped before it serves another namespace, and saved states are only looked
 * up within the namespace, so no tenant's cached KV ever serves (or times) another's prompt.
 */
export class SlotCache {
  private readonly namespaces: Array<string | null>;
  private readonly cacheKeys: Array<string | undefined>;
  private readonly lastUsed: number[];
  private clock = 0;

  constructor(
    private readonly sequences: LlamaContextSequence[],
    private readonly store: PrefixStore,
  ) {
    this.namespaces = sequences.map(() => null);
    this.cacheKeys = sequences.map(() => undefined);
    this.lastUsed = sequences.map(() => 0);
  }

  /**
   * Longest reusable prefix first (less `penalty`, in tokens); then the sequence last used with the
   * same cache key; then the least recently used.
   */
  pick(free: readonly number[], namespace: string, prompt: readonly Token[], cacheKey?: string, penalty: (slot: number) => number = () => 0): number {
    let best = free[0];
    let bestScore = -Infinity;
    for (const slot of free) {
      const match = this.namespaces[slot] === namespace ? commonPrefix(this.sequences[slot].contextTokens, prompt) : 0;
      const keyed = cacheKey !== undefined && this.cacheKeys[slot] === cacheKey ? 0.5 : 0;
      const score = match - penalty(slot) + keyed - this.lastUsed[slot] / (this.clock + 1) / 4;
      if (score > bestScore) {
        bestScore = score;
        best = slot;
      }
    }
    return best;
  }

  /**
   * Puts the sequence in a state that holds the longest usable prefix of `prompt` and nothing
   * after it; returns how many prompt tokens need no evaluation. With `reuse` off, starts empty.
   */
  async prepare(slot: number, namespace: string, prompt: readonly Token[], reuse: boolean, cacheKey?: string): Promise<number> {
    const sequence = this.sequences[slot];
    this.lastUsed[slot] = ++this.clock;
    this.cacheKeys[slot] = cacheKey;
    // The last prompt token is always evaluated: its logits choose the first generated token.
    const limit = prompt.length - 1;
    let cached = 0;
    if (!reuse || this.namespaces[slot] !== namespace) {
      await sequence.clearHistory();
    } else {
      cached = Math.min(limit, commonPrefix(sequence.contextTokens, prompt));
    }
    this.namespaces[slot] = reuse ? namespace : null;
    if (!reuse) return 0;

    const saved = this.store.enabled ? this.store.best(namespace, prompt) : undefined;
    if (saved && Math.min(limit, saved.match) > cached) {
      try {
        await sequence.loadStateFromFile(saved.entry.path, { acceptRisk: true });
        cached = Math.min(limit, saved.match);
      } catch {
        // The file went (evicted by a save that finished meanwhile, or removed from the RAM disk)
        // or could not be read: the prompt is evaluated instead of failing the request. What a
        // failed load left in the sequence is unknown, so it starts empty.
        this.store.forget(saved.entry);
        await sequence.clearHistory();
        cached = 0;
      }
    }
    if (sequence.nextTokenIndex > cached) await sequence.eraseContextTokenRanges([{ start: cached, end: sequence.nextTokenIndex }]);
    return cached;
  }

  /** Called once the prompt is evaluated (before any generated token enters the sequence). */
  async promptEvaluated(slot: number): Promise<void> {
    const namespace = this.namespaces[slot];
    if (namespace !== null) await this.store.save(namespace, this.sequences[slot]);
  }

  dispose(): void {
    this.store.dispose();
  }
}
