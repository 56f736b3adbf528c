import assert from "../helpers/assert.ts";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { dbx, waitForEndpoint } from "../helpers/databricks.ts";
import { ensureFixtureModel, THINKING_SPEC } from "../fixtures/models.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// The control plane end to end on the real server: endpoints created over the fixture models, the
// 70/30 traffic split measured over 1,000 requests, a config update under load, deletion, a restart
// that finds the endpoints again, scale to zero, and runtime model loading.

const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-dbx-endpoints-"));
/**
 * A model file of an architecture llama.cpp does not know ("llama" renamed "llamz" in its
 * metadata): it passes the file check, and its load fails.
 */
const GHOST = path.join(dataDir, "ghost-unknown-arch.gguf");
let s: TestServer;
before(async () => {
  const model = Buffer.from(readFileSync(await ensureFixtureModel()));
  // general.architecture's value: the key, its type (u32 8, a string), the length (u64 5), "llama".
  const at = model.indexOf(Buffer.concat([Buffer.from("general.architecture"), Buffer.from([8, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]), Buffer.from("llama")]));
  assert.ok(at > 0, "the fixture's architecture is written where expected");
  model.write("llamz", at + "general.architecture".length + 12, "latin1");
  writeFileSync(GHOST, model);
  s = await startTestServer({ "data-dir": dataDir, "route-seed": "42", "scale-to-zero-after": "0.4" }, { think: true });
});
after(async () => {
  await s?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const create = (body: unknown) => dbx(s, "POST", "/api/2.0/serving-endpoints", body);
const ask = (name: string, extra: Record<string, unknown> = {}) =>
  dbx(s, "POST", `/serving-endpoints/${name}/invocations`, { messages: [{ role: "user", content: "hi" }], max_tokens: 1, ...extra });
const AB = {
  served_entities: [
    { name: "a", entity_name: "tiny" },
    { name: "b", entity_name: "think" },
  ],
  traffic_config: { routes: [{ served_model_name: "a", traffic_percentage: 70 }, { served_model_name: "b", traffic_percentage: 30 }] },
};

/** Runs `total` requests, `concurrency` at a time, and returns their results. */
async function load(total: number, concurrency: number, one: (i: number) => Promise<{ status: number; headers: Headers; text: string }>) {
  const out: Array<{ status: number; headers: Headers; text: string }> = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        out[i] = await one(i);
      }
    }),
  );
  return out;
}

test("every --model is a ready pay-per-token endpoint of the same name", async () => {
  const list = await dbx(s, "GET", "/api/2.0/serving-endpoints");
  const names = list.json.endpoints.map((e: any) => e.name);
  assert.ok(names.includes("tiny") && names.includes("think"), names.join());
  const tiny = list.json.endpoints.find((e: any) => e.name === "tiny");
  assert.equal(tiny.endpoint_type, "FOUNDATION_MODEL_API");
  assert.deepEqual(tiny.state, { ready: "READY", config_update: "NOT_UPDATING" });
  assert.equal(tiny.config.served_entities[0].entity_name, "tiny");
});

