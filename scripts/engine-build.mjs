#!/usr/bin/env node
// Builds the llama.cpp that node-llama-cpp bundles on this machine (OpenMP; from the source inside
// the npm package, no download), with Plinth's decode thread and per-thread sampler buffers
// compiled into the addon (scripts/engine/*.h say why; the edits are in
// scripts/engine/addon-edits.mjs). Plinth then uses it without any flag; `npm run engine:prebuilt`
// goes back to node-llama-cpp's prebuilt binary. Decision 0002 has the measurements.
//
// `npm ci` runs it with --install (package.json's postinstall); `npm run engine:build` runs it by hand.
//
// The build is for this CPU (llama.cpp's default, GGML_NATIVE=ON, as llama-server is built), which
// measured ~10 % faster at one stream on an AVX-512 machine than the portable build. A tree
// installed on one machine and run on another (an image) needs PLINTH_ENGINE=portable: on x64,
// GGML_NATIVE=OFF, i.e. AVX2, FMA and F16C, which any x64 CPU since 2013-2015 has.
// PLINTH_ENGINE=prebuilt skips the build.
//
// The addon's sources are edited in place for the build and restored afterwards, whatever happens;
// a marker next to the build (src/engines/llama-cpp/engine-marker.mjs) tells the server that this build has the
// decode thread, and with which CMake options node-llama-cpp finds it.
//
// --if-possible: a machine without cmake or a C++ compiler, or a failed build, keeps the prebuilt
// binary and exits 0. --install: the same, and nothing is built where a current build with the
// same edits is already there, or where a GPU serves (macOS's Metal, an NVIDIA GPU: the prebuilt GPU binaries do).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ADDON_EDITS, editsFingerprint, patchAddonSource } from "./engine/addon-edits.mjs";
import { currentMarker, markerPath, nodeLlamaCppRoot } from "../src/engines/llama-cpp/engine-marker.mjs";

const install = process.argv.includes("--install");
const ifPossible = install || process.argv.includes("--if-possible");
const here = path.dirname(fileURLToPath(import.meta.url));

function give(reason) {
  if (ifPossible) {
    console.log(`plinth engine:build: ${reason}; the prebuilt llama.cpp stays in use.`);
    process.exit(0);
  }
  console.error(`plinth engine:build: ${reason}.`);
  process.exit(1);
}

const runs = (cmd, args) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;

const pkg = nodeLlamaCppRoot();
const version = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).version;
const addonDir = path.join(pkg, "llama", "addon");
const marker = markerPath(pkg);

if (process.env.PLINTH_ENGINE === "prebuilt") give("PLINTH_ENGINE=prebuilt");
if (install) {
  const current = currentMarker(pkg);
  if (current && current.edits === editsFingerprint()) {
    console.log("plinth engine:build: llama.cpp is already built on this machine (npm run engine:build builds it again).");
    process.exit(0);
  }
  // A build with other edits (an older Plinth's) still runs, but without what the current ones add.
  if (current) console.log("plinth engine:build: the llama.cpp built here has an older set of Plinth's edits; building it again.");
  if (process.platform === "darwin") give("macOS runs on the prebuilt Metal binary");
  if (runs("nvidia-smi", ["-L"])) give("an NVIDIA GPU is present, which the prebuilt CUDA binary serves");
}
if (!runs("cmake", ["--version"])) give("cmake not found");
if (!["c++", "g++", "clang++"].some((cc) => runs(cc, ["--version"]))) give("no C++ compiler found (c++, g++ or clang++)");

// Every edit is checked before any file is touched.
const files = Object.keys(ADDON_EDITS).map((file) => {
  const original = fs.readFileSync(path.join(addonDir, file), "utf8");
  const edit = patchAddonSource(file, original);
  if (edit.error) give(edit.error);
  return { file, original, text: edit.text, headers: ADDON_EDITS[file].headers };
});

// node-llama-cpp takes CMake options from NODE_LLAMA_CPP_CMAKE_OPTION_* variables (the user's own
// too); they name the build's folder, so the marker keeps them for the server to ask with.
const OPTION = "NODE_LLAMA_CPP_CMAKE_OPTION_";
const portable = process.env.PLINTH_ENGINE === "portable" && process.env[`${OPTION}GGML_NATIVE`] === undefined;
const buildEnv = { ...process.env, ...(portable ? { [`${OPTION}GGML_NATIVE`]: "OFF" } : {}) };
const cmakeOptions = Object.fromEntries(
  Object.entries(buildEnv)
    .filter(([k, v]) => k.startsWith(OPTION) && k !== OPTION && v !== undefined)
    .map(([k, v]) => [k.slice(OPTION.length), String(v)]),
);

let status = 1;
try {
  for (const f of files) {
    for (const h of f.headers) fs.copyFileSync(path.join(here, "engine", h), path.join(addonDir, h));
    fs.writeFileSync(path.join(addonDir, f.file), f.text);
  }
  fs.rmSync(marker, { force: true });
  const bin = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).bin;
  const cli = path.join(pkg, typeof bin === "string" ? bin : bin["node-llama-cpp"]);
  console.log(`plinth engine:build: building llama.cpp ${portable ? "(portable: GGML_NATIVE=OFF)" : "for this CPU"} with a decode thread; about 8 minutes on 2 cores…`);
  status = spawnSync(process.execPath, [cli, "source", "download", "--gpu", "false", "--noUsageExample"], { stdio: "inherit", env: buildEnv }).status ?? 1;
} finally {
  for (const f of files) {
    fs.writeFileSync(path.join(addonDir, f.file), f.original);
    for (const h of f.headers) fs.rmSync(path.join(addonDir, h), { force: true });
  }
}
if (status !== 0) give(`the build failed (exit ${status})`);
fs.mkdirSync(path.dirname(marker), { recursive: true });
const info = { decodeThread: true, nodeLlamaCpp: version, edits: editsFingerprint(), built: new Date().toISOString(), ...(Object.keys(cmakeOptions).length ? { cmakeOptions } : {}) };
fs.writeFileSync(marker, `${JSON.stringify(info, null, 2)}\n`);
console.log("plinth engine:build: done; the server now runs on llama.cpp built on this machine, with one decode thread.");
