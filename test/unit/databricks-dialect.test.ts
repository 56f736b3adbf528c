import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { RuntimeModelLoader } from "../../src/cli/model-loader.ts";
import { EngineFactories } from "../../src/core/engine-factory.ts";
import { ApiError } from "../../src/core/errors.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { seededRandom } from "../../src/core/random.ts";
import { databricksDataPlaneErrorBody, databricksErrorBody } from "../../src/dialects/databricks/errors.ts";
import { ensureFixtureModel } from "../fixtures/models.ts";
import { scriptedApp, sseData, sseEvents } from "../helpers/scripted-app.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";

// Fast checks of the Databricks dialect over the SCRIPTED ENGINE (no model runs): the error envelope,
// failures after a response started, and the pieces the endpoints are built from.

const post = (app: Awaited<ReturnType<typeof scriptedApp>>["app"], url: string, payload: unknown) => app.inject({ method: "POST", url, payload: payload as object });

test("the envelope: {error_code, message} with Databricks' code for each status", () => {
  const cases: Array<[number, string]> = [
    [400, "INVALID_PARAMETER_VALUE"],
    [401, "UNAUTHENTICATED"],
    [403, "PERMISSION_DENIED"],
    [404, "RESOURCE_DOES_NOT_EXIST"],
    [409, "RESOURCE_ALREADY_EXISTS"],
    [429, "REQUEST_LIMIT_EXCEEDED"],
    [503, "TEMPORARILY_UNAVAILABLE"],
    [500, "INTERNAL_ERROR"],
  ];
  for (const [status, code] of cases) assert.deepEqual(databricksErrorBody(new ApiError(status, "m")), { error_code: code, message: "m" });
  assert.equal(databricksErrorBody(new ApiError(409, "busy", { code: "RESOURCE_CONFLICT" })).error_code, "RESOURCE_CONFLICT");
  assert.equal(databricksErrorBody(new ApiError(400, "bad", { param: "top_k" })).message, "bad (parameter: top_k)");
  // The data plane's copy for OpenAI clients.
  assert.deepEqual(databricksDataPlaneErrorBody(new ApiError(503, "later")), {
    error_code: "TEMPORARILY_UNAVAILABLE",
    message: "later",
    error: { code: "TEMPORARILY_UNAVAILABLE", message: "later" },
  });
});

test("scripted engine: a full queue is 429 REQUEST_LIMIT_EXCEEDED in the envelope", async () => {
  const { app } = await scriptedApp({ slots: 1, maxQueue: 0, delayMs: 50 });
  const body = { messages: [{ role: "user", content: "hi" }] };
  const [a, b] = await Promise.all([post(app, "/serving-endpoints/scripted/invocations", body), post(app, "/serving-endpoints/scripted/invocations", body)]);
  const statuses = [a.statusCode, b.statusCode].sort();
  assert.deepEqual(statuses, [200, 429]);
  const refused = [a, b].find((r) => r.statusCode === 429)!;
  assert.equal(refused.json().error_code, "REQUEST_LIMIT_EXCEEDED");
  await app.close();
});

test("001-56 scripted engine: a response that fails after it started has status failed and error {code, message, type, param}", async () => {
  const { app } = await scriptedApp({ script: () => [{ kind: "text", text: "Hel", tokens: 1 }, new Error("the engine broke")] });
  const streamed = await post(app, "/serving-endpoints/responses", { model: "scripted", input: "hi", stream: true });
  const last = sseEvents(streamed.body).at(-1)!;
  assert.equal(last.event, "response.failed");
  const response = (last.data as any).response;
  assert.equal(response.status, "failed");
  assert.equal(typeof response.error.code, "string");
  assert.ok(response.error.message.includes(`(request id: ${streamed.headers["x-request-id"]})`), response.error.message);
  assert.equal(typeof response.error.type, "string");
  assert.ok("param" in response.error);
  // Usage is in the stream when asked for, a failed response's too: what it spent.
  const counted = await post(app, "/serving-endpoints/responses", { model: "scripted", input: "hi", stream: true, stream_options: { include_usage: true } });
  const failed = sseEvents(counted.body).find((e) => e.event === "response.failed");
  assert.equal((failed?.data as any)?.response.usage?.output_tokens, 1, counted.body);
  const plain = await post(app, "/serving-endpoints/responses", { model: "scripted", input: "hi" });
  assert.equal(plain.statusCode, 500);
  assert.equal(plain.json().error_code, "INTERNAL_ERROR");
  await app.close();
});

