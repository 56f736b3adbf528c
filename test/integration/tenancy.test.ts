import assert from "../helpers/assert.ts";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import Database from "better-sqlite3";
import OpenAI from "openai";
import { serve, type RunningServer } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { ensureBertFixtureModel, ensureFixtureModel } from "../fixtures/models.ts";
import { parsePrometheus, sum } from "../helpers/prometheus.ts";
import { NO_EOG, streamThenCancel, waitFor } from "../helpers/server.ts";

// API keys, per-key limits and the usage ledger on the real server over HTTP: managed keys are made
// through the admin API, rate windows are 2 s long so the limits can be waited out in a test.

const ADMIN = "admin-secret-0123456789";
const STATIC_KEY = "static-key-for-tests-abcdef";
const WINDOW_S = 2;
const logLines: string[] = [];
let server: RunningServer;
let dataDir: string;

before(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "plinth-tenancy-"));
  const logStream = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(chunk.toString("utf8"));
      done();
    },
  });
  const config = loadConfig(
    {
      // The DeepSeek-style dialect's one model name, on the same file; an embedding-only model.
      model: [`tiny=${await ensureFixtureModel()}`, `SpAk-Aster-V1-MOE=${await ensureFixtureModel()}`, `emb=${await ensureBertFixtureModel()}`],
      port: "0",
      threads: "1",
      parallel: "4",
      "ctx-size": "512",
      "data-dir": dataDir,
      "log-format": "json",
      "log-level": "debug",
      // Bodies are logged: keys must stay out of the log even so (the admin API's answers hold them).
      "log-bodies": "true",
      "api-key": [STATIC_KEY],
      "admin-key": ADMIN,
      "rate-window": String(WINDOW_S),
    },
    {},
  );
  server = await serve(config, { log: () => {}, logStream });
  await server.loaded;
});

