import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { LlamaContext } from "node-llama-cpp";
import { DecodeShare, EMBED_PIECE, shareEmbeddingDecodes } from "../../src/engines/llama-cpp/decode-share.ts";

/** A clock the test moves by hand; `sleep` resolves once the clock has been moved past its end. */
function manualClock() {
  let now = 1000;
  const sleepers: { until: number; wake: () => void }[] = [];
  return {
    now: () => now,
    sleep: (ms: number) => new Promise<void>((wake) => sleepers.push({ until: now + ms, wake })),
    async advance(ms: number) {
      now += ms;
      for (const s of sleepers.splice(0)) {
        if (s.until <= now) s.wake();
        else sleepers.push(s);
      }
      // Let woken waiters run their next look.
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    },
  };
}

/** A stand-in embedding context: records the pieces it is asked to decode; each returns the logits asked for. */
function fakeContext(batchSize = 512) {
  const pieces: { first: number; length: number }[] = [];
  let pending: Array<() => void> = [];
  const proto = {
    batchSize,
    async _decodeTokens(item: { tokens: number[]; logits: boolean[]; firstTokenSequenceIndex: number }) {
      pieces.push({ first: item.firstTokenSequenceIndex, length: item.tokens.length });
      await new Promise<void>((r) => pending.push(r));
      return item.logits.flatMap((wanted, i) => (wanted ? [`logit@${item.firstTokenSequenceIndex + i}`] : []));
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: object) => Promise<unknown[]> };
  return {
    context,
    pieces,
    /** Finishes every decode in flight. */
    finish() {
      const p = pending;
      pending = [];
      for (const r of p) r();
    },
  };
}

const input = (n: number, first = 0) => ({
  sequenceId: 0,
  tokens: Array.from({ length: n }, (_, i) => i + 1),
  logits: Array.from({ length: n }, (_, i) => i === n - 1),
  firstTokenSequenceIndex: first,
});

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

test("with no generation running, an embedding input is read in pieces without waiting", async () => {
  const clock = manualClock();
  const share = new DecodeShare(clock);
  const { context, pieces, finish } = fakeContext(512);
  shareEmbeddingDecodes(context, true, share);
  const result = context._decodeTokens(input(1200));
  for (let i = 0; i < 5; i++) {
    await settle();
    finish();
  }
  assert.deepEqual(await result, ["logit@1199"]);
  assert.deepEqual(pieces, [
    { first: 0, length: EMBED_PIECE },
    { first: EMBED_PIECE, length: EMBED_PIECE },
    { first: 2 * EMBED_PIECE, length: EMBED_PIECE },
    { first: 3 * EMBED_PIECE, length: EMBED_PIECE },
    { first: 4 * EMBED_PIECE, length: 1200 - 4 * EMBED_PIECE },
  ]);
});

test("with no generation, two contexts read at once, unless one thread does every decode", async () => {
  for (const oneDecoder of [false, true]) {
    const clock = manualClock();
    const share = new DecodeShare(clock);
    share.oneDecoder = oneDecoder;
    const a = fakeContext();
    const b = fakeContext();
    shareEmbeddingDecodes(a.context, true, share);
    shareEmbeddingDecodes(b.context, true, share);
    const ra = a.context._decodeTokens(input(100));
    const rb = b.context._decodeTokens(input(100));
    await settle();
    assert.equal(a.pieces.length + b.pieces.length, oneDecoder ? 1 : 2, `oneDecoder ${oneDecoder}`);
    // The first piece done wakes the other at once, without waiting for a poll.
    a.finish();
    b.finish();
    await settle();
    assert.equal(a.pieces.length + b.pieces.length, 2);
    a.finish();
    b.finish();
    assert.deepEqual(await ra, ["logit@99"]);
    assert.deepEqual(await rb, ["logit@99"]);
  }
});

test("while generation runs, embedding pieces are cut small and give generation as long as they took", async () => {
  const clock = manualClock();
  const share = new DecodeShare(clock);
  const { context, pieces, finish } = fakeContext(512);
  shareEmbeddingDecodes(context, true, share);
  share.generationStarted();
  const result = context._decodeTokens(input(600, 10));
  await settle();
  assert.deepEqual(pieces, [{ first: 10, length: EMBED_PIECE }]);
  // The piece takes 300 ms; generation's step meanwhile waits behind it and comes back after.
  await clock.advance(300);
  finish();
  share.generationEnded();
  share.generationStarted();
  await settle();
  // Generation's turn: 300 ms, during which no embedding piece goes.
  await clock.advance(150);
  assert.equal(pieces.length, 1);
  await clock.advance(160);
  assert.equal(pieces.length, 2);
  assert.deepEqual(pieces[1], { first: 10 + EMBED_PIECE, length: EMBED_PIECE });
  // Generation stops: the rest goes at once, whole.
  share.generationEnded();
  await clock.advance(100);
  finish();
  await settle();
  assert.deepEqual(pieces[2], { first: 10 + 2 * EMBED_PIECE, length: 600 - 2 * EMBED_PIECE });
  finish();
  assert.deepEqual(await result, ["logit@609"]);
});

test("while generation runs, only one embedding piece is decoded at a time in the process", async () => {
  const clock = manualClock();
  const share = new DecodeShare(clock);
  const a = fakeContext();
  const b = fakeContext();
  shareEmbeddingDecodes(a.context, true, share);
  shareEmbeddingDecodes(b.context, true, share);
  share.generationStarted();
  const ra = a.context._decodeTokens(input(100));
  const rb = b.context._decodeTokens(input(100));
  await settle();
  assert.equal(a.pieces.length + b.pieces.length, 1);
  share.generationEnded();
  a.finish();
  b.finish();
  // Generation went idle: the other input goes without waiting for a turn.
  await clock.advance(50);
  assert.equal(a.pieces.length + b.pieces.length, 2);
  a.finish();
  b.finish();
  assert.deepEqual(await ra, ["logit@99"]);
  assert.deepEqual(await rb, ["logit@99"]);
});

test("an input that cannot be cut (a pooled model) still takes its turn, whole", async () => {
  const clock = manualClock();
  const share = new DecodeShare(clock);
  const { context, pieces, finish } = fakeContext(2048);
  shareEmbeddingDecodes(context, false, share);
  share.generationStarted();
  const first = context._decodeTokens(input(1000));
  await settle();
  await clock.advance(200);
  finish();
  await first;
  assert.deepEqual(pieces, [{ first: 0, length: 1000 }]);
  // Generation is still running: the next input waits as long as the last one took.
  const second = context._decodeTokens(input(1000));
  await clock.advance(100);
  assert.equal(pieces.length, 1);
  await clock.advance(110);
  assert.equal(pieces.length, 2);
  finish();
  await second;
});

test("a failed piece gives its turn back", async () => {
  const clock = manualClock();
  const share = new DecodeShare(clock);
  const proto = {
    batchSize: 512,
    async _decodeTokens() {
      throw new Error("decode failed");
    },
  };
  const context = Object.create(proto) as LlamaContext & { _decodeTokens: (item: object) => Promise<unknown[]> };
  shareEmbeddingDecodes(context, true, share);
  share.generationStarted();
  await assert.rejects(context._decodeTokens(input(300)), /decode failed/);
  share.generationEnded();
  await clock.advance(50);
  const { context: other, pieces, finish } = fakeContext();
  shareEmbeddingDecodes(other, true, share);
  const result = other._decodeTokens(input(10));
  await settle();
  assert.equal(pieces.length, 1);
  finish();
  await result;
});
