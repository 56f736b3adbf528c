import assert from "../helpers/assert.ts";
import type { AddressInfo } from "node:net";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import Database from "better-sqlite3";
import type { FastifyInstance } from "fastify";
import { buildApp, type AppOptions } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { toApiError } from "../../src/http/to-api-error.ts";
import { ScriptedEngine, type ScriptedEngineOptions } from "../helpers/scripted-engine.ts";
import { testStore } from "../helpers/test-store.ts";

// The HTTP layer's refusals of hostile or broken requests, through the real app over the scripted
// engine with inject(): content types, encodings, the Host check, CORS, router errors, admission of
// requests that can never fit, and what validation messages say. Socket-level behaviour (draining an
// oversized body, Node's client errors, timeouts, the connection limit) is in http-sockets.test.ts.

async function app(
  http: Partial<Omit<AppOptions, "store" | "sealer">> = {},
  engine: ScriptedEngineOptions & { maxQueue?: number } = {},
): Promise<FastifyInstance> {
  const registry = new ModelRegistry(engine.maxQueue ?? 8);
  const e = new ScriptedEngine({ id: "tiny", ...engine });
  registry.register(e.id);
  registry.ready(e);
  const { store, sealer, dispose } = testStore();
  const a = buildApp(new GenerationService(registry), { bodyLimit: 64 * 1024, store, sealer, ...http });
  a.addHook("onClose", dispose);
  await a.ready();
  return a;
}

const ok = { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 };
const JSON_TYPE = { "content-type": "application/json" };

function envelope(r: { statusCode: number; body: string }, status: number) {
  assert.equal(r.statusCode, status, r.body);
  const e = JSON.parse(r.body).error;
  assert.equal(typeof e?.message, "string", r.body);
  assert.ok(e.message.length > 10, r.body);
  assert.ok("param" in e && "code" in e && "type" in e, r.body);
  return e as { message: string; param: string | null; code: string | null; type: string };
}

