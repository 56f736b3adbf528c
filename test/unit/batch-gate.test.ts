import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { LlamaContext } from "node-llama-cpp";
import { BatchGate } from "../../src/engines/llama-cpp/batch-gate.ts";

/**
 * A stand-in context whose `_decodeTokens` records when each call reached it, and whose
 * `dispatchPendingBatch` records how many had reached it when a batch was dispatched.
 */
function fakeContext() {
  const reached: string[] = [];
  const dispatched: number[] = [];
  const proto = {
    async _decodeTokens(this: unknown, item: { name: string; sequenceId?: number; tokens?: number[] }) {
      reached.push(item.name);
      return item.name;
    },
    dispatchPendingBatch() {
      dispatched.push(reached.length);
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: { name: string; sequenceId?: number; tokens?: number[] }) => Promise<string> };
  return { context, reached, dispatched };
}

test("a step's decodes wait for every generating sequence, then go through together", async () => {
  const { context, reached, dispatched } = fakeContext();
  const gate = new BatchGate(context);
  assert.equal(gate.engaged, true);
  gate.enter();
  gate.enter();
  gate.enter();
  const a = context._decodeTokens({ name: "a", tokens: [1] });
  const b = context._decodeTokens({ name: "b", tokens: [2] });
  // Checked in the same tick: the hold ends on its own after a few ms.
  assert.deepEqual(reached, []);
  const c = context._decodeTokens({ name: "c", tokens: [3] });
  assert.deepEqual(reached, ["a", "b", "c"]);
  // A step of one-token decodes is dispatched at once, with all three in it, not on a later
  // event-loop turn.
  assert.deepEqual(dispatched, [3]);
  assert.deepEqual(await Promise.all([a, b, c]), ["a", "b", "c"]);
  // A step with a prompt in it is left to node-llama-cpp's own dispatch on the next turn, so that
  // requests that arrived together can still join it.
  const d = context._decodeTokens({ name: "d", tokens: [4] });
  const e = context._decodeTokens({ name: "e", tokens: [5, 6, 7] });
  const f = context._decodeTokens({ name: "f", tokens: [8] });
  assert.deepEqual(reached.slice(3), ["d", "e", "f"]);
  assert.deepEqual(dispatched, [3]);
  await Promise.all([d, e, f]);
  gate.dispose();
});

test("a step's decodes reach the batch in ascending sequence order, whatever order they came in", async () => {
  // llama.cpp cuts a batch into micro-batches wherever the next token's sequence id is not the
  // previous one's plus one, so arrival order would split one step into several decodes.
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  for (let i = 0; i < 4; i++) gate.enter();
  const calls = [3, 0, 2, 1].map((id) => context._decodeTokens({ name: `s${id}`, sequenceId: id }));
  assert.deepEqual(reached, ["s0", "s1", "s2", "s3"]);
  assert.deepEqual(await Promise.all(calls), ["s3", "s0", "s2", "s1"]);
  gate.dispose();
});

test("a sequence that stops generating no longer holds the others", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  gate.enter();
  const a = context._decodeTokens({ name: "a" });
  assert.deepEqual(reached, []);
  gate.leave();
  assert.deepEqual(reached, ["a"]);
  assert.equal(await a, "a");
  gate.dispose();
});

test("a late sequence holds the others only briefly", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  gate.enter();
  const started = performance.now();
  assert.equal(await context._decodeTokens({ name: "a" }), "a");
  assert.deepEqual(reached, ["a"]);
  // The hold is a share of a step, at most 20 ms (slack for a busy machine).
  assert.ok(performance.now() - started < 500);
  gate.dispose();
});

test("a single generating sequence is never held, and disposing restores the context", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  const a = context._decodeTokens({ name: "a" });
  assert.deepEqual(reached, ["a"]);
  await a;
  gate.dispose();
  assert.equal(Object.hasOwn(context, "_decodeTokens"), false);
});

test("while a sequence prepares to join, the next step waits for it, so the context's lock comes free", async () => {
  // node-llama-cpp's dispatch keeps the context's lock while decodes keep arriving; a newcomer's
  // cache trim needs that lock. Holding the step back empties the queue, so the dispatch lets go.
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  gate.enter();
  const joined = gate.join();
  const a = context._decodeTokens({ name: "a", sequenceId: 0 });
  const b = context._decodeTokens({ name: "b", sequenceId: 1 });
  await new Promise((r) => setTimeout(r, 5));
  assert.deepEqual(reached, [], "the step waits while the newcomer prepares");
  joined();
  assert.deepEqual(reached, ["a", "b"], "the step goes as soon as the newcomer is ready");
  assert.deepEqual(await Promise.all([a, b]), ["a", "b"]);
  gate.dispose();
});

test("a join that drags on holds a step only briefly", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  const joined = gate.join();
  const started = performance.now();
  assert.equal(await context._decodeTokens({ name: "a", sequenceId: 0 }), "a");
  assert.deepEqual(reached, ["a"]);
  // At most 100 ms (slack for a busy machine).
  assert.ok(performance.now() - started < 1000);
  joined();
  gate.dispose();
});

