import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { DB_FILE, openSqliteStore } from "../../src/store/sqlite-store.ts";
import { loadOrCreateSecretKey } from "../../src/store/secret-key.ts";
import { staticKeyId, staticKeyIdBefore } from "../../src/tenancy/keys.ts";
import { startTestServer } from "../helpers/server.ts";

// An --api-key key's id was a plain SHA-256 prefix of it before 2026-12-02 and is a hash keyed with
// the data directory's secret since. Objects and ledger rows the key stored before are filed under
// the old id: a server of now moves them to the key's id at start, so the key still reaches them.

const KEY = "sk-upgrade-test-key";

test("objects and ledger rows an --api-key key stored under its earlier id are its own again after an upgrade", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-static-key-"));
  try {
    // The data directory as an older Plinth left it: a stored response under the old id, and a ledger row.
    const store = openSqliteStore({ dataDir, ttlSeconds: 0 });
    const oldNs = JSON.stringify(["key", staticKeyIdBefore(KEY), ""]);
    const body = { id: "resp_before", object: "response", created_at: 1, status: "completed", model: "tiny", output: [], usage: null };
    await store.responses.create(oldNs, { id: "resp_before", status: "completed", model: "tiny", body, inputItems: [] });
    await store.close();
    const raw = new Database(path.join(dataDir, DB_FILE));
    raw
      .prepare(
        "INSERT INTO usage_ledger (at, request_id, key_id, namespace, dialect, method, endpoint, model, prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens, status, duration_ms) VALUES (?, 'req_old', ?, NULL, 'openai', 'POST', '/v1/responses', 'tiny', 5, 0, 7, 0, 200, 10)",
      )
      .run(Date.now() - 60_000, staticKeyIdBefore(KEY));
    raw.close();
    const newId = staticKeyId(KEY, loadOrCreateSecretKey(dataDir));
    assert.notEqual(newId, staticKeyIdBefore(KEY));

    const server = await startTestServer({ "data-dir": dataDir, "api-key": [KEY] });
    try {
      const r = await fetch(`${server.url}/v1/responses/resp_before`, { headers: { authorization: `Bearer ${KEY}` } });
      assert.equal(r.status, 200, await r.clone().text());
      assert.equal(((await r.json()) as { id: string }).id, "resp_before");
    } finally {
      await server.close();
    }
    const db = new Database(path.join(dataDir, DB_FILE), { readonly: true });
    try {
      assert.deepEqual(db.prepare("SELECT key_id FROM usage_ledger WHERE request_id = 'req_old'").get(), { key_id: newId });
      assert.equal((db.prepare("SELECT count(*) AS n FROM responses WHERE namespace = ?").get(oldNs) as { n: number }).n, 0);
    } finally {
      db.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