test("scripted engine: a chat or completions stream that fails mid-way ends with the envelope as its last event", async () => {
  const { app } = await scriptedApp({ script: () => [{ kind: "text", text: "Hel", tokens: 1 }, new Error("the engine broke")] });
  for (const body of [{ messages: [{ role: "user", content: "hi" }], stream: true }, { prompt: "hi", stream: true }]) {
    const r = await post(app, "/serving-endpoints/scripted/invocations", body);
    assert.equal(r.statusCode, 200);
    const events = sseData(r.body).filter((e) => e !== "[DONE]") as any[];
    assert.equal(events.at(-1).error_code, "INTERNAL_ERROR", r.body);
    assert.equal(typeof events.at(-1).message, "string");
  }
  await app.close();
});

test("scripted engine: no request field is silently dropped; a model that names another endpoint is refused", async () => {
  const { app, engine } = await scriptedApp();
  // No limit on stop sequences is documented; past Plinth's 256 they are refused, chat and completions.
  const stops = Array.from({ length: 257 }, (_, i) => `zq${i}`);
  for (const body of [{ messages: [{ role: "user", content: "hi" }], stop: stops }, { prompt: "hi", stop: stops }]) {
    const many = await post(app, "/serving-endpoints/scripted/invocations", body);
    assert.equal(many.statusCode, 400, many.body);
    assert.match(many.json().message, /stop/);
    const fine = await post(app, "/serving-endpoints/scripted/invocations", { ...body, stop: stops.slice(0, 256), max_tokens: 1 });
    assert.equal(fine.statusCode, 200, fine.body);
  }
  const unknown = await post(app, "/serving-endpoints/scripted/invocations", { messages: [{ role: "user", content: "hi" }], frequency_penalty: 1 });
  assert.equal(unknown.statusCode, 400);
  assert.ok(unknown.json().message.includes("frequency_penalty"), unknown.body);
  // A message's `name` (OpenAI clients send it) reaches the model on every role that takes one.
  const named = await post(app, "/serving-endpoints/scripted/invocations", { messages: [{ role: "user", content: "hi", name: "bo" }, { role: "assistant", content: "yo", name: "al" }, { role: "user", content: "x" }] });
  assert.equal(named.statusCode, 200, named.body);
  const messages = (engine.prepared.at(-1)!.prompt as { messages: Array<{ name?: string }> }).messages;
  assert.deepEqual(messages.map((m) => m.name), ["bo", "al", undefined]);
  // Null optional keys, as clients that send a message back as they got it write them, are absent keys.
  const nulls = await post(app, "/serving-endpoints/scripted/invocations", { messages: [{ role: "user", content: "hi", name: null }, { role: "assistant", content: "yo", tool_calls: null, name: null }, { role: "user", content: "x" }] });
  assert.equal(nulls.statusCode, 200, nulls.body);
  const other = await post(app, "/serving-endpoints/scripted/invocations", { model: "elsewhere", messages: [{ role: "user", content: "hi" }] });
  assert.equal(other.statusCode, 400);
  assert.ok(other.json().message.includes("model"));
  const neither = await post(app, "/serving-endpoints/scripted/invocations", { text: "hi" });
  assert.equal(neither.statusCode, 400);
  const badJson = await app.inject({ method: "POST", url: "/serving-endpoints/scripted/invocations", payload: "{", headers: { "content-type": "application/json" } });
  assert.equal(badJson.statusCode, 400);
  assert.equal(badJson.json().error_code, "INVALID_PARAMETER_VALUE");
  // "__proto__" is an unknown key like any other here (the body parser drops it; the dialect says so),
  // on every path and at any depth, and on the control plane too.
  const withProto = [
    ["/serving-endpoints/scripted/invocations", '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"__proto__":{"temperature":5}}'],
    ["/serving-endpoints/chat/completions", '{"model":"scripted","messages":[{"role":"user","content":"hi","__proto__":{}}]}'],
    ["/serving-endpoints/responses", '{"model":"scripted","input":"hi","__proto__":null}'],
    ["/api/2.0/serving-endpoints", '{"name":"e","config":{"served_entities":[]},"__proto__":{}}'],
  ];
  for (const [url, payload] of withProto) {
    const r = await app.inject({ method: "POST", url, payload, headers: { "content-type": "application/json" } });
    assert.equal(r.statusCode, 400, `${url}: ${r.body}`);
    assert.equal(r.json().error_code, "INVALID_PARAMETER_VALUE", r.body);
    assert.match(r.json().message, /__proto__/);
  }
  const unknownRoute = await app.inject({ method: "GET", url: "/api/2.0/serving-endpoints/a/b/c" });
  assert.equal(unknownRoute.statusCode, 404);
  assert.equal(unknownRoute.json().error_code, "ENDPOINT_NOT_FOUND", "Databricks' code for a path no API has");
  await app.close();
});

