import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { RequestContext } from "../../src/core/context.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { PlinthMetrics, spellNaN } from "../../src/observability/metrics.ts";

test("time to first token counts from when the request came in, not from its admission after the engine prepared it", async () => {
  // A remote engine's preparation waits for the upstream's first token: counted from admission, a
  // router's TTFT read ~0 ms while its clients waited seconds.
  const metrics = new PlinthMetrics(new ModelRegistry(4), { defaultMetrics: false });
  const hooks = metrics.hooks();
  const ctx: RequestContext = { requestId: "req_1", internalId: "r1", dialect: "openai" };
  hooks.admitted!(ctx, { model: "m", operation: "chat", promptTokens: [3], choices: 1, params: [{ n: 1, maxTokens: 16 }], receivedAt: performance.now() - 400 });
  hooks.started!(ctx);
  hooks.firstToken!(ctx);
  const text = await metrics.registry.metrics();
  const sum = Number(/vllm:time_to_first_token_seconds_sum\{model_name="m"\} ([\d.e-]+)/.exec(text)?.[1]);
  assert.ok(sum >= 0.4, `TTFT sum ${sum} s`);
  // Queue time stays what it was: from admission to the slot.
  const queued = Number(/vllm:request_queue_time_seconds_sum\{model_name="m"\} ([\d.e-]+)/.exec(text)?.[1]);
  assert.ok(queued < 0.4, `queue time ${queued} s`);
});

test("vLLM's per-request phase and parameter histograms: n and max_tokens per request, prefill, decode and inference time; preemptions stay 0", async () => {
  const metrics = new PlinthMetrics(new ModelRegistry(4), { defaultMetrics: false });
  const hooks = metrics.hooks();
  const ctx: RequestContext = { requestId: "req_2", internalId: "r2", dialect: "openai" };
  // A Completions batch of two prompts, n = 3 each.
  hooks.admitted!(ctx, { model: "m", operation: "chat", promptTokens: [3, 4], choices: 6, params: [{ n: 3, maxTokens: 16 }, { n: 3, maxTokens: 700 }], receivedAt: performance.now() });
  hooks.started!(ctx);
  await new Promise((r) => setTimeout(r, 30));
  hooks.firstToken!(ctx);
  await new Promise((r) => setTimeout(r, 50));
  hooks.finished!(ctx, { usage: { promptTokens: 7, completionTokens: 6, totalTokens: 13, cachedTokens: 0, reasoningTokens: 0 } });
  const text = await metrics.registry.metrics();
  const read = (name: string) => Number(new RegExp(`${name}\\{model_name="m"\\} ([\\d.e-]+)`).exec(text)?.[1]);
  assert.equal(read("vllm:request_params_n_count"), 2);
  assert.equal(read("vllm:request_params_n_sum"), 6);
  assert.equal(read("vllm:request_params_max_tokens_sum"), 716);
  assert.ok(read("vllm:request_prefill_time_seconds_sum") >= 0.025, text);
  assert.ok(read("vllm:request_decode_time_seconds_sum") >= 0.045, text);
  const inference = read("vllm:request_inference_time_seconds_sum");
  assert.ok(Math.abs(inference - read("vllm:request_prefill_time_seconds_sum") - read("vllm:request_decode_time_seconds_sum")) < 0.002, `${inference}`);
  assert.equal(read("vllm:num_preemptions_total"), 0);
});

test("a value that is not a number is spelled NaN in the exposition (prom-client writes Nan)", async () => {
  const metrics = new PlinthMetrics(new ModelRegistry(4), { defaultMetrics: false });
  const { Gauge } = await import("prom-client");
  new Gauge({ name: "test_not_a_number", help: "a gauge set to NaN", registers: [metrics.registry] }).set(NaN);
  const raw = await metrics.registry.metrics();
  assert.match(raw, /^test_not_a_number Nan$/m, "prom-client's own spelling (if it changes, spellNaN can go)");
  assert.match(spellNaN(raw), /^test_not_a_number NaN$/m);
});
