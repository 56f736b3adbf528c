import { childServerUrl } from "../helpers/child-server.ts";
import assert from "../helpers/assert.ts";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { openSqliteStore } from "../../src/store/sqlite-store.ts";
import { TenancyStore } from "../../src/store/tenancy-store.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";

// The ledger's promise: a finished request's row survives the server being killed with SIGKILL
// within a second of the request's end. The server runs as the CLI in a child process; after the
// kill the store is opened again (as a restart would) and the rows are counted.

const MAIN = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
const KEY = "crash-test-key-0123456789";

test("ledger rows of finished requests survive kill -9 one second later, and the store reopens", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-ledger-crash-"));
  const model = await ensureFixtureModel();
  const child = spawn(
    process.execPath,
    ["--import", "tsx", MAIN, "serve", "--model", `tiny=${model}`, "--port", "0", "--threads", "1", "--ctx-size", "512",
      "--data-dir", dataDir, "--api-key", KEY, "--log-level", "silent"],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  try {
    const url = await childServerUrl(child);

    let prompt = 0;
    let completion = 0;
    const N = 24;
    for (let i = 0; i < N; i += 4) {
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          const res = await fetch(`${url}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
            body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hello there" }], max_tokens: 3 }),
          });
          const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
          assert.equal(res.status, 200);
          prompt += body.usage.prompt_tokens;
          completion += body.usage.completion_tokens;
        }),
      );
    }
    await new Promise((r) => setTimeout(r, 1000));
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;

    const store = openSqliteStore({ dataDir, ttlSeconds: 0 });
    const tenancy = new TenancyStore(dataDir);
    try {
      const [row] = tenancy.usage("key", 0, Date.now() + 1);
      assert.equal(row.requests, N);
      assert.equal(row.errors, 0);
      assert.equal(row.promptTokens, prompt);
      assert.equal(row.completionTokens, completion);
      assert.match(row.group ?? "", /^static-[0-9a-f]{12}$/);
    } finally {
      tenancy.close();
      await store.close();
    }
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  }
});
