import { constants } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { ModelFileRefused } from "../../core/engine-factory.ts";
import { HPARAM_KEYS, HparamRecord } from "./gguf-hparams.ts";

// Plinth's own check of a GGUF file's header, run before anything else reads the file.
//
// node-llama-cpp's reader (readGgufFileInfo, which llama.loadModel runs first) trusts the counts a
// file declares and reads past its end as zeros: a header that declares 2^63 metadata entries never
// finishes, and its buffer grows until memory runs out, on the main thread. So every count and length
// here is checked against the bytes the file still has before it is believed, the header is walked
// to its end without keeping what it says (strings and fixed-size arrays are skipped, not read), and
// the walk itself is capped (MAX_HEADER_BYTES, MAX_ARRAY_ITEMS, ...) far above what real models hold:
// a file that passes is one whose header node-llama-cpp reads to its end quickly. The tensor data
// itself is llama.cpp's to read; only its extent is checked here: a file cut short (an interrupted
// download) is refused by name instead of failing inside llama.cpp's loader.
//
// The layout (GGUF v2 and v3, little-endian; llama.cpp's ggml/include/gguf.h):
//   "GGUF" u32 version, u64 tensor count, u64 metadata count,
//   metadata: string key, u32 value type, value   (array: u32 item type, u64 count, items)
//   tensor infos: string name, u32 dimensions, u64 per dimension, u32 ggml type, u64 data offset
// where a string is a u64 byte length and the bytes.

/** Bytes of header (metadata and tensor infos) walked at most; real models hold tens of MiB. */
export const MAX_HEADER_BYTES = 256 * 2 ** 20;
/** Metadata entries at most (real models: under a hundred). */
const MAX_KV = 2 ** 16;
/** Tensors at most (the largest mixture-of-experts models have thousands). */
const MAX_TENSORS = 2 ** 20;
/**
 * Array items over all metadata at most (the largest vocabularies and merge lists hold well under a
 * million); node-llama-cpp turns every item into a JavaScript value.
 */
const MAX_ARRAY_ITEMS = 2 ** 24;
/** llama.cpp's GGML_MAX_DIMS. */
const MAX_DIMS = 4;
/** Bytes read from the file at a time. */
const CHUNK = 2 ** 20;

const STRING = 8;
const ARRAY = 9;
/** Bytes of each fixed-size GGUF value type, by type number (0-12); strings and arrays vary. */
const FIXED_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const LENGTH_BYTES = 8;
/** The least bytes a metadata entry takes: an empty key's length, the value type, a one-byte value. */
const MIN_KV_BYTES = LENGTH_BYTES + 4 + 1;
/** The least bytes a tensor info takes: an empty name's length, no dimensions, the type, the offset. */
const MIN_TENSOR_BYTES = LENGTH_BYTES + 4 + 4 + 8;
const INT64_MAX = 2n ** 63n - 1n;
/** The metadata key that sets the data section's alignment (a u32; 32 when absent). */
const ALIGNMENT_KEY = "general.alignment";
const ARCHITECTURE_KEY = "general.architecture";
/** Keys, tensor names and the architecture are read when at most this long (real ones: under 100 bytes). */
const MAX_KEPT_KEY = 256;
/** Per-layer lists are read when at most this long (llama.cpp loads at most 512 layers). */
const MAX_KEPT_ITEMS = 4096;
const I32 = 5;
const DEFAULT_ALIGNMENT = 32;
const U32 = 4;
/**
 * [elements per block, bytes per block] of each ggml tensor type, by type number, as the llama.cpp
 * that node-llama-cpp 3.21.1 bundles defines them (printed from its ggml_blck_size and
 * ggml_type_size). Removed types are left out; a tensor of a type not listed is not measured here.
 */
const TENSOR_TYPES: Record<number, readonly [number, number]> = {
  0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34], 9: [32, 36],
  10: [256, 84], 11: [256, 110], 12: [256, 144], 13: [256, 176], 14: [256, 210], 15: [256, 292],
  16: [256, 66], 17: [256, 74], 18: [256, 98], 19: [256, 50], 20: [32, 18], 21: [256, 110], 22: [256, 82],
  23: [256, 136], 24: [1, 1], 25: [1, 2], 26: [1, 4], 27: [1, 8], 28: [1, 8], 29: [256, 56], 30: [1, 2],
  34: [256, 54], 35: [256, 66], 39: [32, 17], 40: [64, 36], 41: [128, 18], 42: [64, 18],
};

/** What a header that passed says about itself. */
export interface GgufHeader {
  version: number;
  tensors: number;
  metadata: number;
  /** Where the tensor infos end (the data follows, after alignment). */
  headerBytes: number;
}

