import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/app.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import type { StoreRetryPolicy } from "../../src/dialects/responses/store-writes.ts";
import type { SqliteStore } from "../../src/store/sqlite-store.ts";
import { ScriptedEngine, type ScriptedEngineOptions } from "./scripted-engine.ts";
import { testStore } from "./test-store.ts";

export interface ScriptedApp {
  app: FastifyInstance;
  engine: ScriptedEngine;
  service: GenerationService;
  registry: ModelRegistry;
  /** The app's store (a real SQLite file): `store.limitGrowth(0)` makes it a full disk. */
  store: SqliteStore;
}

/**
 * The real HTTP app (every dialect, the generation service, the scheduler) over a scripted engine,
 * driven with Fastify's `inject()`: no socket, no model, milliseconds per request.
 */
export async function scriptedApp(
  opts: ScriptedEngineOptions & { maxQueue?: number; bodyLimit?: number; queueTimeoutMs?: number; corsOrigins?: readonly string[]; storeRetry?: StoreRetryPolicy } = {},
): Promise<ScriptedApp> {
  const registry = new ModelRegistry(opts.maxQueue ?? 8, opts.queueTimeoutMs ?? 0);
  const engine = new ScriptedEngine(opts);
  registry.register(engine.id);
  registry.ready(engine);
  const service = new GenerationService(registry);
  const { store, sealer, dispose } = testStore();
  const app = buildApp(service, { bodyLimit: opts.bodyLimit ?? 1024 * 1024, store, sealer, corsOrigins: opts.corsOrigins, storeRetry: opts.storeRetry });
  app.addHook("onClose", dispose);
  await app.ready();
  return { app, engine, service, registry, store };
}

/** The data payloads of an SSE body, in order (`[DONE]` included as a string). */
export function sseData(body: string): unknown[] {
  return body
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const data = block
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice(6))
        .join("\n");
      return data === "[DONE]" ? data : JSON.parse(data);
    });
}

/** The `event:` names and parsed data of an SSE body, for event-typed streams. */
export function sseEvents(body: string): Array<{ event?: string; data: unknown }> {
  return body
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const lines = block.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice(7);
      const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      return { event, data: data === "[DONE]" ? data : JSON.parse(data) };
    });
}
