import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { SchemaLimitError, UnsupportedSchemaError } from "../../src/grammar/json-schema-to-gbnf.ts";
import { SchemaCompiler } from "../../src/grammar/schema-compiler.ts";

// The worker that compiles schemas off the event loop: results, refusals, the time limits, and the
// event loop staying free while a costly schema compiles.

const compiler = new SchemaCompiler(20_000);
after(() => compiler.dispose());

/** A legal but costly schema (about 200 ms to compile here): optional properties under a maxProperties bound. */
const costly = (n = 200) => ({
  type: "object",
  properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }])),
  maxProperties: Math.floor(n / 2),
});

test("compiles in the worker, refuses what it cannot enforce, and caches", async () => {
  const out = await compiler.compile({ type: "object", properties: { a: { type: "string" } }, required: ["a"] });
  assert.match(out.gbnf, /root ::=/);
  await assert.rejects(compiler.compile({ not: { type: "string" } }), (e: unknown) => e instanceof UnsupportedSchemaError);
  await assert.rejects(compiler.compile({ type: "string", maxLength: 100_000_000 }), (e: unknown) => e instanceof SchemaLimitError);
  // The very object compiled the first time (one from the worker is a new copy), not a time limit
  // that a busy machine can miss.
  const again = await compiler.compile({ type: "object", properties: { a: { type: "string" } }, required: ["a"] });
  assert.equal(again, out, "a schema seen before is not compiled again");
});

test("a schema refused once is refused again at once, not compiled again behind other clients' schemas", async () => {
  const refused = { type: "object", properties: { a: { type: "integer", not: { const: 3 } } } };
  const first = await compiler.compile(refused).catch((e: unknown) => e);
  assert.ok(first instanceof UnsupportedSchemaError, String(first));
  // The worker is busy with a costly schema: a second ask of the refused one does not wait for it.
  const busy = compiler.compile(costly(198)).catch(() => undefined);
  let busyDone = false;
  void busy.then(() => (busyDone = true));
  const second = await compiler.compile(structuredClone(refused)).catch((e: unknown) => e);
  assert.ok(second instanceof UnsupportedSchemaError && !(second instanceof SchemaLimitError), String(second));
  assert.equal(second.message, first.message);
  assert.equal(busyDone, false, "answered before the worker was free");
  await busy;
  const limit = { type: "string", maxLength: 100_000_001 };
  const l1 = await compiler.compile(limit).catch((e: unknown) => e);
  const l2 = await compiler.compile(limit).catch((e: unknown) => e);
  assert.ok(l1 instanceof SchemaLimitError && l2 instanceof SchemaLimitError && l1.message === l2.message, `${l1} / ${l2}`);
  // A refusal for time depends on the machine's load: it is not remembered.
  const hurried = new SchemaCompiler(1);
  try {
    await assert.rejects(hurried.compile(costly(197)), (e: unknown) => e instanceof SchemaLimitError && /longer than 1 ms/.test(e.message));
    assert.equal((hurried as unknown as { refusals: Map<string, unknown> }).refusals.size, 0);
  } finally {
    await hurried.dispose();
  }
});

test("a refusal deep in a schema keeps its whole path, and its message a readable one", async () => {
  // anyOf nested 300 deep: the message repeated "anyOf.0." 256 times (over a kilobyte).
  let deep: unknown = { type: "string" };
  for (let i = 0; i < 300; i++) deep = { anyOf: [deep] };
  await assert.rejects(compiler.compile(deep), (e: unknown) => {
    assert.ok(e instanceof SchemaLimitError);
    assert.equal(e.path, Array.from({ length: 128 }, () => "anyOf.0").join("."));
    assert.ok(e.message.length < 200, e.message);
    assert.match(e.message, /^anyOf\.0\.anyOf\.0\.anyOf\.0\.…\(240 more keys\)…\.anyOf\.0(\.anyOf\.0){4}: the schema nests more than 256 levels deep$/);
    assert.equal(e.reason, "the schema nests more than 256 levels deep");
    return true;
  });
});

