import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { dbx, waitForEndpoint } from "../helpers/databricks.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// --route-seed on the real server: an A/B endpoint's sequence of entities replays exactly, across a
// restart, whatever traffic other endpoints (A/B or pay-per-token) get in between. Each endpoint
// draws from its own stream, and only when it has a choice to make.

const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-route-seed-"));
let s: TestServer | undefined;
after(async () => {
  await s?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const AB = {
  served_entities: [
    { name: "a", entity_name: "tiny" },
    { name: "b", entity_name: "think" },
  ],
  traffic_config: { routes: [{ served_model_name: "a", traffic_percentage: 50 }, { served_model_name: "b", traffic_percentage: 50 }] },
};
const ROUNDS = 32;

const ask = async (server: TestServer, name: string) => {
  const r = await dbx(server, "POST", `/serving-endpoints/${name}/invocations`, { messages: [{ role: "user", content: "hi" }], max_tokens: 1 });
  assert.equal(r.status, 200, `${name}: ${r.text}`);
  return r.headers.get("served-model-name")!;
};

test("with one seed, endpoint r's entities come in the same order alone and between other endpoints' requests, across a restart", async () => {
  s = await startTestServer({ "data-dir": dataDir, "route-seed": "42" }, { think: true });
  for (const name of ["r", "other"]) assert.equal((await dbx(s, "POST", "/api/2.0/serving-endpoints", { name, config: AB })).status, 200);
  await waitForEndpoint(s, "r");
  await waitForEndpoint(s, "other");
  const alone: string[] = [];
  for (let i = 0; i < ROUNDS; i++) alone.push(await ask(s, "r"));
  assert.ok(alone.includes("a") && alone.includes("b"), `a 50/50 split over ${ROUNDS} requests draws both: ${alone.join("")}`);

  // The same seed after a restart (the endpoints come back from the store), now with another A/B
  // endpoint and a pay-per-token one asked before every request to r.
  await s.close();
  s = await startTestServer({ "data-dir": dataDir, "route-seed": "42" }, { think: true });
  await waitForEndpoint(s, "r");
  await waitForEndpoint(s, "other");
  const interleaved: string[] = [];
  const others: string[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    others.push(await ask(s, "other"));
    assert.equal(await ask(s, "tiny"), "tiny");
    if (i % 3 === 0) others.push(await ask(s, "other"));
    interleaved.push(await ask(s, "r"));
  }
  assert.deepEqual(interleaved, alone);
  // Endpoints' streams are their own, not one stream shared: "other" does not replay r's sequence.
  assert.notDeepEqual(others.slice(0, ROUNDS), alone);
});
