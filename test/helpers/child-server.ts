import type { ChildProcess } from "node:child_process";

/**
 * The URL a Plinth child process announces on stderr ("listening on http://…"), once its /health
 * answers 200. Rejects if the process exits first or does not start within `timeoutMs`. Used by the
 * tests and benchmarks that run the server in a process of its own (kill -9 checks, upstreams).
 */
export async function childServerUrl(child: ChildProcess, timeoutMs = 60_000): Promise<string> {
  const url = await new Promise<string>((resolve, reject) => {
    let log = "";
    const timer = setTimeout(() => reject(new Error(`the server did not start within ${timeoutMs} ms: ${log}`)), timeoutMs);
    child.stderr!.on("data", (d: Buffer) => {
      log += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code}): ${log}`));
    });
  });
  const deadline = Date.now() + timeoutMs;
  while ((await fetch(`${url}/health`).catch(() => undefined))?.status !== 200) {
    if (Date.now() > deadline) throw new Error(`${url}/health did not answer 200 within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return url;
}
