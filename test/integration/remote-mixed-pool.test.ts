import assert from "../helpers/assert.ts";
import { test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { serve } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { waitFor } from "../helpers/server.ts";

// A pool whose replicas serve different models: the model's id comes from the first replica's list,
// and the start warns of a replica that does not list it. The replicas are scripted fakes (small real
// HTTP servers that answer only their model list), not models.
async function fake(model: string, delayMs = 0): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    req.resume();
    const list = () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [{ id: model, object: "model" }] }));
    if (req.url === "/v1/models") return void setTimeout(list, delayMs);
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

test("a replica that does not serve the pool's model is named in a warning at start", async () => {
  const serving = await fake("m");
  // Slower to answer, so the pool's model comes from the other one's list.
  const other = await fake("something-else", 300);
  const urlOf = (s: http.Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-mixed-"));
  const lines: string[] = [];
  const config = loadConfig({ upstream: [{ name: "pool", url: [urlOf(serving), urlOf(other)], model: "m", tokenize: false }], port: "0", "data-dir": dataDir, "health-interval": "0" }, {});
  const server = await serve(config, { log: (line: string) => lines.push(line) });
  try {
    await server.loaded;
    await waitFor(() => lines.some((l) => l.includes("warning")), 5_000);
    const warning = lines.find((l) => l.includes("warning"))!;
    assert.match(warning, new RegExp(`replica ${urlOf(other).replace(/[.]/g, "\\.")}.* does not serve 'm' \\(it serves 'something-else'\\)`));
    assert.ok(!lines.some((l) => l.includes(`replica ${urlOf(serving)}`)), lines.join("\n"));
  } finally {
    await server.close(2_000);
    for (const s of [serving, other]) {
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
});
