import assert from "../helpers/assert.ts";
import { after, test } from "node:test";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { DB_FILE, openSqliteStore } from "../../src/store/sqlite-store.ts";

// A completed response must survive `kill -9` of the server. A child process writes through the
// store, reports each write after its call returned, and is SIGKILLed without closing anything;
// then this process opens the same directory and finds every reported write.

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const STORE_MODULE = pathToFileURL(join(REPO, "src/store/sqlite-store.ts")).href;

const root = mkdtempSync(join(tmpdir(), "plinth-store-durability-"));
after(() => rmSync(root, { recursive: true, force: true }));

const WRITER = `
import { openSqliteStore } from ${JSON.stringify(STORE_MODULE)};
const store = openSqliteStore({ dataDir: process.argv[2], ttlSeconds: 3600 });
const ns = "tenant";
await store.responses.create(ns, {
  id: "resp_bg", status: "in_progress", model: "m", body: { id: "resp_bg", status: "in_progress" },
  inputItems: [{ type: "message", role: "user", content: "go" }], background: true,
});
await store.responses.create(ns, {
  id: "resp_done", status: "completed", model: "m",
  body: { id: "resp_done", object: "response", status: "completed", output: [{ type: "message", content: [{ type: "output_text", text: "kept" }] }] },
  inputItems: [{ id: "msg_in", type: "message", role: "user", content: "hi" }],
});
await store.conversations.create(ns, { id: "conv_1", items: [{ id: "it_1", type: "message", role: "user", content: "c" }] });
await store.chatCompletions.create(ns, { id: "chatcmpl-1", model: "m", metadata: { k: "v" }, body: { id: "chatcmpl-1" }, messages: [{ role: "user", content: "q" }] });
process.stdout.write("written\\n");
// Then stream events until killed, reporting each one after its append returned.
for (let seq = 0; ; seq++) {
  await store.responseEvents.append(ns, "resp_bg", seq, { type: "response.output_text.delta", sequence_number: seq, delta: "x" });
  process.stdout.write("event " + seq + "\\n");
  if (seq % 50 === 49) await new Promise((resolve) => setImmediate(resolve));
}
`;

test("writes whose calls returned survive kill -9 of the writing process", async () => {
  const dataDir = join(root, "data");
  const script = join(root, "writer.mjs");
  writeFileSync(script, WRITER);
  const child = spawn(process.execPath, ["--import", "tsx", script, dataDir], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = once(child, "exit");
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the writer did not report in time; stderr: ${stderr}`)), 60_000);
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      if (/^event 199$/m.test(stdout)) {
        clearTimeout(timer);
        child.kill("SIGKILL");
        resolve();
      }
    });
    child.on("exit", () => reject(new Error(`the writer exited early: ${stderr}`)));
  });
  const [code, signal] = await exited;
  assert.equal(signal, "SIGKILL", `killed (code ${code})`);
  const reported = [...stdout.matchAll(/^event (\d+)$/gm)].map((m) => Number(m[1]));
  const lastReported = Math.max(...reported);
  assert.ok(lastReported >= 199, `reported up to ${lastReported}`);

  // Nothing was checkpointed or closed: the commits are in the write-ahead log.
  const wal = join(dataDir, `${DB_FILE}-wal`);
  assert.ok(existsSync(wal) && statSync(wal).size > 0, "the killed writer left its WAL behind");

  const store = openSqliteStore({ dataDir, ttlSeconds: 3600 });
  try {
    assert.equal(store.migrationsApplied, 0);
    const done = await store.responses.get("tenant", "resp_done");
    assert.equal(done?.status, "completed");
    assert.deepEqual(done?.body.output, [{ type: "message", content: [{ type: "output_text", text: "kept" }] }]);
    assert.deepEqual((await store.responses.listInputItems("tenant", "resp_done"))?.data.map((i) => i.id), ["msg_in"]);
    assert.equal(await store.responses.get("", "resp_done"), undefined, "still namespaced after recovery");
    assert.equal((await store.conversations.getItem("tenant", "conv_1", "it_1"))?.content, "c");
    assert.deepEqual((await store.chatCompletions.list("tenant", { metadata: { k: "v" } })).data.map((c) => c.id), ["chatcmpl-1"]);

    const events = await store.responseEvents.list("tenant", "resp_bg");
    assert.ok(events, "the background response is there");
    const seqs = events.map((e) => e.sequenceNumber);
    assert.ok(seqs.length >= lastReported + 1, `${seqs.length} events stored, ${lastReported + 1} reported`);
    assert.deepEqual(seqs.slice(0, lastReported + 1), Array.from({ length: lastReported + 1 }, (_, i) => i), "every reported event, in order");
    // A resumed stream picks up after the last event a client saw.
    assert.deepEqual((await store.responseEvents.list("tenant", "resp_bg", lastReported - 2))?.slice(0, 2).map((e) => e.sequenceNumber), [lastReported - 1, lastReported]);
  } finally {
    await store.close();
  }
  assert.equal(existsSync(wal), false, "a clean close checkpoints and removes the WAL");
});

test("on a full disk writes fail with SQLITE_FULL, and close still closes (its optimize step failing does not stop it)", async () => {
  const dataDir = join(root, "full");
  const store = openSqliteStore({ dataDir, ttlSeconds: 0 });
  // Enough rows, read through an index, that `optimize` wants to write statistics on close.
  for (let i = 0; i < 300; i++) await store.chatCompletions.create("ns", { id: `c${i}`, model: "m", metadata: { i: String(i % 7) }, body: { text: "x".repeat(200) }, messages: [] });
  for (let i = 0; i < 5; i++) await store.chatCompletions.list("ns", { limit: 5, order: "desc" });
  store.limitGrowth(0);
  await assert.rejects(
    store.chatCompletions.create("ns", { id: "big", model: "m", body: { text: "x".repeat(100_000) }, messages: [] }),
    (err: { code?: string }) => err.code === "SQLITE_FULL",
  );
  await store.close();
  assert.equal(store.sizeBytes(), 0, "closed");
  // The file is whole: it opens again and has what was written before the disk filled up.
  const again = openSqliteStore({ dataDir, ttlSeconds: 0 });
  try {
    assert.equal((await again.chatCompletions.get("ns", "c299"))?.id, "c299");
  } finally {
    await again.close();
  }
});
