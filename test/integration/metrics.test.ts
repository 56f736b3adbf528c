import assert from "../helpers/assert.ts";
import { rawHttp } from "../helpers/raw-http.ts";
import { test } from "node:test";
import { parsePrometheus, sum, type Exposition } from "../helpers/prometheus.ts";
import type { ChatBody } from "../helpers/requests.ts";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

// One sequence and no queue: a second request while one runs is refused with 429.
const s = useTestServer({ parallel: "1", "max-queue": "0", "ctx-size": "1024", "cache-min-tokens": "16" });

const LONG = "Tell me about the king, the river and the city, and every road between them. ".repeat(12);
const M = { model_name: "tiny" };

async function scrape(): Promise<Exposition> {
  const res = await fetch(`${s.url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  return parsePrometheus(await res.text());
}

test("a served model's counters exist at 0 before its first request", async () => {
  const first = await scrape();
  for (const name of ["vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total"]) {
    const series = first.samples.filter((x) => x.name === name && x.labels.model_name === "tiny");
    assert.equal(series.length, 1, name);
    assert.equal(series[0].value, 0, name);
  }
});

test("after a known sequence of requests the counters and histogram counts equal what was sent", async () => {
  const before = await scrape();
  const base = (name: string, match: Record<string, string> = M) => sum(before, name, match);
  const body = (content: string, extra: Partial<ChatBody> = {}): ChatBody => ({
    model: "tiny",
    messages: [{ role: "user", content }],
    max_tokens: 4,
    temperature: 0,
    logit_bias: NO_EOG,
    ...extra,
  });
  const usages: Array<{ prompt_tokens: number; completion_tokens: number; cached: number }> = [];
  const record = (u: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } } | undefined) =>
    usages.push({ prompt_tokens: u!.prompt_tokens, completion_tokens: u!.completion_tokens, cached: u!.prompt_tokens_details?.cached_tokens ?? 0 });

  // A chat and a stream.
  record((await s.http.chat(body("Hello there"))).usage);
  record((await s.http.chatStream(body("Hello again", { stream_options: { include_usage: true } }))).usage);

  // A 429: one long stream holds the only sequence while a second request arrives (long enough that
  // the tiny model cannot finish it first: 48 tokens sometimes did).
  const held = await s.http.send("/v1/chat/completions", body("Hold the line", { max_tokens: 480, stream: true, stream_options: { include_usage: true } }));
  assert.equal(held.status, 200);
  const refused = await s.http.post("/v1/chat/completions", body("Am I refused?"));
  assert.equal(refused.status, 429);
  const heldText = await held.text();
  const heldUsage = heldText
    .split("\n\n")
    .map((e) => e.replace(/^data: /, ""))
    .filter((d) => d.startsWith("{"))
    .map((d) => JSON.parse(d))
    .find((c) => c.usage)?.usage;
  record(heldUsage);

  // A 400.
  const bad = await s.http.postRaw("/v1/chat/completions", { model: "tiny", messages: [], max_tokens: -3 });
  assert.equal(bad.status, 400);

  // A cache hit: the same long prompt twice, for one user.
  record((await s.http.chat(body(LONG, { user: "ann" }))).usage);
  const warm = await s.http.chat(body(LONG, { user: "ann" }));
  assert.ok(warm.usage!.prompt_tokens_details.cached_tokens > 0);
  record(warm.usage);

  // Embeddings: two inputs.
  const emb = await s.http.embed({ model: "tiny", input: ["the king", "the river and the city"] });

  const after = await scrape();
  const delta = (name: string, match: Record<string, string> = M) => sum(after, name, match) - base(name, match);
  const total = (k: "prompt_tokens" | "completion_tokens" | "cached") => usages.reduce((a, u) => a + u[k], 0);
  const requests = usages.length;

  assert.equal(delta("vllm:prompt_tokens_total"), total("prompt_tokens"));
  assert.equal(delta("vllm:generation_tokens_total"), total("completion_tokens"));
  assert.equal(delta("vllm:request_success_total"), requests);
  assert.equal(delta("vllm:request_success_total", { ...M, finished_reason: "length" }), requests);
  assert.equal(delta("vllm:prefix_cache_queries_total"), total("prompt_tokens"));
  assert.equal(delta("vllm:prefix_cache_hits_total"), total("cached"));
  for (const h of [
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
  ]) {
    assert.equal(after.types.get(h), "histogram", h);
    assert.equal(delta(`${h}_count`), requests, `${h}_count`);
    assert.equal(delta(`${h}_bucket`, { ...M, le: "+Inf" }), requests, `${h} +Inf bucket`);
  }
  assert.equal(delta("vllm:request_prompt_tokens_sum"), total("prompt_tokens"));
  assert.equal(delta("vllm:request_generation_tokens_sum"), total("completion_tokens"));
  assert.equal(delta("vllm:request_params_n_sum"), requests, "n = 1 each");
  assert.equal(after.types.get("vllm:num_preemptions_total"), "counter");
  assert.equal(sum(after, "vllm:num_preemptions_total", M), 0);
  // Intervals between output events: at most one fewer than the tokens of each request.
  const itl = delta("vllm:inter_token_latency_seconds_count");
  assert.ok(itl > 0 && itl <= total("completion_tokens") - requests, `itl count ${itl}`);

  assert.equal(sum(after, "vllm:num_requests_running", M), 0);
  assert.equal(sum(after, "vllm:num_requests_waiting", M), 0);
  assert.equal(after.types.get("vllm:num_requests_running"), "gauge");

  const route = { dialect: "openai", route: "/v1/chat/completions", method: "POST" };
  assert.equal(delta("plinth_http_requests_total", { ...route, status: "200" }), requests);
  assert.equal(delta("plinth_http_requests_total", { ...route, status: "429" }), 1);
  assert.equal(delta("plinth_http_requests_total", { ...route, status: "400" }), 1);
  assert.equal(delta("plinth_rate_limited_requests_total", { dialect: "openai", reason: "rate_limit_exceeded" }), 1);
  assert.equal(delta("plinth_rejected_requests_total", { dialect: "openai", status: "429", code: "rate_limit_exceeded" }), 1);
  assert.equal(delta("plinth_rejected_requests_total", { dialect: "openai", status: "400" }), 1);
  assert.equal(delta("plinth_embedding_inputs_total"), 2);
  assert.equal(delta("plinth_embedding_tokens_total"), emb.usage.prompt_tokens);
  assert.equal(delta("plinth_http_requests_total", { route: "/v1/embeddings", status: "200" }), 1);

  assert.equal(sum(after, "plinth_model_state", { ...M, state: "ready" }), 1);
  assert.equal(sum(after, "plinth_model_state", { ...M, state: "loading" }), 0);
  assert.ok(sum(after, "plinth_model_load_seconds", M) > 0);
  assert.ok(sum(after, "plinth_process_resident_memory_bytes") > 0 || sum(after, "plinth_nodejs_heap_size_used_bytes") > 0);
});

test("every family has HELP and TYPE, and vLLM's names carry a model_name label", async () => {
  const exp = await scrape();
  for (const sample of exp.samples)
    if (sample.name.startsWith("vllm:")) assert.ok("model_name" in sample.labels, `${sample.name} without model_name`);
  assert.equal(exp.types.get("vllm:prompt_tokens_total"), "counter");
  assert.equal(exp.types.get("vllm:inter_token_latency_seconds"), "histogram");
});

test("answers for a path no route takes are labelled with their error codes: not_found, method_not_allowed", async () => {
  const before = await scrape();
  const label = (status: string, code: string) => ({ dialect: "none", status, code });
  const count = (e: Exposition, status: string, code: string) => sum(e, "plinth_rejected_requests_total", label(status, code));
  const wrongMethod = await fetch(`${s.url}/v1/models`, { method: "DELETE" });
  assert.equal(wrongMethod.status, 405);
  assert.equal((await wrongMethod.json()).error.code, "method_not_allowed");
  const unknown = await fetch(`${s.url}/v1/no-such-route`);
  assert.equal(unknown.status, 404);
  await unknown.text();
  const after = await scrape();
  // By the code its body names, as every other refusal is (it was `http_405`).
  assert.equal(count(after, "405", "method_not_allowed") - count(before, "405", "method_not_allowed"), 1);
  assert.equal(count(after, "405", "http_405"), 0);
  assert.equal(count(after, "404", "not_found") - count(before, "404", "not_found"), 1);
});

test("answers written before any route is known (headers too large, an Expect header, CONNECT, not HTTP) are counted", async () => {
  const { port } = new URL(s.url);
  const exchange = (text: string) => rawHttp(port, text);
  const before = await scrape();
  const answers = [
    await exchange(`GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: ${"x".repeat(20_000)}\r\n\r\n`),
    await exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n"),
    await exchange("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
    await exchange("GARBAGE\r\n\r\n"),
    // A URL the router cannot decode: Fastify answers it before any hook runs.
    await exchange("GET /v1/models/%ZZ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
  ];
  assert.deepEqual(answers.map((a) => Number(a.split(" ")[1])), [431, 417, 405, 400, 400]);
  const after = await scrape();
  const delta = (name: string, match: Record<string, string>) => sum(after, name, match) - sum(before, name, match);
  assert.equal(delta("plinth_http_requests_total", { dialect: "none", route: "unmatched", method: "GET", status: "431" }), 1);
  assert.equal(delta("plinth_http_requests_total", { dialect: "none", route: "unmatched", method: "POST", status: "417" }), 1);
  assert.equal(delta("plinth_http_requests_total", { dialect: "none", route: "unmatched", method: "CONNECT", status: "405" }), 1);
  assert.equal(delta("plinth_http_requests_total", { dialect: "none", route: "unmatched", method: "other", status: "400" }), 1);
  assert.equal(delta("plinth_http_requests_total", { dialect: "none", route: "unmatched", method: "GET", status: "400" }), 1);
  assert.equal(delta("plinth_rejected_requests_total", { dialect: "none", status: "431", code: "request_header_fields_too_large" }), 1);
  assert.equal(delta("plinth_rejected_requests_total", { dialect: "none", status: "417", code: "expectation_failed" }), 1);
});

test("KV usage counts the cells of running requests only; prompt-cache and store sizes are exported", async () => {
  // A long stream: scrape while it runs (after its first chunk), then again once it has ended.
  const res = await s.http.send("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "Count the stars." }],
    max_tokens: 900,
    temperature: 0,
    logit_bias: NO_EOG,
    stream: true,
  });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  await reader.read();
  // The first chunk can arrive before the prompt is evaluated (the role delta opens the stream), so
  // scrape until the running request's cells show, while it still streams (900 tokens).
  let during = await scrape();
  for (let i = 0; i < 100 && sum(during, "vllm:kv_cache_usage_perc", M) === 0; i++) {
    await new Promise((r) => setTimeout(r, 10));
    during = await scrape();
  }
  const kv = sum(during, "vllm:kv_cache_usage_perc", M);
  assert.equal(during.types.get("vllm:kv_cache_usage_perc"), "gauge");
  assert.ok(kv > 0 && kv <= 1, `kv usage while streaming: ${kv}`);
  while (!(await reader.read()).done);
  const after = await scrape();
  assert.equal(sum(after, "vllm:kv_cache_usage_perc", M), 0, "a finished request's cells count as free");

  assert.equal(after.types.get("plinth_prompt_cache_bytes"), "gauge");
  assert.equal(after.types.get("plinth_prompt_cache_evictions_total"), "counter");
  assert.ok(after.samples.some((x) => x.name === "plinth_prompt_cache_bytes" && x.labels.model_name === "tiny"));
  assert.ok(sum(after, "plinth_prompt_cache_evictions_total", M) >= 0);
  assert.ok(sum(after, "plinth_store_bytes") > 0, "the SQLite file has a size");
});

test("a background response its client cancels is counted as cancelled, not as a server error", async () => {
  const before = await scrape();
  const created = await s.http.postRaw("/v1/responses", {
    model: "tiny",
    input: "Count the stars.",
    background: true,
    max_output_tokens: 900,
    temperature: 0,
    logit_bias: NO_EOG,
  });
  assert.equal(created.status, 200, created.text);
  const id = (created.json as { id: string }).id;
  await new Promise((r) => setTimeout(r, 100));
  const cancelled = await s.http.postRaw(`/v1/responses/${id}/cancel`, {});
  assert.equal((cancelled.json as { status: string }).status, "cancelled", cancelled.text);
  const after = await scrape();
  const delta = (code: string) => sum(after, "plinth_generation_failures_total", { ...M, code }) - sum(before, "plinth_generation_failures_total", { ...M, code });
  // The run was stopped with a plain Error, which every failure counter reads as internal_error.
  assert.equal(delta("internal_error"), 0);
  assert.equal(delta("cancelled"), 1);
});
