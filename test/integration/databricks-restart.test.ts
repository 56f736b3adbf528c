import assert from "../helpers/assert.ts";
import Database from "better-sqlite3";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { DB_FILE } from "../../src/store/sqlite-store.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { dbx, waitForEndpoint } from "../helpers/databricks.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// A server that stops in the middle of a config update (a crash, a kill -9) finds the update in its
// store when it starts again. The config that served before must serve again, whatever the update
// then does. The stop is simulated by writing the stored row as an update under way leaves it: the
// serving config and the pending one side by side.

const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-dbx-restart-"));
let s: TestServer | undefined;
after(async () => {
  await s?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const start = async () => (s = await startTestServer({ "data-dir": dataDir }));
const stop = async () => {
  await s!.close();
  s = undefined;
};
const single = (name: string, entity: string) => ({
  served_entities: [{ name, entity_name: entity }],
  traffic_config: { routes: [{ served_model_name: name, traffic_percentage: 100 }] },
});
const ask = (name: string) =>
  dbx(s!, "POST", `/serving-endpoints/${name}/invocations`, { messages: [{ role: "user", content: "hi" }], max_tokens: 1, temperature: 0 });

/** Rewrites a stored endpoint while no server runs, as a stop during an update would have left it. */
function storeUpdateUnderWay(name: string, pending: unknown): void {
  const db = new Database(path.join(dataDir, DB_FILE));
  try {
    const row = db.prepare<[string], { body: string }>("SELECT body FROM serving_endpoints WHERE name = ?").get(name)!;
    const body = JSON.parse(row.body);
    assert.ok(body.config && !body.pending_config && !body.failure, row.body);
    db.prepare("UPDATE serving_endpoints SET body = ? WHERE name = ?").run(JSON.stringify({ ...body, pending_config: pending }), name);
  } finally {
    db.close();
  }
}

/** An endpoint created and served, then the server stopped mid-update to `pending`, and started again. */
async function stoppedMidUpdate(name: string, serving: unknown, pending: unknown): Promise<void> {
  await start();
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name, config: serving })).status, 200);
  await waitForEndpoint(s!, name);
  await stop();
  storeUpdateUnderWay(name, pending);
  await start();
}

test("an update under way when the server stopped: the old config serves again; a failing update leaves it serving, across restarts", async () => {
  await stoppedMidUpdate("keep", single("old", "tiny"), single("new", "/no/such/model.gguf"));
  const failed = await waitForEndpoint(s!, "keep", (ep) => ep.state.config_update === "UPDATE_FAILED");
  assert.equal(failed.state.ready, "READY", JSON.stringify(failed));
  assert.equal(failed.config.served_entities[0].name, "old");
  assert.equal(failed.config.config_version, 1);
  assert.ok(failed.state_message?.includes("/no/such/model.gguf"), JSON.stringify(failed));
  const r = await ask("keep");
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get("served-model-name"), "old");

  // Once more: the serving config is still what the store holds.
  await stop();
  await start();
  const again = await waitForEndpoint(s!, "keep", (ep) => ep.state.ready === "READY");
  assert.equal(again.config.served_entities[0].name, "old");
  assert.equal((await ask("keep")).status, 200);
  await stop();
});

test("an update under way when the server stopped goes on after the restart, and its config serves once loaded", async () => {
  await stoppedMidUpdate("carry", single("first", "tiny"), single("second", "tiny"));
  const done = await waitForEndpoint(s!, "carry", (ep) => ep.state.config_update === "NOT_UPDATING" && ep.config?.config_version === 2);
  assert.equal(done.config.served_entities[0].name, "second");
  assert.equal(done.pending_config, undefined);
  const r = await ask("carry");
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get("served-model-name"), "second");
  await stop();
});

test("an endpoint whose first config had not loaded when the server stopped comes back with it as version 1", async () => {
  await start();
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "fresh", config: single("only", "tiny") })).status, 200);
  await waitForEndpoint(s!, "fresh");
  await stop();
  // As the create left it before its entities loaded: the config only pending, none serving.
  const db = new Database(path.join(dataDir, DB_FILE));
  try {
    const row = db.prepare<[string], { body: string }>("SELECT body FROM serving_endpoints WHERE name = ?").get("fresh")!;
    const { config, config_version: _, ...rest } = JSON.parse(row.body);
    db.prepare("UPDATE serving_endpoints SET body = ? WHERE name = ?").run(JSON.stringify({ ...rest, pending_config: config }), "fresh");
  } finally {
    db.close();
  }
  await start();
  const ep = await waitForEndpoint(s!, "fresh", (e) => e.state.ready === "READY" && e.state.config_update === "NOT_UPDATING");
  assert.equal(ep.config.config_version, 1, JSON.stringify(ep));
  assert.equal(ep.config.served_entities[0].name, "only");
  await stop();
});

