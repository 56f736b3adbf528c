import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openSqliteStore, type SqliteStore } from "../../src/store/sqlite-store.ts";
import { PAGE_MAX_CHARS, StoreError, type JsonObject, type Page, type StoredItem } from "../../src/store/store.ts";

const root = mkdtempSync(join(tmpdir(), "plinth-store-conversations-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

function withStore(ttlSeconds = 0): SqliteStore {
  const store = openSqliteStore({ dataDir: join(root, `d${dirs++}`), ttlSeconds });
  after(() => store.close());
  return store;
}

const message = (text: string, id?: string): JsonObject => ({ ...(id ? { id } : {}), type: "message", role: "user", content: [{ type: "input_text", text }] });
const ids = (page: Page<StoredItem> | undefined) => page?.data.map((item) => item.id);

test("a conversation is created with its items, read, given new metadata and deleted with its items", async () => {
  const store = withStore();
  const { conversation, items } = await store.conversations.create("alice", {
    id: "conv_1",
    createdAt: 1_700_000_000,
    metadata: { topic: "demo" },
    items: [message("hello", "msg_a"), message("again")],
  });
  assert.deepEqual(conversation, { id: "conv_1", namespace: "alice", createdAt: 1_700_000_000, metadata: { topic: "demo" }, expiresAt: null });
  assert.equal(items.length, 2);
  assert.equal(items[0].id, "msg_a");
  assert.match(items[1].id, /^msg_[0-9a-f]{32}$/);
  assert.deepEqual(items[1].content, [{ type: "input_text", text: "again" }]);

  assert.deepEqual(await store.conversations.get("alice", "conv_1"), conversation);
  const updated = await store.conversations.updateMetadata("alice", "conv_1", { topic: "other", k: "v" });
  assert.deepEqual(updated?.metadata, { topic: "other", k: "v" });
  assert.deepEqual((await store.conversations.get("alice", "conv_1"))?.metadata, { topic: "other", k: "v" });
  assert.equal(await store.conversations.updateMetadata("alice", "conv_nope", {}), undefined);

  assert.deepEqual(await store.conversations.getItem("alice", "conv_1", "msg_a"), items[0]);
  assert.equal(await store.conversations.delete("alice", "conv_1"), true);
  assert.equal(await store.conversations.get("alice", "conv_1"), undefined);
  assert.equal(await store.conversations.getItem("alice", "conv_1", "msg_a"), undefined);
  assert.equal(await store.conversations.delete("alice", "conv_1"), false);

  // A new conversation under the old id starts empty: the items went with the old one.
  await store.conversations.create("alice", { id: "conv_1" });
  assert.deepEqual(ids(await store.conversations.listItems("alice", "conv_1")), []);
});

test("defaults: empty metadata, no items, created now", async () => {
  const store = withStore();
  const { conversation, items } = await store.conversations.create("", { id: "conv_d" });
  assert.deepEqual(conversation.metadata, {});
  assert.deepEqual(items, []);
  assert.ok(Math.abs(conversation.createdAt - Date.now() / 1000) < 5, "created now");
});

test("items append after the existing ones, get and delete one by one", async () => {
  const store = withStore();
  await store.conversations.create("", { id: "conv_a", items: [message("0", "i0")] });
  const added = await store.conversations.addItems("", "conv_a", [message("1", "i1"), { type: "function_call", call_id: "c1", name: "f", arguments: "{}" }]);
  assert.equal(added?.length, 2);
  assert.equal(added?.[0].id, "i1");
  assert.match(added?.[1].id ?? "", /^fc_/);
  await store.conversations.addItems("", "conv_a", [message("3", "i3")]);
  assert.deepEqual(ids(await store.conversations.listItems("", "conv_a", { order: "asc" })), ["i0", "i1", added?.[1].id, "i3"]);

  assert.equal(await store.conversations.deleteItem("", "conv_a", "i1"), true);
  assert.equal(await store.conversations.deleteItem("", "conv_a", "i1"), false);
  assert.equal(await store.conversations.getItem("", "conv_a", "i1"), undefined);
  await store.conversations.addItems("", "conv_a", [message("4", "i4")]);
  assert.deepEqual(ids(await store.conversations.listItems("", "conv_a", { order: "asc" })), ["i0", added?.[1].id, "i3", "i4"], "a deleted item leaves the order of the rest");

  assert.equal(await store.conversations.addItems("", "conv_missing", [message("x")]), undefined);
  await assert.rejects(store.conversations.addItems("", "conv_a", [message("5", "i5"), message("dup", "i0")]), (e: unknown) => e instanceof StoreError && e.code === "conflict");
  assert.equal(await store.conversations.getItem("", "conv_a", "i5"), undefined, "a batch with a repeated id is all or nothing");
  await assert.rejects(store.conversations.create("", { id: "conv_a" }), (e: unknown) => e instanceof StoreError && e.code === "conflict");
});

test("items paginate: desc by default, after in either order, limits, has_more, unknown cursor", async () => {
  const store = withStore();
  const items = Array.from({ length: 7 }, (_, i) => message(`t${i}`, `it_${i}`));
  await store.conversations.create("", { id: "conv_p", items: items.slice(0, 3) });
  await store.conversations.addItems("", "conv_p", items.slice(3));

  const first = await store.conversations.listItems("", "conv_p", { limit: 3 });
  assert.deepEqual(ids(first), ["it_6", "it_5", "it_4"]);
  assert.equal(first?.first_id, "it_6");
  assert.equal(first?.last_id, "it_4");
  assert.equal(first?.has_more, true);
  const second = await store.conversations.listItems("", "conv_p", { limit: 3, after: first?.last_id ?? undefined });
  assert.deepEqual(ids(second), ["it_3", "it_2", "it_1"]);
  assert.equal(second?.has_more, true);
  const third = await store.conversations.listItems("", "conv_p", { limit: 3, after: "it_1" });
  assert.deepEqual(ids(third), ["it_0"]);
  assert.equal(third?.has_more, false);
  assert.deepEqual(await store.conversations.listItems("", "conv_p", { after: "it_0" }), { data: [], first_id: null, last_id: null, has_more: false });

  const asc = await store.conversations.listItems("", "conv_p", { order: "asc", after: "it_4", limit: 2 });
  assert.deepEqual(ids(asc), ["it_5", "it_6"]);
  assert.equal(asc?.has_more, false, "exactly the rest: no more");
  assert.deepEqual(ids(await store.conversations.listItems("", "conv_p", { order: "asc", limit: 1 })), ["it_0"]);
  assert.equal((await store.conversations.listItems("", "conv_p", { limit: 100 }))?.data.length, 7);
  assert.deepEqual((await store.conversations.listItems("", "conv_p", { order: "asc", limit: 1 }))?.data[0], items[0], "items come back as stored");

  await assert.rejects(store.conversations.listItems("", "conv_p", { after: "it_99" }), (e: unknown) => e instanceof StoreError && e.code === "invalid_cursor");
  await assert.rejects(store.conversations.listItems("", "conv_p", { limit: 0 }), (e: unknown) => e instanceof StoreError && e.code === "invalid_limit");
  await assert.rejects(store.conversations.listItems("", "conv_p", { limit: 101 }), (e: unknown) => e instanceof StoreError && e.code === "invalid_limit");
  assert.equal(await store.conversations.listItems("", "conv_missing"), undefined);
});

test("a page of large items stops at PAGE_MAX_CHARS with has_more, and the next page goes on from it", async () => {
  // 100 items of 700 KB made one 70 MB answer, read and written out while every request waited.
  const store = withStore();
  const big = "x".repeat(Math.floor(PAGE_MAX_CHARS / 3));
  await store.conversations.create("", { id: "conv_big", items: Array.from({ length: 7 }, (_, i) => message(big, `b_${i}`)) });
  const first = await store.conversations.listItems("", "conv_big", { order: "asc", limit: 100 });
  assert.deepEqual(ids(first), ["b_0", "b_1"]);
  assert.equal(first?.has_more, true);
  const rest: string[] = [];
  let after = first?.last_id ?? undefined;
  for (let page; (page = await store.conversations.listItems("", "conv_big", { order: "asc", limit: 100, after })); after = page.last_id ?? undefined) {
    rest.push(...(ids(page) ?? []));
    if (!page.has_more) break;
  }
  assert.deepEqual(rest, ["b_2", "b_3", "b_4", "b_5", "b_6"]);
  // An item larger than the bound on its own still comes back, one to a page.
  await store.conversations.create("", { id: "conv_huge", items: [message("y".repeat(PAGE_MAX_CHARS + 1), "h_0"), message("z", "h_1")] });
  const one = await store.conversations.listItems("", "conv_huge", { order: "asc" });
  assert.deepEqual([ids(one), one?.has_more], [["h_0"], true]);
  // A limit reached before the bound is has_more as before.
  const small = await store.conversations.listItems("", "conv_big", { order: "asc", limit: 1 });
  assert.deepEqual([ids(small), small?.has_more], [["b_0"], true]);
});

test("another namespace gets not-found for the conversation and every item operation", async () => {
  const store = withStore();
  await store.conversations.create("alice", { id: "conv_x", metadata: { a: "1" }, items: [message("private", "it_x")] });
  for (const other of ["bob", ""]) {
    assert.equal(await store.conversations.get(other, "conv_x"), undefined);
    assert.equal(await store.conversations.updateMetadata(other, "conv_x", { a: "2" }), undefined);
    assert.equal(await store.conversations.delete(other, "conv_x"), false);
    assert.equal(await store.conversations.addItems(other, "conv_x", [message("intrude")]), undefined);
    assert.equal(await store.conversations.listItems(other, "conv_x"), undefined);
    assert.equal(await store.conversations.listItems(other, "conv_x", { after: "it_x" }), undefined, "the cursor does not reveal the item either");
    assert.equal(await store.conversations.getItem(other, "conv_x", "it_x"), undefined);
    assert.equal(await store.conversations.deleteItem(other, "conv_x", "it_x"), false);
  }
  // Bob can hold a conversation with the same id; the two stay apart.
  await store.conversations.create("bob", { id: "conv_x", items: [message("bob's", "it_x")] });
  assert.deepEqual((await store.conversations.getItem("bob", "conv_x", "it_x"))?.content, [{ type: "input_text", text: "bob's" }]);
  assert.deepEqual((await store.conversations.getItem("alice", "conv_x", "it_x"))?.content, [{ type: "input_text", text: "private" }]);
  assert.deepEqual((await store.conversations.get("alice", "conv_x"))?.metadata, { a: "1" });
  assert.deepEqual(ids(await store.conversations.listItems("alice", "conv_x")), ["it_x"]);
  assert.equal(await store.conversations.delete("bob", "conv_x"), true);
  assert.ok(await store.conversations.getItem("alice", "conv_x", "it_x"), "alice's item survives bob's delete");
});

test("retention: expired conversations are swept with their items", async () => {
  const store = withStore(60);
  const { conversation } = await store.conversations.create("ns", { id: "conv_old", createdAt: 100, items: [message("a", "ia")] });
  await store.conversations.create("ns", { id: "conv_new", createdAt: 150 });
  assert.equal(conversation.expiresAt, 160);
  assert.deepEqual(await store.sweepExpired(170), { responses: 0, conversations: 1, chatCompletions: 0 });
  assert.equal(await store.conversations.get("ns", "conv_old"), undefined);
  assert.equal(await store.conversations.getItem("ns", "conv_old", "ia"), undefined);
  assert.ok(await store.conversations.get("ns", "conv_new"), "not expired yet");
  await store.conversations.create("ns", { id: "conv_old" });
  assert.deepEqual(ids(await store.conversations.listItems("ns", "conv_old")), [], "no orphaned items remain");
});
