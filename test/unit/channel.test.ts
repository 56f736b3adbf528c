import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Channel } from "../../src/core/channel.ts";
import { BUFFERED_BYTES, eventWeight } from "../../src/core/event-weight.ts";

// The queue between a request's choices and its renderer: each take is O(1), and a producer that
// waits for `room` is held while the reader lags, released once it catches up or leaves.

test("a long backlog is read in linear time (taking items does not copy the rest)", async () => {
  // Reading 4 times as many items takes about 4 times as long; with shift() on the array it took
  // about 16 times (200,000 items: 2 s), which is what held the thread when an upstream sent a
  // chunk of 100,000 tool calls. A ratio, so that a slow machine does not fail it.
  const read = async (n: number) => {
    const ch = new Channel<number>();
    for (let i = 0; i < n; i++) ch.push(i);
    ch.close();
    const started = performance.now();
    let count = 0;
    let ordered = true;
    for await (const i of ch) {
      if (i !== count) ordered = false;
      count++;
    }
    assert.equal(count, n);
    assert.ok(ordered);
    return performance.now() - started;
  };
  // The best of three each: on a loaded machine a single run can take a pause the other did not.
  const best = async (n: number) => Math.min(await read(n), await read(n), await read(n));
  await read(10_000);
  const small = await best(50_000);
  const large = await best(200_000);
  assert.ok(large < small * 8 + 100, `50,000 items: ${small.toFixed(0)} ms; 200,000: ${large.toFixed(0)} ms`);
});

test("a producer waiting for room is held while the reader lags, and let go at half the limit", async () => {
  const ch = new Channel<number>(10);
  const signal = new AbortController().signal;
  for (let i = 0; i < 10; i++) ch.push(i);
  assert.equal(ch.full, true);
  let released = false;
  const waiting = ch.room(signal).then(() => (released = true));
  const reader = ch[Symbol.asyncIterator]();
  for (let i = 0; i < 5; i++) await reader.next();
  await new Promise((r) => setImmediate(r));
  assert.equal(released, false, "still 5 buffered: not below half");
  await reader.next();
  await waiting;
  assert.equal(released, true);
});

test("a reader that leaves, a close or an abort releases every waiting producer; pushes after a reader left are dropped", async () => {
  for (const how of ["leave", "close", "abort"] as const) {
    const ch = new Channel<number>(2);
    const abort = new AbortController();
    ch.push(1);
    ch.push(2);
    const reader = ch[Symbol.asyncIterator]();
    await reader.next();
    ch.push(3);
    const waiting = ch.room(abort.signal);
    if (how === "leave") await reader.return!(undefined);
    else if (how === "close") ch.close();
    else abort.abort();
    await waiting;
    if (how === "leave") {
      ch.push(4);
      assert.equal(ch.size, 0);
      assert.equal(ch.full, false);
    }
  }
});

test("with a weight, a producer is held once the buffered weight reaches its limit, and let go below half of it", async () => {
  // Few items, but heavy ones (an event with 20 top logprobs per token): the item limit alone
  // would let them pile up.
  const ch = new Channel<string>(1000, 100, (s) => s.length);
  const signal = new AbortController().signal;
  ch.push("a".repeat(40));
  ch.push("b".repeat(40));
  assert.equal(ch.full, false);
  ch.push("c".repeat(30));
  assert.equal(ch.bytes, 110);
  assert.equal(ch.full, true, "3 items of 1000, but 110 of 100 bytes");
  let released = false;
  const waiting = ch.room(signal).then(() => (released = true));
  const reader = ch[Symbol.asyncIterator]();
  await reader.next();
  await new Promise((r) => setImmediate(r));
  assert.equal(released, false, "70 bytes left: not below half");
  await reader.next();
  await waiting;
  assert.equal(ch.bytes, 30);
  await reader.return!(undefined);
  assert.equal(ch.bytes, 0, "a reader that leaves drops what was buffered");
  assert.equal(ch.finished, true);
});

test("an event's weight grows with its top logprobs: a token with 20 alternatives weighs as much as several plain deltas", () => {
  const entry = (token: string) => ({ token, bytes: [...Buffer.from(token)], logprob: -1 });
  const plain = eventWeight({ type: "text", choice: 0, text: "hello" });
  const heavy = eventWeight({
    type: "text",
    choice: 0,
    text: "hello",
    logprobs: [{ ...entry("hello"), top: Array.from({ length: 20 }, (_, i) => entry(`t${i}`)) }],
  });
  assert.ok(plain >= 100 && plain < 400, `plain: ${plain}`);
  assert.ok(heavy > 5 * plain, `with 20 top logprobs: ${heavy}`);
  // The bound holds hundreds of such events, not the thousands a long answer has.
  assert.ok(BUFFERED_BYTES / heavy > 300 && BUFFERED_BYTES / heavy < 2000);
});
