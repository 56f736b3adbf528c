import type { FastifyInstance } from "fastify";
import type { ModelRegistry } from "../core/registry.ts";

/** GET /health: 200 once every model is loaded; 503 with each model's state while loading or failed. */
export function registerHealthRoute(app: FastifyInstance, registry: ModelRegistry, draining: () => boolean = () => false): void {
  app.get("/health", async (_request, reply) => {
    // A load balancer stops sending work here as soon as a shutdown begins.
    if (draining()) return reply.status(503).header("retry-after", "5").send({ status: "draining" });
    const models = Object.fromEntries(registry.list().map((m) => [m.id, m.error ? `${m.status}: ${m.error}` : m.note ? `${m.status}: ${m.note}` : m.status]));
    if (registry.allReady) return { status: "ok", models };
    const failed = registry.list().some((m) => m.status === "failed");
    return reply.status(503).send({ status: failed ? "error" : "loading", models });
  });
}