describe("bodies", () => {
  let s: FastifyInstance;
  before(async () => {
    s = await app();
  });
  after(() => s.close());
  const post = (payload: string | Buffer, headers: Record<string, string>) =>
    s.inject({ method: "POST", url: "/v1/chat/completions", headers, payload });

  test("only JSON types are parsed; anything else is a 415 that names the type", async () => {
    for (const type of ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"]) {
      const e = envelope(await post(JSON.stringify(ok), { "content-type": type }), 415);
      assert.equal(e.code, "unsupported_media_type");
      assert.ok(e.message.includes(type.split(";")[0]), e.message);
    }
    for (const type of ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "application/merge-patch+json"]) {
      const r = await post(JSON.stringify(ok), { "content-type": type });
      assert.equal(r.statusCode, 200, `${type}: ${r.body}`);
    }
  });

  test("a body with no content type is a 415", async () => {
    const r = await s.inject({ method: "POST", url: "/v1/chat/completions", payload: Buffer.from(JSON.stringify(ok)), headers: { "content-type": "" } });
    envelope(r, 415);
  });

  test("bad JSON says what is wrong with it and names no field", async () => {
    const e = envelope(await post('{"model": "tiny",', JSON_TYPE), 400);
    assert.equal(e.code, "invalid_json");
    assert.equal(e.param, null);
    assert.match(e.message, /not valid JSON: ./);
  });

  test("a UTF-8 byte order mark before the JSON is skipped (files saved by Windows editors); one anywhere else is not", async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const r = await post(Buffer.concat([bom, Buffer.from(JSON.stringify(ok))]), JSON_TYPE);
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().object, "chat.completion");
    const twice = envelope(await post(Buffer.concat([bom, bom, Buffer.from(JSON.stringify(ok))]), JSON_TYPE), 400);
    assert.equal(twice.code, "invalid_json");
  });

  test("a __proto__ key is never a prototype: refused by name and place, at the top level and at any depth", async () => {
    const top = envelope(await post(`{"__proto__": {"stream": true, "n": 3}, "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`, JSON_TYPE), 400);
    assert.equal(top.param, "__proto__");
    const cases: Array<[string, string]> = [
      [`{"model": "tiny", "messages": [{"role": "user", "content": "hi", "__proto__": {"role": "system"}}], "max_tokens": 2}`, "messages[0].__proto__"],
      [`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"metadata":{"__proto__":{"a":1}}}`, "metadata.__proto__"],
      // A strict nested object, whose other unknown keys are refused too: it was served as if the key were not there.
      [`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"response_format":{"type":"text","__proto__":{"type":"json_object"}}}`, "response_format.__proto__"],
      [`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream_options":{"__proto__":{}}}`, "stream_options.__proto__"],
    ];
    for (const [body, param] of cases) assert.equal(envelope(await post(body, JSON_TYPE), 400).param, param, body);
  });

  test("where unknown fields are refused (/tokenize, as vLLM does), a __proto__ key is refused by name too", async () => {
    const plain = await s.inject({ method: "POST", url: "/tokenize", headers: JSON_TYPE, payload: '{"model":"tiny","prompt":"hi"}' });
    assert.equal(plain.statusCode, 200, plain.body);
    const unknown = envelope(await s.inject({ method: "POST", url: "/tokenize", headers: JSON_TYPE, payload: '{"model":"tiny","prompt":"hi","extra":1}' }), 400);
    assert.equal(unknown.param, "extra");
    const proto = envelope(await s.inject({ method: "POST", url: "/tokenize", headers: JSON_TYPE, payload: '{"model":"tiny","prompt":"hi","__proto__":{"x":1}}' }), 400);
    assert.equal(proto.param, "__proto__");
  });

  for (const [name, encode] of [
    ["gzip", gzipSync],
    ["deflate", deflateSync],
    ["br", brotliCompressSync],
  ] as const) {
    test(`a ${name}-encoded body is decoded`, async () => {
      const r = await post(encode(Buffer.from(JSON.stringify(ok))), { ...JSON_TYPE, "content-encoding": name });
      assert.equal(r.statusCode, 200, r.body);
    });
  }

  test("an unknown Content-Encoding is a 415 naming it; corrupt data is a 400 saying so", async () => {
    const e = envelope(await post(JSON.stringify(ok), { ...JSON_TYPE, "content-encoding": "compress" }), 415);
    assert.match(e.message, /'compress'/);
    const bad = envelope(await post(Buffer.from("definitely not gzip"), { ...JSON_TYPE, "content-encoding": "gzip" }), 400);
    assert.match(bad.message, /not valid gzip data/);
  });

  test("a compressed body that inflates past the limit is a 413 (no zip bomb)", async () => {
    const bomb = gzipSync(Buffer.alloc(8 * 1024 * 1024, 0x20));
    assert.ok(bomb.length < 64 * 1024);
    const e = envelope(await post(bomb, { ...JSON_TYPE, "content-encoding": "gzip" }), 413);
    assert.equal(e.code, "request_too_large");
  });
});

describe("bodies that would hold the event loop in JSON.parse", () => {
  test("a body of more objects, values or members than one request may is a 413 before it is parsed, plain or compressed; a vocabulary-wide logit_bias is not", async () => {
    const s = await app({ bodyLimit: 16 * 1024 * 1024 });
    try {
      const parts = JSON.stringify({ ...ok, messages: [{ role: "user", content: Array.from({ length: 120_000 }, () => ({ type: "text", text: "a" })) }] });
      const wide = JSON.stringify({ ...ok, logit_bias: Object.fromEntries(Array.from({ length: 400_000 }, (_, i) => [`k${i}`, 1])) });
      const ints = JSON.stringify({ model: "tiny", input: Array.from({ length: 8 }, () => Array.from({ length: 260_000 }, () => 1)) });
      for (const [url, body, bound] of [
        ["/v1/chat/completions", parts, /100,000 objects and arrays/],
        ["/v1/chat/completions", wide, /300,001 keys/],
        ["/v1/embeddings", ints, /2,000,000 values/],
      ] as const) {
        for (const gzip of [false, true]) {
          const r = await s.inject({ method: "POST", url, headers: { ...JSON_TYPE, ...(gzip ? { "content-encoding": "gzip" } : {}) }, payload: gzip ? gzipSync(body) : body });
          const e = envelope(r, 413);
          assert.equal(e.code, "request_too_large");
          assert.match(e.message, bound);
        }
      }
      const bias = JSON.stringify({ ...ok, logit_bias: Object.fromEntries(Array.from({ length: 262_144 }, (_, i) => [String(i), 1])) });
      const r = await s.inject({ method: "POST", url: "/v1/chat/completions", headers: JSON_TYPE, payload: bias });
      assert.notEqual(r.statusCode, 413, r.body);
    } finally {
      await s.close();
    }
  });
});

