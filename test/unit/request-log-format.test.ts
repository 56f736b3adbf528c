import assert from "../helpers/assert.ts";
import { Writable } from "node:stream";
import { test } from "node:test";
import { loggerOptions, namespaceHash } from "../../src/observability/request-log.ts";

/** What the pretty format writes for one JSON log line. */
async function prettyOf(line: Record<string, unknown>): Promise<string> {
  let out = "";
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      out += chunk.toString("utf8");
      done();
    },
  });
  const { stream } = loggerOptions("info", "pretty", sink);
  await new Promise<void>((resolve) => stream.write(`${JSON.stringify(line)}\n`, () => resolve()));
  return out;
}

test("pretty log lines read time, level, request id, message and fields", async () => {
  const line = { level: 30, time: Date.UTC(2026, 0, 1, 12, 0, 0, 5), pid: 1, hostname: "h", request_id: "req_1", status: 200, route: "/v1/chat/completions", msg: "request" };
  assert.equal(await prettyOf(line), "12:00:00.005 INFO req_1 request status=200 route=/v1/chat/completions\n");
});

test("json format passes lines through; auto is JSON off a terminal", () => {
  const sink = new Writable({ write: (_c, _e, done) => done() });
  assert.equal(loggerOptions("info", "json", sink).stream, sink);
  assert.equal(loggerOptions("info", "auto", sink).stream, sink);
});

test("namespaces are hashed, never shown", () => {
  assert.equal(namespaceHash(undefined), undefined);
  const h = namespaceHash('["alice",null]')!;
  assert.match(h, /^[0-9a-f]{16}$/);
  assert.ok(!h.includes("alice"));
});

test("a pretty line quotes values a client chose, so a newline in one cannot forge another line", async () => {
  const forged = "x\n12:00:00.000 INFO req_forged request status=200";
  const line = { level: 30, time: Date.UTC(2026, 0, 1, 12, 0, 0, 5), request_id: "req_1", model: forged, key_name: "a b", status: 404, msg: "request" };
  const out = await prettyOf(line);
  assert.equal(out.split("\n").length, 2, out);
  assert.equal(out, `12:00:00.005 INFO req_1 request model=${JSON.stringify(forged)} key_name="a b" status=404\n`);
});
