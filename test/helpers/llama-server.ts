import { spawn } from "node:child_process";
import { createServer } from "node:net";

/**
 * A real llama-server (llama.cpp) process for the tests that put it behind a Plinth router. The
 * binary comes from LLAMA_SERVER_BIN (CI has none, so those tests skip). The process is killed
 * when the test process exits, too, so a failing test cannot leave it running.
 */
export interface LlamaServer {
  url: string;
  /** The server's process id (benchmarks read its threads' CPU time). */
  pid: number;
  /** Its recent stderr, for failure messages. */
  log(): string;
  close(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export async function startLlamaServer(bin: string, modelPath: string, args: string[], timeoutMs = 60_000): Promise<LlamaServer> {
  const port = await freePort();
  const child = spawn(bin, ["-m", modelPath, "--host", "127.0.0.1", "--port", String(port), ...args], { stdio: ["ignore", "ignore", "pipe"] });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  let log = "";
  child.stderr!.on("data", (d: Buffer) => {
    log = (log + d.toString()).slice(-8000);
  });
  const close = async () => {
    process.off("exit", killOnExit);
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  };
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`llama-server exited (${child.exitCode}): ${log}`);
      if ((await fetch(`${url}/health`).catch(() => undefined))?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`llama-server did not become healthy within ${timeoutMs} ms: ${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { url, pid: child.pid!, log: () => log, close };
}
