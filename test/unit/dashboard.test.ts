import assert from "../helpers/assert.ts";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ModelRegistry } from "../../src/core/registry.ts";
import { PlinthMetrics } from "../../src/observability/metrics.ts";

// The dashboard in deploy/grafana reads only series the server exports.
test("every metric the Grafana dashboard queries is exported", async () => {
  const dashboard = JSON.parse(readFileSync(new URL("../../deploy/grafana/plinth.json", import.meta.url), "utf8"));
  const exprs: string[] = dashboard.panels.flatMap((p: { targets: Array<{ expr: string }> }) => p.targets.map((t) => t.expr));
  const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:vllm:|plinth_)[a-z0-9_:]+)/g)].map((m) => m[1])));
  const metrics = new PlinthMetrics(new ModelRegistry(0));
  const exported = new Set((await metrics.registry.getMetricsAsJSON()).map((m) => m.name));
  const missing = [...used].map((n) => n.replace(/_bucket$/, "")).filter((n) => !exported.has(n));
  assert.ok(used.size > 10);
  assert.deepEqual(missing, []);
});
