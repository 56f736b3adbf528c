import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { childServerUrl } from "../helpers/child-server.ts";
import { parsePrometheus } from "../helpers/prometheus.ts";

const MAIN = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

/** How often a thread of `pid` has gone to sleep of its own accord (Linux's count in /proc). */
function voluntarySwitches(pid: number): number {
  const status = readFileSync(`/proc/${pid}/task/${pid}/status`, "utf8");
  return Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)![1]);
}

// An idle server's JavaScript thread sleeps. The event-loop lag histogram sampled every 10 ms
// (prom-client's default) woke it 100 times a second, busy or not: an extra turn of the event loop
// per streamed token, and a decode thread put off each time on a machine whose cores decoding fills.
test("an idle server's main thread wakes a few times a second, and the event-loop lag is still sampled", { skip: !existsSync("/proc/self/task") }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-idle-"));
  const child = spawn(
    process.execPath,
    ["--import", "tsx", MAIN, "serve", "--model", `tiny=${await ensureFixtureModel()}`, "--port", "0", "--threads", "1", "--ctx-size", "256", "--data-dir", path.join(dir, "data")],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, PLINTH_CONFIG: "" } },
  );
  try {
    const url = await childServerUrl(child);
    await new Promise((r) => setTimeout(r, 500));
    const before = voluntarySwitches(child.pid!);
    await new Promise((r) => setTimeout(r, 2000));
    const perSecond = (voluntarySwitches(child.pid!) - before) / 2;
    // 100 a second before; the lag sampler at 10 a second leaves about 11.
    assert.ok(perSecond < 50, `the idle main thread woke ${perSecond} times a second`);

    const metrics = parsePrometheus(await (await fetch(`${url}/metrics`)).text());
    const p99 = metrics.samples.find((s) => s.name === "plinth_nodejs_eventloop_lag_p99_seconds");
    assert.ok(p99 && p99.value > 0, "the lag percentiles come from samples taken");
  } finally {
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
