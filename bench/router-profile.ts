/**
 * Where a router's added time to first token goes, one request at a time: an upstream Plinth and a
 * router in front of it both run with bench/router-trace.mjs preloaded, requests alternate between
 * the two paths, and the traces of each routed request are lined up on one clock:
 *
 *   node --import tsx bench/router-profile.ts            (BENCH_ROUNDS requests per path, default 30)
 *
 * Not part of `npm run bench`; the trace hook is loaded only here.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { serverDefaultThreads } from "./threads.ts";
import { BENCH_SPEC, ensureFixtureModel, FIXTURE_TOKENS } from "../test/fixtures/models.ts";
import { startServerProcess } from "./server-process.ts";
import { streamChat } from "./sse-client.ts";
import { fmt, percentile } from "./stats.ts";

const NO_EOG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const BODY = { model: "bench", messages: [{ role: "user", content: "Tell me a long story about a king, a river and a city." }], max_tokens: 16, temperature: 0, logit_bias: NO_EOG };
const rounds = Number(process.env.BENCH_ROUNDS ?? 30);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 300);

interface Call { path: string; created: number; socket?: number; newSocket?: boolean; connected?: number; sent?: number; head?: number; firstByte?: number; firstContent?: number; ended?: number }
interface Served { path: string; arrived: number; bodyIn?: number; firstWrite?: number; firstContent?: number; finished: number; upstream: Call[] }

const traceDir = mkdtempSync(path.join(tmpdir(), "plinth-trace-"));
const modelPath = await ensureFixtureModel(BENCH_SPEC, fileURLToPath(new URL("./.models/", import.meta.url)));
// Inherited by the two server processes started below (this process has already started).
process.env.PLINTH_TRACE_DIR = traceDir;
process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ""} --import ${fileURLToPath(new URL("./router-trace.mjs", import.meta.url))}`;
const upstream = await startServerProcess(["--model", `bench=${modelPath}`, "--threads", String(await serverDefaultThreads(cpus().length)), "--ctx-size", "512", "--parallel", "8"]);
const router = await startServerProcess(["--upstream", `bench=${upstream.url}`, "--health-interval", "0", ...(process.env.PROFILE_ROUTER_ARGS?.split(" ").filter(Boolean) ?? [])]);
const wall: { direct: number[]; routed: Array<{ sent: number; first: number }> } = { direct: [], routed: [] };
try {
  // Warm-up: until V8 has optimised the request path (a few hundred requests), parsing and
  // preparing a request costs several times what it does in a server that has been up a while.
  for (let i = 0; i < WARMUP; i++) {
    await streamChat(upstream.url, { ...BODY, max_tokens: 1 });
    await streamChat(router.url, { ...BODY, max_tokens: 1 });
  }
  for (let i = 0; i < rounds; i++) {
    let t = performance.timeOrigin + performance.now();
    let r = await streamChat(upstream.url, BODY);
    wall.direct.push(performance.timeOrigin + r.first - t);
    t = performance.timeOrigin + performance.now();
    r = await streamChat(router.url, BODY);
    wall.routed.push({ sent: t, first: performance.timeOrigin + r.first });
  }
} finally {
  await router.stop();
  await upstream.stop();
}

const read = (pid: number | undefined): Served[] =>
  readFileSync(path.join(traceDir, `${pid}.jsonl`), "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((s: Served) => s.path === "/v1/chat/completions");
const routerTrace = read(router.child.pid).slice(-rounds);
const upstreamTrace = read(upstream.child.pid);
// With PLINTH_TRACE_CPU=1 the servers' CPU profiles are kept there for a look.
if (process.env.PLINTH_TRACE_CPU === "1") console.log(`CPU profiles: ${traceDir}/<pid>.cpuprofile (router ${router.child.pid}, upstream ${upstream.child.pid})`);
else rmSync(traceDir, { recursive: true, force: true });

// The upstream's own view of each routed request: the one that arrived while that call was open.
const upstreamOf = (c: Call) => upstreamTrace.find((s) => s.arrived >= c.created && s.arrived <= (c.ended ?? Infinity));
const directUpstream = upstreamTrace.filter((s) => !routerTrace.some((r) => r.upstream.some((c) => upstreamOf(c) === s)));

const phases: Record<string, number[]> = {};
const add = (name: string, v: number | undefined) => {
  if (v !== undefined && Number.isFinite(v)) (phases[name] ??= []).push(v);
};
routerTrace.forEach((s, i) => {
  const gen = s.upstream.find((c) => c.path.endsWith("/chat/completions"))!;
  const tok = s.upstream.find((c) => c.path === "/tokenize");
  const up = upstreamOf(gen);
  const w = wall.routed[i];
  add("client → router: request head arrives", s.arrived - w.sent);
  add("router: body read", s.bodyIn! - s.arrived);
  add("router: parse, validate, prepare until the upstream call starts", gen.created - s.bodyIn!);
  add("router: /tokenize calls per request", s.upstream.filter((c) => c.path === "/tokenize").length);
  if (tok) add("router: /tokenize round trip (beside generation)", tok.ended! - tok.created);
  add("router: upstream call created → body sent", gen.sent! - gen.created);
  add("router: new sockets (connects) per request", gen.newSocket ? 1 : 0);
  if (up) {
    add("wire: body sent → upstream sees the request", up.arrived - gen.sent!);
    add("upstream: arrival → first content written (its TTFT for routed requests)", up.firstContent! - up.arrived);
    add("wire: upstream writes first content → router receives it", gen.firstContent! - up.firstContent!);
  }
  add("router: upstream head → first content byte", gen.firstContent! - gen.head!);
  add("router: first content in → first content written to client (SSE parse, core, re-render)", s.firstContent! - gen.firstContent!);
  add("wire: router writes first content → client reads it", w.first - s.firstContent!);
  add("client TTFT through the router", w.first - w.sent);
});
for (const s of directUpstream.slice(-rounds)) add("upstream: arrival → first content written (direct requests)", s.firstContent! - s.arrived);
wall.direct.forEach((d) => add("client TTFT direct", d));

console.log(`\nRouter TTFT profile: ${rounds} sequential streamed chats per path, ${BODY.max_tokens} tokens; load average ${loadavg().map((l) => l.toFixed(2)).join(", ")}\n`);
console.log("| phase | p50 ms | p90 ms |");
console.log("|---|---|---|");
for (const [name, v] of Object.entries(phases)) console.log(`| ${name} | ${fmt(percentile(v, 50), 3)} | ${fmt(percentile(v, 90), 3)} |`);
const added = percentile(phases["client TTFT through the router"], 50) - percentile(phases["client TTFT direct"], 50);
console.log(`\nadded TTFT p50: ${fmt(added, 2)} ms`);
