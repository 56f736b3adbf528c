import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { ApiError } from "../../src/core/errors.ts";
import { Scheduler } from "../../src/core/scheduler.ts";

test("grants free slots immediately and queues the rest in FIFO order", async () => {
  const s = new Scheduler(2, 10);
  const signal = new AbortController().signal;
  s.admit(4);
  const a = await s.acquire(signal);
  const b = await s.acquire(signal);
  assert.notEqual(a.slot, b.slot);
  const order: string[] = [];
  const c = s.acquire(signal).then((l) => (order.push("c"), l));
  const d = s.acquire(signal).then((l) => (order.push("d"), l));
  assert.equal(s.queued, 2);
  a.release();
  const lc = await c;
  assert.equal(lc.slot, a.slot);
  b.release();
  await d;
  assert.deepEqual(order, ["c", "d"]);
});

test("refuses with 429 and Retry-After once the queue bound would be passed", () => {
  const s = new Scheduler(1, 2);
  s.admit(2); // one runs, one waits
  s.admit(1); // it waits too: the queue is full
  assert.throws(
    () => s.admit(1),
    (e: unknown) => e instanceof ApiError && e.status === 429 && e.headers["retry-after"] === "1",
  );
});

test("a whole request is admitted or refused at once, and one request may fill the slots and half the queue, not more", () => {
  const s = new Scheduler(2, 4);
  assert.throws(() => s.admit(5), (e: unknown) => e instanceof ApiError && e.status === 400);
  s.admit(4);
  // The other half of the queue is left for other requests.
  s.admit(2);
  assert.throws(() => s.admit(1), (e: unknown) => e instanceof ApiError && e.status === 429);
});

test("an aborted waiter leaves the queue and never takes a slot", async () => {
  const s = new Scheduler(1, 5);
  s.admit(2);
  const first = await s.acquire(new AbortController().signal);
  const ctl = new AbortController();
  const waiting = s.acquire(ctl.signal);
  assert.equal(s.queued, 1);
  ctl.abort(new Error("gone"));
  await assert.rejects(waiting, /gone/);
  assert.equal(s.queued, 0);
  first.release();
  assert.equal(s.busy, 0);
});

test("releasing twice does not free a slot twice", async () => {
  const s = new Scheduler(1, 0);
  s.admit(1);
  const l = await s.acquire(new AbortController().signal);
  l.release();
  l.release();
  assert.equal(s.busy, 0);
  s.admit(1);
  await s.acquire(new AbortController().signal);
  assert.equal(s.busy, 1);
});

test("waiting keys take turns: one key's burst does not hold another key's single job behind it", async () => {
  const s = new Scheduler(1, 100);
  const signal = new AbortController().signal;
  s.admit(1);
  const running = await s.acquire(signal, undefined, "burst");
  const order: string[] = [];
  const waits: Array<Promise<{ release: () => void }>> = [];
  for (let i = 0; i < 50; i++) {
    s.admit(1);
    waits.push(s.acquire(signal, undefined, "burst").then((l) => (order.push(`burst${i}`), l)));
  }
  s.admit(1);
  waits.push(s.acquire(signal, undefined, "single").then((l) => (order.push("single"), l)));
  assert.equal(s.queued, 51);
  running.release();
  // Each granted job releases at once; the single job is served second, not fifty-first.
  for (let served = 0; served < 51; served++) {
    await new Promise((r) => setImmediate(r));
    const granted = await Promise.race(waits.map((w, i) => w.then((l) => ({ l, i }))));
    waits.splice(granted.i, 1);
    granted.l.release();
  }
  assert.deepEqual(order.slice(0, 3), ["burst0", "single", "burst1"]);
  assert.equal(order.length, 51);
  assert.equal(s.queued, 0);
});

test("a waiting job that gives up leaves its key's turn when it was the last", async () => {
  const s = new Scheduler(1, 10);
  s.admit(3);
  const first = await s.acquire(new AbortController().signal, undefined, "a");
  const gone = new AbortController();
  const leaving = s.acquire(gone.signal, undefined, "b").catch((e) => e);
  const staying = s.acquire(new AbortController().signal, undefined, "c");
  gone.abort(new Error("left"));
  assert.match(String(await leaving), /left/);
  first.release();
  const next = await staying;
  assert.equal(next.slot, first.slot);
  assert.equal(s.queued, 0);
});

