import { createHash } from "node:crypto";
import { existsSync, mkdirSync, rmSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";

interface SavedPrefix {
  namespace: string;
  tokens: Token[];
  path: string;
  bytes: number;
  lastUsed: number;
}

/**
 * Evaluated prompt states saved outside the sequences, so a prefix survives its sequence being
 * reused for another prompt. node-llama-cpp can only copy sequence state through files, so they live
 * on a RAM-backed directory (/dev/shm where it exists), bounded by a byte budget with least-recently
 * used eviction. Entries belong to one namespace and are only ever offered to that namespace.
 */
export class PrefixStore {
  private readonly entries = new Map<string, SavedPrefix>();
  private readonly dir: string;
  private used = 0;
  private clock = 0;

  constructor(
    private readonly budgetBytes: number,
    private readonly minTokens: number,
    label: string,
  ) {
    const base = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
    this.dir = join(base, `plinth-${process.pid}-${label.replace(/[^A-Za-z0-9._-]/g, "_")}`);
  }

  get enabled(): boolean {
    return this.budgetBytes > 0;
  }

  get bytesUsed(): number {
    return this.used;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The saved state sharing the longest prefix with `prompt` in this namespace. */
  best(namespace: string, prompt: readonly Token[]): { entry: SavedPrefix; match: number } | undefined {
    let best: { entry: SavedPrefix; match: number } | undefined;
    for (const entry of this.entries.values()) {
      if (entry.namespace !== namespace) continue;
      const match = commonPrefix(entry.tokens, prompt);
      if (match > (best?.match ?? 0)) best = { entry, match };
    }
    if (best) best.entry.lastUsed = ++this.clock;
    return best;
  }

  /** Saves the sequence's current state (an evaluated prompt) unless it is too short or already kept. */
  async save(namespace: string, sequence: LlamaContextSequence): Promise<void> {
    const tokens = sequence.contextTokens;
    if (!this.enabled || tokens.length < this.minTokens) return;
    const key = createHash("sha256").update(namespace).update("\0").update(Uint32Array.from(tokens)).digest("hex").slice(0, 32);
    const existing = this.entries.get(key);
    if (existing) {
      existing.lastUsed = ++this.clock;
      return;
    }
    const path = join(this.dir, `${key}.state`);
    let fileSize: number;
    try {
      mkdirSync(this.dir, { recursive: true });
      ({ fileSize } = await sequence.saveStateToFile(path));
    } catch {
      // A full or missing RAM disk (containers often give /dev/shm 64 MiB) costs cache hits, never
      // the request: the state is simply not kept.
      rmSync(path, { force: true });
      return;
    }
    if (fileSize > this.budgetBytes) {
      unlinkSync(path);
      return;
    }
    this.entries.set(key, { namespace, tokens: tokens.slice(), path, bytes: fileSize, lastUsed: ++this.clock });
    this.used += fileSize;
    this.evictToBudget();
  }

  dispose(): void {
    this.entries.clear();
    this.used = 0;
    rmSync(this.dir, { recursive: true, force: true });
  }

  private evictToBudget(): void {
    while (this.used > this.budgetBytes && this.entries.size > 0) {
      let oldestKey = "";
      let oldest = Infinity;
      for (const [key, e] of this.entries) {
        if (e.lastUsed < oldest) {
          oldest = e.lastUsed;
          oldestKey = key;
        }
      }
      const victim = this.entries.get(oldestKey)!;
      this.entries.delete(oldestKey);
      this.used -= victim.bytes;
      rmSync(victim.path, { force: true });
    }
  }
}

export function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
