import assert from "../helpers/assert.ts";
import { execFile, spawn } from "node:child_process";
import Database from "better-sqlite3";
import { chmodSync, chownSync, closeSync, mkdirSync, mkdtempSync, openSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { childServerUrl } from "../helpers/child-server.ts";
import { DB_FILE, openSqliteStore } from "../../src/store/sqlite-store.ts";

// The command line as a user meets it: the real CLI in a child process, its exit code and what it
// prints. A mistake in the invocation must say what is wrong in a line or two, never a bare errno.

const MAIN = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `plinth <args>`; `asUser` runs it as that uid/gid (root only: to meet a permission check root would pass). */
function plinth(args: string[], opts: { asUser?: number; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", MAIN, ...args],
      { timeout: opts.timeoutMs ?? 30_000, uid: opts.asUser, gid: opts.asUser, env: { ...process.env, PLINTH_CONFIG: "" } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
    );
  });
}

const scratch = () => {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-cli-"));
  chmodSync(dir, 0o755); // readable by the other user the permission checks run as
  return dir;
};

test("a data directory that is a file, or under a file, is refused naming the data directory", async () => {
  const dir = scratch();
  const file = path.join(dir, "file");
  writeFileSync(file, "");
  for (const [args, dataDir] of [
    [["serve", "--port", "0"], file],
    [["keys", "list"], file],
    [["usage"], path.join(file, "sub")],
  ] as const) {
    const r = await plinth([...args, "--data-dir", dataDir]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`data directory ${dataDir.replaceAll("/", "\\/")}`), r.stderr);
    assert.match(r.stderr, /not a directory|a part of its path is a file/);
    assert.doesNotMatch(r.stderr, /EEXIST|ENOTDIR/);
    assert.ok(r.stderr.trim().split("\n").length <= 2, r.stderr);
  }
});

test("a data directory that cannot be made is refused at once (under /proc, Node's recursive mkdir never returned)", { skip: process.platform !== "linux" }, async () => {
  const start = Date.now();
  const r = await plinth(["serve", "--port", "0", "--data-dir", "/proc/plinth-test/data"], { timeoutMs: 20_000 });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /cannot create the data directory \/proc\/plinth-test\/data/);
  assert.ok(Date.now() - start < 15_000);
});

test("a store file that cannot serve (a directory, another program's file) is refused naming the file", async () => {
  const dir = scratch();
  const asDirectory = path.join(dir, "a");
  mkdirSync(path.join(asDirectory, "plinth.db"), { recursive: true });
  const notSqlite = path.join(dir, "b");
  mkdirSync(notSqlite);
  writeFileSync(path.join(notSqlite, "plinth.db"), "these are notes, not a database\n".repeat(200));
  for (const [args, dataDir, why] of [
    [["serve", "--port", "0"], asDirectory, /it is a directory/],
    [["keys", "list"], asDirectory, /it is a directory/],
    [["serve", "--port", "0"], notSqlite, /not an SQLite database/],
    [["usage"], notSqlite, /not an SQLite database/],
  ] as const) {
    const r = await plinth([...args, "--data-dir", dataDir]);
    assert.equal(r.code, 1, r.stderr);
    assert.ok(r.stderr.includes(`the store ${path.join(dataDir, "plinth.db")}`), r.stderr);
    assert.match(r.stderr, why);
    assert.doesNotMatch(r.stderr, /EISDIR|file is not a database/);
    assert.ok(r.stderr.trim().split("\n").length <= 2, r.stderr);
  }
});

test("a data directory this user may not create or write in is refused naming the data directory", async (t) => {
  const dir = scratch();
  const locked = path.join(dir, "locked");
  mkdirSync(locked);
  // Root passes every permission check, so as root the CLI runs as nobody, for whom a root-owned
  // 0755 directory is read-only; anyone else makes the directory read-only for themselves.
  const root = process.getuid?.() === 0;
  if (!root) chmodSync(locked, 0o555);
  const asUser = root ? 65534 : undefined;
  // Running as another user needs the capability to switch (a container may lack it) and a checkout
  // that user can read: without either, there is no user here for whom the directory is read-only.
  if (asUser !== undefined && (await plinth(["--help"], { asUser })).code !== 0) {
    t.skip("running as root, and the CLI cannot run as another user here");
    return;
  }
  for (const dataDir of [locked, path.join(locked, "new")]) {
    for (const args of [["keys", "list"], ["serve", "--port", "0"]]) {
      const r = await plinth([...args, "--data-dir", dataDir], { asUser });
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, new RegExp(`the data directory ${dataDir.replaceAll("/", "\\/")}`), r.stderr);
      assert.match(r.stderr, /permission denied/);
      assert.doesNotMatch(r.stderr, /EACCES/);
    }
  }
});