/** A file that is not a GGUF model Plinth can hand to llama.cpp; the message says what is wrong. */
export class GgufHeaderError extends ModelFileRefused {
  constructor(file: string, problem: string) {
    super(`'${file}' is not a usable GGUF model file: ${problem}.`);
    this.name = "GgufHeaderError";
  }
}

/**
 * Checks a model file before it is loaded; throws GgufHeaderError (or ModelFileRefused for a file
 * that cannot be read at all) naming what is wrong. A file split into parts (`name-00001-of-00003.gguf`)
 * has every part checked: node-llama-cpp reads them all.
 */
export async function checkGgufFiles(file: string): Promise<void> {
  for (const part of splitParts(file)) await checkGgufHeader(part);
}

/** node-llama-cpp's naming of split files (resolveSplitGgufParts): every part it will open. */
function splitParts(file: string): string[] {
  const m = /-(\d{5})-of-(\d{5})\.gguf$/.exec(file);
  if (!m) return [file];
  const part = Number(m[1]);
  const parts = Number(m[2]);
  if (part === 0 || parts === 0 || part > parts) return [file];
  const common = file.slice(0, m.index);
  return Array.from({ length: parts }, (_, i) => `${common}-${String(i + 1).padStart(5, "0")}-of-${m[2]}.gguf`);
}

/** Checks one GGUF file's header; see the top of this file for what is checked. */
export async function checkGgufHeader(file: string): Promise<GgufHeader> {
  let handle: FileHandle;
  try {
    // Non-blocking, so that opening a FIFO does not wait for a writer; the checks below refuse it.
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ModelFileRefused(
      code === "ENOENT" || code === "ENOTDIR" ? `The model file '${file}' does not exist.` : `The model file '${file}' cannot be read (${code ?? "error"}).`,
    );
  }
  try {
    // Size and kind from the open file itself, so what is walked is what was checked. A device
    // (/dev/zero), a directory or a FIFO is refused here: reading one may never end.
    const stats = await handle.stat();
    if (!stats.isFile()) throw new GgufHeaderError(file, `it is not a regular file (${kindOf(stats)})`);
    return await walk(new Cursor(handle, stats.size, file));
  } finally {
    await handle.close();
  }
}

function kindOf(stats: { isDirectory(): boolean; isCharacterDevice(): boolean; isBlockDevice(): boolean; isFIFO(): boolean; isSocket(): boolean }): string {
  if (stats.isDirectory()) return "a directory";
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return "a device";
  if (stats.isFIFO()) return "a pipe";
  if (stats.isSocket()) return "a socket";
  return "not a file";
}

