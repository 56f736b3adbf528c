import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { createServer, get, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { SseWriter } from "../../src/http/sse.ts";

// SseWriter on real sockets: after the head, each event goes to the socket as one ready-framed
// chunk (not res.write's three corked writes), and the bytes stay what Node would have sent —
// for a keep-alive client, for pipelined requests (whose responses wait their turn for the
// socket) and for an HTTP/1.0 client (no chunked framing at all).

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer((req, res) => void handler(req, res));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Streams `n` events named after the request's path, `gapMs` apart. */
async function stream(req: IncomingMessage, res: ServerResponse, n: number, gapMs: number): Promise<void> {
  const sse = new SseWriter(res);
  sse.open();
  for (let i = 0; i < n; i++) {
    await sse.data({ path: req.url, i, text: "é ☃" });
    await pause(gapMs);
  }
  sse.end();
}

/** Sends raw request bytes and collects everything until the server has sent `until` (or closes). */
function exchange(port: number, raw: string, until: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(port, "127.0.0.1", () => socket.write(raw));
    let text = "";
    const timer = setTimeout(() => reject(new Error(`timed out; got: ${text}`)), 5000);
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(text);
    };
    socket.on("data", (d) => {
      text += d.toString("latin1");
      if (until(text)) done();
    });
    socket.on("close", done);
  });
}

/** Splits raw HTTP/1.1 responses with chunked bodies into their bodies, checking every chunk's size line. */
function chunkedBodies(raw: string): string[] {
  const bodies: string[] = [];
  let at = 0;
  while (at < raw.length) {
    const head = raw.indexOf("\r\n\r\n", at);
    assert.ok(head > 0, `a response head at ${at}`);
    assert.match(raw.slice(at, head), /^HTTP\/1\.1 200 OK\r\n[\s\S]*transfer-encoding: chunked/i);
    at = head + 4;
    let body = Buffer.alloc(0);
    for (;;) {
      const line = raw.indexOf("\r\n", at);
      const size = parseInt(raw.slice(at, line), 16);
      assert.ok(Number.isInteger(size), `a chunk size line, got ${JSON.stringify(raw.slice(at, at + 20))}`);
      at = line + 2;
      if (size === 0) {
        assert.equal(raw.slice(at, at + 2), "\r\n");
        at += 2;
        break;
      }
      body = Buffer.concat([body, Buffer.from(raw.slice(at, at + size), "latin1")]);
      at += size;
      assert.equal(raw.slice(at, at + 2), "\r\n", "a chunk ends with CRLF");
      at += 2;
    }
    bodies.push(body.toString("utf8"));
  }
  return bodies;
}

const events = (body: string) => body.split("\n\n").filter(Boolean).map((e) => JSON.parse(e.replace(/^data: /, "")));

test("after the head, each event is one write of one framed chunk, and a client reads every event intact", async () => {
  const writes: number[] = [];
  const s = await serve(async (req, res) => {
    const socket = res.socket!;
    const write = socket.write.bind(socket) as (...a: unknown[]) => boolean;
    let calls = 0;
    socket.write = ((...a: unknown[]) => {
      calls++;
      return write(...a);
    }) as typeof socket.write;
    const sse = new SseWriter(res);
    sse.open();
    for (let i = 0; i < 6; i++) {
      const before = calls;
      await sse.data({ i, text: "é ☃" });
      writes.push(calls - before);
    }
    sse.end();
  });
  try {
    const body = await new Promise<string>((resolve) => get(`http://127.0.0.1:${s.port}/`, (r) => {
      let text = "";
      r.setEncoding("utf8");
      r.on("data", (d) => (text += d));
      r.on("end", () => resolve(text));
    }));
    assert.deepEqual(events(body), [0, 1, 2, 3, 4, 5].map((i) => ({ i, text: "é ☃" })));
    // The first event carries the head through res.write; each one after is a single socket write
    // (res.write made three of them: size line, data, line end).
    assert.deepEqual(writes.slice(1), [1, 1, 1, 1, 1]);
  } finally {
    await s.close();
  }
});

test("pipelined streamed requests on one connection get their responses whole and in order", async () => {
  const s = await serve((req, res) => stream(req, res, 4, req.url === "/a" ? 15 : 1));
  try {
    const raw = await exchange(
      s.port,
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n",
      (t) => (t.match(/\r\n0\r\n\r\n/g) ?? []).length === 3,
    );
    const bodies = chunkedBodies(raw);
    assert.deepEqual(bodies.map((b) => events(b).map((e) => `${e.path}${e.i}`).join(" ")), ["/a0 /a1 /a2 /a3", "/b0 /b1 /b2 /b3", "/c0 /c1 /c2 /c3"]);
  } finally {
    await s.close();
  }
});

test("a keep-alive connection takes a second stream after the first ends", async () => {
  const s = await serve((req, res) => stream(req, res, 3, 2));
  try {
    const socket = connect(s.port, "127.0.0.1");
    await new Promise((r) => socket.once("connect", r));
    let raw = "";
    socket.on("data", (d) => (raw += d.toString("latin1")));
    const ended = (n: number) => new Promise<void>((resolve) => {
      const check = () => ((raw.match(/\r\n0\r\n\r\n/g) ?? []).length >= n ? resolve() : setTimeout(check, 5));
      check();
    });
    socket.write("GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
    await ended(1);
    socket.write("GET /two HTTP/1.1\r\nHost: x\r\n\r\n");
    await ended(2);
    socket.destroy();
    assert.deepEqual(chunkedBodies(raw).map((b) => events(b).length), [3, 3]);
  } finally {
    await s.close();
  }
});

test("an HTTP/1.0 client gets the events unframed, and the connection closes at the end", async () => {
  const s = await serve((req, res) => stream(req, res, 3, 1));
  try {
    const raw = await exchange(s.port, "GET /old HTTP/1.0\r\n\r\n", () => false);
    const [head, ...rest] = raw.split("\r\n\r\n");
    assert.doesNotMatch(head, /transfer-encoding/i);
    assert.deepEqual(events(Buffer.from(rest.join("\r\n\r\n"), "latin1").toString("utf8")).map((e) => e.i), [0, 1, 2]);
  } finally {
    await s.close();
  }
});
