import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { ChatBody } from "../helpers/requests.ts";
import { NO_EOG, useTestServer, waitFor } from "../helpers/server.ts";

// One sequence and a one-place queue make the limits easy to reach.
const s = useTestServer({ parallel: "1", "max-queue": "1" });

const longRequest: ChatBody = {
  model: "tiny",
  messages: [{ role: "user", content: "Go on forever" }],
  max_tokens: 3000,
  stream: true,
  logit_bias: NO_EOG,
};
const scheduler = () => s.registry.resolve("tiny").scheduler;

/** Starts a streaming request and resolves once its first bytes arrived (it holds the sequence). */
async function startStream(controller: AbortController) {
  const res = await s.http.send("/v1/chat/completions", longRequest, controller.signal);
  const reader = res.body!.getReader();
  await reader.read();
  return reader;
}

test("a client that disconnects stops its generation and frees its sequence", async () => {
  const ctl = new AbortController();
  await startStream(ctl);
  await waitFor(() => scheduler().busy === 1);
  ctl.abort();
  await waitFor(() => scheduler().busy === 0, 5000);

  // The freed sequence serves the next request right away.
  const r = await s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
  assert.equal(r.choices.length, 1);
});

test("past --max-queue a request gets 429 with Retry-After; waiting requests still complete", async () => {
  const running = new AbortController();
  await startStream(running);
  await waitFor(() => scheduler().busy === 1);
  // This one waits in the queue (a non-streaming request that will be served once the first ends).
  const queued = s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "queued" }],
    max_tokens: 2,
  });
  await waitFor(() => scheduler().queued === 1);

  const refused = await s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "too many" }],
    max_tokens: 2,
  });
  assert.equal(refused.status, 429);
  assert.ok(Number(refused.headers.get("retry-after")) >= 1);
  assert.equal(refused.error?.type, "rate_limit_error");
  assert.equal(refused.error?.code, "rate_limit_exceeded");

  running.abort();
  const done = await queued;
  assert.equal(done.status, 200, "an accepted request is never lost");
  assert.equal(done.json.choices.length, 1);
  await waitFor(() => scheduler().busy === 0 && scheduler().queued === 0);
});

test("a waiting client that gives up leaves the queue", async () => {
  const running = new AbortController();
  await startStream(running);
  await waitFor(() => scheduler().busy === 1);
  const waiting = new AbortController();
  const pending = s.http.send("/v1/chat/completions", longRequest, waiting.signal).catch(() => undefined);
  await waitFor(() => scheduler().queued === 1);
  waiting.abort();
  await pending;
  await waitFor(() => scheduler().queued === 0);
  running.abort();
  await waitFor(() => scheduler().busy === 0);
});
