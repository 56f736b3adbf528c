/**
 * What storing a Responses request with a large input costs the event loop (better-sqlite3 writes
 * synchronously, so every millisecond here is one that every stream of the server waits):
 * `node --import tsx bench/store-input.ts`, also part of `npm run bench`. Two inputs of ~14 MB: one
 * message holding all of it, and 2,000 messages of 7 KB. Each operation is timed in-process on the
 * SQLite store, median of BENCH_STORE_ROUNDS (3).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { openSqliteStore } from "../src/store/sqlite-store.ts";
import type { JsonObject } from "../src/store/store.ts";
import { fmt, median } from "./stats.ts";

const MB = 1024 * 1024;

function inputs(): Array<{ name: string; items: JsonObject[] }> {
  const message = (text: string): JsonObject => ({ type: "message", role: "user", content: [{ type: "input_text", text }] });
  return [
    { name: "1 item of 14 MB", items: [message("x".repeat(14 * MB))] },
    { name: "2,000 items of 7 KB", items: Array.from({ length: 2000 }, (_, i) => message(`${i} ${"y".repeat(7 * 1024)}`)) },
  ];
}

export async function storeInputBench(rounds = Number(process.env.BENCH_STORE_ROUNDS ?? 3)): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-bench-store-"));
  const store = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  try {
    console.log("\nStoring a large Responses input (ms of the event loop, median of %d):\n", rounds);
    console.log("| input | create | update (status) | get | all input items | a page of 20 input items |");
    console.log("|---|---|---|---|---|---|");
    let n = 0;
    for (const { name, items } of inputs()) {
      const t = { create: [] as number[], update: [] as number[], get: [] as number[], all: [] as number[], page: [] as number[] };
      for (let r = 0; r < rounds; r++) {
        const id = `resp_${n++}`;
        const body = (status: string) => ({ id, object: "response", status, output: [] });
        let at = performance.now();
        await store.responses.create("", { id, status: "in_progress", model: "m", body: body("in_progress"), inputItems: items });
        t.create.push(performance.now() - at);
        at = performance.now();
        await store.responses.update("", id, { status: "completed", body: body("completed") });
        t.update.push(performance.now() - at);
        at = performance.now();
        await store.responses.get("", id);
        t.get.push(performance.now() - at);
        at = performance.now();
        await store.responses.inputItems("", id);
        t.all.push(performance.now() - at);
        at = performance.now();
        await store.responses.listInputItems("", id, { limit: 20 });
        t.page.push(performance.now() - at);
      }
      console.log(`| ${name} | ${fmt(median(t.create))} | ${fmt(median(t.update))} | ${fmt(median(t.get))} | ${fmt(median(t.all))} | ${fmt(median(t.page))} |`);
    }
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await storeInputBench();
