import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { commonPrefix, PrefixStore, processAlive, safeFileLabel } from "../../src/engines/llama-cpp/prefix-store.ts";

const tokens = (...ids: number[]) => ids as Token[];

/** Only the two members the store uses; the real sequence is exercised by the integration tests. */
function fakeSequence(contextTokens: Token[], save: (path: string) => Promise<{ fileSize: number }>) {
  return { contextTokens, saveStateToFile: save } as unknown as LlamaContextSequence;
}

test("commonPrefix counts the shared leading tokens", () => {
  assert.equal(commonPrefix(tokens(1, 2, 3), tokens(1, 2, 4)), 2);
  assert.equal(commonPrefix(tokens(), tokens(1)), 0);
  assert.equal(commonPrefix(tokens(5, 6), tokens(5, 6)), 2);
});

test("a failed save (a full RAM disk) is skipped, not thrown", async () => {
  const store = new PrefixStore(1_000_000, 1, "unit-fail", { baseDir: tempBase() });
  await store.save("ns", fakeSequence(tokens(1, 2, 3), async () => {
    throw new Error("ENOSPC: no space left on device");
  }));
  assert.equal(store.size, 0);
  store.dispose();
});

test("the same prompt saved by several sequences at once is written once and counted once", async () => {
  const store = new PrefixStore(1_000_000, 1, "unit-once", { baseDir: tempBase() });
  let writes = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const save = async (path: string) => {
    writes++;
    await gate;
    writeFileSync(path, "x".repeat(100));
    return { fileSize: 100 };
  };
  const saves = Array.from({ length: 8 }, () => store.save("ns", fakeSequence(tokens(1, 2, 3), save)));
  release();
  await Promise.all(saves);
  assert.equal(writes, 1, "one writer for one file");
  assert.equal(store.size, 1);
  assert.equal(store.bytesUsed, 100);
  // Once written, later saves of the same prompt only mark it used.
  await store.save("ns", fakeSequence(tokens(1, 2, 3), save));
  assert.equal(writes, 1);
  store.dispose();
});

test("forget drops an entry, its bytes and its file", async () => {
  const store = new PrefixStore(1_000_000, 1, "unit-forget", { baseDir: tempBase() });
  await store.save("ns", fakeSequence(tokens(1, 2, 3), async (path) => {
    writeFileSync(path, "x".repeat(100));
    return { fileSize: 100 };
  }));
  const found = store.best("ns", tokens(1, 2, 3, 4))!;
  assert.ok(existsSync(found.entry.path));
  store.forget(found.entry);
  assert.equal(store.size, 0);
  assert.equal(store.bytesUsed, 0);
  assert.equal(existsSync(found.entry.path), false);
  assert.equal(store.best("ns", tokens(1, 2, 3, 4)), undefined);
  store.dispose();
});

test("entries are found only in their own namespace, and evicted oldest first", async () => {
  const store = new PrefixStore(250, 1, "unit-lru", { baseDir: tempBase() });
  const save = (path: string) => {
    writeFileSync(path, "x".repeat(100));
    return Promise.resolve({ fileSize: 100 });
  };
  await store.save("a", fakeSequence(tokens(1, 2, 3), save));
  await store.save("a", fakeSequence(tokens(7, 8), save));
  assert.equal(store.best("b", tokens(1, 2, 3)), undefined);
  assert.equal(store.best("a", tokens(1, 2, 9))?.match, 2);
  await store.save("a", fakeSequence(tokens(4, 5), save)); // over budget: the least recently used goes
  assert.equal(store.size, 2);
  assert.equal(store.best("a", tokens(7, 8)), undefined);
  assert.ok(store.bytesUsed <= 250);
  assert.equal(store.evictions, 1, "the eviction is counted (plinth_prompt_cache_evictions_total)");
  store.dispose();
});