test("create validates: names, routes adding to 100, known entities; a second endpoint of one name is RESOURCE_ALREADY_EXISTS", async () => {
  const bad = async (body: unknown, word: string) => {
    const r = await create(body);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE");
    assert.ok(r.json.message.includes(word), r.json.message);
  };
  await bad({ name: "x y", config: AB }, "name");
  await bad({ name: "x", config: AB, tags: Array.from({ length: 51 }, (_, i) => ({ key: `k${i}` })) }, "tags");
  await bad({ name: "x", config: AB, tags: [{ key: "team", value: "a" }, { key: "team", value: "b" }] }, "unique");
  await bad({ name: "x", config: AB, tags: [{ key: "k".repeat(256) }] }, "tags");
  await bad({ name: "x", config: { ...AB, traffic_config: { routes: [{ served_model_name: "a", traffic_percentage: 70 }, { served_model_name: "b", traffic_percentage: 20 }] } } }, "100");
  await bad({ name: "x", config: { ...AB, traffic_config: { routes: [{ served_model_name: "zz", traffic_percentage: 100 }] } } }, "zz");
  await bad({ name: "x", config: { served_entities: AB.served_entities } }, "traffic_config");
  await bad({ name: "x", config: { served_entities: [] } }, "served_entities");
  // Path segments that clients fold away: /served-models/../invocations would reach the split.
  for (const dots of [".", ".."]) await bad({ name: "x", config: { served_entities: [{ name: dots, entity_name: "tiny" }] } }, "'..'");
  const dup = await create({ name: "tiny", config: { served_entities: [{ entity_name: "tiny" }] } });
  assert.equal(dup.status, 409, dup.text);
  assert.equal(dup.json.error_code, "RESOURCE_ALREADY_EXISTS");
  const missing = await dbx(s, "GET", "/api/2.0/serving-endpoints/nope");
  assert.equal(missing.status, 404);
  assert.equal(missing.json.error_code, "RESOURCE_DOES_NOT_EXIST");
  // Not a served model, a .gguf file or an hf: reference: refused before anything is opened (a
  // load would report whether the file exists and its first bytes).
  for (const source of ["/etc/passwd", "../../etc/hostname", "nosuchmodel"]) {
    const r = await create({ name: "peek", config: { served_entities: [{ entity_name: source }] } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE");
    assert.ok(r.json.message.includes("config.served_entities[0].entity_name"), r.json.message);
    assert.ok(!/root|GGUF magic/.test(r.json.message), r.json.message);
  }
  const adminPeek = await dbx(s, "POST", "/api/2.0/plinth/models", { source: "/etc/passwd" });
  assert.equal(adminPeek.status, 400, adminPeek.text);
  assert.equal((await dbx(s, "GET", "/api/2.0/serving-endpoints/peek")).status, 404);
  // A default entity name (from the model and its version) keeps to the rule for names, so the
  // endpoint's own config can be sent back as it is.
  const versioned = await create({ name: "versioned", config: { served_entities: [{ entity_name: "tiny", entity_version: "a/b c?" + "v".repeat(300) }] } });
  assert.equal(versioned.status, 200, versioned.text);
  const ready = await waitForEndpoint(s, "versioned");
  const entityName = ready.config.served_entities[0].name;
  assert.match(entityName, /^tiny-[A-Za-z0-9_.-]+$/);
  assert.ok(entityName.length <= 63, entityName);
  const back = await dbx(s, "PUT", "/api/2.0/serving-endpoints/versioned/config", {
    served_entities: ready.config.served_entities.map((e: any) => ({ name: e.name, entity_name: e.entity_name, entity_version: e.entity_version })),
    traffic_config: ready.config.traffic_config,
  });
  assert.equal(back.status, 200, back.text);
  // A PUT's body is the config itself: its fields are named from there.
  await waitForEndpoint(s, "versioned");
  const wrongSum = await dbx(s, "PUT", "/api/2.0/serving-endpoints/versioned/config", {
    served_entities: [{ name: "one", entity_name: "tiny" }],
    traffic_config: { routes: [{ served_model_name: "one", traffic_percentage: 99 }] },
  });
  assert.equal(wrongSum.status, 400, wrongSum.text);
  assert.ok(wrongSum.json.message.includes("traffic_config.routes") && !wrongSum.json.message.includes("config.traffic_config"), wrongSum.json.message);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/versioned")).status, 200);
  // A file that is missing is refused at once, naming the entity (so is a malformed one:
  // databricks-model-files.test.ts); one whose header is sound but whose load fails makes an
  // endpoint that fails to load, and says why.
  const absent = await create({ name: "ghost", config: { served_entities: [{ entity_name: "/no/such/model.gguf" }] } });
  assert.equal(absent.status, 400, absent.text);
  assert.ok(absent.json.message.includes("config.served_entities[0].entity_name"), absent.json.message);
  const unknownEntity = await create({ name: "ghost", config: { served_entities: [{ entity_name: GHOST }] } });
  assert.equal(unknownEntity.status, 200, unknownEntity.text);
  const failed = await waitForEndpoint(s, "ghost", (ep) => ep.state.config_update === "UPDATE_FAILED");
  assert.equal(failed.state.ready, "NOT_READY");
  const refused = await ask("ghost");
  assert.equal(refused.status, 503, refused.text);
  assert.equal(refused.json.error_code, "TEMPORARILY_UNAVAILABLE");
  assert.ok(failed.state_message, "the failure says why");
});

test("two endpoints; 70/30 over two fixture models lands within ±4 points over 1,000 requests, and the answer names the entity", async () => {
  const ab = await create({ name: "ab", config: AB });
  assert.equal(ab.status, 200, ab.text);
  assert.equal(ab.json.endpoint_type, "PROVISIONED_THROUGHPUT");
  const other = await create({ name: "solo", config: { served_entities: [{ name: "only", entity_name: "tiny" }] } });
  assert.equal(other.status, 200, other.text);
  const ready = await waitForEndpoint(s, "ab");
  assert.deepEqual(ready.config.traffic_config, AB.traffic_config);
  await waitForEndpoint(s, "solo");

  const started = Date.now();
  const results = await load(1000, 4, () => ask("ab", { reasoning_effort: undefined }));
  const counts = { a: 0, b: 0 };
  for (const r of results) {
    assert.equal(r.status, 200, r.text);
    const entity = r.headers.get("served-model-name") as "a" | "b";
    assert.equal(JSON.parse(r.text).model, entity);
    counts[entity]++;
  }
  const share = (counts.a / 1000) * 100;
  process.stdout.write(`# traffic split 70/30 over 1000 requests: a ${counts.a}, b ${counts.b} (${share.toFixed(1)}% / ${(100 - share).toFixed(1)}%) in ${Date.now() - started} ms\n`);
  assert.ok(Math.abs(share - 70) <= 4, `a served ${share}%`);
  assert.equal((await ask("solo")).headers.get("served-model-name"), "only");
});

test("on an A/B endpoint pairing a thinking model with one that does not, a reasoning field is valid on every draw; where no candidate thinks it is a 400", async () => {
  await waitForEndpoint(s, "ab");
  const results = await load(16, 4, () => ask("ab", { reasoning_effort: "low" }));
  const entities = new Set<string | null>();
  for (const r of results) {
    assert.equal(r.status, 200, r.text);
    entities.add(r.headers.get("served-model-name"));
  }
  assert.ok(entities.has("a"), "the draw reached the model that does not think");
  const responses = await load(8, 4, () =>
    dbx(s, "POST", "/serving-endpoints/ab/invocations", { model: "ab", input: "hi", max_output_tokens: 2, reasoning: { effort: "low" } }),
  );
  for (const r of responses) assert.equal(r.status, 200, r.text);
  // An entity no draw reaches (no route, or a share of 0) has no say: the field is refused where
  // only such an entity thinks, as it would be ignored on every draw.
  const unreached = await create({
    name: "unreached",
    config: {
      served_entities: [{ name: "a", entity_name: "tiny" }, { name: "b", entity_name: "think" }],
      traffic_config: { routes: [{ served_model_name: "a", traffic_percentage: 100 }, { served_model_name: "b", traffic_percentage: 0 }] },
    },
  });
  assert.equal(unreached.status, 200, unreached.text);
  await waitForEndpoint(s, "unreached");
  const ignored = await ask("unreached", { reasoning_effort: "low" });
  assert.equal(ignored.status, 400, ignored.text);
  assert.ok(ignored.json.message.includes("reasoning_effort"), ignored.json.message);
  assert.equal((await dbx(s, "POST", "/serving-endpoints/unreached/served-models/b/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 1, reasoning_effort: "low" })).status, 200);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/unreached")).status, 200);
  // Named, the entity that does not think has no other candidate: refused, as on its own endpoint.
  const named = await dbx(s, "POST", "/serving-endpoints/ab/served-models/a/invocations", { messages: [{ role: "user", content: "hi" }], max_tokens: 1, reasoning_effort: "low" });
  assert.equal(named.status, 400, named.text);
  assert.equal((await ask("solo", { reasoning_effort: "low" })).status, 400);
});

test("a config update under load swaps without a failed request: the old config serves until the new one is loaded", async () => {
  const before = await waitForEndpoint(s, "solo");
  assert.equal(before.config.config_version, 1);
  let stop = false;
  // Each answer with when its request was sent and when it came back: two requests in flight at once
  // finish in either order, so "after the swap" is judged by when a request was sent.
  const seen: { sent: number; done: number; entity: string }[] = [];
  const failures: string[] = [];
  const traffic = (async () => {
    await Promise.all(
      [0, 1].map(async () => {
        while (!stop) {
          const sent = performance.now();
          const r = await ask("solo");
          if (r.status !== 200) failures.push(r.text);
          else seen.push({ sent, done: performance.now(), entity: r.headers.get("served-model-name")! });
        }
      }),
    );
  })();
  await new Promise((r) => setTimeout(r, 100));
  // The new entity is a model file loaded at run time (its own engine), so the update takes a while.
  const put = await dbx(s, "PUT", "/api/2.0/serving-endpoints/solo/config", { served_entities: [{ name: "fresh", entity_name: s.modelPath }] });
  assert.equal(put.status, 200, put.text);
  assert.equal(put.json.state.config_update, "IN_PROGRESS");
  assert.equal(put.json.config.served_entities[0].name, "only", "the old config still serves");
  assert.equal(put.json.pending_config.served_entities[0].name, "fresh");
  // A model loading for an endpoint does not take the server out of a load balancer.
  const health = await dbx(s, "GET", "/health");
  assert.equal(health.status, 200, health.text);
  const after = await waitForEndpoint(s, "solo");
  await new Promise((r) => setTimeout(r, 150));
  stop = true;
  await traffic;
  assert.deepEqual(failures, []);
  assert.equal(after.config.config_version, 2);
  seen.sort((a, b) => a.sent - b.sent);
  assert.equal(seen[0].entity, "only");
  assert.equal(seen.at(-1)!.entity, "fresh");
  // Once any client has had an answer from the new entity, every request sent later goes to it.
  const firstFresh = Math.min(...seen.filter((r) => r.entity === "fresh").map((r) => r.done));
  const late = seen.filter((r) => r.sent > firstFresh && r.entity !== "fresh");
  assert.deepEqual(late, [], "once swapped, only the new entity serves");
  const old = seen.filter((r) => r.entity === "only").length;
  process.stdout.write(`# update under load: ${seen.length} requests, ${old} on the old config, 0 failed\n`);
});

test("scale to zero: an idle endpoint's model is unloaded, /health and the state say so, and the next request loads it again", async () => {
  // The thinking fixture's file, loaded a second time under its own id: no other endpoint uses that model.
  const file = await ensureFixtureModel(THINKING_SPEC);
  const created = await create({ name: "sleepy", config: { served_entities: [{ name: "z", entity_name: file, scale_to_zero_enabled: true }] } });
  assert.equal(created.status, 200, created.text);
  const ready = await waitForEndpoint(s, "sleepy");
  const model = ready.config.served_entities[0].model;
  assert.equal((await ask("sleepy", { reasoning_effort: "low" })).status, 200);
  const asleep = await waitForEndpoint(s, "sleepy", (ep) => ep.config.served_entities[0].state.scaled_to_zero === true, 10_000);
  assert.equal(asleep.state.ready, "READY");
  const health = await dbx(s, "GET", "/health");
  assert.equal(health.status, 200, health.text);
  assert.equal(health.json.models[model], "unloaded");
  // Several requests at once: the first wakes the model, and the others wait for it as well.
  const woken = await Promise.all([0, 1, 2].map(() => ask("sleepy", { max_tokens: 2, reasoning_effort: "low" })));
  for (const r of woken) assert.equal(r.status, 200, r.text);
  assert.equal((await dbx(s, "GET", "/health")).json.models[model], "ready");
  // "solo" serves the tiny fixture's file without scale_to_zero_enabled: that model stays loaded.
  const solo = await dbx(s, "GET", "/api/2.0/serving-endpoints/solo");
  assert.equal((await dbx(s, "GET", "/health")).json.models[solo.json.config.served_entities[0].model], "ready");
  // Deleting the endpoint unloads the model it loaded for itself (once its running requests are
  // done, without the DELETE waiting for them); the server's own models stay.
  const running = ask("sleepy", { max_tokens: 150, reasoning_effort: "low", temperature: 1 });
  await new Promise((r) => setTimeout(r, 300));
  const t0 = performance.now();
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/sleepy")).status, 200);
  const deleteMs = performance.now() - t0;
  const finished = await running;
  assert.equal(finished.status, 200, `the request running when the endpoint went finishes: ${finished.text}`);
  assert.ok(deleteMs < 1500, `the DELETE took ${Math.round(deleteMs)} ms`);
  let models = (await dbx(s, "GET", "/health")).json.models;
  for (let i = 0; i < 100 && models[model] !== undefined; i++) {
    await new Promise((r) => setTimeout(r, 50));
    models = (await dbx(s, "GET", "/health")).json.models;
  }
  assert.equal(models[model], undefined);
  assert.equal(models.think, "ready");
});

test("a config that never comes to serve leaves no model loaded: a failed config's loaded entities, an endpoint deleted while it loads", async () => {
  const models = async () => (await dbx(s, "GET", "/health")).json.models as Record<string, string>;
  const gone = async (model: string) => {
    let now = await models();
    for (let i = 0; i < 200 && now[model] !== undefined; i++) {
      await new Promise((r) => setTimeout(r, 25));
      now = await models();
    }
    return now[model] === undefined;
  };
  // Two entities, the first a model file that loads and the second one that does not: the update
  // fails, and the first model, loaded for that config alone, is freed again.
  const first = path.join(dataDir, "orphan-first.gguf");
  copyFileSync(s.modelPath, first);
  const half = await create({
    name: "halfway",
    config: {
      served_entities: [{ name: "ok", entity_name: first }, { name: "bad", entity_name: GHOST }],
      traffic_config: { routes: [{ served_model_name: "ok", traffic_percentage: 50 }, { served_model_name: "bad", traffic_percentage: 50 }] },
    },
  });
  assert.equal(half.status, 200, half.text);
  await waitForEndpoint(s, "halfway", (ep) => ep.state.config_update === "UPDATE_FAILED");
  assert.ok(await gone("orphan-first"), `the failed config's model stays loaded: ${JSON.stringify(await models())}`);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/halfway")).status, 200);
  // Deleted while its model file loads: the load finishes with no endpoint to serve, and is freed.
  const second = path.join(dataDir, "orphan-deleted.gguf");
  copyFileSync(s.modelPath, second);
  assert.equal((await create({ name: "dropped", config: { served_entities: [{ entity_name: second }] } })).status, 200);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/dropped")).status, 200);
  // The delete can come before the load has begun (then it never begins) or while it runs (then it
  // finishes and is freed): either way the model is not left loaded. Watched for 3 s, so a load that
  // begins late and stays is caught too.
  let seen = false;
  for (let i = 0; i < 150; i++) {
    seen ||= (await models())["orphan-deleted"] !== undefined;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(await gone("orphan-deleted"), `the deleted endpoint's model stays loaded (seen loading: ${seen}): ${JSON.stringify(await models())}`);
  assert.equal((await models()).tiny, "ready");
});

test("models load and unload at run time (admin route), with a memory check; a loaded model is a pay-per-token endpoint", async () => {
  const missing = await dbx(s, "POST", "/api/2.0/plinth/models", { source: "/no/such/file.gguf" });
  assert.equal(missing.status, 400, missing.text);
  const loaded = await dbx(s, "POST", "/api/2.0/plinth/models", { source: s.modelPath, name: "extra" });
  assert.equal(loaded.status, 200, loaded.text);
  assert.deepEqual(loaded.json, { name: "extra", status: "ready" });
  const r = await ask("extra");
  assert.equal(r.status, 200, r.text);
  assert.equal((await dbx(s, "GET", "/api/2.0/serving-endpoints/extra")).json.endpoint_type, "FOUNDATION_MODEL_API");
  const busy = await dbx(s, "DELETE", "/api/2.0/plinth/models/think");
  assert.equal(busy.status, 409, "think serves endpoint 'ab'");
  // A config still loading that names the model holds it too: unloaded now, the config would go live
  // on a model that is gone. (Its first entity is a file that takes a while to load.)
  const file = path.join(dataDir, "second-copy.gguf");
  copyFileSync(await ensureFixtureModel(THINKING_SPEC), file);
  const holder = await create({
    name: "holder",
    config: {
      served_entities: [{ name: "slow", entity_name: file }, { name: "x", entity_name: "extra" }],
      traffic_config: { routes: [{ served_model_name: "slow", traffic_percentage: 50 }, { served_model_name: "x", traffic_percentage: 50 }] },
    },
  });
  assert.equal(holder.status, 200, holder.text);
  const taken = await dbx(s, "POST", "/api/2.0/plinth/models", { source: s.modelPath, name: "holder" });
  assert.equal(taken.status, 409, "a provisioned endpoint's name is taken");
  assert.equal(taken.json.error_code, "RESOURCE_ALREADY_EXISTS");
  const held = await dbx(s, "DELETE", "/api/2.0/plinth/models/extra");
  assert.equal(held.status, 409, held.text);
  assert.match(held.json.message, /'holder'/);
  await waitForEndpoint(s, "holder");
  assert.equal((await ask("holder")).status, 200);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/holder")).status, 200);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/plinth/models/extra")).status, 200);
  assert.equal((await ask("extra")).status, 404);
  assert.equal((await dbx(s, "GET", "/api/2.0/plinth/models")).json.models.some((m: any) => m.name === "extra"), false);
});