test("the event loop keeps running while a costly schema compiles", async () => {
  let ticks = 0;
  let worst = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
    ticks++;
  }, 5);
  const t0 = performance.now();
  // Past the default load-cost bound (compileJsonSchema checks that last), so lifted here.
  await compiler.compile(costly(), { limits: { maxLoadCost: Infinity } });
  const took = performance.now() - t0;
  clearInterval(timer);
  assert.ok(ticks > 3, `the loop ticked ${ticks} times during ${Math.round(took)} ms`);
  assert.ok(worst < 200, `the loop waited ${Math.round(worst)} ms at worst`);
});

test("past its deadline a compilation is refused and the next one still works", async () => {
  const hurried = new SchemaCompiler(1);
  try {
    await assert.rejects(hurried.compile(costly(199)), (e: unknown) => e instanceof SchemaLimitError && /longer than 1 ms/.test(e.message));
    const slower = new SchemaCompiler(20_000);
    const ok = await slower.compile({ type: "integer" });
    assert.match(ok.gbnf, /root/);
    await slower.dispose();
  } finally {
    await hurried.dispose();
  }
});

test("a request's queued schemas leave the queue when its client does", async () => {
  const own = new SchemaCompiler(20_000);
  try {
    // The worker is busy with one schema; a second request's schema waits behind it.
    const busy = own.compile(costly(201), { limits: { maxLoadCost: Infinity } });
    const client = new AbortController();
    const waiting = own.compile(costly(202), { limits: { maxLoadCost: Infinity } }, { signal: client.signal });
    const gone = new Error("client closed");
    setTimeout(() => client.abort(gone), 20);
    // Rejected when the client leaves, not after the busy schema (which it used to wait for and then compile).
    const leftAt = await waiting.then(
      () => assert.fail("compiled for a client that left"),
      (e: unknown) => {
        assert.equal(e, gone);
        return performance.now();
      },
    );
    const busyDoneAt = await busy.then(() => performance.now());
    assert.ok(leftAt < busyDoneAt, "dropped while the worker was still busy");
    // A request whose client is already gone queues nothing.
    const before = new AbortController();
    before.abort(gone);
    await assert.rejects(own.compile({ type: "integer" }, {}, { signal: before.signal }), (e: unknown) => e === gone);
    // The compiler carries on.
    assert.match((await own.compile({ type: "boolean" })).gbnf, /root/);
  } finally {
    await own.dispose();
  }
});

test("a request's schemas share one budget of worker time: a job is cut at what is left of it", async () => {
  const own = new SchemaCompiler(20_000);
  try {
    await own.compile({ type: "null" }); // the worker is up
    // The per-job limit is 20 s; the request has 50 ms for all its schemas.
    const control = { leftMs: 50 };
    await assert.rejects(
      own.compile(costly(203), { limits: { maxLoadCost: Infinity } }, control),
      (e: unknown) => e instanceof SchemaLimitError && /this request's schemas took longer/.test(e.message),
    );
    assert.ok(control.leftMs <= 0, `${control.leftMs} ms left`);
    // Its next schema is refused without reaching the worker.
    await assert.rejects(own.compile({ type: "string", maxLength: 7 }, {}, control), (e: unknown) => e instanceof SchemaLimitError && /this request's schemas/.test(e.message));
    // Another request is unaffected.
    assert.match((await own.compile({ type: "string", maxLength: 8 }, {}, { leftMs: 20_000 })).gbnf, /root/);
  } finally {
    await own.dispose();
  }
});

test("time spent waiting behind another request's schema is not charged to a request", async () => {
  const own = new SchemaCompiler(20_000);
  try {
    await own.compile({ type: "null" }); // the worker is up
    // One request's slow schema holds the worker; another's small one, with a budget far shorter
    // than that wait, queues behind it. It used to be refused for the other's time (a deadline from
    // its start); now it compiles, charged only what it took itself.
    const slow = own.compile(costly(204), { limits: { maxLoadCost: Infinity } });
    const control = { leftMs: 100 };
    const t0 = performance.now();
    const small = await own.compile({ type: "string", maxLength: 9 }, {}, control);
    const waited = performance.now() - t0;
    assert.match(small.gbnf, /root/);
    assert.ok(waited > 100, `queued for ${Math.round(waited)} ms only: the slow schema did not hold the worker long enough to show it`);
    assert.ok(control.leftMs > 0 && control.leftMs < 100, `${control.leftMs} ms left`);
    await slow;
  } finally {
    await own.dispose();
  }
});