test("sequences whose decode is still running are waited for, so a split step comes back together", async () => {
  // A stand-in whose decodes finish only when the test says so.
  const reached: string[] = [];
  const finish: Array<() => void> = [];
  const proto = {
    _decodeTokens(this: unknown, item: { name: string; sequenceId: number; tokens: number[] }) {
      reached.push(item.name);
      return new Promise<string>((resolve) => finish.push(() => resolve(item.name)));
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: { name: string; sequenceId: number; tokens: number[] }) => Promise<string> };
  const gate = new BatchGate(context);
  for (let i = 0; i < 4; i++) gate.enter();
  // Two sequences went ahead (say, the hold ran out) and are decoding.
  const first = [0, 1].map((id) => context._decodeTokens({ name: `a${id}`, sequenceId: id, tokens: [7] }));
  await new Promise((r) => setTimeout(r, 40));
  assert.deepEqual(reached, ["a0", "a1"]);
  // The other two arrive while that decode runs: they wait for it instead of forming a batch of their own.
  const second = [2, 3].map((id) => context._decodeTokens({ name: `b${id}`, sequenceId: id, tokens: [7] }));
  await new Promise((r) => setTimeout(r, 40));
  assert.deepEqual(reached, ["a0", "a1"], "held while the other two are still decoding");
  for (const f of finish.splice(0)) f();
  await Promise.all(first);
  // The first two come back and ask again: all four go through as one step.
  const third = [0, 1].map((id) => context._decodeTokens({ name: `c${id}`, sequenceId: id, tokens: [7] }));
  assert.deepEqual(reached, ["a0", "a1", "c0", "c1", "b2", "b3"]);
  for (const f of finish.splice(0)) f();
  await Promise.all([...second, ...third]);
  gate.dispose();
});

test("a prompt being decoded does not hold a generating sequence back", async () => {
  // A long prompt spans several batches; the generating sequence must keep getting a token into
  // each of them rather than wait for the whole prompt.
  const reached: string[] = [];
  const proto = {
    _decodeTokens(this: unknown, item: { name: string; sequenceId: number; tokens: number[] }) {
      reached.push(item.name);
      return item.tokens.length > 1 ? new Promise<string>(() => {}) : Promise.resolve(item.name);
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: { name: string; sequenceId: number; tokens: number[] }) => Promise<string> };
  const gate = new BatchGate(context);
  gate.enter();
  gate.enter();
  void context._decodeTokens({ name: "prompt", sequenceId: 0, tokens: Array.from({ length: 500 }, (_, i) => i) });
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(reached, ["prompt"]);
  const started = performance.now();
  assert.equal(await context._decodeTokens({ name: "step", sequenceId: 1, tokens: [7] }), "step");
  // Only the usual hold (at most 20 ms; slack for a busy machine).
  assert.ok(performance.now() - started < 500);
  gate.dispose();
});

test("a long prompt is let through a piece per step beside the generating sequences, and its results come back whole", async () => {
  // The fake decodes a batch in a few ms and answers, like node-llama-cpp, with [token index,
  // value] for each token whose logits were asked for.
  const reached: string[] = [];
  const proto = {
    batchSize: 64,
    _decodeTokens(this: unknown, item: { sequenceId: number; tokens: number[]; logits: Array<true | undefined>; firstTokenSequenceIndex: number }) {
      reached.push(item.tokens.length === 1 ? `s${item.sequenceId}` : `p${item.tokens.length}@${item.firstTokenSequenceIndex}`);
      const out = item.logits.flatMap((l, i) => (l ? [[item.firstTokenSequenceIndex + i, `v${item.tokens[i]}`]] : []));
      return new Promise((r) => setTimeout(() => r(out), 2));
    },
  };
  type Item = { sequenceId: number; tokens: number[]; logits: Array<true | undefined>; firstTokenSequenceIndex: number };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: Item) => Promise<unknown> };
  const gate = new BatchGate(context);
  gate.enter(0);
  gate.enter(1);
  // Sequence 0 generates: a token per step, each step asked for when the last one came back.
  let promptDone = false;
  const generating = (async () => {
    let position = 10;
    await context._decodeTokens({ sequenceId: 0, tokens: [1], logits: [true], firstTokenSequenceIndex: position++ });
    while (!promptDone) await context._decodeTokens({ sequenceId: 0, tokens: [1], logits: [true], firstTokenSequenceIndex: position++ });
  })();
  const tokens = Array.from({ length: 400 }, (_, i) => 1000 + i);
  const logits: Array<true | undefined> = tokens.map((_, i) => (i === 399 || i === 70 ? true : undefined));
  const result = await context._decodeTokens({ sequenceId: 1, tokens, logits, firstTokenSequenceIndex: 5 });
  promptDone = true;
  gate.leave(1);
  await generating;
  // The whole batch less the generating sequence's token, each piece in the same step as a token of
  // sequence 0 (queued right after it: ascending sequence order), until what is left is short
  // enough to go whole (at most 256 tokens, what a prompt of a new request may be in one step).
  const pieces = reached.filter((r) => r.startsWith("p"));
  assert.deepEqual(pieces, ["p63@5", "p63@68", "p63@131", "p211@194"]);
  for (const piece of pieces) assert.equal(reached[reached.indexOf(piece) - 1], "s0");
  // Both logits asked for, at their positions in the sequence, as one answer.
  assert.deepEqual(result, [
    [75, "v1070"],
    [404, "v1399"],
  ]);
  gate.dispose();
});

