import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { Writable } from "node:stream";
import { keysCommand, usageCommand } from "../../src/cli/keys.ts";
import { isLoopback, serve } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { keyedNamespace, keyedStoreNamespace } from "../../src/core/context.ts";
import { openSqliteStore } from "../../src/store/sqlite-store.ts";
import { TenancyStore } from "../../src/store/tenancy-store.ts";
import { buildApp } from "../../src/app.ts";
import { ApiError } from "../../src/core/errors.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { createManagedKey, hashKey, KeyRing, presentedKey, type Principal } from "../../src/tenancy/keys.ts";
import { LedgerWriter } from "../../src/tenancy/ledger.ts";
import { formatReset, InProcessLimiter, rateHeaders } from "../../src/tenancy/limiter.ts";
import { Tenancy } from "../../src/tenancy/tenancy.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";
import { sseData } from "../helpers/scripted-app.ts";
import { testStore } from "../helpers/test-store.ts";

const principal = (limits: Partial<Principal["limits"]>, usedTokens = 0): Principal => ({
  id: "key_test",
  name: "t",
  models: null,
  limits: { rpm: null, tpm: null, maxConcurrency: null, budgetTokens: null, ...limits },
  usedTokens,
});

test("requests per window slide: Retry-After is the time until the oldest request leaves the window", () => {
  let now = 1000;
  const limiter = new InProcessLimiter(60_000, () => now);
  const key = principal({ rpm: 2 });
  assert.equal(limiter.begin(key).ok, true);
  now += 10_000;
  const second = limiter.begin(key);
  assert.equal(second.ok, true);
  assert.deepEqual(second.state.requests, { limit: 2, remaining: 0, resetMs: 50_000 });
  now += 5_000;
  const third = limiter.begin(key);
  assert.equal(third.ok, false);
  if (!third.ok) assert.deepEqual([third.refusal.limit, third.refusal.retryAfterMs], ["requests", 45_000]);
  now += 45_000; // the first request leaves the window
  assert.equal(limiter.begin(key).ok, true);
  assert.equal(limiter.begin(key).ok, false);
});

test("token reservations count until settled, then count what was really used", () => {
  let now = 0;
  const limiter = new InProcessLimiter(60_000, () => now);
  const key = principal({ tpm: 1000 });
  const a = limiter.reserve(key, 800);
  assert.equal(a.ok, true);
  assert.equal(limiter.reserve(key, 300).ok, false);
  if (a.ok) a.value.settle(100);
  assert.equal(limiter.state(key).tokens?.remaining, 900);
  const b = limiter.reserve(key, 900);
  assert.equal(b.ok, true);
  now += 1000;
  const c = limiter.reserve(key, 50);
  assert.equal(c.ok, false);
  // 50 more need the first entry (100 tokens) out of the window: 59 s from now.
  if (!c.ok) assert.equal(c.refusal.retryAfterMs, 59_000);
  // A request larger than the limit can never fit: no Retry-After.
  const d = limiter.reserve(key, 1001);
  assert.equal(d.ok, false);
  if (!d.ok) assert.equal(d.refusal.retryAfterMs, null);
  // A reservation settled after its entry left the window does not disturb the count.
  now += 120_000;
  if (b.ok) b.value.settle(10);
  assert.equal(limiter.state(key).tokens?.remaining, 1000);
});

test("a refusal's advice fits the request: embeddings have no max_tokens to lower", () => {
  const limiter = new InProcessLimiter();
  const key = principal({ tpm: 100 });
  const chat = limiter.reserve(key, 101);
  const embedding = limiter.reserve(key, 101, false);
  assert.ok(!chat.ok && /lower max_tokens or send less input/.test(chat.refusal.message));
  assert.ok(!embedding.ok && /its input\), .*; send less input\.$/.test(embedding.refusal.message));
  assert.ok(!embedding.ok && !embedding.refusal.message.includes("max_tokens"));
  const budget = principal({ budgetTokens: 50 });
  const spent = limiter.reserve(budget, 51, false);
  assert.ok(!spent.ok && spent.refusal.limit === "budget" && !spent.refusal.message.includes("max_tokens"));
});

