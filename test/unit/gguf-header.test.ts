import { test, after } from "node:test";
import assert from "../helpers/assert.ts";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import fc from "fast-check";
import { readGgufFileInfo } from "node-llama-cpp";
import { ModelFileRefused } from "../../src/core/engine-factory.ts";
import { checkGgufFiles, checkGgufHeader, GgufHeaderError } from "../../src/engines/llama-cpp/gguf-header.ts";
import { BERT_TINY_SPEC, ensureBertFixtureModel, ensureFixtureModel, HARMONY_SPEC, SPM_SPEC } from "../fixtures/models.ts";

// The GGUF header check (gguf-header.ts) against real fixture files, hand-made malformed headers, and
// random truncations and mutations of a real header: it never hangs, never throws anything but its
// own refusal, and a file it lets through is one node-llama-cpp's reader finishes quickly.

const dir = mkdtempSync(path.join(tmpdir(), "plinth-gguf-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(bytes: Buffer): string {
  const p = path.join(dir, `f${n++}.gguf`);
  writeFileSync(p, bytes);
  return p;
}

/** Little-endian pieces of a GGUF header. */
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const u64 = (v: bigint | number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const str = (s: string) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
const header = (tensors: bigint | number, kvs: bigint | number, version = 3) => Buffer.concat([Buffer.from("GGUF"), u32(version), u64(tensors), u64(kvs)]);

async function refused(p: string, message: RegExp): Promise<void> {
  await assert.rejects(checkGgufHeader(p), (err: Error) => {
    assert.ok(err instanceof ModelFileRefused, `${err.name}: ${err.message}`);
    assert.match(err.message, message);
    return true;
  });
}

test("real fixture models pass, in milliseconds", async () => {
  const files = [await ensureFixtureModel(), await ensureFixtureModel(SPM_SPEC), await ensureFixtureModel(HARMONY_SPEC), await ensureBertFixtureModel(BERT_TINY_SPEC)];
  for (const p of files) {
    const h = await checkGgufHeader(p);
    assert.equal(h.version, 3);
    assert.ok(h.tensors > 0 && h.metadata > 0, JSON.stringify(h));
    const info = await readGgufFileInfo(p);
    assert.equal(h.headerBytes, info.metadataSize + (info.tensorInfoSize ?? 0), p);
  }
  const start = performance.now();
  for (let i = 0; i < 10; i++) await checkGgufHeader(files[0]);
  assert.ok((performance.now() - start) / 10 < 50, "a fixture's header takes milliseconds");
});

test("the audit's file: counts of 2^63 are refused at once", async () => {
  const p = file(Buffer.from("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff\xff\xff\xff\xff\x7f", "latin1"));
  await refused(p, /declares 9223372036854775807 tensors, more than its remaining bytes can hold/);
  await refused(file(header(0, 2n ** 63n - 1n)), /metadata entries, more than its remaining bytes can hold/);
});

test("files that are not GGUF models are refused with what is wrong", async () => {
  await refused(file(Buffer.alloc(0)), /it is empty/);
  await refused(file(Buffer.from("GGU")), /ends inside the magic number/);
  await refused(file(Buffer.from("not a model at all, just text")), /GGUF magic number/);
  await refused(file(header(0, 0, 1)), /GGUF version 1 is not supported/);
  await refused(file(Buffer.concat([Buffer.from("GGUF"), Buffer.from([0, 0, 0, 3]), u64(0), u64(0)])), /big-endian/);
  await refused(file(Buffer.concat([Buffer.from("GGUF"), u32(3), u64(0)])), /ends inside the tensor and metadata counts/);
  const sub = path.join(dir, "dir.gguf");
  mkdirSync(sub);
  await refused(sub, /not a regular file \(a directory\)/);
  const zero = path.join(dir, "zero.gguf");
  symlinkSync("/dev/zero", zero);
  await refused(zero, /not a regular file \(a device\)/);
  await refused(path.join(dir, "missing.gguf"), /does not exist/);
});

test("metadata and tensor infos are walked with every length and count bounded", async () => {
  const kv = (key: string, type: number, value: Buffer) => Buffer.concat([str(key), u32(type), value]);
  // A string longer than the file.
  await refused(file(Buffer.concat([header(0, 1), u64(2n ** 62n), Buffer.alloc(8)])), /ends inside the key of metadata entry 0/);
  await refused(file(Buffer.concat([header(0, 1), kv("a", 8, u64(1000))])), /ends inside the value of metadata entry 0/);
  // Unknown value types, nested arrays, arrays larger than the file.
  await refused(file(Buffer.concat([header(0, 1), kv("a", 13, u32(0))])), /unknown value type 13/);
  await refused(file(Buffer.concat([header(0, 1), kv("a", 9, Buffer.concat([u32(9), u64(1), u32(0), u64(0)]))])), /array of arrays/);
  await refused(file(Buffer.concat([header(0, 1), kv("a", 9, Buffer.concat([u32(77), u64(1), u32(0)]))])), /array of unknown value type 77/);
  await refused(file(Buffer.concat([header(0, 1), kv("a", 9, Buffer.concat([u32(0), u64(2n ** 40n)]))])), /items in the array of metadata entry 0, more than its remaining bytes/);
  await refused(file(Buffer.concat([header(0, 1), kv("a", 9, Buffer.concat([u32(8), u64(3), str("x"), str("y"), u64(100)]))])), /ends inside item 2 of metadata entry 0/);
  // Tensor infos: too many dimensions, too many elements, cut short.
  const tensor = (dims: bigint[]) => Buffer.concat([str("t"), u32(dims.length), ...dims.map(u64), u32(0), u64(0)]);
  await refused(file(Buffer.concat([header(1, 0), tensor([1n, 1n, 1n, 1n, 1n])])), /5 dimensions \(at most 4\)/);
  await refused(file(Buffer.concat([header(1, 0), tensor([2n ** 32n, 2n ** 32n])])), /more elements than llama.cpp can count/);
  await refused(file(Buffer.concat([header(2, 0), tensor([4n, 4n])])), /ends inside the name of tensor info 1/);
  // A well-formed header of each kind passes.
  const ok = Buffer.concat([header(1, 3), kv("s", 8, str("v")), kv("a", 9, Buffer.concat([u32(8), u64(2), str("x"), str("yz")])), kv("f", 9, Buffer.concat([u32(6), u64(2), u32(0), u32(0)])), tensor([4n, 4n])]);
  // Its one 4×4 f32 tensor's 64 bytes follow, from the next multiple of 32.
  const data = Buffer.alloc(Math.ceil(ok.length / 32) * 32 - ok.length + 64);
  assert.deepEqual(await checkGgufHeader(file(Buffer.concat([ok, data]))), { version: 3, tensors: 1, metadata: 3, headerBytes: ok.length });
});

test("a file cut short inside its tensor data (an interrupted download) is refused, by llama.cpp's arithmetic", async () => {
  const real = readFileSync(await ensureFixtureModel());
  await checkGgufHeader(file(real));
  await refused(file(real.subarray(0, real.length - 1)), new RegExp(`it is cut short: tensor \\d+'s data ends at byte ${real.length}, but the file has ${real.length - 1} bytes`));
  // The data section starts at general.alignment (here 256), not at the default 32.
  const kv = (key: string, type: number, value: Buffer) => Buffer.concat([str(key), u32(type), value]);
  const q8 = Buffer.concat([str("t"), u32(2), u64(64), u64(2), u32(8), u64(0)]); // Q8_0: 2 rows of 2 blocks of 34 bytes
  const head = Buffer.concat([header(1, 1), kv("general.alignment", 4, u32(256)), q8]);
  assert.ok(head.length < 256);
  await refused(file(Buffer.concat([head, Buffer.alloc(32 - (head.length % 32) + 136)])), /data ends at byte 392/);
  await refused(file(Buffer.concat([head, Buffer.alloc(256 - head.length + 135)])), /data ends at byte 392, but the file has 391 bytes/);
  await checkGgufHeader(file(Buffer.concat([head, Buffer.alloc(256 - head.length + 136)])));
});

test("every part of a split model is checked", async () => {
  const good = readFileSync(await ensureFixtureModel());
  writeFileSync(path.join(dir, "m-00001-of-00002.gguf"), good);
  writeFileSync(path.join(dir, "m-00002-of-00002.gguf"), Buffer.from("junk"));
  await assert.rejects(checkGgufFiles(path.join(dir, "m-00001-of-00002.gguf")), /m-00002-of-00002.gguf' is not a usable GGUF model file/);
});

test("random truncations and mutations of a real header: refused or passed, never a hang, and what passes node-llama-cpp reads", async () => {
  const real = readFileSync(await ensureFixtureModel());
  const { headerBytes } = await checkGgufHeader(await ensureFixtureModel());
  // The header and a little of the data: what the check and node-llama-cpp's reader look at.
  const head = real.subarray(0, headerBytes + 64);
  const rest = real.subarray(head.length);
  const mutation = fc.oneof(
    fc.record({ kind: fc.constant("cut" as const), at: fc.integer({ min: 0, max: head.length }) }),
    fc.record({ kind: fc.constant("byte" as const), at: fc.integer({ min: 0, max: head.length - 1 }), value: fc.integer({ min: 0, max: 255 }) }),
    fc.record({ kind: fc.constant("u64" as const), at: fc.integer({ min: 0, max: head.length - 8 }), value: fc.bigUintN(64) }),
    // Small changes to the counts and lengths near the start, where they are.
    fc.record({ kind: fc.constant("count" as const), at: fc.integer({ min: 8, max: 400 }), value: fc.integer({ min: 0, max: 1 << 20 }) }),
  );
  const outcomes = { passed: 0, refused: 0 };
  await fc.assert(
    fc.asyncProperty(fc.array(mutation, { minLength: 1, maxLength: 4 }), async (mutations) => {
      let bytes = Buffer.from(head);
      let cut = false;
      for (const m of mutations) {
        if (m.kind === "cut") {
          bytes = bytes.subarray(0, Math.min(m.at, bytes.length));
          cut = true;
        } else if (m.at + (m.kind === "byte" ? 1 : 8) > bytes.length) continue;
        else if (m.kind === "byte") bytes[m.at] = m.value;
        else bytes.writeBigUInt64LE(m.kind === "u64" ? m.value : BigInt(m.value), m.at);
      }
      // The rest of the tensor data follows, unless the file was cut.
      const p = file(cut ? bytes : Buffer.concat([bytes, rest]));
      const start = performance.now();
      let passed = false;
      try {
        await checkGgufHeader(p);
        passed = true;
      } catch (err) {
        assert.ok(err instanceof GgufHeaderError, `${(err as Error).name}: ${(err as Error).message}`);
      }
      assert.ok(performance.now() - start < 1000, "the check answers within a second");
      outcomes[passed ? "passed" : "refused"]++;
      if (passed) {
        // What passed, node-llama-cpp's reader finishes (it may still refuse, for its own reasons).
        const read = readGgufFileInfo(p).then(
          () => "done",
          () => "done",
        );
        const timeout = new Promise((r) => setTimeout(() => r("hung"), 5000).unref());
        assert.equal(await Promise.race([read, timeout]), "done", "node-llama-cpp read the passed header to its end");
      }
      rmSync(p);
    }),
    { numRuns: 300 },
  );
  // Both sides were exercised (mutations of string bytes and data pass; of counts and lengths mostly not).
  assert.ok(outcomes.passed > 10 && outcomes.refused > 10, JSON.stringify(outcomes));
});

test("hyperparameters llama.cpp aborts the process on (not refuses) are refused by name first", async () => {
  const kv = (key: string, type: number, value: Buffer) => Buffer.concat([str(key), u32(type), value]);
  const U32 = 4;
  const u32s = (values: number[]) => Buffer.concat([u32(U32), u64(values.length), ...values.map(u32)]);
  /** A llama-architecture header with `hparams` and one 4×4 f32 tensor per name, its data included. */
  const model = (hparams: Array<[string, number | number[]]>, tensors = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_up.weight"]) => {
    const kvs = [kv("general.architecture", 8, str("llama")), ...hparams.map(([k, v]) => (Array.isArray(v) ? kv(`llama.${k}`, 9, u32s(v)) : kv(`llama.${k}`, U32, u32(v))))];
    const infos = tensors.map((name, i) => Buffer.concat([str(name), u32(2), u64(4), u64(4), u32(0), u64(i * 64)]));
    const head = Buffer.concat([header(tensors.length, kvs.length), ...kvs, ...infos]);
    const padded = Math.ceil(head.length / 32) * 32;
    return file(Buffer.concat([head, Buffer.alloc(padded - head.length), Buffer.alloc(64 * tensors.length)]));
  };
  const sound: Array<[string, number | number[]]> = [["block_count", 1], ["attention.head_count", 2], ["feed_forward_length", 8]];
  await checkGgufHeader(model(sound));
  const cases: Array<[Array<[string, number | number[]]>, RegExp]> = [
    [[["block_count", 0]], /block_count is 0, outside the 1–512 layers/],
    [[["block_count", 513]], /block_count is 513/],
    [[["block_count", 1], ["attention.head_count", 0]], /attention\.head_count is 0 for layer 0, which has attention weights/],
    [[["block_count", 2], ["attention.head_count", [2, 0]]], /./], // layer 1 has no tensors here: passes (below)
    [[["block_count", 1], ["attention.head_count", 2], ["attention.head_count_kv", 0]], /head_count_kv is 0 for layer 0/],
    [[["block_count", 1], ["feed_forward_length", [0]]], /feed_forward_length is 0 for layer 0, which has feed-forward weights/],
    [[["block_count", 1], ["attention.key_length", 0]], /key_length is 0 for layer 0/],
    [[["block_count", 1], ["expert_count", 4], ["expert_used_count", 0]], /4 experts but expert_used_count 0/],
    [[["block_count", 1], ["expert_count", 4], ["expert_used_count", 5]], /expert_used_count \(5\) is more than its expert_count \(4\)/],
    [[["block_count", 1], ["expert_count", 2000], ["expert_used_count", 2]], /expert_count is 2000/],
    [[["block_count", 1], ["expert_used_count", [0, 2]]], /expert_used_count \(2\) is more than its expert_count \(0\)/],
    [[["block_count", 1], ["expert_count", 8], ["expert_used_count", 2], ["expert_group_count", 3], ["expert_group_used_count", 1]], /expert groups do not fit/],
    [[["block_count", 1], ["expert_group_count", 2]], /expert groups \(2\) but no experts/],
    [[["block_count", 1], ["nextn_predict_layers", 2]], /nextn_predict_layers \(2\) is more than its block_count \(1\)/],
  ];
  for (const [hparams, message] of cases) {
    const p = model(hparams);
    if (message.source === ".") await checkGgufHeader(p);
    else await refused(p, message);
  }
  // A layer without the weights a size shapes may have that size 0 (DeciLM's skipped layers).
  await checkGgufHeader(model([["block_count", 2], ["feed_forward_length", [8, 0]]], ["blk.0.ffn_up.weight", "blk.1.attn_q.weight"]));
});