after(async () => {
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

type Obj = Record<string, any>;

async function call(method: string, route: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}${route}`, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Obj | undefined;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, json: json as Obj, text };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** A request with headers exactly as listed (name, value, name, value…): repeated ones stay repeated. */
function rawCall(method: string, route: string, rawHeaders: string[], body?: unknown): Promise<{ status: number; json: Obj; text: string }> {
  const url = new URL(`${server.url}${route}`);
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers = ["host", url.host, ...rawHeaders, ...(payload ? ["content-type", "application/json", "content-length", String(payload.length)] : [])];
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers }, (res) => {
      let text = "";
      res.on("data", (c: Buffer) => (text += c.toString("utf8")));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text), text }));
    });
    req.on("error", reject);
    req.end(payload);
  });
}

/** Waits until an asynchronous check holds (ledger rows are committed every 200 ms). */
async function until(check: () => Promise<boolean> | boolean, timeoutMs = 5_000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}
const admin = (method: string, route: string, body?: unknown) => call(method, `/admin${route}`, body, bearer(ADMIN));

async function createKey(settings: Obj): Promise<{ id: string; key: string }> {
  const r = await admin("POST", "/keys", settings);
  assert.equal(r.status, 201, r.text);
  return { id: r.json.id, key: r.json.key };
}

const chatBody = (extra: Obj = {}) => ({ model: "tiny", messages: [{ role: "user", content: "Tell me about the river." }], max_tokens: 4, ...extra });
/** The same chat for the DeepSeek-style route, whose model is an enum of one name. */
const spakBody = (extra: Obj = {}) => chatBody({ model: "SpAk-Aster-V1-MOE", ...extra });

/** A request on each dialect's generation route, and one GET, each with the body that route takes. */
const DIALECT_ROUTES: Array<[string, string, unknown]> = [
  ["POST", "/v1/chat/completions", chatBody()],
  ["POST", "/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 2 }],
  ["POST", "/v1/responses", { model: "tiny", input: "hi", max_output_tokens: 16 }],
  ["POST", "/v3/chat/completions", { model: "tiny", messages: [{ role: "user", content: "hi" }], max_completion_tokens: 2 }],
  ["POST", "/chat/completions", spakBody()],
  ["POST", "/tokenize", { model: "tiny", prompt: "hello" }],
  ["POST", "/invocations", { model: "tiny", prompt: "Once", max_tokens: 2 }],
  ["GET", "/v1/models", undefined],
  ["GET", "/props?model=tiny", undefined],
];

describe("authentication", () => {
  test("without a valid key every dialect answers 401 invalid_api_key in its envelope; /health stays open", async () => {
    const revoked = await createKey({ name: "gone" });
    assert.equal((await admin("DELETE", `/keys/${revoked.id}`)).json.state, "revoked");
    // A key cannot be created already expired: this one expires within two seconds, and is waited out.
    const expiresAt = Math.floor(Date.now() / 1000) + 2;
    const expired = await createKey({ name: "old", expires_at: expiresAt });
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt * 1000 - Date.now()) + 50));
    const cases: Array<[string, Record<string, string>]> = [
      ["missing", {}],
      ["wrong bearer", bearer("pk-not-a-key")],
      ["wrong x-api-key", { "x-api-key": "pk-not-a-key" }],
      ["revoked", bearer(revoked.key)],
      ["expired", bearer(expired.key)],
    ];
    for (const [method, route, body] of DIALECT_ROUTES) {
      for (const [what, headers] of cases) {
        const r = await call(method, route, body, headers);
        assert.equal(r.status, 401, `${route} ${what}: ${r.text}`);
        assert.equal(r.json.error.code, "invalid_api_key", `${route} ${what}`);
        assert.equal(typeof r.json.error.message, "string");
        assert.match(r.headers.get("www-authenticate") ?? "", /^Bearer/);
      }
    }
    // Databricks' envelope names the same refusal its own way.
    const dbx = await call("POST", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(dbx.status, 401, dbx.text);
    assert.equal(dbx.json.error_code, "UNAUTHENTICATED");
    // A path under Databricks' prefixes that no route has is refused in that envelope too (its 404
    // with a key already was; the 401 without one was OpenAI's).
    for (const path of ["/api/2.0/nope", "/serving-endpoints;x", "//serving-endpoints/tiny/invocations"]) {
      const unrouted = await call("POST", path, {});
      assert.equal(unrouted.status, 401, unrouted.text);
      assert.equal(unrouted.json.error_code, "UNAUTHENTICATED", `${path}: ${unrouted.text}`);
    }
    assert.match((await call("POST", "/v1/chat/completions", chatBody(), bearer(revoked.key))).json.error.message, /revoked/);
    assert.match((await call("POST", "/v1/chat/completions", chatBody(), bearer(expired.key))).json.error.message, /expired/);
    assert.equal((await call("GET", "/health", undefined)).status, 200);
    // A SageMaker container's health check and vLLM's version route are open too.
    assert.equal((await call("GET", "/ping", undefined)).status, 200);
    assert.equal((await call("GET", "/version", undefined)).status, 200);
    // /metrics follows --metrics-auth, on by default.
    assert.equal((await call("GET", "/metrics", undefined)).status, 401);
    assert.equal((await call("GET", "/metrics", undefined, bearer(STATIC_KEY))).status, 200);
  });

  test("a valid key works as a Bearer token and as x-api-key, on every dialect", async () => {
    const k = await createKey({ name: "ok" });
    for (const [method, route, body] of DIALECT_ROUTES) {
      const a = await call(method, route, body, bearer(k.key));
      assert.equal(a.status, 200, `${route}: ${a.text}`);
      const b = await call(method, route, body, { "x-api-key": STATIC_KEY });
      assert.equal(b.status, 200, `${route}: ${b.text}`);
    }
  });

  test("a request carrying more than one key is a 400 in its dialect's envelope; a key of another scheme is told so", async () => {
    const k = await createKey({ name: "two keys" });
    const cases: Array<[string, string[]]> = [
      ["two Authorization headers", ["authorization", `Bearer ${k.key}`, "Authorization", "Bearer pk-other"]],
      // Node keeps the first Authorization: a valid key second was ignored, a valid key first won.
      ["two Authorization headers, the valid one second", ["Authorization", "Bearer pk-other", "authorization", `Bearer ${k.key}`]],
      ["two x-api-key headers", ["x-api-key", k.key, "x-api-key", "pk-other"]],
      ["a Bearer key and an x-api-key that differ", ["authorization", `Bearer ${k.key}`, "x-api-key", STATIC_KEY]],
    ];
    for (const [what, headers] of cases) {
      const r = await rawCall("POST", "/v1/chat/completions", headers, chatBody());
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.match(r.json.error.message, /more than one credential/, what);
      const dbx = await rawCall("POST", "/serving-endpoints/tiny/invocations", headers, { messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
      assert.equal(dbx.status, 400, `${what}: ${dbx.text}`);
      assert.match(dbx.json.message, /more than one credential/, `${what}, in Databricks' envelope`);
      // The admin API reads its key the same way.
      const asAdmin = await rawCall("GET", "/admin/keys", ["authorization", `Bearer ${ADMIN}`, "authorization", "Bearer pk-other"]);
      assert.equal(asAdmin.status, 400, asAdmin.text);
    }
    // One key, in both headers: one credential.
    assert.equal((await rawCall("POST", "/v1/chat/completions", ["authorization", `Bearer ${k.key}`, "x-api-key", k.key], chatBody())).status, 200);
    // A key sent with another scheme (or none) is not "no key": the message names the scheme.
    for (const authorization of ["Basic dXNlcjpwYXNz", `Token ${k.key}`, k.key]) {
      const r = await call("POST", "/v1/chat/completions", chatBody(), { authorization });
      assert.equal(r.status, 401, r.text);
      assert.match(r.json.error.message, /does not use the Bearer scheme/, authorization);
      assert.doesNotMatch(r.json.error.message, /No API key was given/);
    }
  });

  test("the admin API needs the admin key, and API keys cannot call it", async () => {
    assert.equal((await call("GET", "/admin/keys", undefined)).status, 401);
    assert.equal((await call("GET", "/admin/keys", undefined, bearer(STATIC_KEY))).status, 401);
    const listed = await admin("GET", "/keys");
    assert.equal(listed.status, 200);
    assert.ok(listed.json.data.length > 0);
    assert.ok(listed.json.data.every((k: Obj) => k.key === undefined && typeof k.prefix === "string"));
    const bad = await admin("POST", "/keys", { name: "x", rpm: 0 });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, "rpm");
    const unknown = await admin("POST", "/keys", { name: "x", colour: "red" });
    assert.equal(unknown.status, 400);
    // "__proto__" too (an own key of this object, as JSON.parse makes it, so it is sent).
    const proto = await admin("POST", "/keys", JSON.parse('{"name":"x","__proto__":{"rpm":1}}'));
    assert.equal(proto.status, 400, proto.text);
    assert.equal(proto.json.error.param, "__proto__");
    assert.equal((await admin("DELETE", "/keys/key_nope")).status, 404);
    const usage = await call("GET", "/admin/usage?group_by=week", undefined, bearer(ADMIN));
    assert.equal(usage.status, 400);
    assert.equal(usage.json.error.param, "group_by");
    // A range that ends before it starts is a mistake worth naming, not an empty list.
    const backwards = await call("GET", "/admin/usage?from=2026-12-02&to=2026-12-01", undefined, bearer(ADMIN));
    assert.equal(backwards.status, 400, backwards.text);
    assert.equal(backwards.json.error.param, "from");
    // A time with no offset is UTC, whatever the server's zone, as a bare date is.
    const bare = await call("GET", "/admin/usage?from=2026-12-01T00:00&to=2026-12-01%2006:30", undefined, bearer(ADMIN));
    assert.equal(bare.status, 200, bare.text);
    assert.equal(bare.json.from, Date.UTC(2026, 11, 1) / 1000);
    assert.equal(bare.json.to, Date.UTC(2026, 11, 1, 6, 30) / 1000);
  });

  test("changing serving endpoints or loaded models needs the admin key; an API key may only read them", async () => {
    const endpoint = { name: "ep-admin-only", config: { served_entities: [{ name: "a", entity_name: "tiny" }] } };
    const asUser = await call("POST", "/api/2.0/serving-endpoints", endpoint, bearer(STATIC_KEY));
    // A known key that may not do this: 403; no key or a wrong one: 401.
    assert.equal(asUser.status, 403, asUser.text);
    assert.equal(asUser.json.error_code, "PERMISSION_DENIED", "in the Databricks envelope");
    const unload = await call("DELETE", "/api/2.0/plinth/models/tiny", undefined, bearer(STATIC_KEY));
    assert.equal(unload.status, 403);
    const anonymous = await call("POST", "/api/2.0/serving-endpoints", endpoint, undefined);
    assert.equal(anonymous.status, 401, anonymous.text);
    assert.equal(anonymous.json.error_code, "UNAUTHENTICATED");
    assert.equal((await call("POST", "/api/2.0/serving-endpoints", endpoint, bearer("sk-not-a-key-at-all"))).status, 401);
    assert.equal((await call("GET", "/api/2.0/serving-endpoints", undefined, bearer(STATIC_KEY))).status, 200);
    assert.equal((await call("GET", "/api/2.0/serving-endpoints", undefined)).status, 401, "reading still needs a key");
    // HEAD is a read too (the GET route answers it, and its Allow names it): an API key may make it.
    for (const route of ["/api/2.0/serving-endpoints", "/api/2.0/serving-endpoints/tiny", "/api/2.0/plinth/models"]) {
      assert.equal((await call("HEAD", route, undefined, bearer(STATIC_KEY))).status, 200, route);
      assert.equal((await call("HEAD", route, undefined)).status, 401, route);
    }
    const asAdmin = await call("POST", "/api/2.0/serving-endpoints", endpoint, bearer(ADMIN));
    assert.equal(asAdmin.status, 200, asAdmin.text);
    // The admin key reads what it changed (and the metrics), though it is no API key; it still cannot query a model.
    const state = await call("GET", "/api/2.0/serving-endpoints/ep-admin-only", undefined, bearer(ADMIN));
    assert.equal(state.status, 200, state.text);
    assert.equal(state.json.name, "ep-admin-only");
    assert.equal((await call("GET", "/api/2.0/plinth/models", undefined, bearer(ADMIN))).status, 200);
    assert.equal((await call("GET", "/metrics", undefined, bearer(ADMIN))).status, 200);
    const query = await call("POST", "/serving-endpoints/ep-admin-only/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 1 }, bearer(ADMIN));
    assert.equal(query.status, 401, query.text);
    assert.equal((await call("GET", "/v1/models", undefined, bearer(ADMIN))).status, 401);
    assert.equal((await call("DELETE", "/api/2.0/serving-endpoints/ep-admin-only", undefined, bearer(ADMIN))).status, 200);
  });
});

