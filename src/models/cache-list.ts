import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { cachedModelRef, defaultCacheDir, isCompleteSync } from "./cache-layout.ts";

export interface CachedModel {
  /** The reference that serves it: hf:owner/repo[@rev]/file.gguf */
  ref: string;
  path: string;
  bytes: number;
}

/**
 * Finished, verified downloads in the cache (see cache-layout.ts), each with the reference
 * that serves it. Partial downloads are not listed.
 */
export function listCachedModels(cacheDir = defaultCacheDir()): CachedModel[] {
  const root = path.resolve(cacheDir);
  const out: CachedModel[] = [];
  const walk = (dir: string) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      // A missing cache is an empty one.
      if (dir === root && (err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        walk(full);
        continue;
      }
      const ref = cachedModelRef(full, root);
      if (ref !== undefined && isCompleteSync(full)) out.push({ ref, path: full, bytes: statSync(full).size });
    }
  };
  walk(root);
  return out.sort((a, b) => a.ref.localeCompare(b.ref));
}
