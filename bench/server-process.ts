import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { childServerUrl } from "../test/helpers/child-server.ts";

const MAIN = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));

/**
 * The server under test runs in its own process, as in production, so the benchmark client's own
 * work does not share its event loop.
 */
export async function startServerProcess(
  args: string[],
  checkout?: string,
  /** CPUs to pin the server to (a `taskset -c` list such as "0" or "2-3"); unpinned when absent. */
  cpus?: string,
): Promise<{ url: string; child: ChildProcess; stop: () => Promise<void> }> {
  // Each server stores what it stores (responses) in a directory of its own, removed at stop.
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-bench-"));
  // Another checkout (a baseline to compare against) runs its own sources with its own modules.
  const main = checkout ? path.join(checkout, "src/cli/main.ts") : MAIN;
  // BENCH_NODE_ARGS adds flags to the server's node (e.g. "--cpu-prof --cpu-prof-dir=/tmp/p"), which
  // NODE_OPTIONS does not accept.
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const command = [process.execPath, ...nodeArgs, "--import", "tsx", main, "serve", "--port", "0", "--data-dir", dataDir, ...args];
  // taskset execs the server in place, so the child's pid is the server's.
  if (cpus) command.unshift("taskset", "-c", cpus);
  const child = spawn(command[0], command.slice(1), {
    stdio: ["ignore", "inherit", "pipe"],
    ...(checkout ? { cwd: checkout } : {}),
  });
  // A benchmark stopped half-way (Ctrl-C, a timeout's SIGTERM) must not leave its server decoding.
  const orphanGuard = () => child.kill("SIGKILL");
  process.once("exit", orphanGuard);
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.once(signal, () => {
      orphanGuard();
      process.exit(130);
    });
  child.once("exit", () => process.off("exit", orphanGuard));
  const url = await childServerUrl(child);
  const stop = () =>
    new Promise<void>((resolve) => {
      child.once("exit", () => {
        rmSync(dataDir, { recursive: true, force: true });
        resolve();
      });
      child.kill("SIGTERM");
    });
  return { url, child, stop };
}