async function walk(c: Cursor): Promise<GgufHeader> {
  if (c.size === 0) throw c.fail("it is empty");
  await c.need(4, "the magic number");
  if (c.bytes(4) !== "GGUF") throw c.fail("it does not start with the GGUF magic number");
  await c.need(4, "the version");
  const version = c.u32();
  if (version !== 2 && version !== 3)
    throw c.fail(`GGUF version ${version} is not supported (only 2 and 3 are${version > 0xffff ? "; a big-endian file?" : ""})`);
  await c.need(16, "the tensor and metadata counts");
  const tensors = c.count(c.u64(), MIN_TENSOR_BYTES, MAX_TENSORS, "tensors");
  const kvs = c.count(c.u64(), MIN_KV_BYTES, MAX_KV, "metadata entries");
  let arrayItems = 0;
  let alignment = DEFAULT_ALIGNMENT;
  const hparams = new HparamRecord();
  for (let i = 0; i < kvs; i++) {
    const where = `metadata entry ${i}`;
    const key = await c.shortString(`the key of ${where}`, MAX_KEPT_KEY);
    await c.need(4, `the value type of ${where}`);
    const type = c.u32();
    if (key === ALIGNMENT_KEY && type === U32) {
      await c.need(4, `the value of ${where}`);
      alignment = c.u32();
      continue;
    }
    if (key === ARCHITECTURE_KEY && type === STRING) {
      hparams.architecture = await c.shortString(`the value of ${where}`, MAX_KEPT_KEY);
      continue;
    }
    const kept = key !== undefined && HPARAM_KEYS.has(key.slice(key.indexOf(".") + 1));
    if (kept && type === U32) {
      await c.need(4, `the value of ${where}`);
      hparams.values.set(key, c.u32());
      continue;
    }
    if (kept && type === ARRAY) {
      // A per-layer list (llama.cpp reads u32 and i32 ones).
      await c.need(12, `the array header of ${where}`);
      const itemType = c.u32();
      const items = c.count(c.u64(), 4, MAX_ARRAY_ITEMS - arrayItems, `items in the array of ${where}`);
      if ((itemType === U32 || itemType === I32) && items <= MAX_KEPT_ITEMS) {
        arrayItems += items;
        await c.need(items * 4, `the array of ${where}`);
        hparams.values.set(key, Array.from({ length: items }, () => (itemType === U32 ? c.u32() : c.i32())));
        continue;
      }
      // Not one llama.cpp reads as such a list: walked as any other array (its count read again).
      c.rewind(12);
    }
    if (type === ARRAY) {
      await c.need(12, `the array header of ${where}`);
      const itemType = c.u32();
      if (itemType === ARRAY) throw c.fail(`${where} is an array of arrays, which llama.cpp does not read`);
      const itemBytes = itemType === STRING ? LENGTH_BYTES : FIXED_SIZE[itemType];
      if (itemBytes === undefined) throw c.fail(`${where} is an array of unknown value type ${itemType}`);
      const items = c.count(c.u64(), itemBytes, MAX_ARRAY_ITEMS - arrayItems, `items in the array of ${where}`);
      arrayItems += items;
      if (itemType === STRING) {
        // The hot loop of a vocabulary: no promise and no message built per item while the chunk lasts.
        let j = 0;
        const item = () => `item ${j} of ${where}`;
        for (; j < items; j++) {
          if (!c.buffered(LENGTH_BYTES)) await c.need(LENGTH_BYTES, item());
          c.skipString(item);
        }
      } else c.skip(items * itemBytes, `the array of ${where}`);
    } else if (type === STRING) {
      await c.string(`the value of ${where}`);
    } else {
      const bytes = FIXED_SIZE[type];
      if (bytes === undefined) throw c.fail(`${where} has unknown value type ${type}`);
      c.skip(bytes, `the value of ${where}`);
    }
  }
  /** Where the data of the tensor that reaches furthest ends, from the data section's start. */
  let dataEnd = 0n;
  let furthest = -1;
  for (let i = 0; i < tensors; i++) {
    const where = `tensor info ${i}`;
    const name = await c.shortString(`the name of ${where}`, MAX_KEPT_KEY);
    if (name !== undefined) hparams.tensor(name);
    await c.need(4, `the dimension count of ${where}`);
    const dims = c.u32();
    if (dims > MAX_DIMS) throw c.fail(`${where} has ${dims} dimensions (at most ${MAX_DIMS})`);
    await c.need(dims * 8 + 12, where);
    const shape: bigint[] = [];
    let elements = 1n;
    for (let d = 0; d < dims; d++) {
      const n = c.u64();
      shape.push(n);
      elements *= n;
      if (n > INT64_MAX || elements > INT64_MAX) throw c.fail(`${where} has more elements than llama.cpp can count`);
    }
    const type = c.u32(); // an unknown type is llama.cpp's to refuse
    const offset = c.u64();
    const bytes = tensorBytes(type, shape);
    if (bytes !== undefined && offset + bytes > dataEnd) {
      dataEnd = offset + bytes;
      furthest = i;
    }
  }
  // llama.cpp's loader refuses a tensor whose data runs past the file's end (a model "corrupted or
  // incomplete"); the same arithmetic here names the file and says by how much it is short.
  if (furthest >= 0 && alignment > 0 && (alignment & (alignment - 1)) === 0) {
    const dataStart = BigInt(Math.ceil(c.pos / alignment) * alignment);
    const needed = dataStart + dataEnd;
    if (needed > BigInt(c.size))
      throw c.fail(`it is cut short: tensor ${furthest}'s data ends at byte ${needed}, but the file has ${c.size} bytes (an incomplete download?)`);
  }
  const problem = hparams.problem();
  if (problem) throw c.fail(problem);
  return { version, tensors, metadata: kvs, headerBytes: c.pos };
}

/** Bytes of a tensor's data (ggml_nbytes of a contiguous tensor), or undefined for a type not listed. */
function tensorBytes(type: number, shape: readonly bigint[]): bigint | undefined {
  const traits = TENSOR_TYPES[type];
  if (!traits) return undefined;
  const [block, blockBytes] = traits;
  const rows = shape.slice(1).reduce((n, d) => n * d, 1n);
  const first = shape[0] ?? 1n;
  return ((first + BigInt(block) - 1n) / BigInt(block)) * BigInt(blockBytes) * rows;
}

