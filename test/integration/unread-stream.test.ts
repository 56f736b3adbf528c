import assert from "../helpers/assert.ts";
import net from "node:net";
import { describe, test } from "node:test";
import { BUFFERED_BYTES } from "../../src/core/event-weight.ts";
import { NO_EOG, useTestServer, waitFor } from "../helpers/server.ts";

// A client that opens a stream and then stops reading its socket. Its events must not pile up in
// the server without bound (they did: 28 MB for one 4,000-token answer with 20 top logprobs per
// token, and RSS grew by 420 MB with 16 such clients): its generation is held once a bounded
// buffer is full, and a client that takes nothing for --send-timeout is cut off like a disconnect.

const heavy = (maxTokens: number, n = 1) =>
  JSON.stringify({
    model: "tiny",
    n,
    messages: [{ role: "user", content: "Go on" }],
    stream: true,
    max_tokens: maxTokens,
    logprobs: true,
    top_logprobs: 20,
    logit_bias: NO_EOG,
  });

/** A raw connection that sends a streaming request; it reads only when told to. */
function rawStream(url: string, body: string) {
  const { port } = new URL(url);
  const socket = net.connect(Number(port), "127.0.0.1");
  const chunks: Buffer[] = [];
  let ended = false;
  socket.on("data", (b) => {
    chunks.push(b);
    // The last chunk of a chunked body.
    if (b.toString("latin1").endsWith("\r\n0\r\n\r\n")) ended = true;
  });
  socket.on("error", () => {});
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return {
    socket,
    received: () => Buffer.concat(chunks).toString("utf8"),
    /** The whole response has arrived. */
    get ended() {
      return ended;
    },
  };
}

/** The JSON payloads of a chunked SSE response's data lines, and whether it ended with [DONE]. */
function dataEvents(raw: string): { events: Array<Record<string, unknown>>; done: boolean } {
  const body = raw.slice(raw.indexOf("\r\n\r\n") + 4);
  // Chunked transfer: drop the chunk-size lines between the chunks.
  let text = "";
  for (let at = 0; at < body.length; ) {
    const eol = body.indexOf("\r\n", at);
    const size = Number.parseInt(body.slice(at, eol), 16);
    if (!(size > 0)) break;
    text += body.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
  const lines = text.split("\n").filter((l) => l.startsWith("data: "));
  const done = lines.at(-1) === "data: [DONE]";
  return { events: lines.filter((l) => l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6))), done };
}

describe("a client that stops reading", () => {
  const s = useTestServer({ parallel: "4" });
  const scheduler = () => s.registry.resolve("tiny").scheduler;

  test("holds its generation at a bounded buffer, lets other requests run, and gets the whole stream once it reads on", async () => {
    // Three choices of 3,000 tokens: about 16 MB rendered, well past what the sockets' buffers take
    // on loopback (a few MB), which would otherwise hide a buffer that grows.
    const stream = rawStream(s.url, heavy(3000, 3));
    // Reading nothing (Node's socket stops pulling from the kernel once paused).
    stream.socket.pause();
    await waitFor(() => scheduler().busy === 3);
    // Wait until the buffered events stop growing (the generation is held) or pass the bound.
    const slack = 64 * 1024;
    let last = -1;
    let still = 0;
    await waitFor(() => {
      const { bytes } = s.service.buffered();
      if (bytes > BUFFERED_BYTES + slack) return true;
      still = bytes === last && bytes > 0 ? still + 1 : 0;
      last = bytes;
      return still >= 50; // about a second without a change
    }, 60_000);
    const held = s.service.buffered();
    assert.ok(held.bytes <= BUFFERED_BYTES + slack, `buffered ${held.bytes} bytes (${held.events} events) for one unread stream; bound ${BUFFERED_BYTES}`);
    assert.equal(scheduler().busy, 3, "the held generation keeps its sequences until it ends or is cut off");

    // The other sequence serves another client meanwhile, at its usual pace.
    const started = Date.now();
    const other = await s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 20, logit_bias: NO_EOG });
    assert.equal(other.choices[0].finish_reason, "length");
    assert.ok(Date.now() - started < 10_000);

    // Reading on, the client gets every token, in a well-formed stream.
    stream.socket.resume();
    await waitFor(() => stream.ended, 60_000);
    stream.socket.destroy();
    const { events, done } = dataEvents(stream.received());
    assert.ok(done, "the stream ends with [DONE]");
    type Chunk = { choices: Array<{ index: number; finish_reason: string | null; logprobs?: { content?: unknown[] } | null }> };
    const tokens = [0, 0, 0];
    const finished: Array<string | null> = [null, null, null];
    for (const e of events as Chunk[])
      for (const c of e.choices) {
        tokens[c.index] += c.logprobs?.content?.length ?? 0;
        finished[c.index] ??= c.finish_reason;
      }
    assert.deepEqual(tokens, [3000, 3000, 3000]);
    assert.deepEqual(finished, ["length", "length", "length"]);
    assert.equal(s.service.buffered().bytes, 0);
  });
});

describe("a client that takes nothing for --send-timeout", () => {
  const s = useTestServer({ parallel: "1", "send-timeout": "2" });
  const scheduler = () => s.registry.resolve("tiny").scheduler;

  test("is cut off like a disconnect: its generation ends, its sequence serves the next request", async () => {
    const failures = async () => {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      return Number(/^plinth_generation_failures_total\{[^}]*code="client_closed"[^}]*\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const before = await failures();
    const stream = rawStream(s.url, heavy(4000));
    stream.socket.pause();
    await waitFor(() => scheduler().busy === 1);
    const started = Date.now();
    // The client's own socket cannot tell: it reads nothing, so it never sees the server's close.
    await waitFor(() => scheduler().busy === 0, 30_000);
    // Held for the send timeout (2 s) once its buffers filled, not for the whole answer.
    assert.ok(Date.now() - started < 20_000);
    assert.equal(await failures(), before + 1, "counted as a client that closed the connection");
    const next = await s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    assert.equal(next.choices.length, 1);
    stream.socket.destroy();
  });
});

describe("a client that asks for the connection to close", () => {
  const s = useTestServer();

  test("gets its stream and then the close it asked for (an explicit keep-alive header kept the socket open)", async () => {
    const { port } = new URL(s.url);
    const body = JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hi" }], stream: true, max_tokens: 4 });
    const socket = net.connect(Number(port), "127.0.0.1");
    let text = "";
    socket.on("data", (b) => (text += b.toString("utf8")));
    const closed = new Promise<boolean>((resolve) => {
      socket.on("close", () => resolve(true));
      setTimeout(() => resolve(false), 10_000).unref();
    });
    socket.on("error", () => {});
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    assert.ok(await closed, `the server kept the connection open: ${text.slice(0, 300)}`);
    socket.destroy();
    assert.match(text, /^HTTP\/1\.1 200/);
    assert.match(text, /data: \[DONE\]/);
    assert.doesNotMatch(text.split("\r\n\r\n")[0], /connection: keep-alive/i);
  });
});
