import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Sealer } from "../../src/dialects/responses/sealer.ts";
import { loadOrCreateSecretKey, openText, sealText } from "../../src/store/secret-key.ts";
import { openSqliteStore, type SqliteStore } from "../../src/store/sqlite-store.ts";

/** A real SQLite store and sealing key in a fresh temporary directory; `dispose` closes and removes it. */
export function testStore(): { store: SqliteStore; sealer: Sealer; dataDir: string; dispose: () => Promise<void> } {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-store-"));
  const store = openSqliteStore({ dataDir, ttlSeconds: 0 });
  const key = loadOrCreateSecretKey(dataDir);
  const sealer: Sealer = { seal: (t) => sealText(key, t, "test"), open: (s) => openText(key, s, "test") };
  return {
    store,
    sealer,
    dataDir,
    dispose: async () => {
      await store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Makes the store a full disk: its growth capped (SqliteStore.limitGrowth) and the room left in the
 * pages each kind of object is appended to taken by filler rows (namespace "filler"), so that the
 * next write of a response, its events or a chat completion fails with SQLite's own SQLITE_FULL.
 * The returned function frees the disk again (the fillers stay).
 */
export async function fillStore(store: SqliteStore): Promise<() => void> {
  await store.responses.create("filler", { id: "resp_filler", status: "completed", model: "m", body: {}, inputItems: [] });
  store.limitGrowth(0);
  let n = 0;
  const writers: Array<(text: string) => Promise<unknown>> = [
    (x) => store.chatCompletions.create("filler", { id: `filler-${n++}`, model: "m", body: { x }, messages: [] }),
    (x) => store.responses.create("filler", { id: `resp_filler_${n++}`, status: "completed", model: "m", body: { x }, inputItems: [] }),
    (x) => store.responseEvents.appendMany("filler", "resp_filler", [{ sequenceNumber: n++, event: { x } }]),
  ];
  for (const write of writers) {
    for (const size of [200_000, 20_000, 2_000, 200, 20, 1]) {
      for (;;) {
        try {
          await write("y".repeat(size));
        } catch (err) {
          if ((err as { code?: string }).code !== "SQLITE_FULL") throw err;
          break;
        }
      }
    }
  }
  return () => store.limitGrowth(undefined);
}