test("a word or an option a command does not use is refused, not ignored", async () => {
  const dataDir = scratch();
  for (const [args, message] of [
    [["keys", "list", "extra"], /keys list takes no arguments, got 'extra'/],
    [["keys", "list", "--rpm", "5"], /keys list does not take --rpm/],
    [["keys", "create", "--name", "n", "extra"], /keys create takes no arguments, got 'extra'/],
    [["keys", "revoke", "a", "b"], /keys revoke takes 1 argument, got 'b'/],
    [["keys", "create", "--name", "n", "--expires", "2001-01-01"], /--expires: '2001-01-01' is already past/],
    [["keys", "revoke", "a", "--json"], /keys revoke does not take --json/],
    [["usage", "extra"], /usage takes no arguments, got 'extra'/],
    [["serve", "extra", "--port", "0"], /serve takes no arguments, got 'extra'/],
    [["serve", "--log-bodies", "off", "--port", "0"], /serve takes no arguments, got 'off' \(--log-bodies, --no-auth and --no-ui take no value\)/],
    [["models", "extra"], /models takes no arguments, got 'extra'/],
    [["models", "--port", "5"], /models does not take --port/],
    [["pull", "--gpu", "off", "hf:a/b/c.gguf"], /pull does not take --gpu/],
  ] as const) {
    const withDir = args[0] === "keys" || args[0] === "usage" || args[0] === "serve" ? [...args, "--data-dir", dataDir] : [...args];
    const r = await plinth(withDir, { timeoutMs: 15_000 });
    assert.equal(r.code, 1, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, message, args.join(" "));
    assert.equal(r.stdout, "", args.join(" "));
  }
  // What the commands do take still works.
  const listed = await plinth(["keys", "list", "--json", "--data-dir", dataDir]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.equal(listed.stdout, "[]\n");
});

test("a model that fails to load at startup leaves the others serving; only a server with no model left exits 1", async () => {
  const dir = scratch();
  const empty = path.join(dir, "empty.gguf");
  writeFileSync(empty, "");
  const child = spawn(
    process.execPath,
    ["--import", "tsx", MAIN, "serve", "--model", `tiny=${await ensureFixtureModel()}`, "--model", `bad=${empty}`,
      "--port", "0", "--threads", "1", "--ctx-size", "256", "--log-level", "silent", "--data-dir", path.join(dir, "data")],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  try {
    let log = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`loading did not settle: ${log}`)), 60_000);
      child.stderr!.on("data", (d: Buffer) => {
        log += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(log);
        if (m && /serving the other models without 'bad'/.test(log)) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once("exit", (code) => reject(new Error(`the server exited (${code}): ${log}`)));
    });
    // Still up a moment later (the exit came right after the loads settled), serving the good model.
    await new Promise((r) => setTimeout(r, 300));
    const health = await fetch(`${url}/health`);
    const body = await health.json();
    assert.equal(health.status, 503);
    assert.equal(body.status, "error");
    assert.equal(body.models.tiny, "ready");
    assert.match(body.models.bad, /^failed: .*it is empty/);
    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    });
    assert.equal(chat.status, 200, await chat.clone().text());
    const refused = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "bad", messages: [{ role: "user", content: "hi" }] }),
    });
    assert.equal(refused.status, 503);
    assert.equal((await refused.json()).error.code, "model_unavailable");
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
  } finally {
    child.kill("SIGKILL");
  }

  const none = await plinth(["serve", "--model", `bad=${empty}`, "--port", "0", "--log-level", "silent", "--data-dir", path.join(dir, "data")]);
  assert.equal(none.code, 1, none.stderr);
  assert.match(none.stderr, /model 'bad' failed to load/);
  assert.match(none.stderr, /no model could be loaded/);
});

test("SIGTERM to `npm start` (the README's start command) reaches the server: it drains and exits, nothing left behind", async () => {
  const dir = scratch();
  // npm runs the script through `sh -c`; without `exec` there, the shell took the signal and died,
  // and the server kept running, orphaned, with the port.
  const child = spawn("npm", ["start", "--silent", "--", "--model", `tiny=${await ensureFixtureModel()}`, "--port", "0", "--threads", "1", "--ctx-size", "256", "--data-dir", path.join(dir, "data")], {
    cwd: fileURLToPath(new URL("../..", import.meta.url)),
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, PLINTH_CONFIG: "" },
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log += d.toString()));
  try {
    const url = await childServerUrl(child);
    child.kill("SIGTERM");
    assert.equal(await exited, 0, log);
    assert.match(log, /shutting down/);
    await assert.rejects(fetch(`${url}/health`), "the server is gone with npm");
  } finally {
    child.kill("SIGKILL");
  }
});