describe("Host header (DNS rebinding)", () => {
  test("bound to loopback: loopback names and IP literals pass; any other name is a 403 in the envelope", async () => {
    const s = await app({ host: "127.0.0.1" });
    try {
      for (const host of ["localhost", "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST.", "app.localhost:3000", "10.1.2.3"]) {
        const r = await s.inject({ method: "GET", url: "/v1/models", headers: { host } });
        assert.equal(r.statusCode, 200, `${host}: ${r.body}`);
      }
      for (const url of ["/v1/models", "/health", "/v1/chat/completions", "/nothing-here"]) {
        const r = await s.inject({ method: url === "/v1/chat/completions" ? "POST" : "GET", url, headers: { host: "evil.example:8080", ...JSON_TYPE }, payload: url === "/v1/chat/completions" ? JSON.stringify(ok) : undefined });
        const e = envelope(r, 403);
        assert.equal(e.code, "host_not_allowed", url);
        assert.match(e.message, /--allowed-host evil\.example/);
      }
    } finally {
      await s.close();
    }
  });

  test("a malformed Host, or more than one, is a 400: a name a proxy could read another way never passes", async () => {
    const s = await app({ host: "127.0.0.1" });
    try {
      for (const host of ["localhost:80.attacker.com", "127.0.0.1:8080.evil.com", "[::1].evil.com", "localhost:notaport", "local host"]) {
        const e = envelope(await s.inject({ method: "GET", url: "/v1/models", headers: { host } }), 400);
        assert.match(e.message, /Host header/, host);
      }
      // Two Host headers need a real connection (inject keeps one).
      await s.listen({ port: 0, host: "127.0.0.1" });
      const { port } = s.server.address() as AddressInfo;
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = connect(port, "127.0.0.1", () => socket.write("GET /v1/models HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n"));
        let got = "";
        socket.on("data", (d) => (got += d.toString("latin1")));
        socket.on("close", () => resolve(got));
        socket.on("error", reject);
      });
      assert.match(answer, /^HTTP\/1\.1 400 /);
    } finally {
      await s.close();
    }
  });

  test("--allowed-host adds names; * turns the check off; a named listen address is accepted", async () => {
    const named = await app({ host: "0.0.0.0", allowedHosts: ["plinth.lan"] });
    const any = await app({ allowedHosts: ["*"] });
    const byName = await app({ host: "gpu-box.internal" });
    try {
      assert.equal((await named.inject({ url: "/v1/models", headers: { host: "Plinth.LAN:8080" } })).statusCode, 200);
      assert.equal((await named.inject({ url: "/v1/models", headers: { host: "evil.example" } })).statusCode, 403);
      assert.equal((await any.inject({ url: "/v1/models", headers: { host: "evil.example" } })).statusCode, 200);
      assert.equal((await byName.inject({ url: "/v1/models", headers: { host: "gpu-box.internal:8080" } })).statusCode, 200);
    } finally {
      await Promise.all([named.close(), any.close(), byName.close()]);
    }
  });
});

