import { childServerUrl } from "./child-server.ts";
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { AddressInfo } from "node:net";

/**
 * Upstream replicas for the remote-engine tests: real processes speaking HTTP.
 *
 * `faultyReplica` is a small HTTP server that passes every request through to a real Plinth
 * upstream, except generation requests (and /health), which it answers as its current `mode` says:
 * 500s, malformed SSE, a stream cut after one token, a stream that never produces a token, one event
 * that never ends, a well-formed answer with numbers no real server sends (a tool call numbered a
 * billion, a negative and an astronomic token count; embeddings of a billion tokens).
 * `spawnUpstream` runs a whole Plinth server as a child process, so a test can kill it with SIGKILL.
 */

export type FaultMode = "ok" | "500" | "malformed" | "midstream" | "stall" | "endless" | "odd" | "down";

export interface FaultyReplica {
  url: string;
  mode: FaultMode;
  /** Generation requests it received, by the mode it was in. */
  hits: Record<string, number>;
  /** Connections open to it now. */
  connections(): Promise<number>;
  close(): Promise<void>;
}

export async function faultyReplica(target: string, mode: FaultMode = "ok"): Promise<FaultyReplica> {
  const stalled = new Set<http.ServerResponse>();
  const state: FaultyReplica = { url: "", mode, hits: {}, connections: async () => 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    const generation = req.url === "/v1/chat/completions" || req.url === "/v1/completions";
    if (req.url === "/tokenize" && state.mode === "endless") {
      // The head of a count, then its body one byte a second.
      req.resume();
      res.writeHead(200, { "content-type": "application/json" });
      const drip = setInterval(() => res.write(" "), 1_000);
      res.on("close", () => clearInterval(drip));
      return;
    }
    if (req.url === "/health" && state.mode === "endless") {
      // Healthy by its status, then a body that never ends.
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"status":"ok","padding":"');
      const drip = setInterval(() => res.write("a"), 50);
      res.on("close", () => clearInterval(drip));
      return;
    }
    if (req.url === "/health" && state.mode === "down") {
      res.writeHead(503, { "content-type": "application/json" }).end('{"status":"down"}');
      return;
    }
    if (req.url === "/v1/embeddings" && state.mode === "odd") {
      // A vector, and a token count a billion long for a few words of input.
      req.resume();
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", model: "tiny", data: [{ object: "embedding", index: 0, embedding: [0.6, 0.8] }], usage: { prompt_tokens: 1e9, total_tokens: 1e9 } }));
      return;
    }
    if (generation && state.mode !== "ok") {
      state.hits[state.mode] = (state.hits[state.mode] ?? 0) + 1;
      req.resume();
      const sse = () => res.writeHead(200, { "content-type": "text/event-stream" });
      const role = 'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"tiny","choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}\n\n';
      switch (state.mode) {
        case "500":
        case "down":
          res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"message":"replica on fire","type":"server_error"}}');
          return;
        case "malformed":
          sse();
          res.end(`${role}data: {"choices": [oops\n\n`);
          return;
        case "midstream":
          sse();
          res.write(role);
          res.write('data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"tiny","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}\n\n');
          setTimeout(() => res.socket?.destroy(), 20);
          return;
        case "endless": {
          // The role chunk, then a content event that never ends: 64 KiB reads of one token's text
          // without a blank line, up to 1 GiB, for as long as the reader keeps reading.
          sse();
          res.write(`${role}data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"tiny","choices":[{"index":0,"delta":{"content":"`);
          const chunk = Buffer.alloc(64 * 1024, "a");
          let left = 16_384;
          const pump = () => {
            while (left > 0 && !res.destroyed) {
              left--;
              if (!res.write(chunk)) return void res.once("drain", pump);
            }
            res.end();
          };
          pump();
          return;
        }
        case "odd": {
          const chunk = (delta: object, finish: string | null = null, usage: object | null = null) =>
            `data: ${JSON.stringify({ id: "x", object: "chat.completion.chunk", created: 0, model: "tiny", choices: [{ index: 0, delta, finish_reason: finish }], usage })}\n\n`;
          const call = (index: number, name: string) => ({ tool_calls: [{ index, id: `call_${name}`, type: "function", function: { name, arguments: '{"a":1}' } }] });
          sse();
          res.end(
            role +
              chunk(call(1_000_000_000, "first")) +
              chunk(call(-3, "second")) +
              chunk({}, "tool_calls", { prompt_tokens: 1e300, completion_tokens: -5, total_tokens: 7, prompt_tokens_details: { cached_tokens: 2.5 } }) +
              "data: [DONE]\n\n",
          );
          return;
        }
        case "stall":
          sse();
          res.write(role);
          stalled.add(res);
          res.on("close", () => stalled.delete(res));
          return;
      }
    }
    if (generation) state.hits.ok = (state.hits.ok ?? 0) + 1;
    const upstream = http.request(new URL(req.url!, target), { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    res.on("close", () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.connections = () => new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
  state.close = async () => {
    for (const r of stalled) r.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

export interface ChildUpstream {
  url: string;
  child: ChildProcess;
  /** Stops it (SIGKILL if still running) and removes its data directory. */
  close(): Promise<void>;
}

/** A Plinth server in a child process, serving the fixture model as "tiny" (`env` adds to this process's environment); resolves once it is ready. */
export async function spawnUpstream(modelPath: string, extra: string[] = [], env?: NodeJS.ProcessEnv): Promise<ChildUpstream> {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-child-"));
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "src/cli/main.ts", "serve", "--model", `tiny=${modelPath}`, "--port", "0", "--threads", "1", "--data-dir", dataDir, "--log-level", "silent", ...extra],
    { stdio: ["ignore", "ignore", "pipe"], ...(env ? { env: { ...process.env, ...env } } : {}) },
  );
  const url = await childServerUrl(child);
  return {
    url,
    child,
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await new Promise((r) => child.once("exit", r));
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