/**
 * Reads the file forward from its start, a chunk at a time, never past its end or MAX_HEADER_BYTES.
 * Reads are only awaited when the chunk runs out, so a long array of short strings is walked at
 * memory speed and the event loop gets its turn at every chunk.
 */
class Cursor {
  pos = 0;
  private readonly buf = Buffer.allocUnsafe(CHUNK);
  private bufStart = 0;
  private bufEnd = 0;
  /** Where the walk must stop: the file's end, or the header cap. */
  private readonly end: number;

  constructor(
    private readonly handle: FileHandle,
    readonly size: number,
    private readonly file: string,
  ) {
    this.end = Math.min(size, MAX_HEADER_BYTES);
  }

  fail(problem: string): GgufHeaderError {
    return new GgufHeaderError(this.file, problem);
  }

  /** Makes `n` bytes (at most a chunk) from the position readable, or refuses the file. */
  async need(n: number, what: string): Promise<void> {
    this.bound(n, what);
    if (this.pos + n <= this.bufEnd) return;
    const length = Math.min(CHUNK, this.end - this.pos);
    const { bytesRead } = await this.handle.read(this.buf, 0, length, this.pos);
    this.bufStart = this.pos;
    this.bufEnd = this.pos + bytesRead;
    // The file shrank after its size was read.
    if (bytesRead < n) throw this.fail(`it ends inside ${what}`);
  }

  /** Moves past `n` bytes without reading them. */
  skip(n: number, what: string): void {
    this.bound(n, what);
    this.pos += n;
  }

  /** Moves past a GGUF string (its length, then its bytes). */
  async string(what: string): Promise<void> {
    if (!this.buffered(LENGTH_BYTES)) await this.need(LENGTH_BYTES, what);
    this.skipString(() => what);
  }

  /** Reads a GGUF string of at most `max` bytes; a longer one is moved past and reads as undefined. */
  async shortString(what: string, max: number): Promise<string | undefined> {
    if (!this.buffered(LENGTH_BYTES)) await this.need(LENGTH_BYTES, what);
    const length = this.buf.readBigUInt64LE(this.pos - this.bufStart);
    if (length > BigInt(max)) {
      this.skipString(() => what);
      return undefined;
    }
    this.pos += LENGTH_BYTES;
    const n = Number(length);
    await this.need(n, what);
    const text = this.buf.toString("utf8", this.pos - this.bufStart, this.pos - this.bufStart + n);
    this.pos += n;
    return text;
  }

  /** Steps back over bytes just read (all still in the chunk). */
  rewind(n: number): void {
    this.pos -= n;
  }

  /** Whether `n` bytes from the position are in the chunk already. */
  buffered(n: number): boolean {
    return this.pos + n <= this.bufEnd;
  }

  /** Moves past a string whose length is in the chunk already. */
  skipString(what: () => string): void {
    const length = this.u64();
    if (length > BigInt(this.size - this.pos))
      throw this.fail(`it ends inside ${what()} (a length of ${length} bytes at byte ${this.pos - LENGTH_BYTES} of ${this.size})`);
    const n = Number(length);
    if (this.pos + n > this.end) this.bound(n, what());
    this.pos += n;
  }

  /**
   * A declared count, believed only when the bytes left could hold that many items of `itemBytes`
   * each and it is within the cap.
   */
  count(declared: bigint, itemBytes: number, cap: number, what: string): number {
    if (declared > BigInt(Math.floor((this.size - this.pos) / itemBytes))) throw this.fail(`it declares ${declared} ${what}, more than its remaining bytes can hold`);
    if (declared > BigInt(cap)) throw this.fail(`it declares ${declared} ${what}, more than Plinth reads (${cap})`);
    return Number(declared);
  }

  bytes(n: number): string {
    const s = this.buf.toString("latin1", this.pos - this.bufStart, this.pos - this.bufStart + n);
    this.pos += n;
    return s;
  }

  u32(): number {
    const v = this.buf.readUInt32LE(this.pos - this.bufStart);
    this.pos += 4;
    return v;
  }

  i32(): number {
    const v = this.buf.readInt32LE(this.pos - this.bufStart);
    this.pos += 4;
    return v;
  }

  u64(): bigint {
    const v = this.buf.readBigUInt64LE(this.pos - this.bufStart);
    this.pos += 8;
    return v;
  }

  private bound(n: number, what: string): void {
    if (this.pos + n <= this.end) return;
    if (this.pos + n > this.size) throw this.fail(`it ends inside ${what} (at byte ${this.pos} of ${this.size})`);
    throw this.fail(`its header runs past the ${MAX_HEADER_BYTES / 2 ** 20} MiB Plinth reads (at ${what})`);
  }
}