describe("CORS", () => {
  const preflight = (s: FastifyInstance, origin: string, url = "/v1/chat/completions") =>
    s.inject({
      method: "OPTIONS",
      url,
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
    });

  test("off by default: preflights are a 403 in the envelope and no answer carries Access-Control-Allow-*", async () => {
    const s = await app();
    try {
      for (const url of ["/v1/chat/completions", "/v1/responses", "/tokenize", "/health"]) {
        const r = await preflight(s, "https://evil.example", url);
        const e = envelope(r, 403);
        assert.equal(e.code, "cors_not_allowed", url);
        assert.ok(!Object.keys(r.headers).some((h) => h.startsWith("access-control-")), url);
      }
      const r = await s.inject({ method: "POST", url: "/v1/chat/completions", headers: { origin: "https://evil.example", ...JSON_TYPE }, payload: JSON.stringify(ok) });
      assert.ok(!Object.keys(r.headers).some((h) => h.startsWith("access-control-")));
      // A POST a page elsewhere could send without a preflight (no body, no JSON type, no key) is refused;
      // the same from the server's own origin (the console), or with a key, is not.
      const simple = (headers: Record<string, string>) => s.inject({ method: "POST", url: "/v1/conversations", headers: { host: "localhost:8080", ...headers } });
      assert.equal(envelope(await simple({ origin: "https://evil.example" }), 403).code, "cors_not_allowed");
      assert.equal(envelope(await simple({ origin: "null" }), 403).code, "cors_not_allowed");
      assert.equal((await simple({ origin: "http://localhost:8080" })).statusCode, 200);
      assert.equal((await simple({})).statusCode, 200);
    } finally {
      await s.close();
    }
  });

  test("with --cors-origin: its origins get preflights and the header; others a 403", async () => {
    const s = await app({ corsOrigins: ["https://app.example"] });
    try {
      const r = await preflight(s, "https://app.example");
      assert.equal(r.statusCode, 204, r.body);
      assert.equal(r.headers["access-control-allow-origin"], "https://app.example");
      // PUT too: a browser console changes a serving endpoint's config with it.
      assert.match(String(r.headers["access-control-allow-methods"]), /POST.*PUT.*DELETE/);
      assert.match(String(r.headers["access-control-allow-headers"]), /authorization/);
      assert.equal(r.headers.vary, "Origin");
      envelope(await preflight(s, "https://evil.example"), 403);
      const real = await s.inject({ method: "POST", url: "/v1/chat/completions", headers: { origin: "https://app.example", ...JSON_TYPE }, payload: JSON.stringify(ok) });
      assert.equal(real.statusCode, 200);
      assert.equal(real.headers["access-control-allow-origin"], "https://app.example");
      const error = await s.inject({ method: "POST", url: "/v1/chat/completions", headers: { origin: "https://app.example", ...JSON_TYPE }, payload: "{}" });
      assert.equal(error.statusCode, 400);
      assert.equal(error.headers["access-control-allow-origin"], "https://app.example", "errors are readable by the page too");
      const other = await s.inject({ method: "GET", url: "/v1/models", headers: { origin: "https://evil.example" } });
      assert.equal(other.headers["access-control-allow-origin"], undefined);
    } finally {
      await s.close();
    }
  });

  test("--cors-origin '*' allows any origin", async () => {
    const s = await app({ corsOrigins: ["*"] });
    try {
      const r = await preflight(s, "https://anything.example");
      assert.equal(r.statusCode, 204);
      assert.equal(r.headers["access-control-allow-origin"], "*");
    } finally {
      await s.close();
    }
  });
});

describe("URLs the router cannot take", () => {
  let s: FastifyInstance;
  before(async () => {
    s = await app();
  });
  after(() => s.close());

  test("a bad percent-encoding is a 400 in the envelope", async () => {
    const e = envelope(await s.inject({ url: "/v1/models/%ZZ" }), 400);
    assert.match(e.message, /percent-encoding/);
  });

  test("an over-long path segment is a 414 in the envelope", async () => {
    const e = envelope(await s.inject({ url: `/v1/models/${"m".repeat(2000)}` }), 414);
    assert.equal(e.code, "uri_too_long");
  });

  test("an unknown route's message does not echo a huge URL", async () => {
    const e = envelope(await s.inject({ url: `/${"x".repeat(10_000)}` }), 404);
    assert.ok(e.message.length < 400);
  });
});