test("a prompt is not cut while nothing else generates, beyond the batch size, and a short one not at all", async () => {
  const reached: number[] = [];
  const proto = {
    batchSize: 64,
    _decodeTokens(this: unknown, item: { tokens: number[] }) {
      reached.push(item.tokens.length);
      return Promise.resolve([]);
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: object) => Promise<unknown> };
  const gate = new BatchGate(context);
  gate.enter(3);
  await context._decodeTokens({ sequenceId: 3, tokens: Array.from({ length: 600 }, () => 7), logits: new Array(600).fill(undefined), firstTokenSequenceIndex: 0 });
  assert.deepEqual(reached, [64, 64, 64, 64, 64, 64, 216]);
  // A prompt a new request might send (at most 256 tokens) goes in one piece, whatever the batch.
  reached.length = 0;
  gate.enter(4);
  gate.enter(5);
  const step = context._decodeTokens({ sequenceId: 5, tokens: [1], logits: [true], firstTokenSequenceIndex: 9 });
  await context._decodeTokens({ sequenceId: 4, tokens: Array.from({ length: 200 }, () => 7), logits: new Array(200).fill(undefined), firstTokenSequenceIndex: 0 });
  await step;
  assert.deepEqual(reached, [200, 1]);
  gate.dispose();
});

const turn = () => new Promise((r) => setImmediate(r));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A newcomer as the engine brings one in: join, prepare, enter with its id, first decode. */
function arrive(gate: BatchGate, context: ReturnType<typeof fakeContext>["context"], id: number) {
  const joined = gate.join();
  gate.enter(id);
  joined();
  return context._decodeTokens({ name: `s${id}`, sequenceId: id, tokens: [id] });
}

test("a newcomer from idle goes after one event-loop turn, so requests already received join its step", async () => {
  const { context, reached, dispatched } = fakeContext();
  const gate = new BatchGate(context);
  const a = arrive(gate, context, 0);
  // Not yet: a request received together with it is read in this turn.
  assert.deepEqual(reached, []);
  const b = arrive(gate, context, 1);
  await turn();
  assert.deepEqual(reached, ["s0", "s1"]);
  assert.deepEqual(dispatched, [2]);
  await Promise.all([a, b]);
  gate.dispose();
});

test("after a step from idle that others followed, the next one from idle waits for the rest of the burst", async () => {
  const { context, reached } = fakeContext();
  // Wider bounds than the server's (3 ms quiet, 15 ms in all), so a busy machine's late timers do not decide the test.
  const gate = new BatchGate(context, { stallMs: 60, maxMs: 400 });
  // First burst: s0 goes alone (nothing says a burst is coming); s1 follows while s0 runs.
  await arrive(gate, context, 0);
  assert.deepEqual(reached, ["s0"]);
  const s1 = arrive(gate, context, 1);
  await s1;
  gate.leave(0);
  gate.leave(1);
  // Second burst, its requests a few ms apart: held together until none has come for a few ms.
  const started = performance.now();
  const calls = [arrive(gate, context, 2)];
  await sleep(5);
  calls.push(arrive(gate, context, 3));
  await sleep(5);
  calls.push(arrive(gate, context, 4));
  assert.deepEqual(reached, ["s0", "s1"], "the burst's first decodes wait for each other");
  await Promise.all(calls);
  assert.deepEqual(reached, ["s0", "s1", "s2", "s3", "s4"]);
  // Bounded: the quiet time after the last one, and the longest wait in all.
  assert.ok(performance.now() - started < 400 + 100);
  gate.dispose();
});

test("requests sent one after another are never held for a burst", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  for (let id = 0; id < 4; id++) {
    const call = arrive(gate, context, id);
    await turn();
    assert.deepEqual(reached.at(-1), `s${id}`, `request ${id} went after one turn`);
    await call;
    gate.leave(id);
  }
  gate.dispose();
});

test("a step with a running sequence in it is never held for newcomers", async () => {
  const { context, reached } = fakeContext();
  const gate = new BatchGate(context);
  gate.enter();
  const running = context._decodeTokens({ name: "run", tokens: [9] });
  assert.deepEqual(reached, ["run"]);
  await running;
  // A newcomer and the running sequence's next step: they go together at once, no turn waited.
  const a = arrive(gate, context, 0);
  const next = context._decodeTokens({ name: "run2", tokens: [9] });
  assert.deepEqual(reached, ["run", "s0", "run2"]);
  await Promise.all([a, next]);
  gate.dispose();
});
