import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { clientError } from "../helpers/requests.ts";
import { useTestServer } from "../helpers/server.ts";

const s = useTestServer();

/** Fields both the openai client and the typed HTTP helper accept. */
const base = (extra: { stop?: string | string[]; max_tokens?: number } = {}) => ({
  model: "tiny",
  messages: [{ role: "user" as const, content: "Write something long" }],
  max_tokens: 48,
  temperature: 0,
  ...extra,
});

test("stop strings end the answer and never appear in it, also when they span tokens and in streams", async () => {
  const free = await s.client.chat.completions.create(base());
  const text = free.choices[0].message.content ?? "";
  assert.ok(text.length >= 20, `fixture produced too little text: ${JSON.stringify(text)}`);

  // A stop string taken from the middle of the greedy answer that is longer than one token.
  const start = Math.floor(text.length / 2);
  const stop = text.slice(start, start + 5);
  const expected = text.slice(0, text.indexOf(stop));

  const stopped = await s.client.chat.completions.create(base({ stop }));
  assert.equal(stopped.choices[0].message.content, expected);
  assert.equal(stopped.choices[0].finish_reason, "stop");
  assert.ok(!stopped.choices[0].message.content?.includes(stop));

  const streamed = await s.http.chatStream(base({ stop: [stop, "\u0000never"] }));
  assert.equal(streamed.content, expected);
  assert.equal(streamed.finishReason, "stop");
  // No streamed piece may carry any prefix of the stop string past the cut.
  assert.ok(!streamed.content.includes(stop));
});

test("usage counts the tokens generated up to the stop, not the whole budget", async () => {
  const free = await s.client.chat.completions.create(base());
  const text = free.choices[0].message.content ?? "";
  const stop = text.slice(3, 6);
  const stopped = await s.client.chat.completions.create(base({ stop }));
  assert.ok((stopped.usage?.completion_tokens ?? 0) < (free.usage?.completion_tokens ?? 0));
});

test("sixteen stop strings are accepted; seventeen are refused", async () => {
  const sixteen = Array.from({ length: 16 }, (_, i) => `zz${i}zz`);
  const ok = await s.client.chat.completions.create(base({ stop: sixteen, max_tokens: 4 }));
  assert.equal(ok.choices.length, 1);
  await assert.rejects(
    s.client.chat.completions.create(base({ stop: [...sixteen, "x"], max_tokens: 4 })),
    clientError(400, "stop"),
  );
});

test("an empty stop string is no stop string: the answer is the one given without it, not empty", async () => {
  const free = await s.client.chat.completions.create(base());
  for (const stop of ["", ["", "\u0000never"]]) {
    const r = await s.client.chat.completions.create(base({ stop }));
    assert.equal(r.choices[0].message.content, free.choices[0].message.content, JSON.stringify(stop));
    assert.equal(r.choices[0].finish_reason, free.choices[0].finish_reason);
  }
});
