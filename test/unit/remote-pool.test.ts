import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { loadConfig } from "../../src/config/load.ts";
import { modelSpecs, upstreamSpecs } from "../../src/config/models.ts";
import { MAX_EJECT_MS, NoReplica, ReplicaPool, ReplicaWaitTimeout } from "../../src/engines/remote/pool.ts";

const opts = { balance: "prefix" as const, slots: 8, ejectAfter: 2, ejectMs: 50, loadFactor: 1.25 };
const urls = (n: number) => Array.from({ length: n }, (_, i) => new URL(`http://10.0.0.${i + 1}:8000/`));
const keys = Array.from({ length: 2000 }, (_, i) => `ns\u0000chat\u0000conversation ${i}`);

test("prefix balancing: a key always maps to one replica, keys spread, and adding a replica moves about 1/n of them", () => {
  const four = new ReplicaPool(urls(4), opts);
  const five = new ReplicaPool(urls(5), opts);
  const before = keys.map((k) => four.choose(k)!.name);
  assert.deepEqual(keys.map((k) => four.choose(k)!.name), before, "stable");
  const counts = new Map<string, number>();
  for (const name of before) counts.set(name, (counts.get(name) ?? 0) + 1);
  assert.equal(counts.size, 4);
  for (const c of counts.values()) assert.ok(c > 2000 / 4 / 2, `uneven spread ${[...counts.values()]}`);
  const after = keys.map((k) => five.choose(k)!.name);
  const moved = after.filter((name, i) => name !== before[i]).length;
  // Ideal is 1/5 (every moved key goes to the new replica); modulo hashing would move about 4/5.
  assert.ok(moved < 2000 * 0.3, `${moved} keys moved`);
  assert.ok(after.every((name, i) => name === before[i] || name === five.replicas[4].name), "keys move only to the new replica");
});

test("bounded load: a hot key spills to other replicas instead of piling onto one", async () => {
  const pool = new ReplicaPool(urls(3), opts);
  const leases = [];
  for (let i = 0; i < 9; i++) leases.push(await pool.acquire("hot", new Set(), new AbortController().signal));
  const load = pool.replicas.map((r) => r.outstanding);
  assert.ok(Math.max(...load) <= Math.ceil((1.25 * 9) / 3), `load ${load}`);
  for (const l of leases) l.release();
});

test("ejection after consecutive failures, half-open trial, and back; an all-ejected pool refuses at once", async () => {
  const pool = new ReplicaPool(urls(1), { ...opts, ejectAfter: 2, ejectMs: 30 });
  const r = pool.replicas[0];
  const signal = new AbortController().signal;
  for (let i = 0; i < 2; i++) {
    const l = await pool.acquire(undefined, new Set(), signal);
    l.failure();
    l.release();
  }
  assert.equal(r.state, "ejected");
  await assert.rejects(pool.acquire(undefined, new Set(), signal), /no replica/);
  await new Promise((res) => setTimeout(res, 40));
  const trial = await pool.acquire(undefined, new Set(), signal);
  assert.equal(r.state, "half-open");
  // Only one trial at a time.
  assert.equal(pool.tryAcquire(undefined, new Set()), undefined);
  trial.success();
  trial.release();
  assert.equal(r.state, "up");
});

test("--upstream NAME=URL[,URL…] from flags, PLINTH_UPSTREAM and config objects; no default model when only upstreams are given", () => {
  const config = loadConfig({ upstream: ["a=http://h1:8000,http://h2:8000/v1", "b=http://h3:9000"], balance: "least" }, {});
  const specs = upstreamSpecs(config);
  assert.deepEqual(
    specs.map((s) => [s.id, (s.source as { urls: string[] }).urls, (s.source as { balance: string }).balance]),
    [
      ["a", ["http://h1:8000", "http://h2:8000/v1"], "least"],
      ["b", ["http://h3:9000"], "least"],
    ],
  );
  assert.deepEqual(modelSpecs(config), []);
  // No slot count configured: each replica's own is asked for, 64 until it answers.
  assert.deepEqual(
    specs.map((s) => [(s.source as { slots: number }).slots, (s.source as { learnSlots: boolean }).learnSlots]),
    [
      [64, true],
      [64, true],
    ],
  );
  assert.equal((upstreamSpecs(loadConfig({ upstream: ["a=http://h1:8000"], "upstream-slots": "5" }, {}))[0].source as { learnSlots: boolean }).learnSlots, false);
  const fromEnv = loadConfig({}, { PLINTH_UPSTREAM: "a=http://h1:8000,http://h2:8000;b=http://h3:9000" });
  assert.deepEqual(upstreamSpecs(fromEnv).map((s) => s.id), ["a", "b"]);
  const objects = loadConfig({ upstream: [{ name: "c", url: ["http://h4:1"], model: "m", "api-key": "k", slots: 3, "first-token-timeout": 2, unsupported: ["logitBias"] }] }, {});
  const c = upstreamSpecs(objects)[0].source as Record<string, unknown>;
  assert.equal(c.model, "m");
  assert.equal(c.apiKey, "k");
  assert.equal(c.slots, 3);
  assert.equal(c.learnSlots, false, "configured slots are not asked of the replica");
  assert.equal(c.firstTokenTimeoutMs, 2000);
  assert.deepEqual(c.unsupported, ["logitBias"]);
  assert.throws(() => loadConfig({ upstream: ["no-url-here"] }, {}), /NAME=URL/);
  assert.throws(() => upstreamSpecs(loadConfig({ upstream: ["a=ftp://x"] }, {})), /not an http/);
});

