import assert from "../helpers/assert.ts";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

// Dependencies point one way (docs/architecture.md): the core knows no engine, dialect or HTTP;
// engines know no dialect; the HTTP layer knows no dialect; only the assembly (app.ts, cli/) sees
// everything. This reads every import in src/ and fails on one that runs the wrong way.

const SRC = fileURLToPath(new URL("../../src/", import.meta.url));

/** Top-level area of a file under src/ ("core", "dialects", "app.ts", …). */
const areaOf = (file: string) => path.relative(SRC, file).split(path.sep)[0];

/** What each area may import, besides itself and npm packages. */
const ALLOWED: Record<string, string[]> = {
  core: [],
  grammar: ["core"],
  models: ["core"],
  config: ["core", "models"],
  engines: ["core", "grammar", "models"],
  store: ["core"],
  http: ["core"],
  // Dialects see the store's interface only (store.ts); the SQLite implementation is the assembly's.
  dialects: ["core", "http", "store"],
  // Metrics, request logs and traces: they observe the core through its hooks and the HTTP server.
  observability: ["core", "http"],
  // The web console: static files and the routes that serve them; it calls the API over HTTP only.
  console: [],
  // API keys, limits and the usage ledger: a request hook, an admission gate and generation hooks.
  tenancy: ["core", "http", "store", "observability"],
  cli: ["*"],
  "app.ts": ["*"],
};

function* sourceFiles(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(full);
    else if (entry.name.endsWith(".ts")) yield full;
  }
}

test("no import runs from a lower layer to a higher one", () => {
  const wrong: string[] = [];
  for (const file of sourceFiles(SRC)) {
    const from = areaOf(file);
    const allowed = ALLOWED[from];
    assert.ok(allowed, `src/${path.relative(SRC, file)} is in an area the layering rules do not know (${from})`);
    for (const m of readFileSync(file, "utf8").matchAll(/^\s*(?:import|export)[^'"]*?from\s+["'](\.[^"']+)["']/gm)) {
      const target = areaOf(path.resolve(path.dirname(file), m[1]));
      if (target === from || allowed.includes("*") || allowed.includes(target)) continue;
      wrong.push(`src/${path.relative(SRC, file)} imports ${m[1]} (${from} → ${target})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test("dialects never reach an engine, and engines never name a dialect", () => {
  const wrong: string[] = [];
  for (const file of sourceFiles(SRC)) {
    const text = readFileSync(file, "utf8");
    const rel = path.relative(SRC, file);
    if (rel.startsWith("dialects") && /from\s+["'][^"']*engines\//.test(text)) wrong.push(rel);
    if (rel.startsWith("engines") && /from\s+["'][^"']*dialects\//.test(text)) wrong.push(rel);
    if (rel.startsWith("dialects") && /from\s+["'][^"']*store\/(?!store\.ts)/.test(text)) wrong.push(rel);
  }
  assert.deepEqual(wrong, []);
});
