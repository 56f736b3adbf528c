import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { defaultDecodeContexts, defaultThreads } from "../../src/engines/llama-cpp/runtime.ts";
// @ts-expect-error: a plain ES module of the build script, without types
import { ADDON_EDITS, editsFingerprint, patchAddonSource } from "../../scripts/engine/addon-edits.mjs";
import { currentMarker, markerPath } from "../../src/engines/llama-cpp/engine-marker.mjs";
import assert from "../helpers/assert.ts";

function installedAddonSource(file: string): string {
  let dir = path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp")));
  while (!fs.existsSync(path.join(dir, "llama", "addon"))) dir = path.dirname(dir);
  return fs.readFileSync(path.join(dir, "llama", "addon", file), "utf8");
}

test("engine:build's edits apply to the installed node-llama-cpp addon: decode and sampling go through the decode thread", () => {
  const source = installedAddonSource("AddonContext.cpp");
  const edit = patchAddonSource("AddonContext.cpp", source) as { text?: string; error?: string };
  assert.equal(edit.error, undefined);
  const text = edit.text!;
  assert.ok(text.includes('#include "plinth-decode-thread.h"'));
  // The one llama_decode call of the addon, now inside the decode thread's job.
  assert.equal(text.split("llama_decode(").length - 1, 1);
  assert.ok(/plinth::onDecodeThread\(\[&\] \{\s*r = llama_decode\(ctx->ctx, ctx->batch\);/.test(text));
  assert.ok(text.includes("plinth::sampleOnDecodeThreadIfIdle([&] { SampleToken(); });"));
  // Sampling ahead: armed sequences are sampled inside the decode job, after a successful decode;
  // each batch starts with no rows and notes every row that has logits; sampleToken hands over a
  // token sampled ahead before it would queue a worker; arming is on the class.
  assert.ok(text.includes('#include "plinth-presample.h"'));
  assert.ok(/llama_synchronize\(ctx->ctx\);\s*plinth::presampleAfterDecode\(ctx\);/.test(text));
  assert.ok(/llama_batch_init\(n_tokens, 0, 1\);\s*plinth::newBatch\(this\);/.test(text));
  assert.ok(/resLogitIndexes\[l\] = batch\.n_tokens - 1;\s*plinth::noteLogitRow\(this, sequenceId, batch\.n_tokens - 1\);/.test(text));
  assert.ok(text.indexOf("plinth::takePresampled(") < text.indexOf("new AddonContextSampleTokenWorker(info, this)"));
  assert.ok(text.includes('StaticMethod("plinthArmSampler", &plinth::armSampler<AddonContext>)'));
  assert.ok(text.includes('StaticMethod("plinthDisarmSampler", &plinth::disarmSampler<AddonContext>)'));
  // Direct decode: decodeBatch queues on the decode thread before it would queue the stock worker,
  // unless the decode thread or direct decode is turned off.
  assert.ok(text.includes('#include "plinth-direct-decode.h"'));
  assert.ok(/if \(!plinth::decodeInline\(\) && !plinth::directDecodeOff\(\)\) \{\s*Napi::Value direct = plinth::decodeBatchDirect\(this, info\);/.test(text));
  assert.ok(text.indexOf("plinth::decodeBatchDirect(") < text.indexOf("new AddonContextDecodeBatchWorker(info.Env(), this)"));
  // Applying them to something else fails by name instead of building a half-edited addon.
  assert.match(patchAddonSource("AddonContext.cpp", source.replace("SampleToken();", "sample();")).error, /the sampling/);
});

test("engine:build's edits apply to the installed addon's sampler: candidates go to a per-thread buffer, none in the constructor", () => {
  const source = installedAddonSource("AddonSampler.cpp");
  const edit = patchAddonSource("AddonSampler.cpp", source) as { text?: string; error?: string };
  assert.equal(edit.error, undefined);
  const text = edit.text!;
  assert.ok(text.includes('#include "plinth-sampler-buffer.h"'));
  assert.ok(!text.includes("tokenCandidates.resize(llama_vocab_n_tokens(model->vocab));"));
  assert.ok(text.includes("std::vector<llama_token_data>& tokenCandidates = plinth::samplerCandidates();"));
  // Exactly one function fills the candidates, so one local buffer covers every use.
  assert.equal(text.split("void AddonSampler::setTokenCandidates(").length - 1, 1);
});

test("the edits' fingerprint, kept in the build's marker, covers every header the edits include", () => {
  const fingerprint = editsFingerprint();
  assert.match(fingerprint, /^[0-9a-f]{16}$/);
  assert.equal(editsFingerprint(), fingerprint);
  const headers = Object.values(ADDON_EDITS as Record<string, { headers: string[] }>).flatMap((plan) => plan.headers);
  for (const h of ["plinth-presample.h", "plinth-decode-thread.h", "plinth-direct-decode.h", "plinth-sampler-buffer.h"]) assert.ok(headers.includes(h), h);
});

test("default threads and decode contexts follow the engine binary", () => {
  const prebuilt = { local: false, decodeThread: false };
  const built = { local: true, decodeThread: true };
  // Prebuilt: a core left for the JavaScript thread, the rest spread over single-threaded contexts.
  assert.equal(defaultThreads(2, prebuilt), 1);
  assert.equal(defaultDecodeContexts(2, defaultThreads(2, prebuilt)), 2);
  assert.equal(defaultThreads(8, prebuilt), 7);
  assert.equal(defaultDecodeContexts(8, defaultThreads(8, prebuilt)), 1);
  assert.equal(defaultThreads(1, prebuilt), 1);
  // With the decode thread: every core in one context.
  assert.equal(defaultThreads(2, built), 2);
  assert.equal(defaultDecodeContexts(2, defaultThreads(2, built)), 1);
  assert.equal(defaultThreads(8, built), 8);
});

test("engine:build without cmake: --if-possible keeps the prebuilt engine and succeeds, a plain run fails by name", () => {
  const script = fileURLToPath(new URL("../../scripts/engine-build.mjs", import.meta.url));
  // A PATH with no cmake and no compiler; node itself is run by its full path.
  const env = { ...process.env, PATH: "/nonexistent" };
  const soft = spawnSync(process.execPath, [script, "--if-possible"], { env, encoding: "utf8" });
  assert.equal(soft.status, 0, soft.stderr);
  assert.match(soft.stdout, /cmake not found; the prebuilt llama\.cpp stays in use/);
  const hard = spawnSync(process.execPath, [script], { env, encoding: "utf8" });
  assert.equal(hard.status, 1);
  assert.match(hard.stderr, /cmake not found/);
});

test("engine:build --install (npm ci's postinstall): PLINTH_ENGINE=prebuilt skips the build and succeeds", () => {
  const script = fileURLToPath(new URL("../../scripts/engine-build.mjs", import.meta.url));
  const run = spawnSync(process.execPath, [script, "--install"], { env: { ...process.env, PLINTH_ENGINE: "prebuilt" }, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /PLINTH_ENGINE=prebuilt; the prebuilt llama\.cpp stays in use/);
});

test("the build marker counts only for the installed node-llama-cpp and while newer than every local addon build", () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "plinth-marker-"));
  try {
    fs.writeFileSync(path.join(root, "package.json"), JSON.stringify({ name: "node-llama-cpp", version: "3.21.1" }));
    const addon = path.join(root, "llama", "localBuilds", "linux-x64-abc", "Release", "llama-addon.node");
    fs.mkdirSync(path.dirname(addon), { recursive: true });
    // No build, no marker.
    assert.equal(currentMarker(root), undefined);
    fs.writeFileSync(addon, "");
    const info = { decodeThread: true, nodeLlamaCpp: "3.21.1", built: "now", cmakeOptions: { GGML_NATIVE: "OFF" } };
    const write = (value: object) => fs.writeFileSync(markerPath(root), JSON.stringify(value));
    const age = (file: string, seconds: number) => fs.utimesSync(file, new Date(Date.now() - seconds * 1000), new Date(Date.now() - seconds * 1000));
    write(info);
    age(addon, 60);
    assert.deepEqual(currentMarker(root), info);
    // A later build without the script (node-llama-cpp's own command) has no decode thread.
    age(markerPath(root), 120);
    assert.equal(currentMarker(root), undefined);
    // A marker from another node-llama-cpp version, or a broken one, counts for nothing.
    write({ ...info, nodeLlamaCpp: "3.20.0" });
    assert.equal(currentMarker(root), undefined);
    fs.writeFileSync(markerPath(root), "{");
    assert.equal(currentMarker(root), undefined);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
