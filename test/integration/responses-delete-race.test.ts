import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { buildApp } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { ScriptedEngine } from "../helpers/scripted-engine.ts";
import { sseEvents } from "../helpers/scripted-app.ts";
import { testStore } from "../helpers/test-store.ts";

// A DELETE that lands while a finished stored stream's end is being written: the real app over the
// scripted engine (named as such: the race is in the dialect, not the engine), with the store's final
// write held open so the DELETE arrives inside that window every time.

test("a stored stream deleted while its end is stored still ends with response.completed, no error after it", async () => {
  const registry = new ModelRegistry(8, 0);
  const engine = new ScriptedEngine({ id: "tiny" });
  registry.register(engine.id);
  registry.ready(engine);
  const service = new GenerationService(registry);
  const { store, sealer, dispose } = testStore();
  let holdFinal: (() => void) | undefined;
  let finalStarted!: (id: string) => void;
  const finalWrite = new Promise<string>((r) => (finalStarted = r));
  const update = store.responses.update.bind(store.responses);
  store.responses.update = async (ns, id, patch) => {
    if (patch.status === "completed") {
      finalStarted(id);
      await new Promise<void>((r) => (holdFinal = r));
    }
    return update(ns, id, patch);
  };
  const app = buildApp(service, { bodyLimit: 1024 * 1024, store, sealer });
  try {
    await app.ready();
    const streamed = app.inject({ method: "POST", url: "/v1/responses", payload: { model: "tiny", input: "hi", stream: true, store: true } });
    const id = await finalWrite;
    const deleted = app.inject({ method: "DELETE", url: `/v1/responses/${id}` });
    // Let the DELETE reach the run before the final write goes on.
    await new Promise((r) => setTimeout(r, 50));
    holdFinal!();
    const [res, del] = await Promise.all([streamed, deleted]);
    assert.equal(del.statusCode, 200, del.body);
    const types = sseEvents(res.body).map((e) => e.event);
    assert.equal(types.at(-1), "response.completed", types.join(", "));
    assert.ok(!types.includes("error"), types.join(", "));
  } finally {
    await app.close();
    await dispose();
  }
});
