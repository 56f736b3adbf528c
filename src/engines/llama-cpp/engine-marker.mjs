// The marker scripts/engine-build.mjs leaves next to the llama.cpp it built
// (node-llama-cpp/llama/localBuilds/plinth-engine.json), read by the build script (is there a
// current build already?) and by the server (does this binary have the decode thread, and which
// CMake options name its folder?). Plain JavaScript so the install step can run it without tsx.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** node-llama-cpp's package directory. */
export function nodeLlamaCppRoot() {
  let dir = path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp")));
  while (!fs.existsSync(path.join(dir, "package.json")) || JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).name !== "node-llama-cpp") {
    const up = path.dirname(dir);
    if (up === dir) throw new Error("node-llama-cpp's package directory not found");
    dir = up;
  }
  return dir;
}

export function markerPath(root = nodeLlamaCppRoot()) {
  return path.join(root, "llama", "localBuilds", "plinth-engine.json");
}

/**
 * The marker, when it speaks for the installed node-llama-cpp and for every local build there:
 * a build made afterwards without the script (node-llama-cpp's own `source download`) has no decode
 * thread, so the marker must be newer than every addon binary. Undefined otherwise.
 * @returns {{ decodeThread: boolean, nodeLlamaCpp: string, edits?: string, built: string, cmakeOptions?: Record<string, string> } | undefined}
 */
export function currentMarker(root = nodeLlamaCppRoot()) {
  try {
    const version = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).version;
    const file = markerPath(root);
    const info = JSON.parse(fs.readFileSync(file, "utf8"));
    const written = fs.statSync(file).mtimeMs;
    const builds = path.dirname(file);
    const addons = fs
      .readdirSync(builds, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => path.join(builds, d.name, "Release", "llama-addon.node"))
      .filter((f) => fs.existsSync(f));
    if (info.decodeThread !== true || info.nodeLlamaCpp !== version || addons.length === 0) return undefined;
    if (addons.some((f) => fs.statSync(f).mtimeMs > written)) return undefined;
    return info;
  } catch {
    return undefined;
  }
}
