import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { Readable } from "node:stream";
import fc from "fast-check";
import { sseData, UpstreamFailure, type UpstreamResponse } from "../../src/engines/remote/http.ts";

// The remote engine's reader of an upstream's server-sent events, fed from in-memory streams.

const timeouts = { firstMs: 5_000, idleMs: 5_000, started: () => true };

function response(reads: Iterable<Buffer | string> | AsyncIterable<Buffer | string>): UpstreamResponse {
  const body = Readable.from(reads, { objectMode: false });
  return { status: 200, headers: {}, body } as unknown as UpstreamResponse;
}

async function collect(res: UpstreamResponse): Promise<string[]> {
  const out: string[] = [];
  for await (const d of sseData(res, timeouts)) out.push(d);
  return out;
}

type Eol = "\n" | "\r\n" | "\r";

/** A stream of `events` payloads and [DONE]; each line break is eol(i) for the i-th one written. */
function stream(events: string[], eol: Eol | ((i: number) => Eol)): string {
  let i = 0;
  const br = () => (typeof eol === "string" ? eol : eol(i++));
  return [...events, "[DONE]"].map((e) => `data: ${e}${br()}${br()}`).join("");
}

/** `bytes` cut into reads at the given offsets. */
function cut(bytes: Buffer, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const reads: Buffer[] = [];
  let from = 0;
  for (const c of [...at, bytes.length]) {
    if (c > from) reads.push(bytes.subarray(from, c));
    from = Math.max(from, c);
  }
  return reads;
}

const payloads = fc.array(fc.string({ minLength: 1, maxLength: 40 }).filter((s) => !/[\r\n]/.test(s) && s !== "[DONE]"), { minLength: 1, maxLength: 12 });

test("events come out whole and in order however the stream is cut into reads, LF, CRLF or CR", async () => {
  await fc.assert(
    fc.asyncProperty(payloads, fc.constantFrom<Eol>("\n", "\r\n", "\r"), fc.array(fc.nat(), { maxLength: 20 }), async (events, eol, cuts) => {
      assert.deepEqual(await collect(response(cut(Buffer.from(stream(events, eol)), cuts))), events);
    }),
    { numRuns: 300 },
  );
});

test("line endings mixed within one stream, even within one blank line, still end events where SSE says", async () => {
  await fc.assert(
    fc.asyncProperty(payloads, fc.array(fc.constantFrom<Eol>("\n", "\r\n", "\r"), { minLength: 1, maxLength: 30 }), fc.array(fc.nat(), { maxLength: 20 }), async (events, eols, cuts) => {
      // A CR and then an LF would be one CRLF, not two breaks; after a CR, a break that starts with
      // LF is written as a CRLF instead (CR, CRLF: two breaks, as meant).
      let last: Eol | undefined;
      const text = stream(events, (i) => {
        const eol = eols[i % eols.length];
        last = last === "\r" && eol === "\n" ? "\r\n" : eol;
        return last;
      });
      assert.deepEqual(await collect(response(cut(Buffer.from(text), cuts))), events);
    }),
    { numRuns: 300 },
  );
});

test("a CRLF cut between its CR and its LF is one line break, not two (no event ends early)", async () => {
  // "data: a\r" | "\ndata: b\r\n\r\n": were the CR and the LF two breaks, "a" would end there and
  // "b" would come out as an event of its own; as one break, the two lines are one event.
  const out = await collect(response([Buffer.from("data: a\r"), Buffer.from("\ndata: b\r\n\r\ndata: [DONE]\r\n\r\n")]));
  assert.deepEqual(out, ["a\nb"]);
});

test("data lines: one space after the colon is dropped, a bare `data` is an empty line, other fields and comments are skipped", async () => {
  const text = ": keep-alive\n\nevent: chunk\nid: 7\ndata:{\"a\":1}\n\ndata:  two spaces\ndata\ndata: end\n\nretry: 10\n\ndata: [DONE]\n\n";
  assert.deepEqual(await collect(response([Buffer.from(text)])), ['{"a":1}', " two spaces\n\nend"]);
});

test("many events in one read all come out, in one pass over the read", async () => {
  const events = Array.from({ length: 50_000 }, (_, i) => `{"i":${i}}`);
  for (const eol of ["\n", "\r\n"] as const) {
    const out = await collect(response([Buffer.from(stream(events, eol))]));
    assert.equal(out.length, events.length);
    assert.equal(out[49_999], '{"i":49999}');
  }
});

test("an event that never ends is refused once it passes the limit, not read until memory runs out", async () => {
  let reads = 0;
  async function* endless() {
    yield Buffer.from('data: {"choices":[{"delta":{"content":"');
    const chunk = Buffer.alloc(64 * 1024, "a");
    // 1 GiB if nobody stopped reading.
    for (let i = 0; i < 16_384; i++) {
      reads++;
      yield chunk;
    }
  }
  await assert.rejects(collect(response(endless())), (err: unknown) => err instanceof UpstreamFailure && err.kind === "protocol" && /longer than/.test(err.message));
  // 16 Mi characters in 64 KiB reads: 256 reads and a little more.
  assert.ok(reads < 300, `read ${reads} chunks`);
});

test("a stream that ends inside an event, or without [DONE], is a protocol failure", async () => {
  await assert.rejects(collect(response([Buffer.from('data: {"a":1}\n\ndata: {"b"')])), /ended inside an event/);
  await assert.rejects(collect(response([Buffer.from('data: {"a":1}\n\n')])), /ended without \[DONE\]/);
});

test("an upstream that drips bytes without completing an event is stalled all the same", async () => {
  let stop = false;
  async function* drip() {
    yield Buffer.from('data: {"a":1}\n\ndata: {"b":"');
    while (!stop) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      yield Buffer.from("x");
    }
  }
  const started = Date.now();
  const got: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const d of sseData(response(drip()), { firstMs: 5_000, idleMs: 300, started: () => true })) got.push(d);
    })(),
    (err: unknown) => err instanceof UpstreamFailure && err.kind === "timeout",
  );
  stop = true;
  assert.deepEqual(got, ['{"a":1}']);
  // 300 ms after the last whole event, however many bytes came since (a read every 20 ms).
  assert.ok(Date.now() - started < 3_000, `took ${Date.now() - started} ms`);
});
