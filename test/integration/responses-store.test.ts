import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { requestJson, useTestServer } from "../helpers/server.ts";

// The Responses API's stored objects over real HTTP on the tiny fixture: conversations and their
// items as the reference shapes them, and what a stored response looks like while it runs.

const s = useTestServer();

const call = (method: string, path: string, body?: unknown) => requestJson(`${s.url}/v1${path}`, method, body);

test("a conversation's metadata set to null is cleared, as the reference and the SDK allow", async () => {
  const conv = await s.client.conversations.create({ metadata: { who: "test" } });
  const cleared = await s.client.conversations.update(conv.id, { metadata: null });
  assert.deepEqual(cleared.metadata, {});
  assert.deepEqual((await s.client.conversations.retrieve(conv.id)).metadata, {});
  // Left out, it is still refused: the body's one field is required.
  const missing = await call("POST", `/conversations/${conv.id}`, {});
  assert.equal(missing.status, 400);
  assert.equal(missing.json.error.param, "metadata");
});

test("an item_reference added to a conversation is stored as the item it names; one that names nothing is a 400 naming it", async () => {
  const earlier = await s.client.responses.create({ model: "tiny", input: "elsewhere", max_output_tokens: 2 });
  const [said] = earlier.output as any[];
  // On creation and added later, as the audit's client did.
  const conv = await s.client.conversations.create({ items: [{ type: "item_reference", id: said.id }] });
  await s.client.conversations.items.create(conv.id, { items: [{ type: "message", role: "user", content: "hi" }] });
  const earlierInput = (await s.client.responses.inputItems.list(earlier.id)).data[0];
  await s.client.conversations.items.create(conv.id, { items: [{ type: "item_reference", id: earlierInput.id }] });
  for (const [path, items, param] of [
    [`/conversations/${conv.id}/items`, [{ type: "item_reference", id: "msg_nothing" }], "items[0].id"],
    ["/conversations", [{ role: "user", content: "x" }, { type: "item_reference", id: "msg_nothing" }], "items[1].id"],
  ] as const) {
    const refused = await call("POST", path, { items });
    assert.equal(refused.status, 400, path);
    assert.equal(refused.json.error.param, param, path);
  }

  // The stored items, not the references: listed whole, with their own ids.
  const items = (await s.client.conversations.items.list(conv.id, { order: "asc" })).data as any[];
  assert.deepEqual(
    items.map((i) => [i.type, i.role, i.id]),
    [
      ["message", "assistant", said.id],
      ["message", "user", items[1].id],
      ["message", "user", earlierInput.id],
    ],
  );
  assert.deepEqual(items[0].content, said.content);
  assert.deepEqual(items[2].content, [{ type: "input_text", text: "elsewhere" }]);
  assert.deepEqual(await s.client.conversations.items.retrieve(said.id, { conversation_id: conv.id }), items[0]);

  // And a turn goes on from them.
  const next = await s.client.responses.create({ model: "tiny", conversation: conv.id, input: "and then", max_output_tokens: 2 });
  assert.ok(next.status === "completed" || next.status === "incomplete", next.status);
});