describe("admission: a request that can never fit is a 400, not a retryable 429", () => {
  let s: FastifyInstance;
  before(async () => {
    s = await app({}, { slots: 4, maxQueue: 16 });
  });
  after(() => s.close());

  test("chat n beyond slots + half the queue → 400 naming n (a request that takes the whole queue locks everyone else out)", async () => {
    const e = envelope(await s.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...ok, n: 13 } }), 400);
    assert.equal(e.param, "n");
    assert.equal(e.code, "too_many_choices");
    assert.match(e.message, /^n asks for 13 generations.*at most 12/);
    const fits = await s.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...ok, n: 12 } });
    assert.equal(fits.statusCode, 200, fits.body);
  });

  test("a completions batch whose prompts × n exceed it → 400 naming prompt; one prompt's n → n", async () => {
    const batch = envelope(await s.inject({ method: "POST", url: "/v1/completions", payload: { model: "tiny", prompt: ["a", "b", "c", "d", "e", "f"], n: 4, max_tokens: 1 } }), 400);
    assert.equal(batch.param, "prompt");
    const single = envelope(await s.inject({ method: "POST", url: "/v1/completions", payload: { model: "tiny", prompt: ["a", "b"], n: 21, max_tokens: 1 } }), 400);
    assert.equal(single.param, "n");
  });
});

