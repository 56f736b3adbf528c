import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadOrCreateSecretKey, openText, SEALED_PREFIX, SealedTextError, sealText, SECRET_KEY_FILE } from "../../src/store/secret-key.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const root = mkdtempSync(join(tmpdir(), "plinth-store-key-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = () => join(root, `d${dirs++}`);

test("the key is made on first use: 32 random bytes in a 0600 file in a 0700 directory", () => {
  const dir = join(freshDir(), "data");
  const previous = process.umask(0o000); // the widest umask: modes must still come out private
  let key: Buffer;
  try {
    key = loadOrCreateSecretKey(dir);
  } finally {
    process.umask(previous);
  }
  assert.equal(key.length, 32);
  assert.ok(!key.equals(Buffer.alloc(32)), "not all zeros");
  const path = join(dir, SECRET_KEY_FILE);
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  assert.deepEqual(readFileSync(path), key);
  assert.deepEqual(readdirSync(dir), [SECRET_KEY_FILE], "no temporary file left behind");
});

test("the key is reused, and two data directories get two keys", () => {
  const dir = freshDir();
  const first = loadOrCreateSecretKey(dir);
  const again = loadOrCreateSecretKey(dir);
  assert.deepEqual(again, first);
  assert.ok(!loadOrCreateSecretKey(freshDir()).equals(first), "another directory, another key");
});

test("a key file of the wrong size is an error naming the file, not a silent new key", () => {
  const dir = freshDir();
  loadOrCreateSecretKey(dir);
  writeFileSync(join(dir, SECRET_KEY_FILE), "short");
  assert.throws(() => loadOrCreateSecretKey(dir), /secret\.key holds 5 bytes, not a 32-byte key/);
});

test("processes racing to create the key all end up with the one key on disk", async () => {
  const dir = freshDir();
  const moduleUrl = pathToFileURL(join(REPO, "src/store/secret-key.ts")).href;
  const script = join(root, "race.mjs");
  const barrier = join(root, "race-barrier");
  mkdirSync(barrier);
  writeFileSync(
    script,
    `import { existsSync, writeFileSync } from "node:fs";
     import { loadOrCreateSecretKey } from ${JSON.stringify(moduleUrl)};
     // Start together: say ready once loaded, then wait for the go.
     const [dir, barrier, me] = process.argv.slice(2);
     writeFileSync(barrier + "/ready-" + me, "");
     const cell = new Int32Array(new SharedArrayBuffer(4));
     while (!existsSync(barrier + "/go")) Atomics.wait(cell, 0, 0, 1);
     process.stdout.write(loadOrCreateSecretKey(dir).toString("hex"));`,
  );
  const racers = 4;
  const children = Array.from({ length: racers }, (_, i) =>
    spawn(process.execPath, ["--import", "tsx", script, dir, barrier, String(i)], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] }),
  );
  const deadline = Date.now() + 60_000;
  while (readdirSync(barrier).length < racers) {
    assert.ok(Date.now() < deadline, "the racers got ready");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  writeFileSync(join(barrier, "go"), "");
  const keys = await Promise.all(
    children.map(async (child) => {
      let out = "";
      let err = "";
      child.stdout.on("data", (chunk) => (out += chunk));
      child.stderr.on("data", (chunk) => (err += chunk));
      const [code] = await once(child, "exit");
      assert.equal(code, 0, err);
      return out;
    }),
  );
  const onDisk = readFileSync(join(dir, SECRET_KEY_FILE)).toString("hex");
  assert.equal(onDisk.length, 64);
  assert.deepEqual(keys, keys.map(() => onDisk));
  assert.deepEqual(readdirSync(dir), [SECRET_KEY_FILE], "the losers' temporary files are gone");
});

test("seal and open round-trip, with a fresh IV each time", () => {
  const key = loadOrCreateSecretKey(freshDir());
  for (const text of ["", "reasoning: 2 + 2 = 4", "ünïcödé 🧠 " + "x".repeat(10_000)]) {
    const sealed = sealText(key, text, "ns:alice");
    assert.ok(sealed.startsWith(SEALED_PREFIX), sealed.slice(0, 20));
    assert.equal(openText(key, sealed, "ns:alice"), text);
  }
  const a = sealText(key, "same", "");
  const b = sealText(key, "same", "");
  assert.notEqual(a, b, "random IV: the same text seals differently");
  assert.equal(openText(key, a, ""), "same");
  assert.ok(!a.includes("same"), "the plaintext does not show");
});

test("any change, another key or another context is detected", () => {
  const key = loadOrCreateSecretKey(freshDir());
  const sealed = sealText(key, "the model's reasoning", "ns:alice");
  const raw = Buffer.from(sealed.slice(SEALED_PREFIX.length), "base64");
  const rewrap = (bytes: Buffer) => SEALED_PREFIX + bytes.toString("base64");
  const flip = (at: number) => {
    const copy = Buffer.from(raw);
    copy[at] ^= 0x01;
    return rewrap(copy);
  };
  const isSealedError = (pattern: RegExp) => (e: unknown) => e instanceof SealedTextError && pattern.test(e.message);
  const auth = isSealedError(/failed authentication/);

  assert.throws(() => openText(key, flip(0), "ns:alice"), auth, "IV");
  assert.throws(() => openText(key, flip(12), "ns:alice"), auth, "tag");
  assert.throws(() => openText(key, flip(raw.length - 1), "ns:alice"), auth, "ciphertext");
  assert.throws(() => openText(key, rewrap(raw.subarray(0, raw.length - 1)), "ns:alice"), auth, "cut short");
  assert.throws(() => openText(key, rewrap(Buffer.concat([raw, Buffer.from([0])])), "ns:alice"), auth, "extended");
  assert.throws(() => openText(key, sealed, "ns:bob"), auth, "another context");
  assert.throws(() => openText(loadOrCreateSecretKey(freshDir()), sealed, "ns:alice"), auth, "another key");
  assert.throws(() => openText(key, rewrap(raw.subarray(0, 20)), "ns:alice"), isSealedError(/too short/));
  assert.throws(() => openText(key, sealed.slice(SEALED_PREFIX.length), "ns:alice"), isSealedError(/must start with/));
  assert.throws(() => openText(key, "plinth-v2:" + sealed.slice(SEALED_PREFIX.length), "ns:alice"), isSealedError(/must start with/));
  assert.throws(() => openText(key, SEALED_PREFIX + "not base64!", "ns:alice"), isSealedError(/base64/));
  assert.equal(openText(key, sealed, "ns:alice"), "the model's reasoning", "the original still opens");

  assert.throws(() => sealText(Buffer.alloc(16), "x", ""), /32-byte/);
  assert.throws(() => openText(Buffer.alloc(16), sealed, ""), /32-byte/);
});
