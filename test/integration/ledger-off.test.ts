import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import Database from "better-sqlite3";
import { serve, type RunningServer } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";

// `--ledger off` writes no usage rows, but a key's lifetime budget must still be charged: the
// limiter starts from the key's used_tokens at every start, so a budget that was only counted in
// memory would start over at each restart.

const ADMIN = "admin-secret-ledger-off-0123";
const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-ledger-off-"));
after(() => rmSync(dataDir, { recursive: true, force: true }));

async function start(): Promise<RunningServer> {
  const config = loadConfig(
    { model: [`tiny=${await ensureFixtureModel()}`], port: "0", threads: "1", "ctx-size": "512", "data-dir": dataDir, "admin-key": ADMIN, ledger: "off" },
    {},
  );
  const server = await serve(config, { log: () => {} });
  await server.loaded;
  return server;
}

async function call(server: RunningServer, method: string, route: string, key: string, body?: unknown) {
  const res = await fetch(`${server.url}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, any> };
}

test("with --ledger off a key's budget is charged and holds across a restart; no usage rows are written", async () => {
  const chat = { model: "tiny", messages: [{ role: "user", content: "Tell me about the river." }], max_tokens: 4 };
  let key = "";
  let server = await start();
  try {
    const created = await call(server, "POST", "/admin/keys", ADMIN, { name: "budget", budget_tokens: 60 });
    assert.equal(created.status, 201);
    key = created.json.key as string;
    let spent = 0;
    let refused = 0;
    for (let i = 0; i < 20 && refused === 0; i++) {
      const r = await call(server, "POST", "/v1/chat/completions", key, chat);
      if (r.status === 200) spent += r.json.usage.total_tokens;
      else {
        assert.equal(r.status, 429);
        assert.equal(r.json.error.code, "insufficient_quota");
        refused++;
      }
    }
    assert.ok(refused === 1 && spent > 0 && spent <= 60, `spent ${spent}`);
    // Charged within a batch interval (200 ms), shown on the key.
    let used = 0;
    for (let i = 0; i < 40 && used !== spent; i++) {
      await new Promise((r) => setTimeout(r, 50));
      used = (await call(server, "GET", `/admin/keys/${created.json.id}`, ADMIN)).json.used_tokens;
    }
    assert.equal(used, spent);
  } finally {
    await server.close();
  }

  const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true, fileMustExist: true });
  try {
    assert.equal((db.prepare("SELECT COUNT(*) AS n FROM usage_ledger").get() as { n: number }).n, 0, "no ledger rows with --ledger off");
  } finally {
    db.close();
  }

  server = await start();
  try {
    const again = await call(server, "POST", "/v1/chat/completions", key, chat);
    assert.equal(again.status, 429, "the spent budget is still spent after the restart");
    assert.equal(again.json.error.code, "insufficient_quota");
  } finally {
    await server.close();
  }
});
