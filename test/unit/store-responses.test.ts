import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { DB_FILE, MIGRATIONS, migrate, openSqliteStore, type SqliteStore } from "../../src/store/sqlite-store.ts";
import { StoreError, type JsonObject } from "../../src/store/store.ts";

const root = mkdtempSync(join(tmpdir(), "plinth-store-responses-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = () => join(root, `d${dirs++}`);

function withStore(ttlSeconds = 0): SqliteStore {
  const store = openSqliteStore({ dataDir: freshDir(), ttlSeconds });
  after(() => store.close());
  return store;
}

const body = (id: string, status = "completed"): JsonObject => ({ id, object: "response", status, output: [] });
const userMessage = (text: string, id?: string): JsonObject => ({ ...(id ? { id } : {}), type: "message", role: "user", content: text });

test("a response is created, read back whole, updated and deleted", async () => {
  const store = withStore();
  const created = await store.responses.create("alice", {
    id: "resp_1",
    createdAt: 1_700_000_000,
    status: "queued",
    model: "m",
    body: body("resp_1", "queued"),
    inputItems: [userMessage("hi", "msg_given"), userMessage("there")],
    previousResponseId: "resp_0",
    conversationId: "conv_1",
    background: true,
  });
  assert.equal(created.expiresAt, null);
  const got = await store.responses.get("alice", "resp_1");
  assert.ok(got, "stored response");
  assert.deepEqual(got, created);
  assert.equal(got.createdAt, 1_700_000_000);
  assert.equal(got.background, true);
  assert.equal(got.previousResponseId, "resp_0");
  assert.equal(got.conversationId, "conv_1");
  assert.deepEqual(got.body, body("resp_1", "queued"));
  const input = await store.responses.inputItems("alice", "resp_1");
  assert.equal(input?.[0].id, "msg_given");
  assert.match(input?.[1].id ?? "", /^msg_[0-9a-f]{32}$/);
  assert.equal(input?.[1].content, "there");
  assert.equal(await store.responses.inputItems("bob", "resp_1"), undefined, "another namespace has no such response");

  assert.equal(await store.responses.update("alice", "resp_1", { status: "completed", body: body("resp_1") }), true);
  const updated = await store.responses.get("alice", "resp_1");
  assert.equal(updated?.status, "completed");
  assert.deepEqual(updated?.body, body("resp_1"));

  assert.equal(await store.responses.delete("alice", "resp_1"), true);
  assert.equal(await store.responses.get("alice", "resp_1"), undefined);
  assert.equal(await store.responses.delete("alice", "resp_1"), false);
  assert.equal(await store.responses.update("alice", "resp_1", { status: "x", body: {} }), false);
});

test("defaults: created now, not background, no links; ids by item type", async () => {
  const store = withStore();
  const before = Math.floor(Date.now() / 1000);
  const r = await store.responses.create("", {
    id: "resp_d",
    status: "completed",
    model: "m",
    body: body("resp_d"),
    inputItems: [{ type: "function_call_output", call_id: "c", output: "4" }, { type: "reasoning", summary: [] }, { type: "message", id: "", role: "user", content: "x" }],
  });
  assert.ok(r.createdAt >= before && r.createdAt <= before + 2, `createdAt ${r.createdAt}`);
  assert.equal(r.background, false);
  assert.equal(r.previousResponseId, null);
  assert.equal(r.conversationId, null);
  const input = (await store.responses.inputItems("", "resp_d")) ?? [];
  assert.match(input[0].id, /^fco_/);
  assert.match(input[1].id, /^rs_/);
  assert.match(input[2].id, /^msg_/, "an empty id is replaced");
  assert.deepEqual(Object.keys(input[0])[0], "id");
});

test("a repeated id in one namespace is a conflict; the same id in another namespace is another object", async () => {
  const store = withStore();
  const make = (ns: string, model: string) =>
    store.responses.create(ns, { id: "resp_same", status: "completed", model, body: body("resp_same"), inputItems: [] });
  await make("a", "m1");
  await assert.rejects(make("a", "m2"), (e: unknown) => e instanceof StoreError && e.code === "conflict");
  await make("b", "m2");
  assert.equal((await store.responses.get("a", "resp_same"))?.model, "m1");
  assert.equal((await store.responses.get("b", "resp_same"))?.model, "m2");
});

test("another namespace cannot see, list, update or delete a response, or its events", async () => {
  const store = withStore();
  await store.responses.create("alice", { id: "resp_a", status: "completed", model: "m", body: body("resp_a"), inputItems: [userMessage("secret")] });
  await store.responseEvents.append("alice", "resp_a", 0, { type: "response.created" });
  for (const other of ["bob", ""]) {
    assert.equal(await store.responses.get(other, "resp_a"), undefined);
    assert.equal(await store.responses.listInputItems(other, "resp_a"), undefined);
    assert.equal(await store.responses.update(other, "resp_a", { status: "failed", body: {} }), false);
    assert.equal(await store.responses.delete(other, "resp_a"), false);
    assert.equal(await store.responseEvents.list(other, "resp_a"), undefined);
    assert.equal(await store.responseEvents.append(other, "resp_a", 1, { type: "x" }), false);
    assert.equal(await store.responseEvents.appendMany(other, "resp_a", [{ sequenceNumber: 2, event: {} }]), false);
  }
  const own = await store.responses.get("alice", "resp_a");
  assert.equal(own?.status, "completed");
  assert.equal((await store.responseEvents.list("alice", "resp_a"))?.length, 1);
});

test("input items paginate like OpenAI: desc by default, after/limit/order, first/last/has_more", async () => {
  const store = withStore();
  const items = Array.from({ length: 5 }, (_, i) => userMessage(`m${i}`, `item_${i}`));
  await store.responses.create("", { id: "resp_p", status: "completed", model: "m", body: body("resp_p"), inputItems: items });
  const ids = (page: { data: { id: string }[] } | undefined) => page?.data.map((d) => d.id);

  const all = await store.responses.listInputItems("", "resp_p");
  assert.deepEqual(ids(all), ["item_4", "item_3", "item_2", "item_1", "item_0"]);
  assert.equal(all?.first_id, "item_4");
  assert.equal(all?.last_id, "item_0");
  assert.equal(all?.has_more, false);

  const asc2 = await store.responses.listInputItems("", "resp_p", { order: "asc", limit: 2 });
  assert.deepEqual(asc2, { data: items.slice(0, 2), first_id: "item_0", last_id: "item_1", has_more: true });
  const next = await store.responses.listInputItems("", "resp_p", { order: "asc", limit: 2, after: "item_1" });
  assert.deepEqual(ids(next), ["item_2", "item_3"]);
  assert.equal(next?.has_more, true);
  const last = await store.responses.listInputItems("", "resp_p", { order: "asc", limit: 2, after: "item_3" });
  assert.deepEqual(ids(last), ["item_4"]);
  assert.equal(last?.has_more, false);
  const exact = await store.responses.listInputItems("", "resp_p", { order: "asc", limit: 5 });
  assert.equal(exact?.has_more, false, "a page that ends exactly at the end has no more");

  const descAfter = await store.responses.listInputItems("", "resp_p", { after: "item_2", limit: 100 });
  assert.deepEqual(ids(descAfter), ["item_1", "item_0"]);
  const empty = await store.responses.listInputItems("", "resp_p", { after: "item_0" });
  assert.deepEqual(empty, { data: [], first_id: null, last_id: null, has_more: false });

  await assert.rejects(store.responses.listInputItems("", "resp_p", { after: "nope" }), (e: unknown) => e instanceof StoreError && e.code === "invalid_cursor" && e.param === "after");
  for (const limit of [0, 101, 1.5, Number.NaN]) {
    await assert.rejects(store.responses.listInputItems("", "resp_p", { limit }), (e: unknown) => e instanceof StoreError && e.param === "limit", `limit ${limit}`);
  }
  await assert.rejects(store.responses.listInputItems("", "resp_p", { order: "up" as "asc" }), (e: unknown) => e instanceof StoreError && e.param === "order");

  await store.responses.create("", { id: "resp_none", status: "completed", model: "m", body: body("resp_none"), inputItems: [] });
  assert.deepEqual(await store.responses.listInputItems("", "resp_none"), { data: [], first_id: null, last_id: null, has_more: false });
});

test("stream events append and list in order after a sequence number, and go with their response", async () => {
  const store = withStore();
  await store.responses.create("ns", { id: "resp_e", status: "in_progress", model: "m", body: body("resp_e", "in_progress"), inputItems: [], background: true });
  assert.equal(await store.responseEvents.append("ns", "resp_e", 0, { type: "response.created", sequence_number: 0 }), true);
  assert.equal(await store.responseEvents.appendMany("ns", "resp_e", [
    { sequenceNumber: 2, event: { type: "response.output_text.delta", delta: "b" } },
    { sequenceNumber: 1, event: { type: "response.in_progress" } },
  ]), true);
  const all = await store.responseEvents.list("ns", "resp_e");
  assert.deepEqual(all?.map((e) => e.sequenceNumber), [0, 1, 2]);
  assert.deepEqual(all?.[2].event, { type: "response.output_text.delta", delta: "b" });
  assert.deepEqual((await store.responseEvents.list("ns", "resp_e", 0))?.map((e) => e.sequenceNumber), [1, 2]);
  assert.deepEqual(await store.responseEvents.list("ns", "resp_e", 2), []);

  await assert.rejects(store.responseEvents.append("ns", "resp_e", 1, {}), (e: unknown) => e instanceof StoreError && e.code === "conflict");
  // A batch with a repeat is all or nothing.
  await assert.rejects(store.responseEvents.appendMany("ns", "resp_e", [{ sequenceNumber: 3, event: {} }, { sequenceNumber: 2, event: {} }]));
  assert.deepEqual((await store.responseEvents.list("ns", "resp_e"))?.map((e) => e.sequenceNumber), [0, 1, 2]);

  assert.equal(await store.responseEvents.append("ns", "resp_missing", 0, {}), false);
  assert.equal(await store.responseEvents.list("ns", "resp_missing"), undefined);

  assert.equal(await store.responses.delete("ns", "resp_e"), true);
  await store.responses.create("ns", { id: "resp_e", status: "queued", model: "m", body: body("resp_e"), inputItems: [] });
  assert.deepEqual(await store.responseEvents.list("ns", "resp_e"), [], "the old events went with the deleted response");
});

test("the data directory is made private, the database file too, in WAL mode", async () => {
  const dir = join(freshDir(), "nested", "data");
  const store = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  try {
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    assert.equal(statSync(join(dir, DB_FILE)).mode & 0o777, 0o600);
    await store.responses.create("", { id: "resp_w", status: "completed", model: "m", body: {}, inputItems: [] });
    assert.equal(statSync(join(dir, `${DB_FILE}-wal`)).mode & 0o777, 0o600);
  } finally {
    await store.close();
  }
  const db = new Database(join(dir, DB_FILE), { readonly: true });
  try {
    assert.equal(db.pragma("journal_mode", { simple: true }), "wal");
  } finally {
    db.close();
  }
});

test("synchronous=full is available for power-loss durability", async () => {
  const store = openSqliteStore({ dataDir: freshDir(), ttlSeconds: 0, synchronous: "full" });
  try {
    await store.responses.create("", { id: "resp_f", status: "completed", model: "m", body: { ok: true }, inputItems: [] });
    assert.deepEqual((await store.responses.get("", "resp_f"))?.body, { ok: true });
  } finally {
    await store.close();
  }
});

test("migrations run once: a reopened store applies none and keeps its data", async () => {
  const dir = freshDir();
  const first = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  assert.equal(first.migrationsApplied, MIGRATIONS.length);
  await first.responses.create("", { id: "resp_m", status: "completed", model: "m", body: { a: 1 }, inputItems: [] });
  await first.close();
  await first.close(); // idempotent

  const second = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  try {
    assert.equal(second.migrationsApplied, 0);
    assert.deepEqual((await second.responses.get("", "resp_m"))?.body, { a: 1 });
  } finally {
    await second.close();
  }
  const db = new Database(join(dir, DB_FILE));
  try {
    assert.equal(db.pragma("user_version", { simple: true }), MIGRATIONS[MIGRATIONS.length - 1].version);
  } finally {
    db.close();
  }
});

test("migrations apply in order, each in a transaction; a failing step leaves the earlier ones", () => {
  const db = new Database(":memory:");
  try {
    const order: number[] = [];
    const steps = [
      { version: 1, description: "one", up: (d: Database.Database) => { order.push(1); d.exec("CREATE TABLE one (x)"); } },
      { version: 2, description: "two", up: (d: Database.Database) => { order.push(2); d.exec("CREATE TABLE two (x)"); throw new Error("step two fails"); } },
    ];
    assert.throws(() => migrate(db, steps), /step two fails/);
    assert.deepEqual(order, [1, 2]);
    assert.equal(db.pragma("user_version", { simple: true }), 1);
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all();
    assert.deepEqual(tables, ["one"], "the failed step's table was rolled back");

    steps[1].up = (d) => { order.push(22); d.exec("CREATE TABLE two (x)"); };
    assert.equal(migrate(db, steps), 1);
    assert.equal(migrate(db, steps), 0);
    assert.deepEqual(order, [1, 2, 22]);
    assert.equal(db.pragma("user_version", { simple: true }), 2);
    assert.throws(() => migrate(db, steps.slice(0, 1)), /newer than this Plinth knows/);
  } finally {
    db.close();
  }
});

test("retention: expires_at is created_at + ttl, and the sweep deletes what expired with its events", async () => {
  const store = withStore(100);
  const make = (id: string, createdAt: number) =>
    store.responses.create("ns", { id, createdAt, status: "completed", model: "m", body: body(id), inputItems: [] });
  const old = await make("resp_old", 1000);
  await make("resp_new", 1050);
  assert.equal(old.expiresAt, 1100);
  await store.responseEvents.append("ns", "resp_old", 0, { type: "response.created" });

  assert.deepEqual(await store.sweepExpired(1099), { responses: 0, conversations: 0, chatCompletions: 0 });
  assert.ok(await store.responses.get("ns", "resp_old"), "not yet expired");
  assert.deepEqual(await store.sweepExpired(1100), { responses: 1, conversations: 0, chatCompletions: 0 });
  assert.equal(await store.responses.get("ns", "resp_old"), undefined);
  assert.ok(await store.responses.get("ns", "resp_new"), "the newer one stays");
  assert.equal(await store.responseEvents.list("ns", "resp_old"), undefined);
});

test("ttl 0 keeps responses forever; a negative ttl is refused", async () => {
  const store = withStore(0);
  await store.responses.create("", { id: "resp_k", createdAt: 1, status: "completed", model: "m", body: {}, inputItems: [] });
  assert.deepEqual(await store.sweepExpired(Number.MAX_SAFE_INTEGER), { responses: 0, conversations: 0, chatCompletions: 0 });
  assert.ok(await store.responses.get("", "resp_k"), "kept");
  assert.throws(() => openSqliteStore({ dataDir: freshDir(), ttlSeconds: -1 }), /ttlSeconds/);
});

test("the sweeper runs on its own timer, does not hold the process open, and stops on close", async () => {
  const store = openSqliteStore({ dataDir: freshDir(), ttlSeconds: 1 });
  await store.responses.create("", { id: "resp_s", createdAt: 10, status: "completed", model: "m", body: {}, inputItems: [] });
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
  const before = timers();
  store.startSweeper(20);
  assert.equal(timers(), before, "the sweeper's timer is unref'd");
  const deadline = Date.now() + 5000;
  while ((await store.responses.get("", "resp_s")) !== undefined) {
    assert.ok(Date.now() < deadline, "the sweeper deleted the expired response");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await store.close();
  // Past close, a tick of the (stopped) timer would throw on the closed database; give it time to.
  await new Promise((resolve) => setTimeout(resolve, 60));
  assert.throws(() => store.startSweeper(20), /closed/);
});

test("items of stored responses are found by id within their namespace, and go with their response", async () => {
  const store = withStore();
  const output = [{ id: "fc_1", type: "function_call", call_id: "call_1", name: "f", arguments: "{}" }];
  await store.responses.create("ns", { id: "resp_a", status: "in_progress", model: "m", body: body("resp_a", "in_progress"), inputItems: [userMessage("hi", "msg_in")] });
  assert.deepEqual(await store.responses.findItem("ns", "msg_in"), userMessage("hi", "msg_in"));
  assert.equal(await store.responses.findItem("ns", "fc_1"), undefined, "not output yet");
  await store.responses.update("ns", "resp_a", { status: "completed", body: { ...body("resp_a"), output } });
  assert.deepEqual(await store.responses.findItem("ns", "fc_1"), output[0]);
  assert.equal(await store.responses.findItem("other", "fc_1"), undefined, "another namespace finds nothing");
  await store.responses.delete("ns", "resp_a");
  assert.equal(await store.responses.findItem("ns", "fc_1"), undefined, "deleted with its response");
});

/** A store file at schema `version`, with rows written by `fill` in that version's tables. */
function storeAtVersion(version: number, fill: (db: Database.Database) => void): string {
  const dir = freshDir();
  mkdirSync(dir, { mode: 0o700 });
  const raw = new Database(join(dir, DB_FILE));
  raw.pragma("foreign_keys = ON");
  // The steps up to `version`, as a Plinth of that time left the file.
  migrate(raw, MIGRATIONS.filter((m) => m.version <= version));
  fill(raw);
  raw.close();
  return dir;
}

test("migration 5: objects stored per end user move to their API key's namespace (the server's own without a key), children with them", async () => {
  const keyed = (key: string, user: string) => JSON.stringify(["key", key, user]);
  const dir = storeAtVersion(4, (db) => {
    const response = db.prepare("INSERT INTO responses (namespace, id, created_at, status, model, body, input_items) VALUES (?, ?, 1, 'completed', 'm', ?, ?)");
    response.run("alice-ns", "resp_a", JSON.stringify(body("resp_a")), JSON.stringify([userMessage("hi", "msg_a")]));
    db.prepare("INSERT INTO response_items (namespace, response_id, item_id, item) VALUES (?, ?, ?, ?)").run("alice-ns", "resp_a", "msg_a", JSON.stringify(userMessage("hi", "msg_a")));
    db.prepare("INSERT INTO response_events (namespace, response_id, sequence_number, event) VALUES (?, ?, 0, ?)").run("alice-ns", "resp_a", JSON.stringify({ type: "response.created" }));
    response.run(keyed("key_1", "bob-ns"), "resp_b", JSON.stringify(body("resp_b")), "[]");
    db.prepare("INSERT INTO conversations (namespace, id, created_at, metadata) VALUES (?, ?, 1, '{}')").run("carol-ns", "conv_c");
    db.prepare("INSERT INTO conversation_items (namespace, conversation_id, id, position, item, created_at) VALUES (?, ?, ?, 0, ?, 1)").run(
      "carol-ns",
      "conv_c",
      "msg_c",
      JSON.stringify(userMessage("x", "msg_c")),
    );
  });
  const store = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  after(() => store.close());
  assert.equal(store.migrationsApplied, MIGRATIONS.length - 4);
  assert.ok(await store.responses.get("", "resp_a"));
  assert.equal((await store.responses.findItem("", "msg_a"))?.id, "msg_a");
  assert.equal((await store.responseEvents.list("", "resp_a", -1))?.length, 1);
  assert.ok(await store.responses.get(keyed("key_1", ""), "resp_b"));
  assert.equal(await store.responses.get("", "resp_b"), undefined, "a key's objects stay that key's");
  assert.ok(await store.conversations.get("", "conv_c"));
  assert.equal(await store.responses.get("alice-ns", "resp_a"), undefined);
});

test("migration 5: an open server's end user named \"key\" is not taken for an API key; migration 7 recovers stores where it was", async () => {
  const userKey = JSON.stringify(["key", null]);
  const fill = (db: Database.Database) =>
    db.prepare("INSERT INTO responses (namespace, id, created_at, status, model, body, input_items) VALUES (?, 'resp_k', 1, 'completed', 'm', ?, '[]')").run(userKey, JSON.stringify(body("resp_k")));
  const fresh = openSqliteStore({ dataDir: storeAtVersion(4, fill), ttlSeconds: 0 });
  after(() => fresh.close());
  assert.ok(await fresh.responses.get("", "resp_k"), "the server's, like every other end user's object");
  // A store that migration 5 moved to the id-less key namespace before the fix.
  const misfiled = storeAtVersion(6, (db) =>
    db.prepare("INSERT INTO responses (namespace, id, created_at, status, model, body, input_items) VALUES (?, 'resp_k', 1, 'completed', 'm', ?, '[]')").run('["key",null,""]', JSON.stringify(body("resp_k"))),
  );
  const recovered = openSqliteStore({ dataDir: misfiled, ttlSeconds: 0 });
  after(() => recovered.close());
  assert.ok(await recovered.responses.get("", "resp_k"));
});

test("a key's objects move to another key id with their children (an --api-key key's id of before 2026-12-02)", async () => {
  const store = openSqliteStore({ dataDir: freshDir(), ttlSeconds: 0 });
  after(() => store.close());
  const old = JSON.stringify(["key", "static-old", ""]);
  const now = JSON.stringify(["key", "static-new", ""]);
  await store.responses.create(old, { id: "resp_o", status: "completed", model: "m", body: body("resp_o"), inputItems: [userMessage("hi", "msg_o")] });
  await store.conversations.create(old, { id: "conv_o", metadata: {}, items: [userMessage("x", "msg_c")] });
  assert.equal(store.moveKeyObjects("static-old", "static-new"), 2);
  assert.ok(await store.responses.get(now, "resp_o"));
  assert.deepEqual(await store.responses.inputItems(now, "resp_o"), [userMessage("hi", "msg_o")]);
  assert.ok(await store.conversations.get(now, "conv_o"));
  assert.equal(await store.responses.get(old, "resp_o"), undefined);
  assert.equal(store.moveKeyObjects("static-old", "static-new"), 0, "nothing left to move");
});

test("migration 6: responses stored with their input list keep it; new ones keep input items as rows, read and paged the same", async () => {
  const legacyInput = [userMessage("first", "msg_1"), userMessage("second", "msg_2"), userMessage("third", "msg_3")];
  const dir = storeAtVersion(5, (db) => {
    db.prepare("INSERT INTO responses (namespace, id, created_at, status, model, body, input_items) VALUES ('', 'resp_old', 1, 'completed', 'm', ?, ?)").run(
      JSON.stringify(body("resp_old")),
      JSON.stringify(legacyInput),
    );
    const item = db.prepare("INSERT INTO response_items (namespace, response_id, item_id, item) VALUES ('', 'resp_old', ?, ?)");
    for (const i of legacyInput) item.run(i.id as string, JSON.stringify(i));
    item.run("msg_out", JSON.stringify({ id: "msg_out", type: "message", role: "assistant", content: [] }));
  });
  const store = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  after(() => store.close());
  assert.equal(store.migrationsApplied, MIGRATIONS.length - 5);

  assert.deepEqual(await store.responses.inputItems("", "resp_old"), legacyInput);
  const page = await store.responses.listInputItems("", "resp_old", { order: "asc", limit: 2, after: "msg_1" });
  assert.deepEqual(page?.data, legacyInput.slice(1, 3));
  assert.equal((await store.responses.findItem("", "msg_2"))?.content, "second", "the old index rows still answer references");
  assert.equal((await store.responses.findItem("", "msg_out"))?.id, "msg_out");

  // A response written now keeps its input once, in the index's rows, not in its own row.
  const input = [userMessage("a", "msg_a"), userMessage("b", "msg_b")];
  await store.responses.create("", { id: "resp_new", status: "in_progress", model: "m", body: body("resp_new", "in_progress"), inputItems: input });
  await store.responses.update("", "resp_new", { status: "completed", body: body("resp_new") });
  assert.deepEqual(await store.responses.inputItems("", "resp_new"), input);
  assert.deepEqual((await store.responses.listInputItems("", "resp_new"))?.data, [...input].reverse());
  await store.close();
  const raw = new Database(join(dir, DB_FILE), { readonly: true });
  try {
    assert.equal(raw.prepare("SELECT input_items FROM responses WHERE id = 'resp_new'").pluck().get(), "");
    assert.deepEqual(raw.prepare("SELECT item_id, input_position FROM response_items WHERE response_id = 'resp_new' ORDER BY input_position").all(), [
      { item_id: "msg_a", input_position: 0 },
      { item_id: "msg_b", input_position: 1 },
    ]);
  } finally {
    raw.close();
  }
});

test("input items: an id repeated in one input is listed twice; an output item with an input's id is the one a reference finds", async () => {
  const store = withStore();
  const input = [userMessage("one", "msg_x"), userMessage("two", "msg_x"), userMessage("three", "msg_y")];
  await store.responses.create("", { id: "resp_r", status: "in_progress", model: "m", body: body("resp_r", "in_progress"), inputItems: input });
  assert.deepEqual(await store.responses.inputItems("", "resp_r"), input);
  assert.deepEqual((await store.responses.listInputItems("", "resp_r", { order: "asc" }))?.data, input);
  assert.equal((await store.responses.findItem("", "msg_x"))?.content, "two", "of two with one id, the later");

  const output = { id: "msg_y", type: "message", role: "assistant", content: [{ type: "output_text", text: "out" }] };
  // Written twice, as a response's output is when it is updated more than once: one row, replaced.
  await store.responses.update("", "resp_r", { status: "in_progress", body: { ...body("resp_r", "in_progress"), output: [output] } });
  await store.responses.update("", "resp_r", { status: "completed", body: { ...body("resp_r"), output: [output] } });
  assert.deepEqual(await store.responses.findItem("", "msg_y"), output);
  assert.deepEqual(await store.responses.inputItems("", "resp_r"), input, "the input is not changed by the output");
  await store.responses.delete("", "resp_r");
  assert.equal(await store.responses.inputItems("", "resp_r"), undefined);
  assert.equal(await store.responses.findItem("", "msg_x"), undefined, "rows go with their response");
});
