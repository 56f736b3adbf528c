// Timestamps of one server process's HTTP traffic, for bench/router-profile.ts: preloaded with
// `--import` (through NODE_OPTIONS) into the router and its upstream, never part of a normal run.
// It listens on node:http's diagnostics channels and wraps `write`/`push` of the messages it sees,
// so the server's own code is untouched. One line per POST it served, to
// $PLINTH_TRACE_DIR/<pid>.jsonl: when the request arrived, when its body was in, when the SSE
// head and the first content chunk were written, and for each upstream call it made in the
// meantime: created, socket, body sent, response head, first byte, first content chunk, end.
// Times are epoch milliseconds with sub-millisecond precision, comparable across processes.
// Sequential load only: upstream calls belong to the POST being served when they start.
import dc from "node:diagnostics_channel";
import { appendFileSync } from "node:fs";
import path from "node:path";

const file = path.join(process.env.PLINTH_TRACE_DIR ?? ".", `${process.pid}.jsonl`);
const now = () => performance.timeOrigin + performance.now();
// A content delta, as the benchmark client counts it (the role chunk carries none).
const CONTENT = '"delta":{"content":"';
let current;
const seen = new WeakSet();

dc.subscribe("http.server.request.start", ({ request, response }) => {
  if (request.method !== "POST") return;
  const rec = { path: request.url, arrived: now(), upstream: [] };
  current = rec;
  request.once("end", () => (rec.bodyIn = now()));
  const write = response.write;
  response.write = function (chunk, ...rest) {
    const t = now();
    rec.firstWrite ??= t;
    if (rec.firstContent === undefined && String(chunk).includes(CONTENT)) rec.firstContent = t;
    return write.call(this, chunk, ...rest);
  };
  response.once("finish", () => {
    rec.finished = now();
    if (current === rec) current = undefined;
    appendFileSync(file, JSON.stringify(rec) + "\n");
  });
});

dc.subscribe("http.client.request.start", ({ request }) => {
  const rec = current;
  if (!rec) return;
  const call = { path: request.path, created: now() };
  rec.upstream.push(call);
  request.once("socket", (socket) => {
    call.socket = now();
    call.newSocket = !seen.has(socket);
    seen.add(socket);
  });
  request.once("finish", () => (call.sent = now()));
  request.once("response", (res) => {
    call.head = now();
    // Wrapping push (what the HTTP parser feeds the body through) sees every chunk on arrival
    // without changing how the engine reads the body.
    const push = res.push;
    res.push = function (chunk, ...rest) {
      if (chunk) {
        const t = now();
        call.firstByte ??= t;
        if (call.firstContent === undefined && String(chunk).includes(CONTENT)) call.firstContent = t;
      } else call.ended = now();
      return push.call(this, chunk, ...rest);
    };
  });
});

// PLINTH_TRACE_CPU=1: a CPU profile of the whole run as well, written at exit to <pid>.cpuprofile.
if (process.env.PLINTH_TRACE_CPU === "1") {
  const { Session } = await import("node:inspector");
  const { writeFileSync } = await import("node:fs");
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: 100 });
  session.post("Profiler.start");
  // The same-thread inspector answers synchronously, so this works in an exit handler.
  process.once("exit", () =>
    session.post("Profiler.stop", (err, { profile }) => {
      if (!err) writeFileSync(path.join(process.env.PLINTH_TRACE_DIR ?? ".", `${process.pid}.cpuprofile`), JSON.stringify(profile));
    }),
  );
}
