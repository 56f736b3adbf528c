import assert from "../helpers/assert.ts";
import { connect, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp, type AppOptions } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";
import { testStore } from "../helpers/test-store.ts";

// What the HTTP layer does on a real socket, over the scripted engine: an oversized body is drained
// so the client reads its 413, Node's own refusals (huge URL or headers, a body longer than its
// Content-Length) answer in the envelope, slow headers and trickled bodies are cut off, idle
// connections close, and connections beyond the limit are refused.

const BODY_LIMIT = 64 * 1024;

async function listening(http: Partial<Omit<AppOptions, "store" | "sealer">> = {}): Promise<{ app: FastifyInstance; port: number; url: string }> {
  const registry = new ModelRegistry(8);
  const engine = new ScriptedEngine({ id: "tiny" });
  registry.register(engine.id);
  registry.ready(engine);
  const { store, sealer, dispose } = testStore();
  const app = buildApp(new GenerationService(registry), { bodyLimit: BODY_LIMIT, store, sealer, ...http });
  app.addHook("onClose", dispose);
  await app.listen({ host: "127.0.0.1", port: 0 });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { app, port, url: `http://127.0.0.1:${port}` };
}

const ok = { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 };

/** Writes raw bytes, then collects everything the server sends until it closes the connection. */
function rawExchange(port: number, chunks: Array<string | Buffer>, opts: { gapMs?: number; timeoutMs?: number } = {}): Promise<{ text: string; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    let writing = true;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within ${opts.timeoutMs ?? 5000} ms; got: ${Buffer.concat(received).toString().slice(0, 300)}`));
    }, opts.timeoutMs ?? 5000);
    socket.on("data", (d) => received.push(d));
    socket.on("error", () => {});
    socket.on("close", () => {
      writing = false;
      clearTimeout(timer);
      resolve({ text: Buffer.concat(received).toString(), closedAfterMs: Date.now() - started });
    });
    socket.on("connect", async () => {
      for (const c of chunks) {
        if (!writing) return;
        socket.write(c);
        if (opts.gapMs) await new Promise((r) => setTimeout(r, opts.gapMs));
      }
    });
  });
}

/** The JSON bodies of the HTTP responses in a raw exchange, with their status codes. */
function responses(text: string): Array<{ status: number; body: any; requestId?: string }> {
  const out: Array<{ status: number; body: any; requestId?: string }> = [];
  let rest = text;
  while (rest.startsWith("HTTP/1.1 ")) {
    const headEnd = rest.indexOf("\r\n\r\n");
    const head = rest.slice(0, headEnd);
    const status = Number(head.slice(9, 12));
    const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
    const body = rest.slice(headEnd + 4, headEnd + 4 + length);
    out.push({ status, body: JSON.parse(body), requestId: /^x-request-id: (\S+)/im.exec(head)?.[1] });
    rest = rest.slice(headEnd + 4 + length);
  }
  return out;
}

function assertEnvelope(body: any, status: number, actual: number) {
  assert.equal(actual, status, JSON.stringify(body));
  assert.equal(typeof body?.error?.message, "string", JSON.stringify(body));
  assert.ok(body.error.message.length > 10);
  assert.ok("param" in body.error && "code" in body.error && "type" in body.error, JSON.stringify(body));
}

describe("oversized bodies: the client reads the 413", () => {
  // A body larger than the socket buffers between client and server (several MB on loopback): the
  // client is still sending when the server answers, which is where a closed socket breaks its pipe.
  const LIMIT = 2 * 1024 * 1024;
  const OVER = 6 * 1024 * 1024; // within the drain cap (4 × the limit)
  let s: Awaited<ReturnType<typeof listening>>;
  before(async () => {
    s = await listening({ bodyLimit: LIMIT });
  });
  after(() => s.app.close());

  test("fetch sending a body over the limit (with Content-Length) gets the 413 envelope, not a socket error", async () => {
    const body = JSON.stringify({ ...ok, messages: [{ role: "user", content: "x".repeat(OVER) }] });
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    assertEnvelope(await r.json(), 413, r.status);
  });

  test("fetch streaming a body over the limit (chunked) gets the 413 envelope", async () => {
    const piece = new TextEncoder().encode("x".repeat(256 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < OVER / piece.length) controller.enqueue(piece);
        else controller.close();
      },
    });
    const r = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: stream,
      duplex: "half",
    } as RequestInit);
    assertEnvelope(await r.json(), 413, r.status);
  });

  test("a client that sends its whole body before reading (as Python's http.client does) reads the 413, no broken pipe", async () => {
    const body = Buffer.alloc(OVER, 0x20);
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const { text, writeError } = await new Promise<{ text: string; writeError?: Error }>((resolve) => {
      const socket = connect(s.port, "127.0.0.1");
      const received: Buffer[] = [];
      let writeError: Error | undefined;
      socket.on("error", (err) => (writeError ??= err));
      socket.on("connect", async () => {
        const write = (b: Buffer | string) => new Promise<void>((r) => socket.write(b, () => r()));
        await write(head);
        for (let at = 0; at < body.length && !writeError; at += 256 * 1024) await write(body.subarray(at, at + 256 * 1024));
        // Only now read, as a client that sends everything first does.
        socket.on("data", (d) => received.push(d));
      });
      socket.on("close", () => resolve({ text: Buffer.concat(received).toString(), writeError }));
      setTimeout(() => socket.destroy(), 5000).unref();
    });
    assert.equal(writeError, undefined, "the body was sent whole");
    const [answer] = responses(text);
    assertEnvelope(answer.body, 413, answer.status);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });

  test("a body far beyond the drain cap is cut off, and the server stays healthy", async () => {
    const r = await rawExchange(s.port, [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${1024 * 1024 * 1024}\r\n\r\n`,
    ]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 413, answer.status);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });
});