test("a request waits for a full replica's slot, moves to whichever frees first, and gives up after the wait limit", async () => {
  const pool = new ReplicaPool(urls(2), { ...opts, slots: 1 });
  const signal = new AbortController().signal;
  const first = await pool.acquire("k", new Set(), signal);
  const second = await pool.acquire("k", new Set(), signal);
  assert.notEqual(first.replica, second.replica, "the hot key spills to the free replica");
  // Both full: the next waits, counted as waiting, and takes the slot the second gives back.
  const third = pool.acquire("k", new Set(), signal, undefined, 5_000);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(pool.waitingCount, 1);
  second.release();
  assert.equal((await third).replica, second.replica);
  assert.equal(pool.waitingCount, 0);
  // Past its limit a waiter gives up (the engine answers the queue timeout's 503).
  const started = Date.now();
  await assert.rejects(pool.acquire("k", new Set(), signal, undefined, 120), ReplicaWaitTimeout);
  assert.ok(Date.now() - started < 1_000, `${Date.now() - started} ms`);
  assert.equal(pool.waitingCount, 0);
  // A replica that reports more room than it was given wakes the waiters at once.
  const fourth = pool.acquire("k", new Set(), signal, undefined, 5_000);
  await new Promise((r) => setTimeout(r, 20));
  pool.setSlots(pool.replicas[0], 2);
  assert.equal((await fourth).replica, pool.replicas[0]);
});

test("waiters are served in arrival order, and a newcomer does not take a freed slot ahead of them", async () => {
  const pool = new ReplicaPool(urls(1), { ...opts, slots: 1 });
  const signal = new AbortController().signal;
  let holder = await pool.acquire(undefined, new Set(), signal);
  const order: number[] = [];
  const waiting = Array.from({ length: 5 }, (_, i) =>
    pool.acquire(undefined, new Set(), signal, undefined, 5_000).then((lease) => {
      order.push(i);
      return lease;
    }),
  );
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(pool.waitingCount, 5);
  assert.equal(pool.tryAcquire(undefined, new Set()), undefined, "no jumping the queue");
  for (let i = 0; i < 5; i++) {
    holder.release();
    holder = await waiting[i];
  }
  holder.release();
  assert.deepEqual(order, [0, 1, 2, 3, 4]);
  // A waiter that can use only a replica it has not tried is passed over for one that can.
  const two = new ReplicaPool(urls(2), { ...opts, slots: 1 });
  const [a, b] = two.replicas;
  const la = await two.acquire(undefined, new Set(), signal, a);
  const lb = await two.acquire(undefined, new Set(), signal, b);
  const first = two.acquire(undefined, new Set([a]), signal, undefined, 5_000);
  const second = two.acquire(undefined, new Set(), signal, undefined, 5_000);
  la.release();
  assert.equal((await second).replica, a, "the second takes a: the first may not");
  lb.release();
  assert.equal((await first).replica, b);
});

test("only the half-open trial re-admits a replica: a request that was already running when it was ejected does not, nor does its end let a second trial in", async () => {
  const pool = new ReplicaPool(urls(1), opts);
  const [r] = pool.replicas;
  const signal = new AbortController().signal;
  const running = await pool.acquire(undefined, new Set(), signal);
  for (let i = 0; i < 2; i++) {
    const l = await pool.acquire(undefined, new Set(), signal);
    l.failure();
    l.release();
  }
  assert.equal(r.state, "ejected");
  running.success();
  assert.equal(r.state, "ejected", "a request from before the ejection says nothing about the replica now");
  await new Promise((res) => setTimeout(res, opts.ejectMs + 10));
  const trial = pool.tryAcquire(undefined, new Set());
  assert.ok(trial, "due for its trial");
  assert.equal(r.state, "half-open");
  running.release();
  assert.equal(pool.tryAcquire(undefined, new Set()), undefined, "one trial at a time");
  trial.success();
  trial.release();
  assert.equal(r.state, "up");
});

