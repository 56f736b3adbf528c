import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { defaultCacheDir } from "./download.ts";

export interface CachedModel {
  /** The reference that serves it: hf:owner/repo[@rev]/file.gguf */
  ref: string;
  path: string;
  bytes: number;
}

/**
 * Completed downloads in the cache (<owner>/<repo>/<revision>/<file>, with the checksum sidecar that
 * marks a finished, verified download). Partial downloads are not listed.
 */
export function listCachedModels(cacheDir = defaultCacheDir()): CachedModel[] {
  const root = path.resolve(cacheDir);
  if (!existsSync(root)) return [];
  const out: CachedModel[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.toLowerCase().endsWith(".gguf") && existsSync(`${full}.sha256`)) {
        const [owner, repo, revision, ...file] = path.relative(root, full).split(path.sep);
        if (!owner || !repo || !revision || file.length === 0) continue;
        const rev = revision === "main" ? "" : `@${revision}`;
        out.push({ ref: `hf:${owner}/${repo}${rev}/${file.join("/")}`, path: full, bytes: statSync(full).size });
      }
    }
  };
  walk(root);
  return out.sort((a, b) => a.ref.localeCompare(b.ref));
}