test("within one key, requests take turns: one request's many choices do not queue ahead of the next request", async () => {
  const s = new Scheduler(1, 16);
  const never = new AbortController().signal;
  const granted: string[] = [];
  const first = await s.acquire(never, undefined, "", undefined, "big");
  // The big request's other three choices wait, then a small request arrives.
  const big = [1, 2, 3].map((i) => s.acquire(never, undefined, "", undefined, "big").then((g) => (granted.push(`big${i}`), g)));
  const small = s.acquire(never, undefined, "", undefined, "small").then((g) => (granted.push("small"), g));
  first.release();
  (await big[0]).release();
  (await small).release();
  for (const b of big.slice(1)) (await b).release();
  // The small request had its turn after one of the big one's, not after all three.
  assert.deepEqual(granted, ["big1", "small", "big2", "big3"]);
});

test("a job whose request already holds a slot waits for its siblings without the queue timeout; other requests keep it", async (t) => {
  const s = new Scheduler(1, 8, 60);
  const never = new AbortController().signal;
  // The queue's timers do not hold the process open; this does, while the test waits on them.
  const keep = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keep));
  const first = await s.acquire(never, undefined, "k", undefined, "req-1");
  // Its second choice, and another request's job, both wait for the one slot.
  const sibling = s.acquire(never, undefined, "k", undefined, "req-1");
  const other = s.acquire(never, undefined, "k", undefined, "req-2");
  await assert.rejects(other, (err: unknown) => err instanceof ApiError && err.code === "queue_timeout");
  await new Promise((r) => setTimeout(r, 100));
  first.release();
  const second = await sibling;
  assert.equal(second.slot, 0);
  second.release();
});

test("siblings queued before their request got its first slot stop timing out once it has one", async (t) => {
  const s = new Scheduler(1, 8, 80);
  const never = new AbortController().signal;
  const keep = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keep));
  const hog = await s.acquire(never, undefined, "a", undefined, "hog");
  const one = s.acquire(never, undefined, "b", undefined, "req");
  const two = s.acquire(never, undefined, "b", undefined, "req");
  await new Promise((r) => setTimeout(r, 40));
  hog.release();
  const a = await one;
  // Past the timeout since `two` queued: it was still waiting, behind its own sibling.
  await new Promise((r) => setTimeout(r, 100));
  a.release();
  const b = await two;
  b.release();
  assert.equal(s.busy, 0);
  // The request's jobs are all done: a new job of it waits with the timeout again.
  const hog2 = await s.acquire(never, undefined, "a", undefined, "hog");
  await assert.rejects(s.acquire(never, undefined, "b", undefined, "req"), (err: unknown) => err instanceof ApiError && err.code === "queue_timeout");
  hog2.release();
});

test("resize: new slots go to waiting jobs in their turn; past a smaller count, released slots are not handed out again", async () => {
  const s = new Scheduler(2, 10);
  const signal = new AbortController().signal;
  s.admit(5);
  const a = await s.acquire(signal);
  const b = await s.acquire(signal);
  const order: string[] = [];
  const c = s.acquire(signal, undefined, "x").then((l) => (order.push("c"), l));
  const d = s.acquire(signal, undefined, "y").then((l) => (order.push("d"), l));
  const e = s.acquire(signal, undefined, "x").then((l) => (order.push("e"), l));
  s.resize(4);
  const [lc, ld] = await Promise.all([c, d]);
  assert.deepEqual(order, ["c", "d"], "keys take turns for the new slots too");
  assert.equal(s.busy, 4);
  assert.equal(new Set([a.slot, b.slot, lc.slot, ld.slot]).size, 4, "each slot held once");
  // Down to two: the four running finish; e runs only once fewer than two are held.
  s.resize(2, 4);
  a.release();
  b.release();
  await new Promise((res) => setImmediate(res));
  assert.deepEqual(order, ["c", "d"]);
  assert.equal(s.queued, 1);
  lc.release();
  await e;
  assert.deepEqual(order, ["c", "d", "e"]);
  assert.equal(s.busy, 2);
  // One request's cap follows the count it runs when all is well, not the shrunk one.
  assert.equal(s.capacity, 4 + 5);
});

test("tryAcquire takes a free slot only when nobody waits, and counts as one of the admitted jobs", async () => {
  const s = new Scheduler(1, 4);
  const signal = new AbortController().signal;
  s.admit(1);
  const first = s.tryAcquire("k", "g");
  assert.ok(first);
  s.admit(1);
  assert.equal(s.tryAcquire("k", "h"), undefined, "no free slot");
  const waiting = s.acquire(signal, undefined, "k", undefined, "h");
  s.admit(1);
  first!.release();
  assert.equal(s.tryAcquire("k", "i"), undefined, "the freed slot went to the job that waited");
  (await waiting).release();
  assert.ok(s.tryAcquire("k", "i"));
  // Three admitted, three taken: nothing is left reserved, so four more may wait (the queue's
  // bound, with the one slot held), and not five.
  s.admit(2);
  s.admit(2);
  assert.throws(() => s.admit(1), (e: unknown) => e instanceof ApiError && e.status === 429);
});
