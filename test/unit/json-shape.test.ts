import assert from "../helpers/assert.ts";
import { describe, test } from "node:test";
import fc from "fast-check";
import { JSON_MAX_CONTAINERS, JSON_MAX_MEMBERS, JSON_MAX_VALUES, JsonShapeGuard, type JsonShapeLimits } from "../../src/http/json-shape.ts";

// The body stage that refuses, before JSON.parse, a body holding more values than one request may
// (see src/http/json-shape.ts), fed directly with chunks.

/** Feeds `text` to a fresh guard in chunks of `size` bytes; the error it fails with, if any. */
async function feed(text: string | Buffer, size = 64 * 1024, limits?: Partial<JsonShapeLimits>): Promise<{ error?: Error & { status?: number }; out: Buffer }> {
  const guard = new JsonShapeGuard(limits);
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const out: Buffer[] = [];
  guard.on("data", (c: Buffer) => out.push(c));
  return new Promise((resolve) => {
    guard.once("error", (error) => resolve({ error, out: Buffer.concat(out) }));
    guard.once("end", () => resolve({ out: Buffer.concat(out) }));
    for (let i = 0; i < bytes.length; i += size) guard.write(bytes.subarray(i, i + size));
    guard.end();
  });
}

describe("JSON shape bounds", () => {
  test("a body within the bounds passes through byte for byte", async () => {
    const body = JSON.stringify({ model: "m", messages: Array.from({ length: 10_000 }, (_, i) => ({ role: "user", content: [{ type: "text", text: `hi ${i}` }] })) });
    const { error, out } = await feed(body, 1000);
    assert.equal(error, undefined);
    assert.equal(out.toString(), body);
  });

  test("too many objects and arrays, too many values and too wide an object are each a 413 naming the bound; a long array is not too wide", async () => {
    const parts = JSON.stringify({ content: Array.from({ length: JSON_MAX_CONTAINERS + 1 }, () => ({ t: 1 })) });
    const a = await feed(parts);
    assert.equal(a.error?.status, 413);
    assert.match(a.error!.message, /more than 100,000 objects and arrays/);

    const wide = JSON.stringify({ logit_bias: Object.fromEntries(Array.from({ length: JSON_MAX_MEMBERS + 1 }, (_, i) => [String(i), 1])) });
    const b = await feed(wide);
    assert.equal(b.error?.status, 413);
    assert.match(b.error!.message, /more than 300,001 keys in one object/);
    assert.equal((await feed(JSON.stringify({ prompt: Array.from({ length: JSON_MAX_MEMBERS * 3 }, () => 9) }))).error, undefined);

    const rows = Array.from({ length: 4 }, () => Array.from({ length: JSON_MAX_VALUES / 4 + 1 }, () => 7));
    const c = await feed(JSON.stringify({ input: rows }));
    assert.equal(c.error?.status, 413);
    assert.match(c.error!.message, /more than 2,000,000 values/);
  });

  test("a vocabulary-wide logit_bias map and an embeddings batch of 300,000 token ids pass", async () => {
    const bias = JSON.stringify({ logit_bias: Object.fromEntries(Array.from({ length: 262_144 }, (_, i) => [String(i), -100])) });
    assert.equal((await feed(bias)).error, undefined);
    const batch = JSON.stringify({ input: Array.from({ length: 2048 }, () => Array.from({ length: 146 }, (_, i) => i)) });
    assert.equal((await feed(batch)).error, undefined);
  });

  test("commas and brackets inside strings are text, escaped quotes included", async () => {
    const text = '\\"[{,}]\\\\'.repeat(JSON_MAX_VALUES / 4);
    const { error } = await feed(JSON.stringify({ content: text }), 7);
    assert.equal(error, undefined);
  });

  test("property: a body is refused exactly when its parsed value passes a bound, wherever its chunks are cut", async () => {
    // What the guard bounds, counted on the parsed value: commas written (values − 1), containers,
    // and the widest object.
    const shape = (v: unknown): { commas: number; containers: number; widest: number } => {
      if (v === null || typeof v !== "object") return { commas: 0, containers: 0, widest: 0 };
      const items = Array.isArray(v) ? v : Object.values(v);
      const inner = items.map(shape);
      return {
        commas: Math.max(items.length - 1, 0) + inner.reduce((n, s) => n + s.commas, 0),
        containers: 1 + inner.reduce((n, s) => n + s.containers, 0),
        widest: Math.max(Array.isArray(v) ? 0 : items.length, ...inner.map((s) => s.widest)),
      };
    };
    const limits: JsonShapeLimits = { values: 40, containers: 12, members: 6 };
    const text = fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.array(fc.oneof(fc.string(), fc.constant('\\"[{,'), fc.integer()), { maxLength: 10 })).map((v) => JSON.stringify(v));
    await fc.assert(
      fc.asyncProperty(text, fc.integer({ min: 1, max: 16 }), async (json, size) => {
        const s = shape(JSON.parse(json));
        const over = s.commas + 1 > limits.values || s.containers > limits.containers || s.widest > limits.members;
        const { error, out } = await feed(json, size, limits);
        assert.equal(error !== undefined, over, `${json} (${JSON.stringify(s)})`);
        if (!over) assert.equal(out.toString(), json);
      }),
      { numRuns: 500 },
    );
  });
});
