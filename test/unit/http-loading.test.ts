import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { buildApp } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { testStore } from "../helpers/test-store.ts";

/** The HTTP layer before any model has loaded, driven in-process with Fastify's inject. */
function loadingServer() {
  const registry = new ModelRegistry(4);
  registry.register("slow");
  const { store, sealer, dispose } = testStore();
  const app = buildApp(new GenerationService(registry), { bodyLimit: 1024 * 1024, store, sealer });
  app.addHook("onClose", dispose);
  return { registry, app };
}

test("/health answers 503 with a JSON body while a model loads, and says which failed", async () => {
  const { registry, app } = loadingServer();
  const loading = await app.inject({ method: "GET", url: "/health" });
  assert.equal(loading.statusCode, 503);
  assert.deepEqual(loading.json(), { status: "loading", models: { slow: "loading" } });

  registry.failed("slow", "file not found");
  const failed = await app.inject({ method: "GET", url: "/health" });
  assert.equal(failed.statusCode, 503);
  assert.equal(failed.json().status, "error");
  assert.match(failed.json().models.slow, /file not found/);
  await app.close();
});

test("requests for a model that is still loading get 503 with Retry-After, not a hang", async () => {
  const { app } = loadingServer();
  const r = await app.inject({
    method: "POST",
    url: "/v1/chat/completions",
    payload: { model: "slow", messages: [{ role: "user", content: "hi" }] },
  });
  assert.equal(r.statusCode, 503);
  assert.ok(Number(r.headers["retry-after"]) >= 1);
  assert.equal(r.json().error.code, "model_loading");
  const models = await app.inject({ method: "GET", url: "/v1/models" });
  assert.equal(models.json().data[0].status, "loading");
  await app.close();
});