test("the store keeps at most maxEntries states, whatever the byte budget, dropping the least recently used", async () => {
  const store = new PrefixStore(1_000_000, 1, "unit-count", { baseDir: tempBase(), maxEntries: 3 });
  const save = (path: string) => {
    writeFileSync(path, "x");
    return Promise.resolve({ fileSize: 1 });
  };
  for (const first of [1, 2, 3]) await store.save("a", fakeSequence(tokens(first, 0), save));
  assert.ok(store.best("a", tokens(1, 0)));
  await store.save("a", fakeSequence(tokens(4, 0), save)); // the fourth: 2 was used least recently
  assert.equal(store.size, 3);
  assert.equal(store.best("a", tokens(2, 0)), undefined);
  assert.ok(store.best("a", tokens(1, 0)));
  assert.equal(store.evictions, 1);
  assert.equal(store.bytesUsed, 3);
  assert.equal(readdirSync(store.directory!).length, 3, "the evicted state's file is gone too");
  store.dispose();
});

// ---- the folder: permissions, clean-up, names ----------------------------------------------

const tempDirs: string[] = [];
after(() => {
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

function tempBase(): string {
  const dir = mkdtempSync(join(tmpdir(), "plinth-prefix-test-"));
  tempDirs.push(dir);
  return dir;
}

/** Writes the state the way the native writer does: fopen("wb"), which keeps an existing file's mode. */
const writeState = (path: string) => {
  writeFileSync(path, "x".repeat(10));
  return Promise.resolve({ fileSize: 10 });
};

const modeOf = (p: string) => statSync(p).mode & 0o777;

test("the folder is 0700 and the state files 0600, whatever the umask", async () => {
  const previous = process.umask(0);
  try {
    const store = new PrefixStore(1_000_000, 1, "unit-perms", { baseDir: tempBase() });
    await store.save("ns", fakeSequence(tokens(1, 2, 3), writeState));
    // A writer that replaces the file rather than rewriting it gets 0666 under umask 0.
    await store.save("ns", fakeSequence(tokens(4, 5, 6), (path) => {
      rmSync(path, { force: true });
      writeFileSync(path, "y".repeat(10), { mode: 0o666 });
      return Promise.resolve({ fileSize: 10 });
    }));
    const dir = store.directory;
    assert.ok(dir, "the first save creates the folder");
    assert.equal(modeOf(dir), 0o700);
    const files = readdirSync(dir);
    assert.equal(files.length, 2);
    for (const f of files) assert.equal(modeOf(join(dir, f)), 0o600, f);
    store.dispose();
  } finally {
    process.umask(previous);
  }
});

test("dispose removes the folder, and stores share one exit listener", async () => {
  const base = tempBase();
  const listenersBefore = process.listenerCount("exit");
  const a = new PrefixStore(1_000_000, 1, "unit-a", { baseDir: base });
  const b = new PrefixStore(1_000_000, 1, "unit-b", { baseDir: base });
  assert.equal(process.listenerCount("exit"), listenersBefore, "no folder yet, no listener");
  await a.save("ns", fakeSequence(tokens(1, 2), writeState));
  await b.save("ns", fakeSequence(tokens(1, 2), writeState));
  assert.equal(process.listenerCount("exit"), listenersBefore + 1);
  const dirA = a.directory!;
  const dirB = b.directory!;
  assert.notEqual(dirA, dirB);

  a.dispose();
  assert.equal(existsSync(dirA), false);
  assert.equal(existsSync(dirB), true);
  assert.equal(process.listenerCount("exit"), listenersBefore + 1, "b still needs it");
  // A save after dispose (a request finishing late) must not bring the folder back.
  await a.save("ns", fakeSequence(tokens(3, 4), writeState));
  assert.equal(a.directory, undefined);
  assert.equal(existsSync(dirA), false);

  b.dispose();
  assert.equal(existsSync(dirB), false);
  assert.equal(process.listenerCount("exit"), listenersBefore);
  assert.deepEqual(readdirSync(base), []);
});

test("a save finishing after dispose leaves nothing behind", async () => {
  const base = tempBase();
  const store = new PrefixStore(1_000_000, 1, "unit-late", { baseDir: base });
  await store.save("ns", fakeSequence(tokens(1, 2), async (path) => {
    const written = await writeState(path);
    store.dispose();
    return written;
  }));
  assert.equal(store.size, 0);
  assert.deepEqual(readdirSync(base), []);
});

test("the folder is removed when the process exits without disposing", () => {
  const base = tempBase();
  const script = `
    import { writeFileSync } from "node:fs";
    import { PrefixStore } from ${JSON.stringify(new URL("../../src/engines/llama-cpp/prefix-store.ts", import.meta.url).href)};
    const store = new PrefixStore(1e6, 1, "unit-exit", { baseDir: process.env.BASE });
    await store.save("ns", { contextTokens: [1, 2], saveStateToFile: async (p) => { writeFileSync(p, "x"); return { fileSize: 1 }; } });
    process.stdout.write(store.directory ?? "none");
    process.exit(0);
  `;
  const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, BASE: base },
    encoding: "utf8",
  });
  assert.equal(child.status, 0, child.stderr);
  assert.ok(child.stdout.startsWith(join(base, "plinth-")), child.stdout);
  assert.equal(existsSync(child.stdout), false);
  assert.deepEqual(readdirSync(base), []);
});

