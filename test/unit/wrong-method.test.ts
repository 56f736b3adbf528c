import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { AddressInfo } from "node:net";
import { request } from "node:http";
import { scriptedApp, type ScriptedApp } from "../helpers/scripted-app.ts";

// Over the SCRIPTED engine, through a real socket: a path that exists for other methods answers 405
// with `Allow`, in the envelope of the dialect that owns the path; an unknown path stays a 404; CORS
// preflights are answered before routing, as before.

const ORIGIN = "https://app.example";
let s: ScriptedApp;
let base: string;
before(async () => {
  s = await scriptedApp({ id: "tiny", corsOrigins: [ORIGIN] });
  await s.app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(s.app.server.address() as AddressInfo).port}`;
});
after(async () => {
  await s.app.close();
});

const call = async (method: string, path: string, headers: Record<string, string> = {}) => {
  const r = await fetch(`${base}${path}`, { method, headers });
  const text = await r.text();
  return { status: r.status, allow: r.headers.get("allow"), text, json: text ? JSON.parse(text) : undefined, headers: r.headers };
};

const databricks: Array<[method: string, path: string, allow: string]> = [
  ["PUT", "/serving-endpoints/tiny/invocations", "POST"],
  ["GET", "/serving-endpoints/tiny/invocations", "POST"],
  ["GET", "/serving-endpoints/chat/completions", "POST"],
  ["PATCH", "/api/2.0/serving-endpoints", "GET, HEAD, POST"],
  ["DELETE", "/api/2.0/serving-endpoints", "GET, HEAD, POST"],
  ["POST", "/api/2.0/serving-endpoints/tiny", "GET, HEAD, DELETE"],
  ["GET", "/api/2.0/serving-endpoints/tiny/config", "PUT"],
];
for (const [method, path, allow] of databricks) {
  test(`scripted engine: ${method} ${path} → 405 BAD_REQUEST (Databricks' envelope), Allow: ${allow}`, async () => {
    const r = await call(method, path);
    assert.equal(r.status, 405, r.text);
    assert.equal(r.allow, allow);
    assert.equal(r.json.error_code, "BAD_REQUEST", r.text);
    assert.match(r.json.message, new RegExp(`${method} is not allowed`));
  });
}

const openai: Array<[method: string, path: string, allow: string]> = [
  ["GET", "/v3/chat/completions", "POST"],
  ["GET", "/chat/completions", "POST"],
  ["PUT", "/v1/chat/completions", "GET, HEAD, POST"],
  ["GET", "/v1/responses?stream=true", "POST"],
  ["GET", "/tokenize", "POST"],
  ["POST", "/v1/models", "GET, HEAD"],
];
for (const [method, path, allow] of openai) {
  test(`scripted engine: ${method} ${path} → 405 in OpenAI's envelope, Allow: ${allow}`, async () => {
    const r = await call(method, path);
    assert.equal(r.status, 405, r.text);
    assert.equal(r.allow, allow);
    assert.equal(r.json.error.code, "method_not_allowed", r.text);
    assert.equal(r.json.error.type, "invalid_request_error");
  });
}

test("scripted engine: a path no route has is still a 404 in its dialect's envelope, without Allow", async () => {
  for (const [method, path] of [["GET", "/v1/nothing"], ["PUT", "/nowhere"], ["GET", "/v3/nowhere"]]) {
    const r = await call(method, path);
    assert.equal(r.status, 404, `${method} ${path}: ${r.text}`);
    assert.equal(r.allow, null);
    assert.equal(r.json.error.code, "not_found");
  }
  for (const [method, path] of [["GET", "/api/2.0/serving-endpoints/a/b/c"], ["PUT", "/serving-endpoints/tiny/nothing"]]) {
    const r = await call(method, path);
    assert.equal(r.status, 404, `${method} ${path}: ${r.text}`);
    assert.equal(r.allow, null);
    assert.equal(r.json.error_code, "ENDPOINT_NOT_FOUND");
  }
});

test("scripted engine: CORS preflights are answered as before; a plain OPTIONS is a 405 naming the methods", async () => {
  const preflight = await call("OPTIONS", "/v3/chat/completions", { origin: ORIGIN, "access-control-request-method": "POST" });
  assert.equal(preflight.status, 204, preflight.text);
  assert.equal(preflight.headers.get("access-control-allow-origin"), ORIGIN);
  const refused = await call("OPTIONS", "/serving-endpoints/tiny/invocations", { origin: "https://evil.example", "access-control-request-method": "POST" });
  assert.equal(refused.status, 403, refused.text);
  const plain = await call("OPTIONS", "/serving-endpoints/tiny/invocations");
  assert.equal(plain.status, 405, plain.text);
  assert.equal(plain.allow, "POST");
  assert.equal(plain.json.error_code, "BAD_REQUEST");
});

test("scripted engine: the 405 and 404 messages name the path, without the query string and percent-decoded as routed", async () => {
  const wrong = await call("POST", "/v1/responses/resp_x?foo=1");
  assert.equal(wrong.status, 405, wrong.text);
  assert.equal(wrong.json.error.message, "POST is not allowed on /v1/responses/resp_x; it takes GET, HEAD, DELETE.");
  // Sent as it is (fetch resolves `%2e%2e` as a step up the path before it sends anything).
  const dots = await new Promise<{ status?: number; text: string }>((resolve, reject) => {
    const req = request(`${base}/`, { method: "PUT", path: "/v1/responses/%2e%2e?foo=1" }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("error", reject);
    req.end();
  });
  assert.equal(dots.status, 405, dots.text);
  assert.equal(JSON.parse(dots.text).error.message, "PUT is not allowed on /v1/responses/..; it takes GET, HEAD, DELETE.");
  // An encoded "/" is one character of a segment, not a step of the path: it stays as sent.
  const none = await call("GET", "/v1/nothing/a%2Fb?x=1");
  assert.equal(none.status, 404, none.text);
  assert.equal(none.json.error.message, "No route for GET /v1/nothing/a%2Fb.");
});