test("the traffic split's random numbers replay from a seed", () => {
  const a = seededRandom(7);
  const b = seededRandom(7);
  const xs = Array.from({ length: 5 }, () => a());
  assert.deepEqual(xs, Array.from({ length: 5 }, () => b()));
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  assert.notDeepEqual(xs, Array.from({ length: 5 }, seededRandom(8)));
});

test("runtime loading checks memory first: a model larger than the free memory is refused (507) before any work", async () => {
  const registry = new ModelRegistry(4);
  let created = 0;
  const engines = new EngineFactories().register(["file"], async () => {
    created++;
    throw new Error("not reached");
  });
  const settings = { parallel: 1, threads: 1, gpu: "off", embeddingContexts: 1, cacheRam: 0, cacheMinTokens: 64 };
  const loader = new RuntimeModelLoader(registry, engines, settings, () => {}, () => 1024);
  const file = await ensureFixtureModel();
  await assert.rejects(() => loader.load(file, { name: "big" }), (err: ApiError) => {
    assert.equal(err.status, 507);
    assert.equal(err.code, "RESOURCE_EXHAUSTED");
    return true;
  });
  assert.equal(created, 0);
  assert.equal(registry.has("big"), false);
});

test("unloading a model whose load never ends aborts it and goes on within a second; an engine that comes late is disposed", async () => {
  const registry = new ModelRegistry(4);
  const settings = { parallel: 1, threads: 1, gpu: "off", embeddingContexts: 1, cacheRam: 0, cacheMinTokens: 64 };
  const file = await ensureFixtureModel();
  // One scripted factory that hears the abort, one that ignores it (a load stuck where no signal reaches).
  let release: (() => void) | undefined;
  let disposed = 0;
  const engines = new EngineFactories().register(["file"], (spec, _log, signal) => {
    if (spec.id === "hears")
      return new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason), { once: true }));
    return new Promise((resolve) => {
      release = () => {
        const engine = new ScriptedEngine({ id: spec.id, slots: 1 });
        engine.dispose = async () => void disposed++;
        resolve(engine);
      };
    });
  });
  const loader = new RuntimeModelLoader(registry, engines, settings, () => {});
  for (const id of ["hears", "deaf"]) {
    const load = loader.load(file, { name: id });
    const failed = load.then(
      () => "loaded",
      (err: ApiError) => err.status,
    );
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(registry.get(id)?.status, "loading");
    const start = performance.now();
    await loader.unload(id);
    assert.ok(performance.now() - start < 1500, `${id}: unload took ${performance.now() - start} ms`);
    assert.equal(registry.has(id), false);
    if (id === "hears") assert.equal(await failed, 503);
  }
  // The deaf load finishes after all: its engine is freed, and the model stays gone.
  release!();
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(disposed, 1);
  assert.equal(registry.has("deaf"), false);
});

test("scripted engine: on /invocations a body with `input` is a Responses request, whatever else it holds (`prompt` is a Responses field too)", async () => {
  const { app } = await scriptedApp();
  // Responses documents `prompt` (a stored prompt template, an object); such a body was taken for a
  // completions request and refused as "'prompt': expected a string or an array".
  const r = await post(app, "/serving-endpoints/scripted/invocations", { model: "scripted", input: "hi", prompt: { id: "pmpt_1" } });
  assert.equal(r.statusCode, 400, r.body);
  assert.match(r.json().message, /stored prompt templates are not supported/, r.body);
  // The same as on the OpenAI-client path.
  const viaPath = await post(app, "/serving-endpoints/responses", { model: "scripted", input: "hi", prompt: { id: "pmpt_1" } });
  assert.equal(viaPath.json().message, r.json().message);
  // A completions body is still one.
  const completion = await post(app, "/serving-endpoints/scripted/invocations", { prompt: "hi", max_tokens: 1 });
  assert.equal(completion.statusCode, 200, completion.body);
  assert.equal(completion.json().object, "text_completion");
  await app.close();
});