describe("requests Node refuses before routing answer in the envelope", () => {
  let s: Awaited<ReturnType<typeof listening>>;
  before(async () => {
    s = await listening();
  });
  after(() => s.app.close());

  test("a 64 KB URL → 431", async () => {
    const r = await rawExchange(s.port, [`GET /v1/models?${"q".repeat(64 * 1024)} HTTP/1.1\r\nHost: localhost\r\n\r\n`]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 431, answer.status);
    // Named like every other answer, though no route ever saw it.
    assert.match(answer.requestId ?? "", /^req_/, r.text.slice(0, 300));
  });

  test("under a dialect's own paths, the same refusals answer in that dialect's envelope (Databricks here)", async () => {
    const long = await rawExchange(s.port, [`POST /serving-endpoints/${"x".repeat(20_000)}/invocations HTTP/1.1\r\nHost: localhost\r\n\r\n`]);
    const [answer] = responses(long.text);
    assert.equal(answer.status, 431, long.text);
    assert.equal(typeof answer.body.error_code, "string", long.text);
    const segment = await fetch(`${s.url}/api/2.0/serving-endpoints/${"x".repeat(600)}`);
    assert.equal(segment.status, 414);
    assert.equal(typeof (await segment.json()).error_code, "string");
    const encoding = await fetch(`${s.url}/serving-endpoints/%ZZ/invocations`, { method: "POST" });
    assert.equal(encoding.status, 400);
    assert.match(encoding.headers.get("x-request-id") ?? "", /^req_/);
    assert.equal(typeof (await encoding.json()).error_code, "string");
    // Elsewhere, OpenAI's.
    const openai = await fetch(`${s.url}/v1/models/%ZZ`);
    assert.equal(typeof (await openai.json()).error?.message, "string");
  });

  test("64 KB of headers → 431", async () => {
    const r = await rawExchange(s.port, [`GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: ${"h".repeat(64 * 1024)}\r\n\r\n`]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 431, answer.status);
  });

  test("a body longer than its Content-Length: every answer is an envelope, never 'Client Error'", async () => {
    const body = JSON.stringify(ok);
    const r = await rawExchange(s.port, [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n${body}`,
    ]);
    assert.ok(!r.text.includes("Client Error"), r.text);
    const answers = responses(r.text);
    assert.ok(answers.length >= 1, r.text);
    for (const a of answers) assertEnvelope(a.body, a.status, a.status);
    assert.ok(answers.every((a) => a.status === 400), r.text);
  });

  test("a request that is not HTTP at all → 400 envelope", async () => {
    const r = await rawExchange(s.port, ["\x16\x03\x01 this is not http\r\n\r\n"]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 400, answer.status);
  });

  test("an HTTP/1.1 request without Host is a 400 envelope naming the header; HTTP/1.0 needs none", async () => {
    const r = await rawExchange(s.port, ["GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n"]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 400, answer.status);
    assert.match(answer.body.error.message, /Host/);
    assert.ok(answer.requestId);
    const old = await rawExchange(s.port, ["GET /health HTTP/1.0\r\n\r\n"]);
    assert.match(old.text, /^HTTP\/1\.1 200 /);
  });

  test("CONNECT is a 405 envelope (it closed the connection without a word), in the route's dialect", async () => {
    for (const target of ["/v1/models", "127.0.0.1:443"]) {
      const r = await rawExchange(s.port, [`CONNECT ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`]);
      const [answer] = responses(r.text);
      assertEnvelope(answer.body, 405, answer.status);
      assert.match(answer.body.error.message, /CONNECT/);
      assert.ok(answer.requestId);
    }
    const mine = responses((await rawExchange(s.port, ["CONNECT /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: mine-connect\r\n\r\n"])).text);
    assert.equal(mine[0].requestId, "mine-connect");
    const databricks = await rawExchange(s.port, ["CONNECT /serving-endpoints/x/invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]);
    const [d] = responses(databricks.text);
    assert.equal(d.status, 405);
    assert.equal(typeof d.body.error_code, "string", JSON.stringify(d.body));
  });

  test("an Expect other than 100-continue is a 417 envelope naming it, in the route's dialect", async () => {
    const body = JSON.stringify(ok);
    const r = await rawExchange(s.port, [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 200-ok\r\nX-Request-Id: mine-417\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    ]);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 417, answer.status);
    assert.match(answer.body.error.message, /200-ok/);
    // The headers were read: the client's own id names the answer, as on every other route.
    assert.equal(answer.requestId, "mine-417");
    const databricks = await rawExchange(s.port, [`POST /serving-endpoints/x/invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: nothing\r\nContent-Length: 2\r\n\r\n{}`]);
    const [d] = responses(databricks.text);
    assert.equal(d.status, 417);
    assert.equal(typeof d.body.error_code, "string", JSON.stringify(d.body));
  });
});

describe("timeouts and the connection limit", () => {
  let s: Awaited<ReturnType<typeof listening>>;
  before(async () => {
    s = await listening({ headersTimeoutMs: 300, bodyTimeoutMs: 400, keepAliveTimeoutMs: 300, maxConnections: 3 });
  });
  after(() => s.app.close());

  test("a client that sends its headers and then trickles its body is answered 408 and cut off", async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n`;
    const trickle = Array.from({ length: 100 }, () => " ");
    const r = await rawExchange(s.port, [head, ...trickle], { gapMs: 50 });
    assert.ok(r.closedAfterMs < 2000, `closed after ${r.closedAfterMs} ms`);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 408, answer.status);
  });

  test("a head declaring a body beyond the drain cap is answered and cut off, and its body deadline passing later harms nothing", async () => {
    // The 413 (or 415) is sent without reading the body; the body's streams used to stay piped from
    // the socket, and when the body deadline passed their error had no reader and ended the process.
    for (const type of ["application/json", "text/plain"]) {
      const r = await rawExchange(s.port, [
        `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: ${type}\r\nContent-Length: ${1024 * 1024 * 1024}\r\n\r\n{`,
      ]);
      const [answer] = responses(r.text);
      assertEnvelope(answer.body, type === "text/plain" ? 415 : 413, answer.status);
    }
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });

  test("a client that trickles its headers is answered 408 and cut off", async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n`;
    const trickle = Array.from({ length: 100 }, (_, i) => `X-${i}: y\r\n`);
    const r = await rawExchange(s.port, [head, ...trickle], { gapMs: 50 });
    assert.ok(r.closedAfterMs < 2000, `closed after ${r.closedAfterMs} ms`);
    const [answer] = responses(r.text);
    assertEnvelope(answer.body, 408, answer.status);
  });

  test("an idle keep-alive connection is closed after the keep-alive timeout", async () => {
    const r = await rawExchange(s.port, ["GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"]);
    assert.equal(responses(r.text)[0].status, 200);
    assert.ok(r.closedAfterMs < 1500, `closed after ${r.closedAfterMs} ms`);
  });

  test("connections beyond the limit are refused at once; a freed one lets the next in", async () => {
    const open: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const sock = connect(s.port, "127.0.0.1");
        sock.on("error", () => {});
        await new Promise((r) => sock.once("connect", r));
        // A request in flight (its head whole, its body still coming) keeps the connection busy.
        sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{");
        open.push(sock);
      }
      await new Promise((r) => setTimeout(r, 50));
      const started = Date.now();
      const extra = await rawExchange(s.port, ["GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"], { timeoutMs: 2000 });
      assert.equal(extra.text, "", "refused without an answer");
      assert.ok(Date.now() - started < 500, "refused quickly");
      open.pop()!.destroy();
      await new Promise((r) => setTimeout(r, 50));
      const after = await fetch(`${s.url}/health`, { headers: { connection: "close" } });
      assert.equal(after.status, 200);
    } finally {
      for (const sock of open) sock.destroy();
    }
  });
});

describe("connections that never finish a request head (slowloris) at the connection limit", () => {
  let s: Awaited<ReturnType<typeof listening>>;
  before(async () => {
    s = await listening({ headersTimeoutMs: 30_000, maxConnections: 4 });
  });
  after(() => s.app.close());

  test("the oldest of them is closed to let a new client in, instead of all holding the limit for the head timeout", async () => {
    const held: Socket[] = [];
    const closed: number[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const sock = connect(s.port, "127.0.0.1");
        sock.on("error", () => {});
        sock.once("close", () => closed.push(i));
        await new Promise((r) => sock.once("connect", r));
        sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
        held.push(sock);
        await new Promise((r) => setTimeout(r, 20));
      }
      // Past the grace a connection gets to send its head (1 s), the oldest make room.
      await new Promise((r) => setTimeout(r, 1_200));
      const started = Date.now();
      const r = await fetch(`${s.url}/health`, { headers: { connection: "close" }, signal: AbortSignal.timeout(3000) });
      assert.equal(r.status, 200);
      assert.ok(Date.now() - started < 1000, `answered after ${Date.now() - started} ms`);
      // The ones closed to make room were the oldest.
      assert.ok(closed.length >= 2, `closed: ${closed}`);
      assert.deepEqual(closed.slice().sort(), closed.slice().sort((a, b) => a - b).slice(0, closed.length));
      assert.ok(closed.includes(0));
    } finally {
      for (const sock of held) sock.destroy();
    }
  });
});

describe("idle keep-alive connections at the connection limit", () => {
  let s: Awaited<ReturnType<typeof listening>>;
  before(async () => {
    s = await listening({ keepAliveTimeoutMs: 60_000, maxConnections: 4 });
  });
  after(() => s.app.close());

  test("connections left idle after a request make room for new clients, instead of holding the limit for the keep-alive timeout", async () => {
    const idle: Socket[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const sock = connect(s.port, "127.0.0.1");
        sock.on("error", () => {});
        await new Promise((r) => sock.once("connect", r));
        sock.write("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
        // Answered, then left open and idle, as a keep-alive client leaves it (or refused: closed).
        const answered = await new Promise((r) => {
          sock.once("data", () => r(true));
          sock.once("close", () => r(false));
        });
        assert.ok(answered, `connection ${i + 1} was refused`);
        idle.push(sock);
      }
      const started = Date.now();
      const r = await fetch(`${s.url}/health`, { headers: { connection: "close" }, signal: AbortSignal.timeout(3000) });
      assert.equal(r.status, 200);
      assert.ok(Date.now() - started < 1000, `answered after ${Date.now() - started} ms`);
    } finally {
      for (const sock of idle) sock.destroy();
    }
  });
});

describe("llama-server's sse_ping_interval", () => {
  test("a stream silent for that many seconds gets a comment line, as llama-server's; none without the field, none when not streamed", async () => {
    const registry = new ModelRegistry(8);
    // Each chunk comes 1.5 s after the one before: past a 1 s interval, one ping in each gap.
    const engine = new ScriptedEngine({
      id: "tiny",
      slots: 4,
      delayMs: 1500,
      script: () => [
        { kind: "text", text: "a", tokens: 1 },
        { kind: "text", text: "b", tokens: 1 },
        { kind: "end", reason: "stop" },
      ],
    });
    registry.register(engine.id);
    registry.ready(engine);
    const { store, sealer, dispose } = testStore();
    const app = buildApp(new GenerationService(registry), { bodyLimit: BODY_LIMIT, store, sealer });
    app.addHook("onClose", dispose);
    const url = await app.listen({ host: "127.0.0.1", port: 0 });
    try {
      const post = async (path: string, body: Record<string, unknown>) => {
        const r = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", ...body }) });
        return { status: r.status, text: await r.text() };
      };
      const pings = (text: string) => text.split("\n\n").filter((e) => e === ":").length;
      const [chat, completion, silent, whole] = await Promise.all([
        post("/v1/chat/completions", { ...ok, stream: true, sse_ping_interval: 1 }),
        post("/v1/completions", { prompt: "hi", max_tokens: 2, stream: true, sse_ping_interval: 1 }),
        post("/v1/chat/completions", { ...ok, stream: true, sse_ping_interval: -1 }),
        post("/v1/chat/completions", { ...ok, sse_ping_interval: 1 }),
      ]);
      for (const r of [chat, completion]) {
        assert.equal(r.status, 200, r.text);
        // Two gaps after the stream's head (before "b" and before the end): a ping in each (one may
        // be lost to a timer late on a loaded machine, never more than one a gap).
        assert.ok(pings(r.text) >= 1 && pings(r.text) <= 2, r.text);
        // A ping is a comment of its own between events, never inside one.
        assert.doesNotMatch(r.text, /[^\n]\n:\n|:\n\n(?!data: |:\n)/);
        assert.match(r.text, /data: \[DONE\]\n\n$/);
      }
      assert.equal(silent.status, 200, silent.text);
      assert.equal(pings(silent.text), 0, silent.text);
      assert.equal(whole.status, 200, whole.text);
      assert.equal(JSON.parse(whole.text).choices[0].message.content, "ab");
      for (const bad of [1.5, -2, "1"]) {
        const r = await post("/v1/chat/completions", { ...ok, stream: true, sse_ping_interval: bad });
        assert.equal(r.status, 400, r.text);
        assert.equal(JSON.parse(r.text).error.param, "sse_ping_interval");
      }
    } finally {
      await app.close();
    }
  });
});