test("a limit of one is counted in the singular: 1 request per minute, 1 request running, 1 token", () => {
  const limiter = new InProcessLimiter();
  const key = principal({ rpm: 1, maxConcurrency: 1 });
  assert.equal(limiter.begin(key).ok, true);
  const rate = limiter.begin(key);
  assert.ok(!rate.ok && rate.refusal.message === "Rate limit reached for this API key: 1 request per minute.", !rate.ok ? rate.refusal.message : "");
  // The first request holds the key's one place.
  const second = limiter.begin(principal({ maxConcurrency: 1 }));
  assert.ok(!second.ok && /already has 1 request running, its limit; retry when it has finished\.$/.test(second.refusal.message), !second.ok ? second.refusal.message : "");
  const tokens = new InProcessLimiter().reserve(principal({ tpm: 1 }), 2);
  assert.ok(!tokens.ok && /up to 2 tokens .* this API key's 1 token per minute/.test(tokens.refusal.message), !tokens.ok ? tokens.refusal.message : "");
  const spent = new InProcessLimiter().begin(principal({ budgetTokens: 1 }, 1));
  assert.ok(!spent.ok && spent.refusal.message === "This API key has used its budget of 1 token.", !spent.ok ? spent.refusal.message : "");
  const many = new InProcessLimiter();
  many.begin(principal({ rpm: 2 }));
  many.begin(principal({ rpm: 2 }));
  const two = many.begin(principal({ rpm: 2 }));
  assert.ok(!two.ok && /: 2 requests per minute\.$/.test(two.refusal.message));
});

test("concurrency leases and the budget (which starts from what the store says was used)", () => {
  const limiter = new InProcessLimiter();
  const key = principal({ maxConcurrency: 1, budgetTokens: 100 }, 40);
  const lease = limiter.begin(key);
  assert.equal(lease.ok, true);
  const second = limiter.begin(key);
  assert.equal(second.ok, false);
  if (!second.ok) assert.equal(second.refusal.limit, "concurrency");
  if (lease.ok) {
    lease.value.release();
    lease.value.release(); // twice is once
  }
  assert.equal(limiter.begin(key).ok, true);
  assert.equal(limiter.reserve(key, 61).ok, false);
  const r = limiter.reserve(key, 60);
  assert.equal(r.ok, true);
  if (r.ok) r.value.settle(60);
  const spent = limiter.begin({ ...key, limits: { ...key.limits, maxConcurrency: null } });
  assert.equal(spent.ok, false);
  if (!spent.ok) assert.deepEqual([spent.refusal.limit, spent.refusal.retryAfterMs], ["budget", null]);
});

test("reset durations and headers are written the way OpenAI writes them", () => {
  assert.equal(formatReset(20), "20ms");
  assert.equal(formatReset(1500), "1.5s");
  assert.equal(formatReset(360_000), "6m0s");
  // Rounded before it is split: 59.95 s is a minute, 119.96 s two (it was "1m60s").
  assert.equal(formatReset(59_950), "1m0s");
  assert.equal(formatReset(119_960), "2m0s");
  assert.deepEqual(rateHeaders({ requests: { limit: 5, remaining: 4, resetMs: 12_000 } }), {
    "x-ratelimit-limit-requests": "5",
    "x-ratelimit-remaining-requests": "4",
    "x-ratelimit-reset-requests": "12s",
  });
});

test("keys: presented as Bearer or x-api-key; static and managed keys checked; only hashes stored", async () => {
  const given = (headers: Record<string, string>) => presentedKey({ headers });
  assert.deepEqual(given({ authorization: "Bearer abc" }), { key: "abc" });
  assert.deepEqual(given({ authorization: "bearer  abc " }), { key: "abc" });
  assert.deepEqual(given({ "x-api-key": "xyz" }), { key: "xyz" });
  // Something after the key makes a wrong key, not a missing one.
  assert.deepEqual(given({ authorization: "Bearer abc extra" }), { key: "abc extra" });
  assert.deepEqual(given({}), { key: undefined, why: "missing" });
  assert.deepEqual(given({ authorization: "Bearer " }), { key: undefined, why: "missing" });
  // Another scheme, or a key with none, is told as such, not as no key at all.
  for (const authorization of ["Basic abc", "Token pk-abc", "pk-abc"]) assert.deepEqual(given({ authorization }), { key: undefined, why: "scheme" }, authorization);
  // A proxy's Basic credential beside the key in x-api-key: the key counts.
  assert.deepEqual(given({ authorization: "Basic abc", "x-api-key": "xyz" }), { key: "xyz" });
  // More than one credential: Node keeps the first Authorization (and joins x-api-keys), while a
  // proxy in front may have read another, so which one counts is not guessed.
  const raw = (...rawHeaders: string[]) => {
    const headers: Record<string, string> = {};
    for (let i = 0; i < rawHeaders.length; i += 2) headers[rawHeaders[i].toLowerCase()] ??= rawHeaders[i + 1];
    return presentedKey({ headers, raw: { rawHeaders } });
  };
  const several = (err: unknown) => err instanceof ApiError && err.status === 400 && /more than one credential/.test(err.message);
  assert.throws(() => raw("Authorization", "Bearer abc", "authorization", "Bearer xyz"), several);
  assert.throws(() => raw("Authorization", "Bearer abc", "Authorization", "Bearer abc"), several, "twice, even the same");
  assert.throws(() => raw("X-Api-Key", "abc", "x-api-key", "xyz"), several);
  assert.throws(() => raw("Authorization", "Bearer abc", "x-api-key", "xyz"), several, "a Bearer key and an x-api-key that differ");
  assert.deepEqual(raw("Authorization", "Bearer abc", "x-api-key", "abc"), { key: "abc" }, "the same key in both headers is one credential");

  const dir = mkdtempSync(path.join(tmpdir(), "plinth-keys-"));
  const main = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  const store = new TenancyStore(dir);
  try {
    let now = Date.now();
    const open = new KeyRing([], store, () => now);
    assert.equal(open.required, false);
    const { key, record } = createManagedKey(store, { name: "a", rpm: 3, expiresAt: now + 1000 });
    assert.match(key, /^pk-[A-Za-z0-9_-]{43}$/);
    assert.equal(store.keyByHash(hashKey(key))?.id, record.id);
    const ring = new KeyRing(["static-one"], store, () => now);
    assert.equal(ring.required, true);
    const ok = ring.check(key);
    assert.equal(ok.ok && ok.principal.limits.rpm, 3);
    const st = ring.check("static-one");
    assert.equal(st.ok && st.principal.id.startsWith("static-"), true);
    assert.deepEqual(ring.check("nope"), { ok: false, reason: "unknown" });
    assert.deepEqual(ring.check(undefined), { ok: false, reason: "missing" });
    // What the tenancy layer rereads for requests still running: a key given on the command line
    // stays valid; a managed one ends when it expires or is revoked (from any process).
    assert.equal(ring.standing(record.id), undefined);
    assert.equal(st.ok && ring.standing(st.principal.id), undefined);
    now += 1000;
    assert.deepEqual(ring.check(key), { ok: false, reason: "expired" });
    assert.equal(ring.standing(record.id), "expired");
    assert.equal(store.revokeKey(record.id, now), true);
    assert.equal(ring.standing(record.id), "revoked");
    assert.equal(store.revokeKey("key_missing", now), false);
  } finally {
    store.close();
    await main.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the ledger store: batched rows charge their keys, group by key, model and day, and old rows are pruned", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-ledger-"));
  const main = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  const store = new TenancyStore(dir);
  try {
    const { record } = createManagedKey(store, { name: "a" });
    const day = Date.UTC(2026, 10, 30, 12);
    const row = (at: number, keyId: string | null, model: string, prompt: number, completion: number, status = 200) => ({
      at, requestId: `req_${at}`, keyId, namespace: null, dialect: "openai", method: "POST", endpoint: "/v1/chat/completions", model,
      promptTokens: prompt, cachedTokens: 0, completionTokens: completion, reasoningTokens: 0, status, ttftMs: 5, durationMs: 9,
    });
    store.insertUsage([row(day, record.id, "m1", 10, 5), row(day + 1, record.id, "m2", 7, 3, 429), row(day - 86_400_000, null, "m1", 1, 1)]);
    assert.equal(store.keyById(record.id)?.usedTokens, 25);
    const byKey = store.usage("key", 0, day + 10);
    assert.deepEqual(byKey.map((r) => [r.group, r.requests, r.errors, r.totalTokens]), [[null, 1, 0, 2], [record.id, 2, 1, 25]]);
    assert.deepEqual(store.usage("model", day, day + 10).map((r) => [r.group, r.promptTokens]), [["m1", 10], ["m2", 7]]);
    assert.deepEqual(store.usage("day", 0, day + 10).map((r) => r.group), ["2026-11-29", "2026-11-30"]);
    assert.equal(store.pruneUsage(day), 1);
    assert.equal(store.usage("key", 0, day + 10).length, 1);
  } finally {
    store.close();
    await main.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the ledger writer keeps rows its store refuses (a full disk) and writes them later, in order; one warning per outage, not per flush", async () => {
  const written: string[] = [];
  let full = true;
  const store = {
    insertUsage: (rows: Array<{ requestId: string }>) => {
      if (full) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
      written.push(...rows.map((r) => r.requestId));
    },
  } as unknown as TenancyStore;
  const warnings: string[] = [];
  const listener = (w: Error) => warnings.push(w.message);
  process.on("warning", listener);
  const ledger = new LedgerWriter(store, { intervalMs: 60_000 });
  try {
    const row = (n: number) => ({ at: n, requestId: `req_${n}`, keyId: null, namespace: null, dialect: "openai", method: "POST", endpoint: "/v1/chat/completions", model: "m",
      promptTokens: 1, cachedTokens: 0, completionTokens: 1, reasoningTokens: 0, status: 200, ttftMs: null, durationMs: 1 });
    for (let n = 0; n < 5; n++) {
      ledger.write(row(n));
      ledger.flush();
    }
    assert.deepEqual(written, []);
    full = false;
    ledger.flush();
    assert.deepEqual(written, ["req_0", "req_1", "req_2", "req_3", "req_4"]);
  } finally {
    ledger.close();
    // Warnings are emitted on the next tick.
    await new Promise((r) => setImmediate(r));
    process.off("warning", listener);
  }
  const ours = warnings.filter((w) => /usage ledger/.test(w));
  assert.equal(ours.length, 2, ours.join("\n"));
  assert.match(ours[0], /database or disk is full/);
});

test("the ledger writer flushes a batch on its own after the interval, retries a refused one the same way, and sets no timer while idle", async () => {
  const written: string[] = [];
  let full = false;
  const store = {
    insertUsage: (rows: Array<{ requestId: string }>) => {
      if (full) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
      written.push(...rows.map((r) => r.requestId));
    },
  } as unknown as TenancyStore;
  const ledger = new LedgerWriter(store, { intervalMs: 20 });
  // Whether the writer holds a timer (an unref'd one is not among process.getActiveResourcesInfo()).
  const timers = () => ((ledger as unknown as { timer?: NodeJS.Timeout }).timer ? 1 : 0);
  const idle = 0;
  const listener = () => {};
  process.on("warning", listener);
  try {
    assert.equal(timers(), idle, "no timer before the first row");
    const row = (n: number) => ({ at: n, requestId: `req_${n}`, keyId: null, namespace: null, dialect: "openai", method: "POST", endpoint: "/v1/chat/completions", model: "m",
      promptTokens: 1, cachedTokens: 0, completionTokens: 1, reasoningTokens: 0, status: 200, ttftMs: null, durationMs: 1 });
    ledger.write(row(0));
    ledger.write(row(1));
    await new Promise((r) => setTimeout(r, 80));
    assert.deepEqual(written, ["req_0", "req_1"]);
    assert.equal(timers(), idle, "no timer once the batch is written");
    full = true;
    ledger.write(row(2));
    await new Promise((r) => setTimeout(r, 80));
    assert.deepEqual(written, ["req_0", "req_1"]);
    full = false;
    await new Promise((r) => setTimeout(r, 80));
    assert.deepEqual(written, ["req_0", "req_1", "req_2"], "a refused batch is written again by the timer");
    assert.equal(timers(), idle);
  } finally {
    ledger.close();
    await new Promise((r) => setImmediate(r));
    process.off("warning", listener);
  }
});

test("the key joins the isolation namespace; without a key it is unchanged", () => {
  assert.equal(keyedNamespace(undefined, "u"), "u");
  assert.equal(keyedNamespace(undefined, undefined), undefined);
  assert.notEqual(keyedNamespace("key_a", "u"), keyedNamespace("key_b", "u"));
  assert.notEqual(keyedNamespace("key_a", undefined), undefined);
  assert.equal(keyedStoreNamespace(undefined, ""), "");
  assert.notEqual(keyedStoreNamespace("key_a", ""), keyedStoreNamespace("key_b", ""));
});

test("with no key the server refuses a non-loopback address unless --no-auth", async () => {
  assert.equal(isLoopback("127.0.0.1"), true);
  assert.equal(isLoopback("::1"), true);
  assert.equal(isLoopback("localhost"), true);
  assert.equal(isLoopback("0.0.0.0"), false);
  assert.equal(isLoopback("192.168.1.5"), false);
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-noauth-"));
  try {
    const base = { model: ["tiny=/nonexistent.gguf"], host: "0.0.0.0", port: "0", "data-dir": dir };
    await assert.rejects(serve(loadConfig(base, {}), { log: () => {} }), /refusing to listen on 0\.0\.0\.0 with no API key.*--no-auth/);
    await assert.rejects(serve(loadConfig({ ...base, "no-auth": true, "api-key": ["k"] }, {}), { log: () => {} }), /contradict/);
    // The admin API's key may not be an API key too: every client holding it could make and revoke keys.
    const shared = "same-key-for-both-1234";
    await assert.rejects(serve(loadConfig({ ...base, "api-key": [shared, "other-key"], "admin-key": shared }, {}), { log: () => {} }), /--admin-key is also one of the API keys/);
    const open = await serve(loadConfig({ ...base, "no-auth": true }, {}), { log: () => {} });
    await open.close();
    const keyed = await serve(loadConfig({ ...base, "api-key": ["some-key"] }, {}), { log: () => {} });
    await keyed.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("plinth keys create/list/revoke and plinth usage work on the data directory's store", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-keys-cli-"));
  let text = "";
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString("utf8");
      done();
    },
  });
  const run = async (fn: typeof keysCommand, args: string[]) => {
    text = "";
    assert.equal(await fn([...args, "--data-dir", dir], out), 0);
    return text;
  };
  try {
    const created = JSON.parse(await run(keysCommand, ["create", "--name", "bob", "--models", "a,b", "--tpm", "500", "--expires", "2030-01-01", "--json"]));
    assert.match(created.key, /^pk-/);
    assert.deepEqual([created.name, created.models, created.tpm, created.expires_at], ["bob", ["a", "b"], 500, Date.UTC(2030, 0, 1) / 1000]);
    const table = await run(keysCommand, ["list"]);
    assert.match(table, new RegExp(`${created.id}\\s+bob\\s+pk-\\S+…\\s+active`));
    assert.equal(table.includes(created.key), false);
    assert.equal(await run(keysCommand, ["revoke", created.id]), `revoked ${created.id}\n`);
    assert.equal(JSON.parse(await run(keysCommand, ["list", "--json"]))[0].state, "revoked");
    await assert.rejects(keysCommand(["revoke", "key_nope", "--data-dir", dir], out), /no API key/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--rpm", "-1", "--data-dir", dir], out), /--rpm/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--expires", "soon", "--data-dir", dir], out), /--expires/);
    // The admin API's rules for names and model lists hold here too (the same store, the same logs).
    await assert.rejects(keysCommand(["create", "--name", "evil\nforged log line", "--data-dir", dir], out), /--name: .*line breaks/);
    // Bidirectional controls make a name display as another (U+202E reverses what follows it).
    await assert.rejects(keysCommand(["create", "--name", "admin\u202e\u2066 ecilA", "--data-dir", dir], out), /--name: .*bidirectional/);
    await assert.rejects(keysCommand(["create", "--name", "x".repeat(201), "--data-dir", dir], out), /--name/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--models", "a,a", "--data-dir", dir], out), /--models: A model is named twice/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--rpm", "99999999999999999999", "--data-dir", dir], out), /--rpm/);
    // Invisible characters make two names that differ display alike ("ali\u200bce" reads "alice").
    await assert.rejects(keysCommand(["create", "--name", "ali\u200bce", "--data-dir", dir], out), /--name: .*invisible or format characters \(found U\+200B\)/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--models", "ti\u202eny", "--data-dir", dir], out), /--models: .*bidirectional/);
    await assert.rejects(keysCommand(["create", "--name", "x", "--models", "ti\u2060ny", "--data-dir", dir], out), /--models: .*U\+2060/);
    assert.equal(JSON.parse(await run(keysCommand, ["list", "--json"])).length, 1, "nothing refused was created");
    // A long name is cut in the table (every row was padded to its 200 characters), whole in JSON.
    const long = `${"n".repeat(150)}😀${"m".repeat(49)}`;
    await run(keysCommand, ["create", "--name", long, "--models", Array.from({ length: 30 }, (_, i) => `model-${i}`).join(","), "--json"]);
    const rows = (await run(keysCommand, ["list"])).trimEnd().split("\n");
    const widest = Math.max(...rows.map((r) => [...r].length));
    assert.ok(widest < 200, `the table is ${widest} characters wide`);
    assert.match(rows.find((r) => r.includes("nnnn"))!, / n{31}… /);
    assert.match(rows.find((r) => r.includes("nnnn"))!, / model-0,model-1,.{23}… /);
    assert.equal(JSON.parse(await run(keysCommand, ["list", "--json"]))[1].name, long);
    await assert.rejects(usageCommand(["--group-by", "week", "--data-dir", dir], out), /--group-by/);
    const usage = JSON.parse(await run(usageCommand, ["--group-by", "day", "--json"]));
    assert.deepEqual([usage.group_by, usage.data], ["day", []]);
    assert.match(await run(usageCommand, []), /^key\s+requests\s+errors/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});