test("a second server on a data directory in use is refused naming it; the first keeps serving, and the directory is free once it stops", async () => {
  const data = path.join(scratch(), "data");
  const args = ["serve", "--model", `tiny=${await ensureFixtureModel()}`, "--port", "0", "--threads", "1", "--ctx-size", "256", "--log-level", "silent", "--data-dir", data];
  const start = () => spawn(process.execPath, ["--import", "tsx", MAIN, ...args], { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, PLINTH_CONFIG: "" } });
  const first = start();
  const exited = new Promise<number | null>((r) => first.once("exit", (code) => r(code)));
  try {
    const url = await childServerUrl(first);
    const second = await plinth(args);
    assert.equal(second.code, 1, second.stderr);
    assert.match(second.stderr, /the data directory .*data is in use by another running Plinth server/);
    assert.equal((await fetch(`${url}/v1/models`)).status, 200, "the first server still answers");
    // The key command still works beside a running server.
    const keys = await plinth(["keys", "list", "--data-dir", data]);
    assert.equal(keys.code, 0, keys.stderr);
    first.kill("SIGTERM");
    assert.equal(await exited, 0);
  } finally {
    first.kill("SIGKILL");
  }
  const again = start();
  try {
    await childServerUrl(again);
  } finally {
    again.kill("SIGKILL");
  }
});

const serveIn = (dataDir: string) => plinth(["serve", "--port", "0", "--data-dir", dataDir]);
/** A start refused with one line on stderr. */
const refusedInOneLine = (r: Run) => {
  assert.equal(r.code, 1, r.stderr);
  assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
};

test("a lock file that cannot serve (a directory, another program's file) is refused in one line naming it and what to do", async () => {
  const asDirectory = scratch();
  mkdirSync(path.join(asDirectory, "server.lock"));
  const stale = scratch();
  writeFileSync(path.join(stale, "server.lock"), "not a lock\n".repeat(300));
  const [a, b] = await Promise.all([serveIn(asDirectory), serveIn(stale)]);
  refusedInOneLine(a);
  assert.ok(a.stderr.includes(path.join(asDirectory, "server.lock")), a.stderr);
  assert.match(a.stderr, /is a directory; remove it/);
  assert.doesNotMatch(a.stderr, /unable to open database file/);
  refusedInOneLine(b);
  assert.ok(b.stderr.includes(path.join(stale, "server.lock")), b.stderr);
  assert.match(b.stderr, /delete it/);
  assert.doesNotMatch(b.stderr, /file is not a database/);
});

test("a secret key that is a directory, and a store page found damaged at start, are refused in one line naming the file and what to do", async () => {
  const keyAsDirectory = scratch();
  mkdirSync(path.join(keyAsDirectory, "secret.key"));
  // A store whose responses table's page is overwritten: the first read of it at start (the runs a
  // killed server left) finds it damaged.
  const damaged = scratch();
  const store = openSqliteStore({ dataDir: damaged, ttlSeconds: 0 });
  await store.responses.create("", { id: "resp_1", status: "in_progress", model: "m", body: {}, inputItems: [] });
  await store.close();
  const file = path.join(damaged, DB_FILE);
  const db = new Database(file);
  const root = db.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'responses'").pluck().get() as number;
  const pageSize = db.pragma("page_size", { simple: true }) as number;
  db.close();
  const fd = openSync(file, "r+");
  writeSync(fd, Buffer.alloc(pageSize, "x"), 0, pageSize, (root - 1) * pageSize);
  closeSync(fd);

  const [c, d] = await Promise.all([serveIn(keyAsDirectory), serveIn(damaged)]);
  refusedInOneLine(c);
  assert.ok(c.stderr.includes(`the secret key ${path.join(keyAsDirectory, "secret.key")}`), c.stderr);
  assert.match(c.stderr, /it is a directory; move it away/);
  assert.doesNotMatch(c.stderr, /EISDIR/);
  refusedInOneLine(d);
  assert.ok(d.stderr.includes(`the store ${file}`), d.stderr);
  assert.match(d.stderr, /damaged .*restore it from a backup/);
});

test("a secret key this user may not read is refused naming it, not as a bare EACCES", async (t) => {
  const dataDir = scratch();
  const key = path.join(dataDir, "secret.key");
  writeFileSync(key, Buffer.alloc(32, 1), { mode: 0o600 });
  // Root reads any file: as root the CLI runs as nobody, who owns the directory but not the key.
  const root = process.getuid?.() === 0;
  if (root) chownSync(dataDir, 65534, 65534);
  else chmodSync(key, 0o000);
  const asUser = root ? 65534 : undefined;
  if (asUser !== undefined && (await plinth(["--help"], { asUser })).code !== 0) {
    t.skip("running as root, and the CLI cannot run as another user here");
    return;
  }
  const r = await plinth(["serve", "--port", "0", "--data-dir", dataDir], { asUser });
  assert.equal(r.code, 1, r.stderr);
  assert.ok(r.stderr.includes(`the secret key ${key}: permission denied`), r.stderr);
  assert.doesNotMatch(r.stderr, /EACCES/);
});
