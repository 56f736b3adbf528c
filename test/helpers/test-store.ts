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
