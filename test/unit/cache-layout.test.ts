import { test, after } from "node:test";
import assert from "../helpers/assert.ts";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {
  cachedModelPath,
  cachedModelRef,
  isComplete,
  isCompleteSync,
  partPath,
  sidecarPath,
  sidecarText,
} from "../../src/models/cache-layout.ts";
import { listCachedModels } from "../../src/models/cache-list.ts";
import { parseModelArg, type ModelSource } from "../../src/models/source.ts";

const DIGEST = "ab".repeat(32);
const tempDirs: string[] = [];
after(() => {
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

function tempCache(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plinth-layout-"));
  tempDirs.push(dir);
  return dir;
}

function hf(ref: string): Extract<ModelSource, { kind: "hf" }> {
  const src = parseModelArg(ref);
  assert.equal(src.kind, "hf");
  return src as Extract<ModelSource, { kind: "hf" }>;
}

/** Stores a finished download the way the downloader leaves it: the file, then its sidecar. */
function storeFinished(cacheDir: string, ref: string, bytes = 5): string {
  const target = cachedModelPath(hf(ref), cacheDir);
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.writeFileSync(target, "x".repeat(bytes));
  fs.writeFileSync(sidecarPath(target), sidecarText(target, DIGEST));
  return target;
}

const REFS = [
  "hf:owner/repo/model.gguf",
  "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
  "hf:owner/repo@v1.0/model.gguf",
  "hf:owner/repo@0123abc/sub/dir/Model-Q8_0.GGUF",
  "hf:o_w.n-er/r.e_p-o/a=b.gguf",
];

test("cache layout: <owner>/<repo>/<revision>/<file>, the default revision stored under its name", () => {
  const root = tempCache();
  assert.equal(cachedModelPath(hf("hf:owner/repo/model.gguf"), root), path.join(root, "owner", "repo", "main", "model.gguf"));
  assert.equal(
    cachedModelPath(hf("hf:owner/repo@v2/a/b.gguf"), root),
    path.join(root, "owner", "repo", "v2", "a", "b.gguf"),
  );
  // Hand-built sources are re-checked: nothing may land outside the cache.
  assert.throws(() => cachedModelPath({ owner: "..", repo: "..", revision: "..", file: "../x.gguf" }, root), /inside/);
});

test("listing a cache written at the downloader's paths gives back the same references", () => {
  const root = tempCache();
  const expected = REFS.map((ref, i) => ({ ref, path: storeFinished(root, ref, i + 1), bytes: i + 1 }));
  for (const e of expected) assert.equal(cachedModelRef(e.path, root), e.ref);
  const listed = listCachedModels(root);
  assert.deepEqual(listed, [...expected].sort((a, b) => a.ref.localeCompare(b.ref)));
  // Each listed reference serves the listed file.
  for (const m of listed) assert.equal(cachedModelPath(hf(m.ref), root), m.path);
  // The default revision is left out of the reference, as the user would type it.
  assert.ok(listed.some((m) => m.ref === "hf:owner/repo/model.gguf"));
});

test("unfinished downloads and stray files are not listed", () => {
  const root = tempCache();
  const done = storeFinished(root, "hf:owner/repo/done.gguf");

  // A download in progress: only the .part file.
  const inProgress = cachedModelPath(hf("hf:owner/repo/partial.gguf"), root);
  fs.writeFileSync(partPath(inProgress), "xx");
  // Renamed into place but the sidecar missing, or not a digest, or still being written.
  const noSidecar = cachedModelPath(hf("hf:owner/repo/no-sidecar.gguf"), root);
  fs.writeFileSync(noSidecar, "xx");
  const badSidecar = cachedModelPath(hf("hf:owner/repo/bad-sidecar.gguf"), root);
  fs.writeFileSync(badSidecar, "xx");
  fs.writeFileSync(sidecarPath(badSidecar), "not a digest\n");
  const tmpSidecar = cachedModelPath(hf("hf:owner/repo/tmp-sidecar.gguf"), root);
  fs.writeFileSync(tmpSidecar, "xx");
  fs.writeFileSync(`${sidecarPath(tmpSidecar)}.tmp`, sidecarText(tmpSidecar, DIGEST));
  // Files outside the layout, even with a sidecar: too shallow, not a .gguf, a name no reference can spell.
  for (const rel of ["top.gguf", "owner/repo/shallow.gguf", "owner/repo/main/notes.txt", "own er/repo/main/x.gguf"]) {
    const p = path.join(root, ...rel.split("/"));
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, "xx");
    fs.writeFileSync(sidecarPath(p), sidecarText(p, DIGEST));
    assert.equal(cachedModelRef(p, root), undefined, rel);
  }

  assert.deepEqual(listCachedModels(root), [{ ref: "hf:owner/repo/done.gguf", path: done, bytes: 5 }]);
  assert.equal(cachedModelRef(partPath(inProgress), root), undefined);
  assert.equal(cachedModelRef(sidecarPath(done), root), undefined);
});

test("isComplete and isCompleteSync agree on what a finished download is", async () => {
  const root = tempCache();
  const done = storeFinished(root, "hf:owner/repo/done.gguf");
  const bare = cachedModelPath(hf("hf:owner/repo/bare.gguf"), root);
  fs.writeFileSync(bare, "x");
  const missing = cachedModelPath(hf("hf:owner/repo/missing.gguf"), root);
  fs.writeFileSync(sidecarPath(missing), sidecarText(missing, DIGEST));
  for (const [p, want] of [[done, true], [bare, false], [missing, false]] as const) {
    assert.equal(await isComplete(p), want, p);
    assert.equal(isCompleteSync(p), want, p);
  }
});

test("a missing cache directory lists as empty", () => {
  assert.deepEqual(listCachedModels(path.join(tempCache(), "nope")), []);
});
