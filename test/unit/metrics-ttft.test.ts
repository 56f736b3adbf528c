import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { RequestContext } from "../../src/core/context.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { PlinthMetrics } from "../../src/observability/metrics.ts";

test("time to first token counts from when the request came in, not from its admission after the engine prepared it", async () => {
  // A remote engine's preparation waits for the upstream's first token: counted from admission, a
  // router's TTFT read ~0 ms while its clients waited seconds.
  const metrics = new PlinthMetrics(new ModelRegistry(4), { defaultMetrics: false });
  const hooks = metrics.hooks();
  const ctx: RequestContext = { requestId: "req_1", internalId: "r1", dialect: "openai" };
  hooks.admitted!(ctx, { model: "m", promptTokens: [3], choices: 1, receivedAt: performance.now() - 400 });
  hooks.started!(ctx);
  hooks.firstToken!(ctx);
  const text = await metrics.registry.metrics();
  const sum = Number(/vllm:time_to_first_token_seconds_sum\{model_name="m"\} ([\d.e-]+)/.exec(text)?.[1]);
  assert.ok(sum >= 0.4, `TTFT sum ${sum} s`);
  // Queue time stays what it was: from admission to the slot.
  const queued = Number(/vllm:request_queue_time_seconds_sum\{model_name="m"\} ([\d.e-]+)/.exec(text)?.[1]);
  assert.ok(queued < 0.4, `queue time ${queued} s`);
});