/** Fails `r` through leases until it is ejected (it must be up or half-open, with a free slot). */
async function eject(pool: ReplicaPool, r = pool.replicas[0], cause?: { retryAfter?: number }): Promise<void> {
  const signal = new AbortController().signal;
  for (let i = 0; i < 10 && r.state !== "ejected"; i++) {
    const l = await pool.acquire(undefined, new Set(), signal, r);
    l.failure(cause);
    l.release();
  }
  assert.equal(r.state, "ejected");
}

test("what the replicas run at once follows their state: an up replica its slots, one on its trial one, an ejected one none; all ejected, all of them", async () => {
  const pool = new ReplicaPool(urls(3), { ...opts, slots: 4, ejectMs: 60_000 });
  const [a, b, c] = pool.replicas;
  let told = 0;
  pool.onChange(() => told++);
  assert.equal(pool.runningSlots, 12);
  await eject(pool, a);
  assert.ok(told >= 1, "an ejection is told");
  assert.equal(pool.runningSlots, 8);
  assert.equal(pool.totalSlots, 12, "the total stays what the replicas run when up");
  // A passing check: half-open (one trial), then back.
  pool.recordHealthy(a);
  assert.equal(a.state, "half-open");
  assert.equal(pool.runningSlots, 9);
  pool.recordHealthy(a);
  assert.equal(a.state, "up");
  assert.equal(pool.runningSlots, 12);
  // Every replica out: requests should meet the pool (and its "no replica") at once, not queue.
  for (const r of [a, b, c]) await eject(pool, r);
  assert.equal(pool.runningSlots, 12);
  const before = told;
  pool.setSlots(b, 2);
  assert.equal(pool.totalSlots, 10);
  assert.ok(told > before, "a learned count is told");
});

test("a passing health check takes an ejected replica back (half-open) at once, whatever its back-off; not before its own Retry-After", async () => {
  const pool = new ReplicaPool(urls(1), { ...opts, ejectMs: 30_000 });
  const [r] = pool.replicas;
  await eject(pool);
  assert.ok(r.retryAt - Date.now() > 20_000);
  pool.recordHealthy(r);
  assert.equal(r.state, "half-open", "before its ejection time is over");
  // Its trial is the request that decides.
  const trial = await pool.acquire(undefined, new Set(), new AbortController().signal);
  trial.success();
  trial.release();
  assert.equal(r.state, "up");
  // Ejected by 429s with Retry-After: 5 (seconds): a passing /health does not bring it back early.
  await eject(pool, r, { retryAfter: 5 });
  pool.recordHealthy(r);
  assert.equal(r.state, "ejected");
  assert.ok(r.notBefore - Date.now() > 4_000);
});

test("the back-off of failed trials is capped at MAX_EJECT_MS (it doubled 15 times: 45 h at --eject-time 5)", async () => {
  const pool = new ReplicaPool(urls(1), { ...opts, ejectMs: 5_000 });
  const [r] = pool.replicas;
  await eject(pool);
  for (let i = 0; i < 20; i++) {
    // Its trial fails each time.
    r.state = "half-open";
    pool.recordFailure(r);
  }
  assert.equal(r.state, "ejected");
  const left = r.retryAt - Date.now();
  assert.ok(left <= MAX_EJECT_MS && left > MAX_EJECT_MS - 1_000, `${left} ms`);
  // An eject time longer than the cap is kept as given.
  const long = new ReplicaPool(urls(1), { ...opts, ejectMs: 120_000 });
  await eject(long);
  long.replicas[0].state = "half-open";
  long.recordFailure(long.replicas[0]);
  assert.ok(long.replicas[0].retryAt - Date.now() > 119_000);
});

test("no replica left: the answer says when one is due back (or may pass a health check) and what ejected it", async () => {
  const pool = new ReplicaPool(urls(1), { ...opts, ejectMs: 8_000 });
  const cause = { retryAfter: 3 };
  await eject(pool, pool.replicas[0], cause);
  const err = await pool.acquire(undefined, new Set(), new AbortController().signal).catch((e: unknown) => e);
  assert.ok(err instanceof NoReplica);
  assert.equal(err.ejectedBy, cause);
  assert.ok(err.retryInMs! > 7_000 && err.retryInMs! <= 8_000, `${err.retryInMs}`);
  // With active checks every 1 s, one may take it back sooner, though not before its Retry-After.
  const checked = new ReplicaPool(urls(1), { ...opts, ejectMs: 8_000, healthMs: 1_000 });
  await eject(checked, checked.replicas[0], cause);
  const soon = checked.noReplica();
  assert.ok(soon.retryInMs! > 2_000 && soon.retryInMs! <= 3_000, `${soon.retryInMs}`);
});
