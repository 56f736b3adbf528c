import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { AddressInfo } from "node:net";
import OpenAI from "openai";
import { scriptedApp, sseData, type ScriptedApp } from "../helpers/scripted-app.ts";
import { fillStore } from "../helpers/test-store.ts";

// Stored Chat Completions (store: true, metadata, list/retrieve/update/delete/messages) through the
// real app over the scripted engine, on a real socket so the official openai client can drive it.

let s: ScriptedApp;
let client: OpenAI;
let base: string;
before(async () => {
  s = await scriptedApp({ id: "tiny", contextSize: 256 });
  await s.app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(s.app.server.address() as AddressInfo).port}`;
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
});
after(async () => {
  await s.app.close();
});

const messages = [
  { role: "system" as const, content: "Be brief." },
  { role: "user" as const, content: "hi" },
];

/** The stored object's metadata (the client's ChatCompletion type does not declare it). */
const metadataOf = (c: OpenAI.Chat.ChatCompletion) => (c as unknown as { metadata?: Record<string, string> }).metadata;

const post = async (url: string, body: unknown) => {
  const r = await fetch(`${base}${url}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
};

test("store: true keeps the completion; retrieve returns it with its metadata", async () => {
  const c = await client.chat.completions.create({ model: "tiny", messages, store: true, metadata: { topic: "greeting" } });
  const got = await client.chat.completions.retrieve(c.id);
  assert.equal(got.id, c.id);
  assert.equal(got.object, "chat.completion");
  assert.equal(got.choices[0].message.content, c.choices[0].message.content);
  assert.deepEqual(metadataOf(got), { topic: "greeting" });
});

