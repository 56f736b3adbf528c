import assert from "../helpers/assert.ts";
import { test } from "node:test";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { AddressInfo } from "node:net";
import { serve, type RunningServer } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { postJson, startTestServer, waitFor } from "../helpers/server.ts";

// A router started before its upstream (a fleet that comes up after it, a vLLM still loading its
// model): the remote model waits, loading, while the local one serves, and is ready once the
// upstream answers. Real processes' worth of parts: the router and the upstream are real servers.

/** A loopback port nobody listens on (taken, then given back). */
async function freePort(): Promise<number> {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

async function router(upstreamUrl: string): Promise<{ server: RunningServer; lines: string[]; close: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-test-"));
  const lines: string[] = [];
  const config = loadConfig(
    {
      model: [`tiny=${await ensureFixtureModel()}`],
      upstream: [{ name: "r", url: [upstreamUrl], model: "tiny" }],
      port: "0",
      threads: "1",
      "health-interval": "0",
      "data-dir": dataDir,
    },
    {},
  );
  const server = await serve(config, { log: (l) => lines.push(l) });
  return {
    server,
    lines,
    close: async () => {
      await server.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

test("a remote model whose upstream is not up yet waits (503 model_loading, /health says so) and serves once the upstream answers", async () => {
  const port = await freePort();
  const r = await router(`http://127.0.0.1:${port}`);
  let upstream: Awaited<ReturnType<typeof startTestServer>> | undefined;
  try {
    // Loading is over for every model that can load: the local one serves, the remote one waits.
    await r.server.loaded;
    assert.equal(r.server.registry.get("tiny")?.status, "ready");
    assert.equal(r.server.registry.get("r")?.status, "loading");
    const health = await fetch(`${r.server.url}/health`);
    assert.equal(health.status, 503);
    const state = (await health.json()) as { status: string; models: Record<string, string> };
    assert.equal(state.status, "loading");
    assert.match(state.models.r, /^loading: waiting for its upstream/);
    const early = await postJson(`${r.server.url}/v1/chat/completions`, { model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(early.status, 503, early.text);
    assert.equal(early.json.error.code, "model_loading");
    // When the model is tried again (the first pause is 1 s; later ones grow), not a fixed guess.
    assert.ok(Number(early.headers.get("retry-after")) >= 1, `Retry-After: ${early.headers.get("retry-after")}`);
    // The client is not told where the upstream lives; the operator's log is.
    assert.ok(!early.text.includes(String(port)), early.text);
    assert.ok(r.lines.some((l) => l.includes("'r' is waiting for its upstream") && l.includes(String(port))), r.lines.join("\n"));
    assert.equal((await postJson(`${r.server.url}/v1/chat/completions`, { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 })).status, 200);

    // The upstream comes up on that port; the router's next try finds it (tries 1, 2, 4 s apart).
    upstream = await startTestServer({ port: String(port) });
    await waitFor(() => r.server.registry.get("r")?.status === "ready", 20_000);
    const answer = await postJson(`${r.server.url}/v1/chat/completions`, { model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(answer.status, 200, answer.text);
    assert.equal((await fetch(`${r.server.url}/health`)).status, 200);
  } finally {
    await r.close();
    await upstream?.close();
  }
});

test("a router stopped while its model waits for an upstream stops at once; an upstream that is up but wrong fails the model at once", async () => {
  const r = await router(`http://127.0.0.1:${await freePort()}`);
  await r.server.loaded;
  assert.equal(r.server.registry.get("r")?.status, "loading");
  const started = Date.now();
  await r.close();
  // Not the 30 s a pause between tries can reach.
  assert.ok(Date.now() - started < 5_000, `close took ${Date.now() - started} ms`);

  // Something that answers, but not with a model list (a web page, a wrong path): the operator's
  // mistake, not a start-up in progress.
  const page = http.createServer((req, res) => res.writeHead(404, { "content-type": "text/html" }).end("<html>no</html>"));
  await new Promise<void>((resolve) => page.listen(0, "127.0.0.1", resolve));
  const wrong = await router(`http://127.0.0.1:${(page.address() as AddressInfo).port}`);
  try {
    await wrong.server.loaded;
    const model = wrong.server.registry.get("r");
    assert.equal(model?.status, "failed");
    assert.match(model?.error ?? "", /answered 404/);
  } finally {
    await wrong.close();
    await new Promise<void>((resolve) => page.close(() => resolve()));
  }
});