test("delete, then a restart finds the stored endpoints again and loads them", async () => {
  const del = await dbx(s, "DELETE", "/api/2.0/serving-endpoints/ab");
  assert.equal(del.status, 200, del.text);
  assert.deepEqual(del.json, {});
  assert.equal((await dbx(s, "GET", "/api/2.0/serving-endpoints/ab")).status, 404);
  assert.equal((await ask("ab")).status, 404);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/tiny")).status, 400, "pay-per-token endpoints are not deleted");

  await s.close();
  s = await startTestServer({ "data-dir": dataDir, "route-seed": "42" }, { think: true });
  const list = (await dbx(s, "GET", "/api/2.0/serving-endpoints")).json.endpoints.map((e: any) => e.name);
  assert.ok(list.includes("solo") && !list.includes("ab"), list.join());
  // An endpoint whose entities never loaded is still failed, and says why, after the restart.
  const ghost = (await dbx(s, "GET", "/api/2.0/serving-endpoints/ghost")).json;
  assert.deepEqual(ghost.state, { ready: "NOT_READY", config_update: "UPDATE_FAILED" });
  assert.ok(ghost.state_message?.includes("ghost"), JSON.stringify(ghost));
  assert.equal((await ask("ghost")).status, 503);
  assert.equal((await dbx(s, "DELETE", "/api/2.0/serving-endpoints/ghost")).status, 200);
  const back = await waitForEndpoint(s, "solo");
  assert.equal(back.config.served_entities[0].name, "fresh");
  assert.equal(back.config.config_version, 2);
  const r = await ask("solo");
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get("served-model-name"), "fresh");
});