test("a completion without store: true is not kept (metadata alone is accepted)", async () => {
  const c = await client.chat.completions.create({ model: "tiny", messages, metadata: { a: "b" } });
  await assert.rejects(client.chat.completions.retrieve(c.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
});

test("a streamed completion is kept once it has finished, with usage", async () => {
  const r = await post("/v1/chat/completions", { model: "tiny", messages, store: true, stream: true, metadata: { kind: "streamed" } });
  assert.equal(r.status, 200);
  const chunks = sseData(r.text);
  assert.equal(chunks.at(-1), "[DONE]");
  const id = (chunks[0] as { id: string }).id;
  const got = await client.chat.completions.retrieve(id);
  assert.equal(got.choices[0].message.content, "Hello");
  assert.equal(got.choices[0].finish_reason, "stop");
  assert.ok(got.usage && got.usage.total_tokens > 0);
  assert.deepEqual(metadataOf(got), { kind: "streamed" });
});

test("list filters by metadata and model, pages with after/limit/order", async () => {
  const tag = `run-${Date.now()}`;
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await client.chat.completions.create({ model: "tiny", messages, store: true, metadata: { tag, i: String(i) } });
    ids.push(c.id);
  }
  const all = await client.chat.completions.list({ metadata: { tag } });
  assert.deepEqual(
    all.data.map((c) => c.id),
    ids,
  );
  const one = await client.chat.completions.list({ metadata: { tag, i: "1" } });
  assert.deepEqual(
    one.data.map((c) => c.id),
    [ids[1]],
  );
  const none = await client.chat.completions.list({ metadata: { tag }, model: "other" });
  assert.equal(none.data.length, 0);
  // A pair under the key "__proto__" filters too (no stored metadata holds it); it was assigned to the
  // filter's prototype, which left the filter without it and listed every completion of the tag.
  const proto = await (await fetch(`${base}/v1/chat/completions?metadata[tag]=${tag}&metadata[__proto__]=x`)).json();
  assert.deepEqual(proto.data, []);
  const page = await client.chat.completions.list({ metadata: { tag }, limit: 2, order: "desc" });
  assert.deepEqual(
    page.data.map((c) => c.id),
    [ids[2], ids[1]],
  );
  assert.equal(page.has_more, true);
  const rest = await client.chat.completions.list({ metadata: { tag }, limit: 2, order: "desc", after: ids[1] });
  assert.deepEqual(
    rest.data.map((c) => c.id),
    [ids[0]],
  );
  // Plain HTTP: the list object's shape.
  const raw = await (await fetch(`${base}/v1/chat/completions?metadata[tag]=${tag}&limit=1`)).json();
  assert.equal(raw.object, "list");
  assert.equal(raw.first_id, ids[0]);
  assert.equal(raw.last_id, ids[0]);
  assert.equal(raw.has_more, true);
});

test("update replaces the metadata; delete removes the completion", async () => {
  const c = await client.chat.completions.create({ model: "tiny", messages, store: true, metadata: { a: "1" } });
  const updated = await client.chat.completions.update(c.id, { metadata: { b: "2" } });
  assert.deepEqual(metadataOf(updated), { b: "2" });
  assert.deepEqual(metadataOf(await client.chat.completions.retrieve(c.id)), { b: "2" });
  const deleted = await client.chat.completions.delete(c.id);
  assert.deepEqual(deleted, { object: "chat.completion.deleted", id: c.id, deleted: true });
  await assert.rejects(client.chat.completions.retrieve(c.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.chat.completions.delete(c.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
});

test("messages lists the request's messages with ids, oldest first", async () => {
  const c = await client.chat.completions.create({ model: "tiny", messages, store: true });
  const page = await client.chat.completions.messages.list(c.id);
  assert.deepEqual(
    page.data.map((m) => [m.id, m.role, m.content]),
    [
      [`${c.id}-0`, "system", "Be brief."],
      [`${c.id}-1`, "user", "hi"],
    ],
  );
  const desc = await client.chat.completions.messages.list(c.id, { order: "desc", limit: 1 });
  assert.deepEqual(
    desc.data.map((m) => m.id),
    [`${c.id}-1`],
  );
  assert.equal(desc.has_more, true);
});

test("messages are listed in OpenAI's stored-message shape: content a string, parts in content_parts", async () => {
  const parts = [
    { type: "text" as const, text: "a" },
    { type: "text" as const, text: "b" },
  ];
  const c = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", name: "bob", content: parts }, { role: "user", content: "hi" }], store: true });
  const page = await client.chat.completions.messages.list(c.id);
  assert.deepEqual(
    page.data.map((m) => [m.content, m.content_parts, (m as { name?: string | null }).name]),
    [
      ["a\nb", parts, "bob"],
      ["hi", null, null],
    ],
  );
});

test("a completion stored for an end user is the application's: retrieved, listed, updated and deleted without naming the user", async () => {
  const c = await client.chat.completions.create({ model: "tiny", messages, store: true, user: "alice", metadata: { who: "alice" } });
  assert.equal((await client.chat.completions.retrieve(c.id)).id, c.id);
  // The old ?user= extension is accepted and changes nothing.
  assert.equal((await client.chat.completions.retrieve(c.id, { query: { user: "bob" } })).id, c.id);
  assert.equal((await client.chat.completions.list({ metadata: { who: "alice" } })).data.length, 1);
  const updated = (await client.chat.completions.update(c.id, { metadata: { who: "still alice" } })) as unknown as { metadata: unknown };
  assert.deepEqual(updated.metadata, { who: "still alice" });
  const deleted = await client.chat.completions.delete(c.id);
  assert.equal(deleted.deleted, true);
  await assert.rejects(client.chat.completions.retrieve(c.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
});

test("metadata limits: 16 pairs accepted; 17 pairs, a 65-character key or a 513-character value → 400 naming metadata", async () => {
  const pairs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
  const c = await client.chat.completions.create({ model: "tiny", messages, store: true, metadata: pairs(16) });
  assert.equal(Object.keys(metadataOf(await client.chat.completions.retrieve(c.id)) ?? {}).length, 16);
  for (const metadata of [pairs(17), { ["k".repeat(65)]: "v" }, { k: "v".repeat(513) }]) {
    const r = await post("/v1/chat/completions", { model: "tiny", messages, store: true, metadata });
    assert.equal(r.status, 400, r.text);
    assert.match(JSON.parse(r.text).error.param, /^metadata/);
  }
  const u = await fetch(`${base}/v1/chat/completions/${c.id}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ metadata: pairs(17) }),
  });
  assert.equal(u.status, 400);
});

test("a bad list cursor or limit → 400 naming the field", async () => {
  const r = await fetch(`${base}/v1/chat/completions?after=chatcmpl-nope`);
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, "after");
  const l = await fetch(`${base}/v1/chat/completions?limit=101`);
  assert.equal(l.status, 400);
  assert.equal((await l.json()).error.param, "limit");
  const m = await fetch(`${base}/v1/chat/completions/chatcmpl-nope/messages`);
  assert.equal(m.status, 404);
  // A parameter given twice, and a metadata filter that names no key, are refused by name, not
  // read as NaN or dropped (which listed everything).
  const twice = await fetch(`${base}/v1/chat/completions?limit=5&limit=6`);
  assert.equal(twice.status, 400);
  const twiceBody = (await twice.json()).error;
  assert.equal(twiceBody.param, "limit");
  assert.match(twiceBody.message, /given once/);
  // A key the list does not read is named too (a misspelt limit listed 20).
  for (const [query, param] of [["limt=5", "limt"], ["order=asc&sort=desc", "sort"]]) {
    const u = await fetch(`${base}/v1/chat/completions?${query}`);
    assert.equal(u.status, 400, query);
    assert.equal((await u.json()).error.param, param, query);
  }
  const updated = await fetch(`${base}/v1/chat/completions/chatcmpl-nope`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ metadata: { a: "b" }, metdata: { a: "b" } }) });
  assert.equal(updated.status, 400);
  assert.equal((await updated.json()).error.param, "metdata");
  for (const filter of ["metadata=notbracket", "metadata[]=x"]) {
    const f = await fetch(`${base}/v1/chat/completions?${filter}`);
    assert.equal(f.status, 400, filter);
    assert.match((await f.json()).error.message, /metadata\[key\]=value/, filter);
  }
});

test("a completion the store cannot keep (a full disk) is a 503 store_unavailable, streamed or not, in each dialect's envelope; kept again once there is room", async () => {
  const free = await fillStore(s.store);
  try {
    // Not streamed: nothing was sent yet, so the request fails rather than answering 200 with a
    // completion that GET would never find.
    const plain = await post("/v1/chat/completions", { model: "tiny", messages, store: true });
    assert.equal(plain.status, 503, plain.text);
    const error = JSON.parse(plain.text).error;
    assert.equal(error.code, "store_unavailable");
    assert.match(error.message, /store/);
    assert.match(error.message, /full/);
    const raw = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", messages, store: true }) });
    assert.equal(raw.status, 503);
    assert.ok(Number(raw.headers.get("retry-after")) >= 1);
    await raw.text();
    // Streamed: the text went out, but no finish chunk says the answer is complete; the stream ends
    // with OpenAI's error event (and [DONE]) instead.
    const streamed = await post("/v1/chat/completions", { model: "tiny", messages, store: true, stream: true, stream_options: { include_usage: true } });
    assert.equal(streamed.status, 200);
    const chunks = sseData(streamed.text);
    const failure = chunks.find((c) => typeof c === "object" && c !== null && "error" in c) as { error: { code: string } } | undefined;
    assert.equal(failure?.error.code, "store_unavailable", streamed.text);
    assert.ok(!/"finish_reason":"stop"/.test(streamed.text), streamed.text);
    const id = (chunks[0] as { id: string }).id;
    assert.equal((await fetch(`${base}/v1/chat/completions/${id}`)).status, 404);
    // Konan's envelope (a completion with metadata is stored there).
    const konan = await post("/v3/chat/completions", { model: "tiny", messages, metadata: { k: "v" } });
    assert.equal(konan.status, 503, konan.text);
    assert.match(konan.text, /store_unavailable/);
    // Not storing is not refused.
    assert.equal((await post("/v1/chat/completions", { model: "tiny", messages })).status, 200);
  } finally {
    free();
  }
  const kept = await client.chat.completions.create({ model: "tiny", messages, store: true });
  assert.equal((await client.chat.completions.retrieve(kept.id)).id, kept.id);
});