describe("validation messages say what is wrong with the field that was sent", () => {
  let s: FastifyInstance;
  before(async () => {
    s = await app({ bodyLimit: 4 * 1024 * 1024 });
  });
  after(() => s.close());
  const post = (body: string | object) =>
    s.inject({ method: "POST", url: "/v1/chat/completions", headers: JSON_TYPE, payload: typeof body === "string" ? body : JSON.stringify(body) });

  test("a surrogate pair written as escapes is one character, and accepted", async () => {
    const r = await post(`{"model":"tiny","messages":[{"role":"user","content":"smile \\ud83d\\ude00"}],"max_tokens":2}`);
    assert.equal(r.statusCode, 200, r.body);
  });

  const cases: Array<[string, string | object, string, RegExp]> = [
    ["max_tokens as a string", { ...ok, max_tokens: "2" }, "max_tokens", /expected a number, got the string "2"/],
    ["temperature 1e999", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":1e999}`, "temperature", /too large/],
    ["temperature as a string", { ...ok, temperature: "hot" }, "temperature", /expected a number, got the string "hot"/],
    ["100k stop strings", { ...ok, stop: Array.from({ length: 100_000 }, () => "x") }, "stop", /has 100000 items; it must have at most 16/],
    // Valid UTF-8 bytes, but an escape for half a character: it would reach the model as U+FFFD.
    ["a lone surrogate escape in content", `{"model":"tiny","messages":[{"role":"user","content":"a\\ud800b"}],"max_tokens":2}`, "messages[0].content", /unpaired UTF-16 surrogate/],
    ["a lone low surrogate in a stop string", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":["x","\\udfff"]}`, "stop[1]", /unpaired UTF-16 surrogate/],
    ["stop as a number", { ...ok, stop: 5 }, "stop", /expected a string or an array, got the integer 5/],
    ["temperature above 2", { ...ok, temperature: 3 }, "temperature", /is 3; it must be at most 2/],
    ["n as a fraction", { ...ok, n: 1.5 }, "n", /expected an integer, got the number 1.5/],
    ["content of the wrong type", { ...ok, messages: [{ role: "user", content: 42 }] }, "messages[0].content", /got the integer 42/],
    ["a text part without its text", { ...ok, messages: [{ role: "user", content: [{ type: "text" }] }] }, "messages[0].content[0].text", /required/],
    ["an unknown role", { ...ok, messages: [{ role: "wizard", content: "x" }] }, "messages[0].role", /got the string "wizard"/],
    // A missing or null model is the one model served (test/unit/default-model.test.ts).
    // Fields checked only as "an object" (schemas, maps) say what came instead, too.
    ["logit_bias as an array", { ...ok, logit_bias: [[15, -100]] }, "logit_bias", /expected an object, got an array of 1 items/],
    ["json_schema as a number", { ...ok, json_schema: 123 }, "json_schema", /expected an object, got the integer 123/],
    ["a schema as a string", { ...ok, response_format: { type: "json_schema", json_schema: { name: "x", schema: "{}" } } }, "response_format.json_schema.schema", /expected an object, got the string "\{\}"/],
  ];
  for (const [name, body, param, message] of cases) {
    test(name, async () => {
      const e = envelope(await post(body), 400);
      assert.equal(e.param, param);
      assert.match(e.message, message);
      if (!/required/.test(message.source)) assert.ok(!/required/.test(e.message), `not "required": ${e.message}`);
    });
  }

  test("a missing field that takes one of several types is called required, not described by its types", async () => {
    for (const [url, payload, param] of [
      ["/v1/completions", { model: "tiny", max_tokens: 1 }, "prompt"],
      ["/v1/embeddings", { model: "tiny" }, "input"],
    ] as const) {
      const e = envelope(await s.inject({ method: "POST", url, headers: JSON_TYPE, payload: JSON.stringify(payload) }), 400);
      assert.equal(e.param, param);
      assert.match(e.message, /this field is required/, e.message);
    }
    // Sent, but of none of the types: still said as the types it may be.
    const wrong = envelope(await s.inject({ method: "POST", url: "/v1/completions", headers: JSON_TYPE, payload: JSON.stringify({ model: "tiny", prompt: 5 }) }), 400);
    assert.match(wrong.message, /expected a string or an array, got the integer 5/);
  });

  test("a SyntaxError that is not the body's (a bad regex, say) is never reported as invalid JSON", () => {
    const e = toApiError(new SyntaxError("Invalid regular expression: /(/: Unterminated group"));
    assert.ok(!/JSON/.test(e.message), e.message);
  });

  test("a store that cannot be used now (full disk, I/O error, read-only, locked) is a 503 store_unavailable with Retry-After; other SQLite failures stay 500s", () => {
    for (const [code, message] of [
      ["SQLITE_FULL", "database or disk is full"],
      ["SQLITE_IOERR_WRITE", "disk I/O error"],
      ["SQLITE_READONLY_DBMOVED", "attempt to write a readonly database"],
      ["SQLITE_BUSY", "database is locked"],
    ]) {
      const e = toApiError(new Database.SqliteError(message, code));
      assert.deepEqual([e.status, e.code, e.type], [503, "store_unavailable", "service_unavailable_error"], code);
      assert.ok(Number(e.headers["retry-after"]) >= 1, code);
      assert.match(e.message, /store/);
      assert.ok(e.message.includes(message), e.message);
    }
    for (const code of ["SQLITE_CONSTRAINT", "SQLITE_ERROR", "SQLITE_FULLNESS"]) assert.equal(toApiError(new Database.SqliteError("x", code)).status, 500, code);
  });
});

describe("settings", () => {
  test("CORS origins and allowed hosts: repeatable, comma-separated, from flags or the environment; timeouts in seconds", async () => {
    const { loadConfig } = await import("../../src/config/load.ts");
    const c = loadConfig({ "cors-origin": ["https://a.example,https://b.example", "https://c.example"], "body-timeout": "0.5" }, { PLINTH_ALLOWED_HOST: "gpu.lan, box.lan" });
    assert.deepEqual(c["cors-origin"], ["https://a.example", "https://b.example", "https://c.example"]);
    assert.deepEqual(c["allowed-host"], ["gpu.lan", "box.lan"]);
    assert.equal(c["body-timeout"], 0.5);
    const d = loadConfig({}, {});
    assert.deepEqual([d["cors-origin"], d["allowed-host"], d["headers-timeout"], d["body-timeout"], d["keep-alive-timeout"], d["max-connections"]], [[], [], 30, 60, 65, 512]);
  });
});
