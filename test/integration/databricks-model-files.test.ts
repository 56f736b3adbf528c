import assert from "../helpers/assert.ts";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { serve } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { dbx } from "../helpers/databricks.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { useTestServer } from "../helpers/server.ts";

// Model files that cannot be served, handed to the model-loading routes of the real server: each is
// a 400 naming the field within a second (the GGUF header check, gguf-header.ts), never a load that
// hangs (a header declaring 2^63 entries made node-llama-cpp's reader run forever) or a 503 that
// reads as "retry", while other requests go on as before.

const s = useTestServer();
const dir = mkdtempSync(path.join(tmpdir(), "plinth-bad-models-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const BAD: Record<string, string> = {
  "counts of 2^63": "hostile.gguf",
  "random bytes": "random.gguf",
  empty: "empty.gguf",
  "a directory": "dir.gguf",
  "a symlink to /dev/zero": "zero.gguf",
  "a model cut short inside its tensor data": "cut.gguf",
  // llama.cpp asserts on these (the process aborts, every model with it) rather than refuse them.
  "a model with 0 layers": "no-layers.gguf",
  "a model with 0 attention heads": "no-heads.gguf",
};
writeFileSync(path.join(dir, "hostile.gguf"), Buffer.from("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff\xff\xff\xff\xff\x7f", "latin1"));
writeFileSync(path.join(dir, "random.gguf"), Buffer.from(Array.from({ length: 8192 }, (_, i) => (i * 2654435761) >>> 24)));
writeFileSync(path.join(dir, "empty.gguf"), "");
mkdirSync(path.join(dir, "dir.gguf"));
symlinkSync("/dev/zero", path.join(dir, "zero.gguf"));
before(async () => {
  const whole = readFileSync(await ensureFixtureModel());
  writeFileSync(path.join(dir, "cut.gguf"), whole.subarray(0, Math.floor(whole.length * 0.9)));
  writeFileSync(path.join(dir, "no-layers.gguf"), withU32(whole, "llama.block_count", 0));
  writeFileSync(path.join(dir, "no-heads.gguf"), withU32(whole, "llama.attention.head_count", 0));
});

/** A copy of a GGUF file with one u32 metadata value changed. */
function withU32(gguf: Buffer, key: string, value: number): Buffer {
  const copy = Buffer.from(gguf);
  const entry = Buffer.concat([Buffer.from(key), Buffer.from([4, 0, 0, 0])]);
  const at = copy.indexOf(entry);
  assert.ok(at > 0, key);
  copy.writeUInt32LE(value, at + entry.length);
  return copy;
}

/** A request of another client, timed: it must not wait on the refused load. */
async function otherRequest(url: string): Promise<number> {
  const start = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
  });
  assert.equal(r.status, 200, await r.text());
  return performance.now() - start;
}

async function timed<T>(work: Promise<T>): Promise<{ value: T; ms: number }> {
  const start = performance.now();
  const value = await work;
  return { value, ms: performance.now() - start };
}

test("the admin route refuses each unusable model file as a 400 naming `source`, at once, while other requests go on", async () => {
  for (const [what, name] of Object.entries(BAD)) {
    const source = path.join(dir, name);
    const [refused, other] = await Promise.all([timed(dbx(s, "POST", "/api/2.0/plinth/models", { source, name: "bad" })), otherRequest(s.url)]);
    const r = refused.value;
    assert.equal(r.status, 400, `${what}: ${r.text}`);
    assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE", `${what}: ${r.text}`);
    assert.match(r.json.message, /source/, what);
    assert.match(r.json.message, /not a usable GGUF model file/, what);
    assert.ok(refused.ms < 1000, `${what}: answered in ${refused.ms} ms`);
    assert.ok(other < 5000, `${what}: the other request took ${other} ms`);
    // Nothing was registered: no model 'bad' loading (or failed) for good, and DELETE has nothing to wait for.
    const models = await dbx(s, "GET", "/api/2.0/plinth/models");
    assert.equal(models.json.models.some((m: any) => m.name === "bad"), false, `${what}: ${models.text}`);
    assert.equal((await dbx(s, "DELETE", "/api/2.0/plinth/models/bad")).status, 404);
  }
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 200, await health.text());
});

