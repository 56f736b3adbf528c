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
import { createManagedKey, hashKey, KeyRing, presentedKey, type Principal } from "../../src/tenancy/keys.ts";
import { formatReset, InProcessLimiter, rateHeaders } from "../../src/tenancy/limiter.ts";

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
  assert.equal(presentedKey({ authorization: "Bearer abc" }), "abc");
  assert.equal(presentedKey({ authorization: "bearer  abc " }), "abc");
  assert.equal(presentedKey({ "x-api-key": "xyz" }), "xyz");
  assert.equal(presentedKey({ authorization: "Basic abc" }), undefined);
  // Something after the key makes a wrong key, not a missing one.
  assert.equal(presentedKey({ authorization: "Bearer abc extra" }), "abc extra");
  assert.equal(presentedKey({}), undefined);

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
    now += 1000;
    assert.deepEqual(ring.check(key), { ok: false, reason: "expired" });
    assert.equal(store.revokeKey(record.id, now), true);
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
    assert.equal(JSON.parse(await run(keysCommand, ["list", "--json"])).length, 1, "nothing refused was created");
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