test("scripted engine: the control plane refuses a query key, and a body field where only the path is read, by name", async () => {
  const { app } = await scriptedApp();
  const call = (method: "GET" | "POST" | "PUT" | "DELETE", url: string, payload?: object) => app.inject({ method, url, ...(payload ? { payload } : {}) });
  const refused = (r: Awaited<ReturnType<typeof call>>, name: string) => {
    assert.equal(r.statusCode, 400, r.body);
    assert.equal(r.json().error_code, "INVALID_PARAMETER_VALUE", r.body);
    assert.ok(r.json().message.includes(`'${name}'`), r.body);
  };
  // Before, each of these answered as if the key had not been sent (a DELETE deleted).
  refused(await call("GET", "/api/2.0/serving-endpoints?page_token=x"), "page_token");
  refused(await call("GET", "/api/2.0/serving-endpoints/scripted?view=full"), "view");
  refused(await call("POST", "/api/2.0/serving-endpoints?dry_run=true", { name: "e1", config: { served_entities: [{ entity_name: "scripted" }] } }), "dry_run");
  assert.equal((await call("GET", "/api/2.0/serving-endpoints/e1")).statusCode, 404);
  const created = await call("POST", "/api/2.0/serving-endpoints", { name: "e1", config: { served_entities: [{ entity_name: "scripted" }] } });
  assert.equal(created.statusCode, 200, created.body);
  refused(await call("PUT", "/api/2.0/serving-endpoints/e1/config?force=true", { served_entities: [{ entity_name: "scripted" }] }), "force");
  refused(await call("DELETE", "/api/2.0/serving-endpoints/e1?force=true"), "force");
  refused(await call("DELETE", "/api/2.0/serving-endpoints/e1", { name: "other" }), "name");
  assert.equal((await call("GET", "/api/2.0/serving-endpoints/e1")).statusCode, 200, "still there");
  assert.equal((await call("DELETE", "/api/2.0/serving-endpoints/e1")).statusCode, 200);
  // The model admin likewise.
  refused(await call("GET", "/api/2.0/plinth/models?all=1"), "all");
  refused(await call("DELETE", "/api/2.0/plinth/models/nope", { force: true }), "force");
  await app.close();
});

test("001-84 scripted engine: cache_control on an item inside a document's content source is refused by name, as on a message's own items", async () => {
  const { app } = await scriptedApp();
  const doc = (item: object) => ({ messages: [{ role: "user", content: [{ type: "document", source: { type: "content", content: [item] } }, { type: "text", text: "q" }] }], max_tokens: 1 });
  const r = await post(app, "/serving-endpoints/scripted/invocations", doc({ type: "text", text: "doc", cache_control: "ephemeral" }));
  assert.equal(r.statusCode, 400, r.body);
  assert.ok(r.json().message.includes("messages[0].content[0].source.content[0].cache_control"), r.body);
  const plain = await post(app, "/serving-endpoints/scripted/invocations", doc({ type: "text", text: "doc" }));
  assert.equal(plain.statusCode, 200, plain.body);
  await app.close();
});

test("scripted engine: an empty entity_version is refused by name, not turned into an entity named '<model>-'", async () => {
  const { app } = await scriptedApp();
  const r = await post(app, "/api/2.0/serving-endpoints", { name: "v0", config: { served_entities: [{ entity_name: "scripted", entity_version: "" }] } });
  assert.equal(r.statusCode, 400, r.body);
  assert.ok(r.json().message.includes("config.served_entities[0].entity_version"), r.body);
  const named = await post(app, "/api/2.0/serving-endpoints", { name: "v1", config: { served_entities: [{ entity_name: "scripted", entity_version: "3" }] } });
  assert.equal(named.statusCode, 200, named.body);
  assert.equal((named.json().pending_config ?? named.json().config).served_entities[0].name, "scripted-3");
  await app.close();
});
