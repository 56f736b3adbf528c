import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openSqliteStore, type SqliteStore } from "../../src/store/sqlite-store.ts";
import { StoreError, type ChatCompletionRecord, type JsonObject, type Metadata, type Page } from "../../src/store/store.ts";

const root = mkdtempSync(join(tmpdir(), "plinth-store-chat-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

function withStore(ttlSeconds = 0): SqliteStore {
  const store = openSqliteStore({ dataDir: join(root, `d${dirs++}`), ttlSeconds });
  after(() => store.close());
  return store;
}

const completion = (id: string, model: string): JsonObject => ({
  id,
  object: "chat.completion",
  model,
  choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
});
const ids = (page: Page<ChatCompletionRecord>) => page.data.map((c) => c.id);

async function seed(store: SqliteStore, ns: string, rows: [id: string, createdAt: number, model: string, metadata: Metadata][]) {
  for (const [id, createdAt, model, metadata] of rows) {
    await store.chatCompletions.create(ns, { id, createdAt, model, metadata, body: completion(id, model), messages: [{ role: "user", content: id }] });
  }
}

test("a stored chat completion is created, read, re-labelled and deleted", async () => {
  const store = withStore();
  const created = await store.chatCompletions.create("u1", {
    id: "chatcmpl-1",
    createdAt: 1_700_000_000,
    model: "Konan-LLM-ENT-11",
    metadata: { team: "a" },
    body: completion("chatcmpl-1", "Konan-LLM-ENT-11"),
    messages: [{ role: "system", content: "be brief" }, { id: "given", role: "user", content: "hello" }],
  });
  assert.deepEqual(created, {
    id: "chatcmpl-1",
    namespace: "u1",
    createdAt: 1_700_000_000,
    model: "Konan-LLM-ENT-11",
    metadata: { team: "a" },
    body: completion("chatcmpl-1", "Konan-LLM-ENT-11"),
    expiresAt: null,
  });
  assert.deepEqual(await store.chatCompletions.get("u1", "chatcmpl-1"), created);

  const messages = await store.chatCompletions.listMessages("u1", "chatcmpl-1");
  assert.deepEqual(messages?.data, [
    { id: "chatcmpl-1-0", role: "system", content: "be brief" },
    { id: "given", role: "user", content: "hello" },
  ]);

  const relabelled = await store.chatCompletions.updateMetadata("u1", "chatcmpl-1", { team: "b", x: "y" });
  assert.deepEqual(relabelled?.metadata, { team: "b", x: "y" });
  assert.deepEqual((await store.chatCompletions.get("u1", "chatcmpl-1"))?.metadata, { team: "b", x: "y" });
  assert.equal(await store.chatCompletions.updateMetadata("u1", "chatcmpl-none", {}), undefined);

  assert.equal(await store.chatCompletions.delete("u1", "chatcmpl-1"), true);
  assert.equal(await store.chatCompletions.get("u1", "chatcmpl-1"), undefined);
  assert.equal(await store.chatCompletions.listMessages("u1", "chatcmpl-1"), undefined);
  assert.equal(await store.chatCompletions.delete("u1", "chatcmpl-1"), false);

  await store.chatCompletions.create("u1", { id: "c2", model: "m", body: {}, messages: [] });
  await assert.rejects(store.chatCompletions.create("u1", { id: "c2", model: "m", body: {}, messages: [] }), (e: unknown) => e instanceof StoreError && e.code === "conflict");
  assert.deepEqual((await store.chatCompletions.get("u1", "c2"))?.metadata, {}, "metadata defaults to {}");
});

test("list orders by created_at then by when each was stored, asc by default, and pages with after/limit", async () => {
  const store = withStore();
  await seed(store, "", [
    ["c", 20, "m", {}],
    ["a", 10, "m", {}],
    ["b", 20, "m", {}],
    ["d", 30, "m", {}],
    ["e", 5, "m", {}],
  ]);
  const all = await store.chatCompletions.list("");
  assert.deepEqual(ids(all), ["e", "a", "c", "b", "d"]);
  assert.equal(all.first_id, "e");
  assert.equal(all.last_id, "d");
  assert.equal(all.has_more, false);

  const p1 = await store.chatCompletions.list("", { limit: 2 });
  assert.deepEqual(ids(p1), ["e", "a"]);
  assert.equal(p1.has_more, true);
  const p2 = await store.chatCompletions.list("", { limit: 2, after: "a" });
  assert.deepEqual(ids(p2), ["c", "b"], "same created_at: in the order stored, across the page boundary");
  assert.equal(p2.has_more, true);
  const p3 = await store.chatCompletions.list("", { limit: 2, after: "b" });
  assert.deepEqual(ids(p3), ["d"]);
  assert.equal(p3.has_more, false);
  const pb = await store.chatCompletions.list("", { limit: 1, after: "c" });
  assert.deepEqual(ids(pb), ["b"], "after the first of two with the same created_at");

  const desc = await store.chatCompletions.list("", { order: "desc" });
  assert.deepEqual(ids(desc), ["d", "b", "c", "a", "e"]);
  assert.deepEqual(ids(await store.chatCompletions.list("", { order: "desc", after: "b", limit: 2 })), ["c", "a"]);
  assert.deepEqual(await store.chatCompletions.list("", { after: "d" }), { data: [], first_id: null, last_id: null, has_more: false });
  assert.equal((await store.chatCompletions.list("", { limit: 5 })).has_more, false);

  await assert.rejects(store.chatCompletions.list("", { after: "zzz" }), (e: unknown) => e instanceof StoreError && e.code === "invalid_cursor" && e.param === "after");
  await assert.rejects(store.chatCompletions.list("", { limit: 101 }), (e: unknown) => e instanceof StoreError && e.code === "invalid_limit");
  assert.deepEqual(await store.chatCompletions.list("nobody"), { data: [], first_id: null, last_id: null, has_more: false });
});

test("list filters by model and by metadata pairs, all of which must match", async () => {
  const store = withStore();
  await seed(store, "", [
    ["c1", 1, "konan", { team: "a", env: "prod" }],
    ["c2", 2, "konan", { team: "a", env: "dev" }],
    ["c3", 3, "aster", { team: "a", env: "prod" }],
    ["c4", 4, "aster", { team: "b" }],
    ["c5", 5, "konan", { "odd key.$[0]\"": "it's \"quoted\"" }],
    ["c6", 6, "konan", {}],
  ]);
  const list = async (query: Parameters<SqliteStore["chatCompletions"]["list"]>[1]) => ids(await store.chatCompletions.list("", query));
  assert.deepEqual(await list({ model: "konan" }), ["c1", "c2", "c5", "c6"]);
  assert.deepEqual(await list({ metadata: { team: "a" } }), ["c1", "c2", "c3"]);
  assert.deepEqual(await list({ metadata: { team: "a", env: "prod" } }), ["c1", "c3"]);
  assert.deepEqual(await list({ metadata: { team: "a", env: "prod" }, model: "aster" }), ["c3"]);
  assert.deepEqual(await list({ metadata: { team: "a", env: "qa" } }), []);
  assert.deepEqual(await list({ metadata: { env: "prod" }, order: "desc", limit: 1 }), ["c3"]);
  assert.deepEqual(await list({ metadata: { env: "prod" }, after: "c1" }), ["c3"]);
  assert.deepEqual(await list({ metadata: { "odd key.$[0]\"": "it's \"quoted\"" } }), ["c5"], "keys and values are bound, not spliced into a JSON path");
  assert.deepEqual(await list({ metadata: {} }), ["c1", "c2", "c3", "c4", "c5", "c6"]);
  assert.deepEqual(await list({ model: "nope" }), []);
  const page = await store.chatCompletions.list("", { model: "konan", limit: 2 });
  assert.equal(page.has_more, true);
  assert.deepEqual(ids(await store.chatCompletions.list("", { model: "konan", limit: 2, after: page.last_id ?? undefined })), ["c5", "c6"]);
});

test("messages paginate: asc by default, after/limit/order", async () => {
  const store = withStore();
  const messages = Array.from({ length: 4 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `m${i}` }));
  await store.chatCompletions.create("", { id: "cc", model: "m", body: {}, messages });
  const page = await store.chatCompletions.listMessages("", "cc", { limit: 3 });
  assert.deepEqual(page?.data.map((m) => m.id), ["cc-0", "cc-1", "cc-2"]);
  assert.equal(page?.has_more, true);
  assert.equal(page?.first_id, "cc-0");
  assert.equal(page?.last_id, "cc-2");
  const rest = await store.chatCompletions.listMessages("", "cc", { limit: 3, after: "cc-2" });
  assert.deepEqual(rest?.data.map((m) => m.content), ["m3"]);
  assert.equal(rest?.has_more, false);
  assert.deepEqual((await store.chatCompletions.listMessages("", "cc", { order: "desc", limit: 2 }))?.data.map((m) => m.id), ["cc-3", "cc-2"]);
  await assert.rejects(store.chatCompletions.listMessages("", "cc", { after: "cc-9" }), (e: unknown) => e instanceof StoreError && e.code === "invalid_cursor");
});

test("another namespace cannot see, list, filter to, update or delete a stored completion", async () => {
  const store = withStore();
  await seed(store, "alice", [["cc-a", 1, "m", { k: "v" }]]);
  for (const other of ["bob", ""]) {
    assert.equal(await store.chatCompletions.get(other, "cc-a"), undefined);
    assert.deepEqual(ids(await store.chatCompletions.list(other)), []);
    assert.deepEqual(ids(await store.chatCompletions.list(other, { metadata: { k: "v" }, model: "m" })), []);
    await assert.rejects(store.chatCompletions.list(other, { after: "cc-a" }), (e: unknown) => e instanceof StoreError && e.code === "invalid_cursor", "another namespace's id is no cursor");
    assert.equal(await store.chatCompletions.updateMetadata(other, "cc-a", { k: "w" }), undefined);
    assert.equal(await store.chatCompletions.delete(other, "cc-a"), false);
    assert.equal(await store.chatCompletions.listMessages(other, "cc-a"), undefined);
  }
  assert.deepEqual((await store.chatCompletions.get("alice", "cc-a"))?.metadata, { k: "v" });
  assert.deepEqual(ids(await store.chatCompletions.list("alice")), ["cc-a"]);
});

test("retention: expired completions are swept", async () => {
  const store = withStore(10);
  await seed(store, "", [["old", 100, "m", {}], ["new", 105, "m", {}]]);
  assert.equal((await store.chatCompletions.get("", "old"))?.expiresAt, 110);
  assert.deepEqual(await store.sweepExpired(110), { responses: 0, conversations: 0, chatCompletions: 1 });
  assert.deepEqual(ids(await store.chatCompletions.list("")), ["new"]);
});
