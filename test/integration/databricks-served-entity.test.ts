import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { dbx, sseData, waitForEndpoint } from "../helpers/databricks.ts";
import { useTestServer } from "../helpers/server.ts";

// POST /serving-endpoints/{name}/served-models/{entity}/invocations on the real server: one served
// entity of an A/B endpoint answers by name, whatever the traffic split says, so the two can be
// compared prompt for prompt (the console's side by side does this).

const s = useTestServer({}, { think: true });

// "b" gets no traffic at all: only the entity route can reach it.
const AB = {
  served_entities: [
    { name: "a", entity_name: "tiny" },
    { name: "b", entity_name: "think" },
  ],
  traffic_config: { routes: [{ served_model_name: "a", traffic_percentage: 100 }, { served_model_name: "b", traffic_percentage: 0 }] },
};
const hi = { messages: [{ role: "user", content: "hi" }], max_tokens: 3 };
const entity = (endpoint: string, name: string, body: unknown = hi) => dbx(s, "POST", `/serving-endpoints/${endpoint}/served-models/${name}/invocations`, body);

test("a named served entity answers even with 0% of the traffic; the split still decides /invocations", async () => {
  assert.equal((await dbx(s, "POST", "/api/2.0/serving-endpoints", { name: "ab", config: AB })).status, 200);
  await waitForEndpoint(s, "ab");
  for (const name of ["a", "b"]) {
    const r = await entity("ab", name);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("served-model-name"), name);
    assert.equal(r.json.model, name);
    assert.equal(r.json.object, "chat.completion");
    assert.ok(r.json.usage.completion_tokens >= 1);
  }
  // 'b' reasons (the thinking fixture), 'a' does not: the usage says which model ran.
  assert.equal("reasoning_tokens" in (await entity("ab", "a")).json.usage, false);
  assert.equal(typeof (await entity("ab", "b")).json.usage.reasoning_tokens, "number");
  for (let i = 0; i < 5; i++) assert.equal((await dbx(s, "POST", "/serving-endpoints/ab/invocations", hi)).headers.get("served-model-name"), "a");
  // 'model' naming an entity is honoured on /invocations too (it was checked, then the split decided).
  for (let i = 0; i < 3; i++) {
    const r = await dbx(s, "POST", "/serving-endpoints/ab/invocations", { ...hi, model: "b" });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("served-model-name"), "b");
    assert.equal(r.json.model, "b");
  }
  assert.equal((await dbx(s, "POST", "/serving-endpoints/ab/invocations", { ...hi, model: "ab" })).headers.get("served-model-name"), "a");
});

test("the entity route streams, takes the other tasks, and 'model' may name the endpoint or that entity", async () => {
  // Greedy, so it runs to its 4 tokens (sampled at temperature 1, it may end sooner).
  const streamed = await entity("ab", "b", { ...hi, stream: true, max_tokens: 4, temperature: 0 });
  assert.equal(streamed.status, 200, streamed.text);
  const events = sseData(streamed.text);
  assert.equal(events.at(-1), "[DONE]");
  assert.ok(events.slice(0, -1).every((e) => e.model === "b"));
  assert.ok(events.some((e) => e.usage?.completion_tokens === 4));
  const completion = await entity("ab", "a", { prompt: "Once", max_tokens: 2 });
  assert.equal(completion.status, 200, completion.text);
  assert.equal(completion.json.object, "text_completion");
  assert.equal((await entity("ab", "a", { ...hi, model: "ab" })).status, 200);
  assert.equal((await entity("ab", "a", { ...hi, model: "a" })).status, 200);
  // A pay-per-token endpoint's one entity has the endpoint's name.
  const ppt = await entity("tiny", "tiny");
  assert.equal(ppt.status, 200, ppt.text);
  assert.equal(ppt.headers.get("served-model-name"), "tiny");
});

test("bad entity requests get Databricks' envelope: unknown entity or endpoint 404, a mismatched model or a bad body 400, a wrong method 405", async () => {
  const unknown = await entity("ab", "c");
  assert.equal(unknown.status, 404, unknown.text);
  assert.equal(unknown.json.error_code, "RESOURCE_DOES_NOT_EXIST");
  assert.match(unknown.json.message, /no served entity named 'c'; it serves 'a', 'b'/);
  const noEndpoint = await entity("nope", "a");
  assert.equal(noEndpoint.status, 404, noEndpoint.text);
  assert.equal(noEndpoint.json.error_code, "RESOURCE_DOES_NOT_EXIST");
  const mismatch = await entity("ab", "a", { ...hi, model: "b" });
  assert.equal(mismatch.status, 400, mismatch.text);
  assert.equal(mismatch.json.error_code, "INVALID_PARAMETER_VALUE");
  assert.match(mismatch.json.message, /served entity 'a'/);
  for (const body of [[1, 2], { hello: 1 }, { ...hi, min_p: 0.1 }]) {
    const r = await entity("ab", "a", body);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE", r.text);
    assert.equal(typeof r.json.message, "string");
  }
  const wrongMethod = await dbx(s, "GET", "/serving-endpoints/ab/served-models/a/invocations");
  assert.equal(wrongMethod.status, 405, wrongMethod.text);
  assert.equal(wrongMethod.json.error_code, "BAD_REQUEST");
  assert.equal(wrongMethod.headers.get("allow"), "POST");
});