describe("model-limited keys and A/B endpoints", () => {
  test("a key limited to one model of an A/B endpoint is always answered by that model's entity, never refused on the other draws", async () => {
    const endpoint = {
      name: "ab-limited",
      config: {
        served_entities: [
          { name: "s", entity_name: "SpAk-Aster-V1-MOE" },
          { name: "t", entity_name: "tiny" },
        ],
        traffic_config: { routes: [{ served_model_name: "s", traffic_percentage: 50 }, { served_model_name: "t", traffic_percentage: 50 }] },
      },
    };
    assert.equal((await call("POST", "/api/2.0/serving-endpoints", endpoint, bearer(ADMIN))).status, 200);
    try {
      const limited = await createKey({ name: "tiny-only", models: ["tiny"] });
      for (let i = 0; i < 8; i++) {
        const r = await call("POST", "/serving-endpoints/ab-limited/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, bearer(limited.key));
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers.get("served-model-name"), "t");
      }
      // A key that may use neither model is refused, in the Databricks envelope.
      const neither = await createKey({ name: "other-only", models: ["some-other-model"] });
      const refused = await call("POST", "/serving-endpoints/ab-limited/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, bearer(neither.key));
      assert.equal(refused.status, 403, refused.text);
    } finally {
      await call("DELETE", "/api/2.0/serving-endpoints/ab-limited", undefined, bearer(ADMIN));
    }
  });
});

describe("admin API input", () => {
  test("hostile bodies, times and paths get a clear 4xx; unknown admin paths are a 404 for the admin key", async () => {
    const refusals: Array<[Obj, string]> = [
      [{ name: "two\nlines" }, "name"],
      [{ name: "nul\u0000" }, "name"],
      [{ name: "x", models: Array.from({ length: 1001 }, (_, i) => `m${i}`) }, "models"],
      [{ name: "x", models: ["m".repeat(201)] }, "models[0]"],
      // Past what a Date holds: it was stored as a float and listed as 99999999999999980000.
      [{ name: "x", expires_at: "99999999999999999999" }, "expires_at"],
      [{ name: "x", expires_at: 9007199254740991 }, "expires_at"],
      [{ name: "x", expires_at: "not a date" }, "expires_at"],
      // Date.parse reads these too, but they are not ISO 8601.
      [{ name: "x", expires_at: "Dec 25 2030" }, "expires_at"],
      [{ name: "x", expires_at: "2030 12" }, "expires_at"],
      // Days that do not exist: Date.parse rolled them over (2027-02-30 was stored as 2 March).
      [{ name: "x", expires_at: "2027-02-30" }, "expires_at"],
      [{ name: "x", expires_at: "2027-04-31T10:00Z" }, "expires_at"],
      // Already past: a key that could never be used (a bare date is 00:00 UTC, so today is past).
      [{ name: "x", expires_at: "2001-01-01" }, "expires_at"],
      [{ name: "x", expires_at: new Date().toISOString().slice(0, 10) }, "expires_at"],
      [{ name: "x", expires_at: 1 }, "expires_at"],
      // Unicode's own line breaks and C1 controls break a log line as a newline does.
      [{ name: "a\u2028b" }, "name"],
      [{ name: "a\u0085b" }, "name"],
      // Bidirectional controls: invisible, and they reorder how the rest of the name is shown.
      [{ name: "admin\u202e\u2066 ecilA" }, "name"],
      [{ name: "a\u200fb" }, "name"],
      // Invisible characters: "ali\u200bce" displayed as "alice"; the same rules hold for model names.
      [{ name: "ali\u200bce" }, "name"],
      [{ name: "alice\u2060" }, "name"],
      [{ name: "soft\u00adhyphen" }, "name"],
      [{ name: "a\ufe0f" }, "name"],
      [{ name: "hangul\u3164filler" }, "name"],
      [{ name: "x", models: ["tiny\u202e"] }, "models[0]"],
      [{ name: "x", models: ["tiny", "ti\u200bny"] }, "models[1]"],
      [{ name: "x", models: [" tiny"] }, "models[0]"],
      [{ name: "x", models: ["tiny\n"] }, "models[0]"],
      [{ name: "x", models: ["tiny", "tiny"] }, "models"],
    ];
    for (const [body, param] of refusals) {
      const r = await admin("POST", "/keys", body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
      assert.equal(r.json.error.param, param);
      assert.equal(r.json.error.code, "invalid_value");
    }
    // A name of spaces is told so; the message counted the spaces trimmed away ("is 3 characters long;
    // it must be at least 1").
    const blank = await admin("POST", "/keys", { name: "   " });
    assert.equal(blank.status, 400, blank.text);
    assert.equal(blank.json.error.param, "name");
    assert.match(blank.json.error.message, /empty or only whitespace/);
    const leap = await admin("GET", "/usage?from=2027-02-29");
    assert.equal(leap.status, 400, "2027 is not a leap year");
    assert.equal(leap.json.error.param, "from");
    assert.equal((await admin("GET", "/usage?from=2028-02-29")).status, 200);
    const far = await admin("GET", "/usage?from=99999999999999999999999");
    assert.equal(far.status, 400, far.text);
    assert.equal(far.json.error.param, "from");
    const paged = await admin("GET", "/keys?limit=5");
    assert.equal(paged.status, 400, "GET /admin/keys takes no parameters, as /admin/usage refuses unknown ones");
    assert.equal(paged.json.error.param, "limit");
    for (const route of ["/nothing", "", "/keys/x/y"]) {
      const r = await admin("GET", route);
      assert.equal(r.status, 404, `/admin${route}: ${r.text}`);
      assert.equal(r.json.error.code, "not_found");
    }
    const asUser = await call("GET", "/admin/nothing", undefined, bearer(STATIC_KEY));
    assert.equal(asUser.status, 401);
    assert.match(asUser.headers.get("www-authenticate") ?? "", /^Bearer/);
    const odd = await admin("GET", `/keys/${encodeURIComponent("'; DROP TABLE api_keys;--\u202e😀")}`);
    assert.equal(odd.status, 404, odd.text);
    assert.equal((await admin("GET", "/keys")).status, 200);
  });
});

describe("admin API query parameters and bodies", () => {
  test("every admin route refuses a query parameter it does not read and a body where it reads none", async () => {
    const k = await createKey({ name: "admin strict" });
    // Each of these was answered as if the parameter or body were not there: a key for every model,
    // a revocation despite dry_run.
    const refusals: Array<[string, string, unknown, string | null]> = [
      ["POST", "/keys?models=tiny&rpm=1", { name: "q" }, "models"],
      ["GET", "/keys?limit=5", undefined, "limit"],
      ["GET", `/keys/${k.id}?foo=1`, undefined, "foo"],
      ["DELETE", `/keys/${k.id}?dry_run=true`, undefined, "dry_run"],
      ["GET", "/usage?group_by=key&foo=1", undefined, "foo"],
      ["DELETE", `/keys/${k.id}`, { reason: "left" }, "reason"],
      ["DELETE", `/keys/${k.id}`, [1], null],
      ["GET", `/keys/${k.id}`, { a: 1 }, null],
      ["GET", "/keys", { a: 1 }, null],
      ["GET", "/usage", { group_by: "model" }, null],
    ];
    // fetch() sends no body with a GET: those go out as raw requests.
    const send = (method: string, route: string, body: unknown) =>
      method === "GET" && body !== undefined ? rawCall(method, `/admin${route}`, ["authorization", `Bearer ${ADMIN}`], body) : admin(method, route, body);
    for (const [method, route, body, param] of refusals) {
      const r = await send(method, route, body);
      assert.equal(r.status, 400, `${method} ${route} ${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.param, param, `${method} ${route}`);
    }
    assert.equal((await admin("GET", "/keys")).json.data.some((key: Obj) => key.name === "q"), false, "nothing was created");
    assert.equal((await admin("GET", `/keys/${k.id}`)).json.state, "active", "nothing was revoked");
    // A GET's body is not read, so any is refused, `{}` included; on a DELETE an empty JSON object
    // is no field, so clients that always send one still work.
    assert.equal((await send("GET", "/usage", {})).status, 400);
    assert.equal((await admin("DELETE", `/keys/${k.id}`, {})).json.state, "revoked");
  });
});

describe("model lists and isolation", () => {
  test("a key limited to other models gets 403 naming model, in each dialect", async () => {
    const k = await createKey({ name: "limited", models: ["other"] });
    for (const [method, route, body] of DIALECT_ROUTES.filter(([m]) => m === "POST")) {
      const r = await call(method, route, body, bearer(k.key));
      assert.equal(r.status, 403, `${route}: ${r.text}`);
      assert.equal(r.json.error.param, "model", route);
      assert.equal(r.json.error.code, "model_not_allowed", route);
    }
    const dbx = await call("POST", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, bearer(k.key));
    assert.equal(dbx.status, 403, dbx.text);
    assert.equal(dbx.json.error_code, "PERMISSION_DENIED");
    // A model that does not exist at all is refused the same way: a limited key cannot tell the
    // served models it may not use from names that are served nowhere.
    const unknown = await call("POST", "/v1/chat/completions", { ...chatBody({ max_tokens: 2 }), model: "no-such-model" }, bearer(k.key));
    assert.equal(unknown.status, 403, unknown.text);
    assert.equal(unknown.json.error.code, "model_not_allowed");
    // Model lists show only the key's models; asking for another one by id is a 403 too.
    for (const prefix of ["/v1", "/v3", ""]) {
      const list = await call("GET", `${prefix}/models`, undefined, bearer(k.key));
      assert.equal(list.status, 200, list.text);
      assert.deepEqual(list.json.data, [], prefix);
      const one = await call("GET", `${prefix}/models/tiny`, undefined, bearer(k.key));
      assert.equal(one.status, 403, `${prefix}: ${one.text}`);
      assert.equal(one.json.error.param, "model");
      // A name served nowhere is the same 403, not a 404 that would set the served ones apart.
      const none = await call("GET", `${prefix}/models/no-such-model`, undefined, bearer(k.key));
      assert.equal(none.status, 403, `${prefix}: ${none.text}`);
      assert.equal(none.json.error.code, "model_not_allowed", prefix);
    }
    // Databricks' endpoint and model lists too: the endpoint is there, but not the key's to see.
    const endpoints = await call("GET", "/api/2.0/serving-endpoints", undefined, bearer(k.key));
    assert.equal(endpoints.status, 200, endpoints.text);
    assert.deepEqual(endpoints.json.endpoints, []);
    const endpoint = await call("GET", "/api/2.0/serving-endpoints/tiny", undefined, bearer(k.key));
    assert.equal(endpoint.status, 403, endpoint.text);
    assert.equal(endpoint.json.error_code, "PERMISSION_DENIED");
    // An endpoint that does not exist is the same 403 (as the data plane answers it), not a 404.
    const noEndpoint = await call("GET", "/api/2.0/serving-endpoints/no-such-endpoint", undefined, bearer(k.key));
    assert.equal(noEndpoint.status, 403, noEndpoint.text);
    assert.equal(noEndpoint.json.error_code, "PERMISSION_DENIED");
    assert.deepEqual((await call("GET", "/api/2.0/plinth/models", undefined, bearer(k.key))).json.models, []);
    const allowed = await createKey({ name: "tiny only", models: ["tiny"] });
    const list = await call("GET", "/v1/models", undefined, bearer(allowed.key));
    assert.deepEqual(list.json.data.map((m: Obj) => m.id), ["tiny"]);
    assert.ok((await call("GET", "/api/2.0/serving-endpoints", undefined, bearer(allowed.key))).json.endpoints.some((e: Obj) => e.name === "tiny"));
    assert.equal((await call("GET", "/api/2.0/serving-endpoints/tiny", undefined, bearer(allowed.key))).status, 200);
    // A key that may use every model still learns that a name is served nowhere.
    assert.equal((await call("GET", "/v1/models/no-such-model", undefined, bearer(STATIC_KEY))).status, 404);
    assert.equal((await call("GET", "/api/2.0/serving-endpoints/no-such-endpoint", undefined, bearer(STATIC_KEY))).status, 404);
    assert.deepEqual((await call("GET", "/api/2.0/plinth/models", undefined, bearer(allowed.key))).json.models.map((m: Obj) => m.name), ["tiny"]);
    assert.equal((await call("POST", "/v1/chat/completions", chatBody(), bearer(allowed.key))).status, 200);
    // llama-server's GET /props reads the same way: ?model= another model (served or not) is a 403
    // for a limited key, an unknown one a 404 for a key that may use them all.
    for (const model of ["tiny", "no-such-model"]) {
      const props = await call("GET", `/props?model=${model}`, undefined, bearer(k.key));
      assert.equal(props.status, 403, props.text);
      assert.equal(props.json.error.code, "model_not_allowed");
    }
    const unknownProps = await call("GET", "/props?model=no-such-model", undefined, bearer(STATIC_KEY));
    assert.equal(unknownProps.status, 404, unknownProps.text);
    assert.equal(unknownProps.json.error.code, "model_not_found");
    assert.equal(unknownProps.json.error.param, "model");
    // Without ?model=, the one model the key may generate with; with several, llama-server's router answer.
    const own = await call("GET", "/props", undefined, bearer(allowed.key));
    assert.equal(own.status, 200, own.text);
    assert.equal(own.json.model_path, "tiny");
    assert.equal((await call("GET", "/props", undefined, bearer(STATIC_KEY))).json.role, "router");
    assert.equal((await call("GET", "/props?model=tiny", undefined, bearer(STATIC_KEY))).json.model_path, "tiny");
  });

  test("Databricks: a limited key gets 403 for any other endpoint, served or not, before its task or entities are checked", async () => {
    const k = await createKey({ name: "dbx tiny only", models: ["tiny"] });
    const messages = [{ role: "user", content: "hi" }];
    const refused = [
      // An embedding model asked to chat (a 400 naming its task told the key it is served here).
      await call("POST", "/serving-endpoints/emb/invocations", { messages, max_tokens: 2 }, bearer(k.key)),
      await call("POST", "/serving-endpoints/emb/invocations", { input: "hi" }, bearer(k.key)),
      await call("POST", "/serving-endpoints/emb/served-models/emb/invocations", { messages }, bearer(k.key)),
      await call("POST", "/serving-endpoints/emb/served-models/nonexist/invocations", { messages }, bearer(k.key)),
      // A name served nowhere (a 404 told it apart from the served ones).
      await call("POST", "/serving-endpoints/nonexist/invocations", { messages }, bearer(k.key)),
      // The OpenAI-style paths, where `model` names the endpoint.
      await call("POST", "/serving-endpoints/chat/completions", { model: "emb", messages }, bearer(k.key)),
      await call("POST", "/serving-endpoints/chat/completions", { model: "nonexist", messages }, bearer(k.key)),
      await call("POST", "/serving-endpoints/embeddings", { model: "emb", input: "hi" }, bearer(k.key)),
      await call("POST", "/serving-endpoints/embeddings", { model: "nonexist", input: "hi" }, bearer(k.key)),
      await call("POST", "/serving-endpoints/completions", { model: "emb", prompt: "hi" }, bearer(k.key)),
      await call("POST", "/serving-endpoints/responses", { model: "nonexist", input: "hi" }, bearer(k.key)),
    ];
    for (const r of refused) {
      assert.equal(r.status, 403, r.text);
      assert.equal(r.json.error_code, "PERMISSION_DENIED", r.text);
    }
    // Both refusals read alike: nothing tells the served endpoint from the missing one.
    assert.equal(refused[0].json.message.replace("emb", "X"), refused[4].json.message.replace("nonexist", "X"));
    // Its own endpoint still answers, and its errors (a wrong task) are its to see.
    assert.equal((await call("POST", "/serving-endpoints/tiny/invocations", { messages, max_tokens: 2 }, bearer(k.key))).status, 200);
    assert.equal((await call("POST", "/serving-endpoints/embeddings", { model: "tiny", input: "hi" }, bearer(k.key))).status, 400);
    // A key with no model list still learns what does not exist, and what an endpoint serves.
    assert.equal((await call("POST", "/serving-endpoints/nonexist/invocations", { messages }, bearer(STATIC_KEY))).status, 404);
    assert.equal((await call("POST", "/serving-endpoints/emb/invocations", { messages }, bearer(STATIC_KEY))).status, 400);
  });

  test("stored completions are visible only to the key that stored them", async () => {
    const a = await createKey({ name: "a" });
    const b = await createKey({ name: "b" });
    const made = await call("POST", "/v1/chat/completions", chatBody({ store: true }), bearer(a.key));
    assert.equal(made.status, 200, made.text);
    const id = made.json.id as string;
    let mine = await call("GET", `/v1/chat/completions/${id}`, undefined, bearer(a.key));
    for (let i = 0; mine.status === 404 && i < 50; i++) {
      await new Promise((r) => setTimeout(r, 20));
      mine = await call("GET", `/v1/chat/completions/${id}`, undefined, bearer(a.key));
    }
    assert.equal(mine.status, 200, mine.text);
    assert.equal((await call("GET", `/v1/chat/completions/${id}`, undefined, bearer(b.key))).status, 404);
  });
});

describe("limits", () => {
  test("requests per minute: headers count down, then 429 with Retry-After; the openai client waits and succeeds", async () => {
    const k = await createKey({ name: "rpm", rpm: 2 });
    const first = await call("POST", "/v1/chat/completions", chatBody(), bearer(k.key));
    assert.equal(first.status, 200);
    assert.equal(first.headers.get("x-ratelimit-limit-requests"), "2");
    assert.equal(first.headers.get("x-ratelimit-remaining-requests"), "1");
    assert.match(first.headers.get("x-ratelimit-reset-requests") ?? "", /^\d+(\.\d+)?(ms|s)$/);
    // Streams carry the headers too.
    const streamed = await call("POST", "/v1/chat/completions", chatBody({ stream: true }), bearer(k.key));
    assert.equal(streamed.status, 200);
    assert.equal(streamed.headers.get("x-ratelimit-remaining-requests"), "0");
    const refused = await call("POST", "/v1/chat/completions", chatBody(), bearer(k.key));
    assert.equal(refused.status, 429);
    assert.equal(refused.json.error.code, "rate_limit_exceeded");
    assert.equal(refused.json.error.type, "rate_limit_error");
    const retryAfter = Number(refused.headers.get("retry-after"));
    assert.ok(retryAfter >= 1 && retryAfter <= WINDOW_S, `retry-after ${retryAfter}`);
    assert.equal(refused.headers.get("x-ratelimit-remaining-requests"), "0");
    // The same refusal in SpAk's and Databricks' routes.
    assert.equal((await call("POST", "/chat/completions", spakBody(), bearer(k.key))).status, 429);
    const dbx = await call("POST", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, bearer(k.key));
    assert.equal(dbx.status, 429, dbx.text);
    assert.equal(dbx.json.error_code, "REQUEST_LIMIT_EXCEEDED");
    assert.ok(Number(dbx.headers.get("retry-after")) >= 1);
    // In the metrics, a key's own limit is told apart from a full queue.
    const metrics = parsePrometheus((await call("GET", "/metrics", undefined, bearer(STATIC_KEY))).text);
    assert.equal(sum(metrics, "plinth_rate_limited_requests_total", { dialect: "openai", reason: "key_requests" }), 1);
    assert.equal(sum(metrics, "plinth_rate_limited_requests_total", { dialect: "databricks", reason: "key_requests" }), 1);
    assert.equal(sum(metrics, "plinth_rate_limited_requests_total", { reason: "rate_limit_exceeded" }), 0);

    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: k.key, maxRetries: 3 });
    const t0 = Date.now();
    const ok = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    assert.equal(ok.object, "chat.completion");
    const waited = Date.now() - t0;
    assert.ok(waited >= 300, `the client retried after waiting (${waited} ms)`);
  });

  test("tokens per minute: the prompt and max_tokens are reserved, then settled to the real count", async () => {
    const k = await createKey({ name: "tpm", tpm: 200 });
    // A request larger than the whole limit can never run: 429 that says not to retry.
    const huge = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 300 }), bearer(k.key));
    assert.equal(huge.status, 429, huge.text);
    assert.equal(huge.headers.get("x-should-retry"), "false");
    assert.match(huge.json.error.message, /max_tokens/);

    const a = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 100 }), bearer(k.key));
    assert.equal(a.status, 200, a.text);
    const used = a.json.usage.total_tokens as number;
    // Settled: what remains is the limit less what the request really used, not less its reservation.
    const after = await call("GET", "/v1/models", undefined, bearer(k.key));
    assert.equal(after.headers.get("x-ratelimit-limit-tokens"), "200");
    assert.equal(Number(after.headers.get("x-ratelimit-remaining-tokens")), 200 - used);
    // A reservation that does not fit what is left is refused until the window moves on.
    const refused = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 200 - used }), bearer(k.key));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, "rate_limit_exceeded");
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    assert.ok(refused.headers.get("x-ratelimit-reset-tokens"));
    await new Promise((r) => setTimeout(r, Number(refused.headers.get("retry-after-ms")) + 50));
    const later = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 200 - used }), bearer(k.key));
    assert.equal(later.status, 200, later.text);
  });

  test("concurrency cap: a second request while one runs gets 429; after it ends, it runs", async () => {
    const k = await createKey({ name: "conc", max_concurrency: 1 });
    const long = call("POST", "/v1/chat/completions", chatBody({ max_tokens: 400, logit_bias: NO_EOG }), bearer(k.key));
    // Once it is generating it holds the key's one place (a fixed 50 ms wait could end before it
    // even arrived on a busy machine).
    await waitFor(() => server.registry.resolve("tiny").scheduler.busy === 1);
    const second = await call("POST", "/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 2 }, bearer(k.key));
    assert.equal(second.status, 429, second.text);
    assert.match(second.json.error.message, /already has 1 request running/);
    assert.equal((await long).status, 200);
    await new Promise((r) => setTimeout(r, 20));
    assert.equal((await call("POST", "/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 2 }, bearer(k.key))).status, 200);
  });

  test("concurrency cap: a background response holds the key's place until its run ends, and reads take none", async () => {
    const k = await createKey({ name: "conc-bg", max_concurrency: 1 });
    const body = { model: "tiny", input: "Write a very long story", max_output_tokens: 300, background: true, logit_bias: NO_EOG };
    const first = await call("POST", "/v1/responses", body, bearer(k.key));
    assert.equal(first.status, 200, first.text);
    const second = await call("POST", "/v1/responses", body, bearer(k.key));
    assert.equal(second.status, 429, `a second background run while the first runs: ${second.text}`);
    // A cancel takes no place either: a key at its limit can stop what it runs.
    const other = await createKey({ name: "conc-bg-cancel", max_concurrency: 1 });
    const running = await call("POST", "/v1/responses", body, bearer(other.key));
    const cancelled = await call("POST", `/v1/responses/${running.json.id}/cancel`, undefined, bearer(other.key));
    assert.equal(cancelled.status, 200, cancelled.text);
    // Polling takes no place: the key can watch its run while it holds the only one.
    let status = "queued";
    for (let i = 0; i < 300 && (status === "queued" || status === "in_progress"); i++) {
      const polled = await call("GET", `/v1/responses/${first.json.id}`, undefined, bearer(k.key));
      assert.equal(polled.status, 200, polled.text);
      status = polled.json.status;
      if (status === "queued" || status === "in_progress") await new Promise((r) => setTimeout(r, 50));
    }
    assert.notEqual(status, "in_progress");
    // Once the run has ended, the place is free again.
    await new Promise((r) => setTimeout(r, 50));
    const third = await call("POST", "/v1/responses", { ...body, max_output_tokens: 2 }, bearer(k.key));
    assert.equal(third.status, 200, third.text);
  });

  test("token budget: requests run until the budget is spent, then 429 insufficient_quota", async () => {
    const k = await createKey({ name: "budget", budget_tokens: 120 });
    let spent = 0;
    let refused: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 30 && !refused; i++) {
      const r = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 4 }), bearer(k.key));
      if (r.status === 200) spent += r.json.usage.total_tokens;
      else refused = r;
    }
    assert.ok(refused, "the budget ran out");
    assert.equal(refused.status, 429);
    assert.equal(refused.json.error.code, "insufficient_quota");
    // OpenAI's own answer for a spent quota: both type and code say so.
    assert.equal(refused.json.error.type, "insufficient_quota");
    assert.equal(refused.headers.get("x-should-retry"), "false");
    assert.ok(spent <= 120 && spent > 60, `spent ${spent}`);
    // Reads still answer: the key can see its models, it just cannot spend more.
    assert.equal((await call("GET", "/v1/models", undefined, bearer(k.key))).status, 200);
    // The ledger charges the key what it used.
    await new Promise((r) => setTimeout(r, 400));
    const listed = (await admin("GET", `/keys/${k.id}`)).json;
    assert.equal(listed.used_tokens, spent);
  });

  test("embeddings reserve their input tokens: requests at once cannot spend a budget twice", async () => {
    // Many inputs a request, so that all twenty are in flight before the first one ends.
    const input = Array.from({ length: 32 }, (_, i) => `Tell me about the river, the long and winding river number ${i}.`);
    const probe = await call("POST", "/v1/embeddings", { model: "tiny", input }, bearer(STATIC_KEY));
    assert.equal(probe.status, 200, probe.text);
    const each = probe.json.usage.prompt_tokens as number;
    const k = await createKey({ name: "embed budget", budget_tokens: each * 5 });
    const answers = await Promise.all(Array.from({ length: 20 }, () => call("POST", "/v1/embeddings", { model: "tiny", input }, bearer(k.key))));
    const served = answers.filter((r) => r.status === 200);
    // Every input token was charged only after the whole batch ran: 20 ran, 4 times the budget.
    assert.equal(served.length, 5, answers.map((r) => r.status).join(","));
    for (const r of answers.filter((a) => a.status !== 200)) {
      assert.equal(r.status, 429, r.text);
      assert.equal(r.json.error.code, "insufficient_quota");
    }
    await until(async () => (await admin("GET", `/keys/${k.id}`)).json.used_tokens === each * 5);
  });

  test("a request cancelled while it waits for a sequence is charged nothing, in the limiter as in the ledger", async () => {
    const probe = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 1, temperature: 0 }), bearer(STATIC_KEY));
    const prompt = probe.json.usage.prompt_tokens as number;
    const filler = await createKey({ name: "filler" });
    const queuedOnTiny = async () => {
      const text = (await call("GET", "/metrics", undefined, bearer(STATIC_KEY))).text;
      return Number(/^vllm:num_requests_waiting\{model_name="tiny"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    // The four holders run ~0.4 s on this fixture, so on a loaded machine they can end before the
    // request under test is seen waiting; such a try proves nothing and is made again with a new key.
    let k: { id: string; key: string } | undefined;
    for (let attempt = 0; attempt < 5 && !k; attempt++) {
      // Room for exactly one request of max_tokens 8.
      const candidate = await createKey({ name: `queued budget ${attempt}`, budget_tokens: prompt + 8 });
      // Hold all four sequences, so the next request waits in the queue.
      const holding = Array.from({ length: 4 }, () =>
        call("POST", "/v1/chat/completions", chatBody({ max_tokens: 400, temperature: 0, logit_bias: NO_EOG }), bearer(filler.key)),
      );
      await new Promise((r) => setTimeout(r, 50));
      const abort = new AbortController();
      const waiting = fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(candidate.key) },
        body: JSON.stringify(chatBody({ max_tokens: 8, temperature: 0 })),
        signal: abort.signal,
      }).catch(() => undefined);
      // Cancelled only once the metrics show it waiting for a sequence.
      const seenWaiting = await until(async () => (await queuedOnTiny()) > 0, 1_000).then(() => true, () => false);
      abort.abort();
      await waiting;
      await Promise.all(holding);
      if (seenWaiting) k = candidate;
    }
    assert.ok(k, "the request was seen waiting for a sequence in one of five tries");
    let row: Obj | undefined;
    await until(async () => (row = (await admin("GET", "/usage?group_by=key")).json.data.find((r: Obj) => r.key === k.id)) !== undefined);
    assert.equal(row!.total_tokens, 0, JSON.stringify(row));
    // The limiter kept its prompt as spent, so this request, which needs the whole budget, was
    // refused though the key had used nothing.
    const whole = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 8, temperature: 0 }), bearer(k.key));
    assert.equal(whole.status, 200, whole.text);
    const line = logLines.join("").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Obj).find((e) => e.msg === "request" && e.key === k.id && e.status === 499);
    assert.equal(line?.prompt_tokens, 0, "the log line books it as the ledger does");
  });
});

describe("request ids chosen by clients", () => {
  // A client's x-request-id is echoed and booked, but two requests may send the same one: each is
  // still its own request to the limits, the model lists and the ledger.
  const ledgerRows = async (keyIds: string[], count: number) => {
    const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true, fileMustExist: true });
    let rows: Obj[] = [];
    try {
      const marks = keyIds.map(() => "?").join(",");
      await until(() => (rows = db.prepare(`SELECT * FROM usage_ledger WHERE key_id IN (${marks}) ORDER BY seq`).all(...keyIds) as Obj[]).length >= count);
    } finally {
      db.close();
    }
    return rows;
  };

  test("two overlapping requests with one x-request-id from different keys: each is limited and charged as its own", async () => {
    const a = await createKey({ name: "same id a", max_concurrency: 1 });
    const b = await createKey({ name: "same id b" });
    const id = { "x-request-id": "shared-request-id-1" };
    const long = call("POST", "/v1/chat/completions", chatBody({ max_tokens: 400, logit_bias: NO_EOG }), { ...bearer(a.key), ...id });
    await waitFor(() => server.registry.resolve("tiny").scheduler.busy >= 1);
    const short = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 3 }), { ...bearer(b.key), ...id });
    assert.equal(short.status, 200, short.text);
    assert.equal(short.headers.get("x-request-id"), "shared-request-id-1");
    const first = await long;
    assert.equal(first.status, 200, first.text);
    // The long request's place was given back: the key limited to one request at a time runs again.
    await new Promise((r) => setTimeout(r, 50));
    const again = await call("POST", "/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 2 }, bearer(a.key));
    assert.equal(again.status, 200, again.text);
    // Two rows under the same request id, each with its own key and usage.
    const rows = (await ledgerRows([a.id, b.id], 3)).filter((r) => r.request_id === "shared-request-id-1");
    assert.equal(rows.length, 2, JSON.stringify(rows));
    const of = (k: string) => rows.find((r) => r.key_id === k)!;
    assert.equal(of(a.id).completion_tokens, first.json.usage.completion_tokens, JSON.stringify(rows));
    assert.equal(of(a.id).prompt_tokens, first.json.usage.prompt_tokens);
    assert.equal(of(b.id).completion_tokens, short.json.usage.completion_tokens, JSON.stringify(rows));
    assert.equal((await admin("GET", `/keys/${b.id}`)).json.used_tokens, short.json.usage.total_tokens);
  });

  test("a key limited to other models is refused though another key's request shares its x-request-id", async () => {
    const limited = await createKey({ name: "same id limited", models: ["other"] });
    const open = await createKey({ name: "same id open" });
    const id = "shared-request-id-2";
    // The limited key's request is checked on arrival, then waits for the rest of its body while the
    // other key's request, with the same id, runs and ends.
    const body = Buffer.from(JSON.stringify(chatBody({ max_tokens: 2 })));
    const url = new URL(`${server.url}/v1/chat/completions`);
    const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.request(
        { host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers: { "content-type": "application/json", "content-length": body.length, "x-request-id": id, ...bearer(limited.key) } },
        (res) => {
          let text = "";
          res.on("data", (c: Buffer) => (text += c.toString("utf8")));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      req.on("error", reject);
      req.write(body.subarray(0, 10));
      setTimeout(async () => {
        try {
          const other = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 2 }), { ...bearer(open.key), "x-request-id": id });
          assert.equal(other.status, 200, other.text);
        } catch (err) {
          reject(err);
        }
        req.end(body.subarray(10));
      }, 200);
    });
    const r = await answer;
    assert.equal(r.status, 403, r.text);
    assert.equal(JSON.parse(r.text).error.code, "model_not_allowed");
    const rows = await ledgerRows([limited.id, open.id], 2);
    assert.deepEqual(rows.map((row) => [row.key_id, row.status]).sort(), [[limited.id, 403], [open.id, 200]].sort());
  });
});

describe("a key revoked while its requests run", () => {
  /** The key's one ledger row, once it is written. */
  async function ledgerRow(keyId: string): Promise<Obj> {
    let row: Obj | undefined;
    await until(async () => (row = (await admin("GET", "/usage?group_by=key")).json.data.find((r: Obj) => r.key === keyId)) !== undefined);
    return row!;
  }

  test("its stream ends at once with an error event, its JSON request with a 401, each booked with what it used", async () => {
    const streamed = await createKey({ name: "revoked midstream" });
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(streamed.key) },
      body: JSON.stringify(chatBody({ max_tokens: 400, logit_bias: NO_EOG, stream: true })),
    });
    assert.equal(res.status, 200);
    const text = await readAll(res, '"content":', async () => {
      assert.equal((await admin("DELETE", `/keys/${streamed.id}`)).json.state, "revoked");
    });
    const events = text.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) => b.slice(6));
    const last = JSON.parse(events.at(-1)!) as Obj;
    assert.equal(last.error?.code, "invalid_api_key", events.at(-1));
    assert.match(last.error.message, /revoked while this request ran/);
    const pieces = events.filter((e) => e.includes('"content":')).length;
    assert.ok(pieces < 400, `the stream ran on after the revocation (${pieces} pieces)`);
    const row = await ledgerRow(streamed.id);
    assert.ok(row.completion_tokens > 0 && row.completion_tokens < 400, JSON.stringify(row));

    const waiting = await createKey({ name: "revoked while answering" });
    const answer = call("POST", "/v1/chat/completions", chatBody({ max_tokens: 400, logit_bias: NO_EOG }), bearer(waiting.key));
    await waitFor(() => server.registry.resolve("tiny").scheduler.busy === 1);
    await admin("DELETE", `/keys/${waiting.id}`);
    const r = await answer;
    assert.equal(r.status, 401, r.text);
    assert.equal(r.json.error.code, "invalid_api_key");
    assert.match(r.json.error.message, /revoked while this request ran/);
    const booked = await ledgerRow(waiting.id);
    assert.ok(booked.completion_tokens < 400, JSON.stringify(booked));
  });

  test("its background response fails, saying why, booked with what it used", async () => {
    const k = await createKey({ name: "revoked in the background", max_concurrency: 1 });
    const created = await call("POST", "/v1/responses", { model: "tiny", input: "Write a long story", max_output_tokens: 400, background: true, logit_bias: NO_EOG }, bearer(k.key));
    assert.equal(created.status, 200, created.text);
    // Followed as its stream until it has generated, then revoked: the stream ends with the run.
    const tail = await fetch(`${server.url}/v1/responses/${created.json.id}?stream=true`, { headers: bearer(k.key) });
    assert.equal(tail.status, 200);
    let revoked = false;
    const text = await readAll(tail, "response.output_text.delta", async () => {
      revoked = true;
      await admin("DELETE", `/keys/${k.id}`);
    });
    assert.ok(revoked, "it generated");
    assert.match(text, /event: response\.failed/);
    // The key can read nothing now (not even its own response), so the store is read directly.
    const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true, fileMustExist: true });
    let stored: Obj | undefined;
    try {
      await until(() => {
        const row = db.prepare("SELECT status, body FROM responses WHERE id = ?").get(created.json.id) as { status: string; body: string } | undefined;
        stored = row && row.status !== "queued" && row.status !== "in_progress" ? JSON.parse(row.body) : undefined;
        return stored !== undefined;
      });
    } finally {
      db.close();
    }
    assert.equal(stored!.status, "failed", JSON.stringify(stored));
    assert.match(stored!.error.message, /revoked while this request ran/);
    assert.ok(stored!.usage.output_tokens > 0 && stored!.usage.output_tokens < 400, JSON.stringify(stored!.usage));
    const row = await ledgerRow(k.id);
    assert.equal(row.completion_tokens, stored!.usage.output_tokens);
  });
});

describe("usage ledger", () => {
  test("Databricks requests are booked under the databricks dialect, refused or served, in the ledger and the metrics", async () => {
    const k = await createKey({ name: "dbx dialect", models: ["tiny"], rpm: 2 });
    const invoke = (model?: string) =>
      call("POST", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0, ...(model ? { model } : {}) }, bearer(k.key));
    assert.equal((await invoke()).status, 200);
    assert.equal((await invoke("no such entity")).status, 400);
    // Refused by the key's rpm before the body is read: booked under the endpoint the path names.
    assert.equal((await invoke()).status, 429);
    const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true, fileMustExist: true });
    let rows: Array<{ dialect: string; status: number; model: string | null }> = [];
    try {
      await until(() => (rows = db.prepare("SELECT dialect, status, model FROM usage_ledger WHERE key_id = ? ORDER BY seq").all(k.id) as typeof rows).length === 3);
    } finally {
      db.close();
    }
    assert.deepEqual(rows.map((r) => r.dialect), ["databricks", "databricks", "databricks"]);
    assert.deepEqual(rows[2], { dialect: "databricks", status: 429, model: "tiny" });
    const metrics = (await call("GET", "/metrics", undefined, bearer(STATIC_KEY))).text;
    assert.match(metrics, /^plinth_http_requests_total\{dialect="databricks",route="\/serving-endpoints\/:name\/invocations",method="POST",status="400"\} \d+/m);
    assert.match(metrics, /^plinth_http_requests_total\{dialect="server",route="\/admin\/keys",method="POST",status="201"\} \d+/m);
    assert.doesNotMatch(metrics, /dialect="spak",route="\/(serving-endpoints|api|admin)/);
  });

  test("after 200 mixed requests the ledger's totals equal the sum of the responses' usage", async () => {
    const k = await createKey({ name: "ledger" });
    const h = bearer(k.key);
    let prompt = 0;
    let completion = 0;
    const one = async (i: number) => {
      switch (i % 4) {
        case 0: {
          const r = await call("POST", "/v1/chat/completions", chatBody({ max_tokens: 1 + (i % 5) }), h);
          assert.equal(r.status, 200, r.text);
          prompt += r.json.usage.prompt_tokens;
          completion += r.json.usage.completion_tokens;
          break;
        }
        case 1: {
          const r = await call("POST", "/v1/completions", { model: "tiny", prompt: "Once upon", max_tokens: 3 }, h);
          assert.equal(r.status, 200, r.text);
          prompt += r.json.usage.prompt_tokens;
          completion += r.json.usage.completion_tokens;
          break;
        }
        case 2: {
          const r = await call("POST", "/v1/chat/completions", chatBody({ stream: true, stream_options: { include_usage: true } }), h);
          const usage = r.text
            .split("\n")
            .filter((l) => l.startsWith("data: {"))
            .map((l) => JSON.parse(l.slice(6)))
            .find((c) => c.usage)?.usage;
          prompt += usage.prompt_tokens;
          completion += usage.completion_tokens;
          break;
        }
        default: {
          const r = await call("POST", "/chat/completions", spakBody({ max_tokens: 2 }), h);
          assert.equal(r.status, 200, r.text);
          prompt += r.json.usage.prompt_tokens;
          completion += r.json.usage.completion_tokens;
        }
      }
    };
    for (let i = 0; i < 200; i += 8) await Promise.all(Array.from({ length: 8 }, (_, j) => one(i + j)));
    let row: Obj | undefined;
    for (let i = 0; i < 50; i++) {
      const usage = await admin("GET", "/usage?group_by=key");
      row = usage.json.data.find((r: Obj) => r.key === k.id);
      if (row?.requests === 200) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(row?.requests, 200);
    assert.equal(row?.errors, 0);
    assert.equal(row?.prompt_tokens, prompt);
    assert.equal(row?.completion_tokens, completion);
    assert.equal(row?.total_tokens, prompt + completion);
    const byModel = await admin("GET", `/usage?group_by=model&from=${new Date(Date.now() - 3600_000).toISOString()}`);
    // The DeepSeek-style requests ran on its own model name (the same file).
    const served = (model: string) => byModel.json.data.filter((r: Obj) => r.model === model).reduce((a: number, r: Obj) => a + r.requests, 0);
    assert.ok(served("SpAk-Aster-V1-MOE") > 0 && served("tiny") + served("SpAk-Aster-V1-MOE") >= 200, byModel.text);
    // Names a client invents (refused: no such model) are not booked as models of their own.
    const junk = `junk-${Date.now()}`;
    const refused = await call("POST", "/v1/chat/completions", { ...chatBody(), model: junk }, bearer(k.key));
    assert.equal(refused.status, 404, refused.text);
    await until(async () => (await admin("GET", "/usage?group_by=key")).json.data.find((r: Obj) => r.key === k.id)?.requests === 201);
    const models = (await admin("GET", `/usage?group_by=model&from=${new Date(Date.now() - 3600_000).toISOString()}`)).json.data.map((r: Obj) => r.model);
    assert.ok(!models.includes(junk), JSON.stringify(models));
    const byDay = await admin("GET", "/usage?group_by=day");
    assert.ok(byDay.json.data.some((r: Obj) => r.day === new Date().toISOString().slice(0, 10)));
  });

  test("a stream its client cancels midway is booked with the tokens it had used", async () => {
    const k = await createKey({ name: "cancels" });
    const res = await streamThenCancel(`${server.url}/v1/chat/completions`, chatBody({ max_tokens: 400, stream: true, logit_bias: NO_EOG }), { headers: bearer(k.key) });
    assert.equal(res.status, 200);
    let row: Obj | undefined;
    for (let i = 0; i < 50 && !row; i++) {
      await new Promise((r) => setTimeout(r, 50));
      row = (await admin("GET", "/usage?group_by=key")).json.data.find((r: Obj) => r.key === k.id);
    }
    assert.equal(row?.requests, 1);
    assert.ok(row!.prompt_tokens > 0, JSON.stringify(row));
    assert.ok(row!.completion_tokens >= 4 && row!.completion_tokens < 400, JSON.stringify(row));
    assert.equal((await admin("GET", `/keys/${k.id}`)).json.used_tokens, row!.total_tokens);
  });

  test("keys never appear in clear in the database files or the logs", async () => {
    const k = await createKey({ name: "secret" });
    assert.equal((await call("POST", "/v1/chat/completions", chatBody(), bearer(k.key))).status, 200);
    assert.equal((await call("POST", "/v1/chat/completions", chatBody(), { "x-api-key": k.key })).status, 200);
    assert.equal((await call("POST", "/v1/chat/completions", chatBody(), bearer("pk-wrong-key-presented"))).status, 401);
    await new Promise((r) => setTimeout(r, 400));
    const files = readdirSync(dataDir).filter((f) => f.startsWith("plinth.db"));
    assert.ok(files.length >= 1);
    const bytes = Buffer.concat(files.map((f) => readFileSync(path.join(dataDir, f))));
    for (const secret of [k.key, STATIC_KEY, ADMIN, "pk-wrong-key-presented"]) {
      assert.equal(bytes.includes(Buffer.from(secret)), false, `a key is in the database files`);
      assert.equal(logLines.join("").includes(secret), false, `a key is in the log`);
    }
    // A request refused before Fastify saw it (not HTTP at all) has its log line too.
    const { port } = new URL(server.url);
    await new Promise<void>((resolve) => {
      const socket = connect(Number(port), "127.0.0.1", () => socket.end("GARBAGE\r\n\r\n"));
      socket.on("data", () => {});
      socket.on("close", () => resolve());
    });
    // The request log names the key by its id and its name.
    const entries = logLines.join("").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Obj);
    assert.ok(
      entries.some((e) => e.msg === "request" && e.route === "unmatched" && e.status === 400 && e.error_code === "invalid_request" && /^req_/.test(e.request_id)),
      "a log line for the malformed request",
    );
    assert.ok(
      entries.some((e) => e.msg === "request" && e.key === k.id && e.key_name === "secret" && e.status === 200),
      "a log line names the key's id and name",
    );
  });
});

/** Reads a streamed answer to its end; `once` runs (awaited) the first time the text so far holds `marker`. */
async function readAll(res: Response, marker: string, once: () => Promise<void>): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let seen = false;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
    if (!seen && text.includes(marker)) {
      seen = true;
      await once();
    }
  }
}
