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
