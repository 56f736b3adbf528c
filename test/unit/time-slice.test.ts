import assert from "node:assert/strict";
import { test } from "node:test";
import { TimeSlice } from "../../src/engines/remote/time-slice.ts";

/** Holds the thread (no event-loop turn) for `ms`. */
function hold(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

test("a stream that holds the thread past its slice gives the event loop a turn", async () => {
  const slice = new TimeSlice(5);
  TimeSlice.wokeFromLoop();
  let turned = false;
  setImmediate(() => (turned = true));
  await slice.breathe();
  assert.equal(turned, false, "within the slice, breathe resolves without a turn of the loop");
  hold(8);
  await slice.breathe();
  assert.equal(turned, true, "past the slice, the loop ran before breathe resolved");
});

test("the slice counts from the thread's last return from the event loop, shared by every stream", async () => {
  const a = new TimeSlice(5);
  const b = new TimeSlice(5);
  hold(8);
  // A read that waited for its socket: the thread has just been back to the loop.
  TimeSlice.wokeFromLoop();
  let turned = false;
  setImmediate(() => (turned = true));
  await a.breathe();
  await b.breathe();
  assert.equal(turned, false, "a stream started long ago does not wait a turn right after the loop gave it the thread");
  hold(8);
  await b.breathe();
  assert.equal(turned, true);
  // After that turn the slice starts again for every stream.
  turned = false;
  setImmediate(() => (turned = true));
  await a.breathe();
  assert.equal(turned, false);
});