test("starting a store sweeps the folders of processes that are gone, and only those", async () => {
  const base = tempBase();
  const dead = await deadPid();
  const stale = join(base, `plinth-${dead}-some-model-abc123`);
  mkdirSync(stale);
  writeFileSync(join(stale, "x.state"), "someone's prompt");
  const keep = [
    `plinth-${process.pid}-mine-abc123`, // this process
    `plinth-${process.ppid}-parent-abc123`, // alive
    `plinth-1-init-abc123`, // alive, and usually not ours to signal (EPERM)
    `plinth-x-not-a-pid`,
    `other-${dead}-thing`,
  ];
  for (const k of keep) mkdirSync(join(base, k));
  writeFileSync(join(base, `plinth-${dead}-a-file`), "not a folder");

  const store = new PrefixStore(0, 1, "unit-sweep", { baseDir: base });
  assert.equal(existsSync(stale), false);
  assert.deepEqual(readdirSync(base).sort(), [...keep, `plinth-${dead}-a-file`].sort());
  store.dispose();
});

test("processAlive: this process and pid 1 are alive, an exited child is not", async () => {
  assert.equal(processAlive(process.pid), true);
  assert.equal(processAlive(1), true);
  assert.equal(processAlive(await deadPid()), false);
  // Another user's process cannot be signalled (EPERM) but is there; run as root this is not seen, so stub it.
  const realKill = process.kill;
  process.kill = (() => {
    throw Object.assign(new Error("kill EPERM"), { code: "EPERM" });
  }) as typeof process.kill;
  try {
    assert.equal(processAlive(12345), true);
  } finally {
    process.kill = realKill;
  }
});

test("model ids become safe, distinct folder names", async () => {
  const base = tempBase();
  const ids = ["org/model:Q4", "org_model_Q4", "../../etc/passwd", "..", "", "名前", "a".repeat(300), "x\0y\nz"];
  const labels = ids.map(safeFileLabel);
  for (const l of labels) {
    assert.match(l, /^[A-Za-z0-9._-]{1,80}$/);
    assert.ok(l !== "." && l !== "..", l);
  }
  assert.equal(new Set(labels).size, ids.length, "ids that render alike still get their own names");

  const dirs: string[] = [];
  for (const id of ids) {
    const store = new PrefixStore(1_000_000, 1, id, { baseDir: base });
    await store.save("ns", fakeSequence(tokens(1, 2), writeState));
    assert.equal(dirname(store.directory!), base, id);
    dirs.push(store.directory!);
    store.dispose();
  }
  assert.equal(new Set(dirs).size, ids.length);
  assert.deepEqual(readdirSync(base), []);
});

/** The pid of a child that has exited and been reaped: certainly not a live process for a while. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  await once(child, "exit");
  assert.ok(child.pid, "child started");
  return child.pid;
}