test("a serving config that no longer loads after a restart stays stored; the update under way still serves when it loads", async () => {
  // The serving entity is a model file of its own, removed while the server is down.
  const copy = path.join(dataDir, "gone.gguf");
  copyFileSync(await ensureFixtureModel(), copy);
  await start();
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "moved", config: single("a", copy) })).status, 200);
  await waitForEndpoint(s!, "moved");
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "lost", config: single("a", copy) })).status, 200);
  await waitForEndpoint(s!, "lost");
  await stop();
  rmSync(copy);

  storeUpdateUnderWay("moved", single("b", "tiny"));
  await start();
  const moved = await waitForEndpoint(s!, "moved", (ep) => ep.state.ready === "READY" && ep.state.config_update === "NOT_UPDATING");
  assert.equal(moved.config.served_entities[0].name, "b");
  assert.equal(moved.config.config_version, 2);
  assert.equal((await ask("moved")).status, 200);

  // Without an update, the endpoint says why it does not serve, and keeps its config for later.
  const lost = await waitForEndpoint(s!, "lost", (ep) => ep.state.config_update === "UPDATE_FAILED");
  assert.equal(lost.state.ready, "NOT_READY");
  assert.ok(lost.state_message?.includes("gone.gguf"), JSON.stringify(lost));
  await stop();

  copyFileSync(await ensureFixtureModel(), copy);
  await start();
  const back = await waitForEndpoint(s!, "lost", (ep) => ep.state.ready === "READY");
  assert.equal(back.config.served_entities[0].name, "a");
  assert.equal((await ask("lost")).status, 200);
});

test("two model files of one file name serve side by side in an A/B split; an endpoint on a model loaded at run time serves again after a restart", async () => {
  // Two versions of a model, each in a folder of its own under the same file name: each entity gets
  // a model of its own (the second under an id of its own), not a refusal of the second.
  const versions = ["v1", "v2"].map((v) => {
    mkdirSync(path.join(dataDir, v), { recursive: true });
    return path.join(dataDir, v, "model.gguf");
  });
  for (const file of versions) copyFileSync(await ensureFixtureModel(), file);
  const runtimeFile = path.join(dataDir, "runtime.gguf");
  copyFileSync(await ensureFixtureModel(), runtimeFile);
  if (s) await stop();
  await start();
  const ab = {
    served_entities: [
      { name: "v1", entity_name: versions[0] },
      { name: "v2", entity_name: versions[1] },
    ],
    traffic_config: { routes: [{ served_model_name: "v1", traffic_percentage: 50 }, { served_model_name: "v2", traffic_percentage: 50 }] },
  };
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "versions", config: ab })).status, 200);
  await waitForEndpoint(s!, "versions");
  // The same two files by other spellings (a detour through "..", a link): the same two models.
  const link = path.join(dataDir, "v2-link.gguf");
  symlinkSync(versions[1], link);
  const aliases = {
    served_entities: [
      { name: "one", entity_name: path.join(dataDir, "v2", "..", "v1", "model.gguf") },
      { name: "two", entity_name: link },
    ],
    traffic_config: { routes: [{ served_model_name: "one", traffic_percentage: 50 }, { served_model_name: "two", traffic_percentage: 50 }] },
  };
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "aliases", config: aliases })).status, 200);
  // A model loaded through the admin route, named by its id in an endpoint.
  const loaded = await dbx(s!, "POST", "/api/2.0/plinth/models", { source: runtimeFile, name: "later" });
  assert.equal(loaded.status, 200, loaded.text);
  assert.equal((await dbx(s!, "POST", "/api/2.0/serving-endpoints", { name: "onlater", config: single("l", "later") })).status, 200);
  for (let round = 0; round < 2; round++) {
    await waitForEndpoint(s!, "versions");
    for (const entity of ["v1", "v2"]) {
      const r = await dbx(s!, "POST", `/serving-endpoints/versions/served-models/${entity}/invocations`, { messages: [{ role: "user", content: "hi" }], max_tokens: 1 });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get("served-model-name"), entity);
    }
    const listed: string[] = (await dbx(s!, "GET", "/api/2.0/plinth/models")).json.models.map((m: any) => m.name);
    // One load per file, each named after the file itself (the second with its path's hash).
    const versionsIds = listed.filter((m) => m === "model" || /^model-[0-9a-f]{8}$/.test(m)).sort();
    assert.equal(versionsIds.length, 2, listed.join());
    const aliased = await waitForEndpoint(s!, "aliases");
    assert.ok(!listed.some((m) => /link/.test(m)), listed.join());
    assert.deepEqual(aliased.config.served_entities.map((e: any) => e.model).sort(), versionsIds);
    const later = await waitForEndpoint(s!, "onlater");
    // Where the model came from is the store's business: the config reads as it was sent.
    assert.deepEqual(later.config.served_entities.map((e: any) => e.entity_name), ["later"]);
    assert.ok(!JSON.stringify(later).includes("runtime.gguf"), JSON.stringify(later));
    assert.equal((await ask("onlater")).status, 200);
    if (round === 1) break;
    await stop();
    await start();
  }
});