test("a model named '.' or '..' is a 400 naming `name`: such a name would be folded out of /api/2.0/plinth/models/{name}", async () => {
  const source = await ensureFixtureModel();
  for (const name of [".", ".."]) {
    const r = await dbx(s, "POST", "/api/2.0/plinth/models", { source, name });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE", r.text);
    assert.match(r.json.message, /\bname\b/, r.text);
    assert.match(r.json.message, /not '\.' or '\.\.'/, r.text);
    assert.doesNotMatch(r.json.message, /does not exist|source/, r.text);
  }
  // Dots inside a name are fine.
  const dotted = await dbx(s, "POST", "/api/2.0/plinth/models", { source, name: "tiny.v2" });
  assert.equal(dotted.status, 200, dotted.text);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/plinth/models/tiny.v2")).status, 200);
});

test("a serving endpoint whose entity is an unusable model file is refused as a 400 naming the entity, at once", async () => {
  for (const [what, name] of Object.entries(BAD)) {
    const entity_name = path.join(dir, name);
    const created = await timed(dbx(s, "POST", "/api/2.0/serving-endpoints", { name: "bad-ep", config: { served_entities: [{ entity_name }] } }));
    assert.equal(created.value.status, 400, `${what}: ${created.value.text}`);
    assert.equal(created.value.json.error_code, "INVALID_PARAMETER_VALUE");
    assert.match(created.value.json.message, /config\.served_entities\[0\]\.entity_name/, what);
    assert.match(created.value.json.message, /not a usable GGUF model file/, what);
    assert.ok(created.ms < 1000, `${what}: answered in ${created.ms} ms`);
    assert.equal((await dbx(s, "GET", "/api/2.0/serving-endpoints/bad-ep")).status, 404, `${what}: no endpoint was made`);
  }
  // An update of an existing endpoint's config is checked the same way.
  const ok = await dbx(s, "POST", "/api/2.0/serving-endpoints", { name: "good-ep", config: { served_entities: [{ entity_name: "tiny" }] } });
  assert.equal(ok.status, 200, ok.text);
  for (let i = 0; i < 200 && (await dbx(s, "GET", "/api/2.0/serving-endpoints/good-ep")).json.state.config_update !== "NOT_UPDATING"; i++)
    await new Promise((r) => setTimeout(r, 25));
  const update = await dbx(s, "PUT", "/api/2.0/serving-endpoints/good-ep/config", { served_entities: [{ entity_name: path.join(dir, "hostile.gguf") }] });
  assert.equal(update.status, 400, update.text);
  assert.match(update.json.message, /served_entities\[0\]\.entity_name/);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/good-ep")).status, 200);
});

test("an unusable --model at startup fails that model at once; the models after it still load", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-bad-start-"));
  const config = loadConfig(
    { model: [`bad=${path.join(dir, "hostile.gguf")}`, `zero=${path.join(dir, "zero.gguf")}`, `tiny=${await ensureFixtureModel()}`], port: "0", threads: "1", "data-dir": dataDir },
    {},
  );
  const server = await serve(config, { log: () => {} });
  try {
    const { ms } = await timed(server.loaded);
    assert.ok(ms < 30_000, `loading settled in ${ms} ms`);
    const status = Object.fromEntries(server.registry.list().map((m) => [m.id, m]));
    assert.equal(status.bad.status, "failed");
    assert.match(status.bad.error ?? "", /declares 9223372036854775807 tensors/);
    assert.equal(status.zero.status, "failed");
    assert.match(status.zero.error ?? "", /not a regular file/);
    assert.equal(status.tiny.status, "ready");
  } finally {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