test("a key given with --api-key goes by an id keyed with the server's secret, not a plain hash of it", async () => {
  const { createHash } = await import("node:crypto");
  const { staticKeyId } = await import("../../src/tenancy/keys.ts");
  const secret = Buffer.alloc(32, 7);
  const id = staticKeyId("sk-weak-key", secret);
  assert.match(id, /^static-[0-9a-f]{12}$/);
  // A log reader holding a guess cannot check it against the id without the secret.
  assert.notEqual(id, `static-${createHash("sha256").update("sk-weak-key").digest("hex").slice(0, 12)}`);
  assert.equal(staticKeyId("sk-weak-key", secret), id, "stable for the same data directory");
  assert.notEqual(staticKeyId("sk-weak-key", Buffer.alloc(32, 8)), id);
});

/**
 * The real app over a scripted engine that answers slowly (400 tokens, 10 ms apart), with managed
 * keys in a store of its own: what a key's requests do when the key stops being valid while they run.
 */
async function keyedApp() {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-key-end-"));
  const main = openSqliteStore({ dataDir: dir, ttlSeconds: 0 });
  const keys = new TenancyStore(dir);
  const registry = new ModelRegistry(8, 0);
  const engine = new ScriptedEngine({
    contextSize: 1024,
    delayMs: 10,
    script: () => [...Array.from({ length: 400 }, () => ({ kind: "text" as const, text: "a", tokens: 1 })), { kind: "end" as const, reason: "length" as const }],
  });
  registry.register(engine.id);
  registry.ready(engine);
  const service = new GenerationService(registry);
  const tenancy = new Tenancy({ keys: new KeyRing([], keys), limiter: new InProcessLimiter(), metricsNeedKey: true });
  service.setGate(tenancy.gate());
  service.addHooks(tenancy.hooks());
  const { store, sealer, dispose } = testStore();
  const app = buildApp(service, { bodyLimit: 1 << 20, store, sealer, tenancy, admin: { store: keys, adminKey: "admin-key-for-tests" } });
  await app.ready();
  return {
    app,
    keys,
    close: async () => {
      await app.close();
      tenancy.close();
      keys.close();
      await main.close();
      await dispose();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test("a key revoked from another process, or expiring, ends the requests it still runs within about a second", async () => {
  const { app, keys, close } = await keyedApp();
  try {
    const chat = (key: string, stream: boolean) =>
      app.inject({
        method: "POST",
        url: "/v1/chat/completions",
        headers: { authorization: `Bearer ${key}` },
        payload: { model: "scripted", messages: [{ role: "user", content: "hi" }], max_tokens: 400, stream },
      });
    // Revoked in the store only, as `plinth keys revoke` does from its own process: the server is not told.
    const revoked = createManagedKey(keys, { name: "revoked elsewhere" });
    const t0 = Date.now();
    const answer = chat(revoked.key, false);
    setTimeout(() => keys.revokeKey(revoked.record.id, Date.now()), 300);
    const r = await answer;
    assert.equal(r.statusCode, 401, r.body);
    assert.equal(r.json().error.code, "invalid_api_key");
    assert.match(r.json().error.message, /revoked while this request ran/);
    assert.ok(Date.now() - t0 < 3000, `ended ${Date.now() - t0} ms after it began (it would run 4 s)`);

    // Expiry ends a stream as revocation does: an error event in the dialect's form, after what it had sent.
    const expiring = createManagedKey(keys, { name: "expiring", expiresAt: Date.now() + 400 });
    const s = await chat(expiring.key, true);
    assert.equal(s.statusCode, 200);
    const events = sseData(s.body) as Array<Record<string, any>>;
    assert.ok(events.some((e) => e.choices?.[0]?.delta?.content === "a"), "it had begun");
    assert.match(events.at(-1)?.error?.message ?? "", /expired while this request ran/, JSON.stringify(events.at(-1)));
    assert.ok(events.filter((e) => e.choices?.[0]?.delta?.content).length < 400);
  } finally {
    await close();
  }
});
