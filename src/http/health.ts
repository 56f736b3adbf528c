import { readFileSync } from "node:fs";
import type { FastifyInstance, FastifyReply } from "fastify";
import type { ModelRegistry } from "../core/registry.ts";

/** Plinth's own version, from its package.json. */
export const VERSION = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;

/**
 * GET /health: 200 once every model is loaded; 503 with each model's state while loading or failed.
 * GET and POST /ping answer the same (a SageMaker container's health check, as vLLM serves it), and
 * GET /version says Plinth's version (vLLM's route of that name).
 */
export function registerHealthRoute(app: FastifyInstance, registry: ModelRegistry, draining: () => boolean = () => false): void {
  const health = async (reply: FastifyReply) => {
    // A load balancer stops sending work here as soon as a shutdown begins.
    if (draining()) return reply.status(503).header("retry-after", "5").send({ status: "draining" });
    const models = Object.fromEntries(registry.list().map((m) => [m.id, m.error ? `${m.status}: ${m.error}` : m.note ? `${m.status}: ${m.note}` : m.status]));
    if (registry.allReady) return { status: "ok", models };
    const failed = registry.list().some((m) => m.status === "failed");
    return reply.status(503).send({ status: failed ? "error" : "loading", models });
  };
  app.get("/health", async (_request, reply) => health(reply));
  app.get("/ping", async (_request, reply) => health(reply));
  app.post("/ping", async (_request, reply) => health(reply));
  app.get("/version", async () => ({ version: VERSION }));
}
