import { readFileSync, statSync } from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";

import { formatHfRef, ModelSourceError, parseModelArg } from "./source.ts";

/**
 * The download cache's layout, shared by the downloader (which writes it) and the listing
 * (which reads it back):
 *
 *   <cacheDir>/<owner>/<repo>/<revision>/<file>          the model, once verified
 *   <cacheDir>/<owner>/<repo>/<revision>/<file>.sha256   its checksum (sha256sum format)
 *   <cacheDir>/<owner>/<repo>/<revision>/<file>.part     a download in progress
 *
 * The default revision is stored under its own name (DEFAULT_REVISION in source.ts) and left
 * out of the `hf:` reference again by formatHfRef. A model file only ever appears by renaming
 * a verified .part file, and its sidecar is written just before that rename, so a model file
 * without a valid sidecar is unfinished.
 */

export type HfLocation = { owner: string; repo: string; revision: string; file: string };

export function defaultCacheDir(): string {
  return process.env.PLINTH_CACHE_DIR || path.join(os.homedir(), ".cache", "plinth", "models");
}

/** Where a hub file is (or will be) stored, without touching the disk or network. */
export function cachedModelPath(src: HfLocation, cacheDir = defaultCacheDir()): string {
  const root = path.resolve(cacheDir);
  const target = path.join(root, src.owner, src.repo, src.revision, ...src.file.split("/"));
  // Sources can be built by hand rather than by parseModelArg, so re-check that no
  // component climbs out of the cache before anything is written there.
  const rel = path.relative(root, target);
  if (rel === "" || rel.startsWith("..") || path.isAbsolute(rel)) {
    throw new ModelSourceError(`model reference ${formatHfRef(src)} does not map to a path inside ${root}`);
  }
  return target;
}

/**
 * The `hf:` reference whose download is stored at `file`, or undefined when `file` is not a
 * place the downloader would store one (a .part or .sha256 file, a path that is not
 * <owner>/<repo>/<revision>/<file>.gguf, names the reference syntax does not accept).
 * Only references that parse back to this very path are returned, so serving the returned
 * reference uses this file.
 */
export function cachedModelRef(file: string, cacheDir = defaultCacheDir()): string | undefined {
  const root = path.resolve(cacheDir);
  const abs = path.resolve(file);
  const [owner, repo, revision, ...rest] = path.relative(root, abs).split(path.sep);
  if (!owner || !repo || !revision || rest.length === 0) return undefined;
  const ref = formatHfRef({ owner, repo, revision, file: rest.join("/") });
  try {
    const src = parseModelArg(ref);
    if (src.kind !== "hf" || cachedModelPath(src, root) !== abs) return undefined;
  } catch (err) {
    if (err instanceof ModelSourceError) return undefined;
    throw err;
  }
  return ref;
}

export function sidecarPath(target: string): string {
  return `${target}.sha256`;
}

export function partPath(target: string): string {
  return `${target}.part`;
}

/** The sidecar's contents, in the format `sha256sum -c` reads. */
export function sidecarText(target: string, sha256: string): string {
  return `${sha256}  ${path.basename(target)}\n`;
}

const SIDECAR_DIGEST = /^[0-9a-f]{64}(?:\s|$)/;

/** Whether `target` is a finished, verified download. */
export async function isComplete(target: string): Promise<boolean> {
  try {
    const [st, side] = await Promise.all([fsp.stat(target), fsp.readFile(sidecarPath(target), "utf8")]);
    return st.isFile() && SIDECAR_DIGEST.test(side);
  } catch {
    return false;
  }
}

/** isComplete for synchronous callers. */
export function isCompleteSync(target: string): boolean {
  try {
    return statSync(target).isFile() && SIDECAR_DIGEST.test(readFileSync(sidecarPath(target), "utf8"));
  } catch {
    return false;
  }
}
