#!/usr/bin/env node
// `npm run engine:build`: builds the llama.cpp that node-llama-cpp bundles on this machine (OpenMP,
// this CPU's instruction set; from the source inside the npm package, no download), with Plinth's
// decode thread and per-thread sampler buffers compiled into the addon (scripts/engine/*.h say why;
// the edits are in scripts/engine/addon-edits.mjs). Plinth then uses it without any flag;
// `npm run engine:prebuilt` goes back to the prebuilt binary.
//
// The addon's sources are edited in place for the build and restored afterwards, whatever happens;
// a marker next to the build tells the server that this build has the decode thread.
//
// --if-possible: a machine without cmake or a C++ compiler, or a failed build, keeps the prebuilt
// binary and exits 0 (for unattended installs).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ADDON_EDITS, patchAddonSource } from "./engine/addon-edits.mjs";

const ifPossible = process.argv.includes("--if-possible");
const here = path.dirname(fileURLToPath(import.meta.url));

function packageRoot() {
  let dir = path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp")));
  while (!fs.existsSync(path.join(dir, "package.json")) || JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).name !== "node-llama-cpp") {
    const up = path.dirname(dir);
    if (up === dir) throw new Error("node-llama-cpp's package directory not found");
    dir = up;
  }
  return dir;
}

function give(reason) {
  if (ifPossible) {
    console.log(`plinth engine:build: ${reason}; the prebuilt llama.cpp stays in use.`);
    process.exit(0);
  }
  console.error(`plinth engine:build: ${reason}.`);
  process.exit(1);
}

const runs = (cmd, args) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;

const pkg = packageRoot();
const version = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).version;
const addonDir = path.join(pkg, "llama", "addon");
const marker = path.join(pkg, "llama", "localBuilds", "plinth-engine.json");

if (process.env.PLINTH_ENGINE === "prebuilt") give("PLINTH_ENGINE=prebuilt");
if (!runs("cmake", ["--version"])) give("cmake not found");
if (!["c++", "g++", "clang++"].some((cc) => runs(cc, ["--version"]))) give("no C++ compiler found (c++, g++ or clang++)");

// Every edit is checked before any file is touched.
const files = Object.keys(ADDON_EDITS).map((file) => {
  const original = fs.readFileSync(path.join(addonDir, file), "utf8");
  const edit = patchAddonSource(file, original);
  if (edit.error) give(edit.error);
  return { file, original, text: edit.text, headers: ADDON_EDITS[file].headers };
});

let status = 1;
try {
  for (const f of files) {
    for (const h of f.headers) fs.copyFileSync(path.join(here, "engine", h), path.join(addonDir, h));
    fs.writeFileSync(path.join(addonDir, f.file), f.text);
  }
  fs.rmSync(marker, { force: true });
  const bin = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).bin;
  const cli = path.join(pkg, typeof bin === "string" ? bin : bin["node-llama-cpp"]);
  console.log("plinth engine:build: building llama.cpp for this machine (a few minutes on 2 cores)…");
  status = spawnSync(process.execPath, [cli, "source", "download", "--gpu", "false", "--noUsageExample"], { stdio: "inherit" }).status ?? 1;
} finally {
  for (const f of files) {
    fs.writeFileSync(path.join(addonDir, f.file), f.original);
    for (const h of f.headers) fs.rmSync(path.join(addonDir, h), { force: true });
  }
}
if (status !== 0) give(`the build failed (exit ${status})`);
fs.mkdirSync(path.dirname(marker), { recursive: true });
fs.writeFileSync(marker, `${JSON.stringify({ decodeThread: true, nodeLlamaCpp: version, built: new Date().toISOString() }, null, 2)}\n`);
console.log("plinth engine:build: done; the server now runs on llama.cpp built on this machine, with one decode thread.");
