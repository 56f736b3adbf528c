import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { EngineChunk } from "../../src/core/engine.ts";
import type { GenerationHooks, RequestContext } from "../../src/core/context.ts";
import type { GenerationEvent, GenerationRequest } from "../../src/core/types.ts";
import { ApiError } from "../../src/core/errors.ts";
import { scriptedApp, sseData } from "../helpers/scripted-app.ts";

// The generation service and the OpenAI renderers over the SCRIPTED engine (no model): event order,
// part brackets, hooks, usage, failures. Real inference is covered by test/integration/.

const ctx: RequestContext = { requestId: "req_test", internalId: "r_test", dialect: "test" };

function request(over: Partial<GenerationRequest> = {}): GenerationRequest {
  return {
    model: "scripted",
    prompt: { kind: "chat", messages: [{ role: "user", content: "hi" }] },
    sampling: { temperature: 0, topP: 1, topK: 0, minP: 0, seed: 7, frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1, logitBias: new Map() },
    stop: [],
    n: 1,
    ...over,
  };
}

async function drain(events: AsyncIterable<GenerationEvent>): Promise<GenerationEvent[]> {
  const out: GenerationEvent[] = [];
  for await (const ev of events) out.push(ev);
  return out;
}

const answerWithEverything: EngineChunk[] = [
  { kind: "cached", tokens: 3 },
  { kind: "text", channel: "reasoning", text: "let me see", tokens: 2 },
  { kind: "usage", reasoningTokens: 2 },
  { kind: "text", text: "Calling.", tokens: 1 },
  { kind: "tool-call", index: 0, name: "a" },
  { kind: "tool-call-arguments", index: 0, text: "{}", tokens: 1 },
  { kind: "tool-call", index: 1, name: "b" },
  { kind: "tool-call-arguments", index: 1, text: "{\"x\":1}", tokens: 3 },
  { kind: "end", reason: "tool_calls" },
];

test("each part is bracketed by part-start and part-end, in order, before the finish", async () => {
  const { service, app } = await scriptedApp({ script: () => answerWithEverything });
  const started = await service.start(ctx, request(), new AbortController().signal);
  const events = await drain(started.events);
  const shape = events.map((e) =>
    e.type === "part-start" || e.type === "part-end" ? `${e.type}:${e.part}${"index" in e && e.index !== undefined ? e.index : ""}` : e.type,
  );
  assert.deepEqual(shape, [
    "part-start:reasoning", "reasoning", "part-end:reasoning",
    "part-start:text", "text", "part-end:text",
    "tool-call", "tool-call-arguments", "part-end:tool-call0",
    "tool-call", "tool-call-arguments", "part-end:tool-call1",
    "finish", "usage",
  ]);
  const usage = events.at(-1) as Extract<GenerationEvent, { type: "usage" }>;
  assert.deepEqual(usage.usage, { promptTokens: started.promptTokens[0], completionTokens: 7, totalTokens: started.promptTokens[0] + 7, cachedTokens: 3, reasoningTokens: 2 });
  await app.close();
});

test("an engine's own usage report replaces what the core summed (a remote stream reports at its end)", async () => {
  const { service, app } = await scriptedApp({
    script: () => [
      { kind: "text", text: "abc", tokens: 0 },
      { kind: "usage", completionTokens: 11, reasoningTokens: 4 },
      { kind: "end", reason: "length" },
    ],
  });
  const events = await drain((await service.start(ctx, request(), new AbortController().signal)).events);
  const usage = events.find((e) => e.type === "usage") as Extract<GenerationEvent, { type: "usage" }>;
  assert.equal(usage.usage.completionTokens, 11);
  assert.equal(usage.usage.reasoningTokens, 4);
  await app.close();
});

test("hooks see admission, the first token once, every event and the usage at the end", async () => {
  const { service, app } = await scriptedApp({ script: () => answerWithEverything });
  const seen: string[] = [];
  let events = 0;
  const hooks: GenerationHooks = {
    admitted: (c, info) => seen.push(`admitted ${c.requestId} ${info.model} ${info.choices} ${info.promptTokens.length}`),
    firstToken: () => seen.push("first"),
    event: () => events++,
    finished: (_c, outcome) => seen.push(outcome.usage ? `finished ${outcome.usage.completionTokens}` : "failed"),
  };
  service.addHooks(hooks);
  service.addHooks({ event: () => { throw new Error("a broken hook is reported, not fatal"); } });
  const delivered = await drain((await service.start(ctx, request({ n: 2 }), new AbortController().signal)).events);
  assert.deepEqual(seen, ["admitted req_test scripted 2 1", "first", "finished 14"]);
  assert.equal(events, delivered.length);
  await app.close();
});

test("one failed choice stops its siblings and fails the request; the hook hears of it", async () => {
  const { service, app } = await scriptedApp({
    delayMs: 5,
    script: (_req, run) =>
      run.sampling.seed === 8
        ? [{ kind: "text", text: "x", tokens: 1 }, new Error("engine broke")]
        : Array.from({ length: 50 }, () => ({ kind: "text", text: "y", tokens: 1 }) as EngineChunk),
  });
  let outcome: unknown;
  let siblingDeltas = 0;
  service.addHooks({
    finished: (_c, o) => (outcome = o.error),
    event: (_c, ev) => void (ev.type === "text" && ev.text === "y" && siblingDeltas++),
  });
  const started = await service.start(ctx, request({ n: 2 }), new AbortController().signal);
  const t0 = Date.now();
  await assert.rejects(drain(started.events), /engine broke/);
  assert.ok(Date.now() - t0 < 200, "the sibling did not run its 50 chunks to the end");
  assert.match(String(outcome), /engine broke/);
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(siblingDeltas < 10, `the sibling stopped at its next chunk (it sent ${siblingDeltas} of 50)`);
  await app.close();
});

test("chat JSON: tool calls with null content, reasoning in both fields, usage details", async () => {
  const { app } = await scriptedApp({ script: () => answerWithEverything });
  const r = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: "scripted", messages: [{ role: "user", content: "hi" }] } });
  assert.equal(r.statusCode, 200, r.body);
  const body = r.json();
  const msg = body.choices[0].message;
  assert.equal(msg.content, "Calling.");
  assert.equal(msg.reasoning_content, "let me see");
  assert.equal(msg.reasoning, "let me see");
  assert.deepEqual(msg.tool_calls.map((c: any) => [c.type, c.function.name, c.function.arguments]), [["function", "a", "{}"], ["function", "b", "{\"x\":1}"]]);
  assert.match(msg.tool_calls[0].id, /^call_/);
  assert.equal(body.choices[0].finish_reason, "tool_calls");
  assert.equal(body.usage.prompt_tokens_details.cached_tokens, 3);
  assert.equal(body.usage.completion_tokens_details.reasoning_tokens, 2);
  await app.close();
});

test("chat SSE: role first, deltas, finish, usage on request, [DONE]; streamed equals collected", async () => {
  const { app } = await scriptedApp({ script: () => answerWithEverything });
  const payload = { model: "scripted", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } };
  const r = await app.inject({ method: "POST", url: "/v1/chat/completions", payload });
  assert.equal(r.statusCode, 200);
  assert.match(String(r.headers["content-type"]), /text\/event-stream/);
  const chunks = sseData(r.body);
  assert.equal(chunks.at(-1), "[DONE]");
  const data = chunks.slice(0, -1) as any[];
  assert.equal(data[0].choices[0].delta.role, "assistant");
  const content = data.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  assert.equal(content, "Calling.");
  const args = data.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []).filter((t: any) => t.index === 1).map((t: any) => t.function.arguments).join("");
  assert.equal(args, "{\"x\":1}");
  assert.equal(data.at(-2).choices[0].finish_reason, "tool_calls");
  assert.deepEqual(data.at(-1).choices, []);
  assert.equal(data.at(-1).usage.completion_tokens, 7);
  await app.close();
});

test("runningUsage: each event of a choice carries its prompt and the tokens generated so far; off, events carry nothing", async () => {
  const { service, app } = await scriptedApp({ script: () => answerWithEverything });
  const counted = await drain((await service.start(ctx, request({ runningUsage: true }), new AbortController().signal)).events);
  const prompt = (counted.at(-1) as Extract<GenerationEvent, { type: "usage" }>).usage.promptTokens;
  const running = counted.filter((e) => "running" in e).map((e) => [e.type, (e as { running: { promptTokens: number; completionTokens: number } }).running.completionTokens]);
  assert.deepEqual(running, [["reasoning", 2], ["text", 3], ["tool-call", 3], ["tool-call-arguments", 4], ["tool-call", 4], ["tool-call-arguments", 7], ["finish", 7]]);
  assert.ok(counted.every((e) => !("running" in e) || (e as { running: { promptTokens: number } }).running.promptTokens === prompt));
  // The hot path when off (nearly every request): no event gets the field.
  const plain = await drain((await service.start(ctx, request(), new AbortController().signal)).events);
  assert.ok(plain.every((e) => !("running" in e)), JSON.stringify(plain));
  await app.close();
});

test("continuous_usage_stats (vLLM): with include_usage every chat chunk carries its choice's usage so far, the final usage chunk still comes; without include_usage nothing", async () => {
  const { app } = await scriptedApp({ script: () => answerWithEverything });
  const payload = { model: "scripted", messages: [{ role: "user", content: "hi" }], n: 2, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } };
  const r = await app.inject({ method: "POST", url: "/v1/chat/completions", payload });
  assert.equal(r.statusCode, 200, r.body);
  const data = (sseData(r.body) as any[]).slice(0, -1);
  const final = data.at(-1);
  assert.deepEqual(final.choices, []);
  assert.equal(final.usage.completion_tokens, 14);
  const prompt = final.usage.prompt_tokens;
  // Per choice, as vLLM counts with n > 1: the request's prompt, that choice's completion tokens.
  for (const index of [0, 1]) {
    const mine = data.slice(0, -1).filter((c) => c.choices[0].index === index);
    assert.deepEqual(mine.map((c) => c.usage.completion_tokens), [0, 2, 3, 3, 4, 4, 7, 7], `choice ${index}`);
    for (const c of mine) assert.deepEqual(c.usage, { prompt_tokens: prompt, completion_tokens: c.usage.completion_tokens, total_tokens: prompt + c.usage.completion_tokens });
    assert.equal(mine.at(-1).choices[0].finish_reason, "tool_calls");
  }
  // As in vLLM, continuous stats ride on include_usage: alone they change nothing.
  for (const stream_options of [{ continuous_usage_stats: true }, { include_usage: false, continuous_usage_stats: true }]) {
    const off = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...payload, stream_options } });
    assert.equal(off.statusCode, 200, off.body);
    assert.ok((sseData(off.body) as any[]).slice(0, -1).every((c) => !("usage" in c)), off.body);
  }
  // continuous_usage_stats: false is include_usage alone: usage null until the usage chunk.
  const plain = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...payload, stream_options: { include_usage: true, continuous_usage_stats: false } } });
  assert.ok((sseData(plain.body) as any[]).slice(0, -2).every((c) => c.usage === null), plain.body);
  await app.close();
});

test("continuous_usage_stats on completions: each choice's chunks carry its own prompt's tokens and its completion tokens so far", async () => {
  const { app } = await scriptedApp({
    script: (req) => [
      ...(req.echo ? [{ kind: "prompt", text: (req.prompt as { text: string }).text } as EngineChunk] : []),
      { kind: "text", text: "x", tokens: 1 },
      { kind: "text", text: "yz", tokens: 2 },
      { kind: "end", reason: "length" },
    ],
  });
  const payload = { model: "scripted", prompt: ["ab", "cdef"], n: 2, echo: true, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } };
  const r = await app.inject({ method: "POST", url: "/v1/completions", payload });
  assert.equal(r.statusCode, 200, r.body);
  const data = (sseData(r.body) as any[]).slice(0, -1);
  const final = data.at(-1);
  assert.deepEqual(final.choices, []);
  assert.equal(final.usage.completion_tokens, 12);
  const prompts: number[] = [];
  for (const index of [0, 1, 2, 3]) {
    const mine = data.slice(0, -1).filter((c) => c.choices[0].index === index);
    // The echoed prompt (nothing generated yet), the two texts, the finish.
    assert.deepEqual(mine.map((c) => c.usage.completion_tokens), [0, 1, 3, 3], `choice ${index}`);
    assert.ok(mine.every((c) => c.usage.prompt_tokens === mine[0].usage.prompt_tokens && c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens));
    prompts.push(mine[0].usage.prompt_tokens);
  }
  assert.equal(prompts[0], prompts[1]);
  assert.equal(prompts[2], prompts[3]);
  assert.equal(prompts[2] - prompts[0], 2, "each choice counts its own prompt");
  assert.equal(final.usage.prompt_tokens, prompts[0] + prompts[2]);
  await app.close();
});

test("timings: each event of a choice carries its prompt and generation times so far, the usage the first choice's; off, nothing", async () => {
  // The engine says when its prompt is evaluated; the tokens it reports are what timings count.
  const script: EngineChunk[] = [
    { kind: "cached", tokens: 3 },
    { kind: "evaluated" },
    { kind: "text", text: "a", tokens: 1 },
    { kind: "text", text: "b", tokens: 2 },
    { kind: "end", reason: "length" },
  ];
  const { service, app } = await scriptedApp({ script: () => script });
  const timed = await drain((await service.start(ctx, request({ timings: true }), new AbortController().signal)).events);
  const usage = timed.at(-1) as Extract<GenerationEvent, { type: "usage" }>;
  const stamped = timed.filter((e) => "timings" in e && e.type !== "usage") as Array<GenerationEvent & { timings: import("../../src/core/types.ts").Timings }>;
  assert.deepEqual(stamped.map((e) => [e.type, e.timings.generatedTokens]), [["text", 1], ["text", 3], ["finish", 3]]);
  for (const e of stamped) {
    assert.equal(e.timings.cachedTokens, 3);
    assert.equal(e.timings.promptTokens, usage.usage.promptTokens - 3);
    assert.ok(e.timings.promptMs >= 0 && e.timings.generationMs >= 0);
  }
  assert.deepEqual(usage.timings?.generatedTokens, 3);
  assert.equal(usage.timings?.cachedTokens, 3);
  // No progress events unless asked for; off, no event gets either field.
  assert.ok(timed.every((e) => e.type !== "progress"));
  const plain = await drain((await service.start(ctx, request(), new AbortController().signal)).events);
  assert.ok(plain.every((e) => !("timings" in e) && e.type !== "progress"), JSON.stringify(plain));
  await app.close();
});

test("promptProgress: the cached prefix, then the evaluated prompt, before the first output; none from an engine that cannot tell", async () => {
  const told: EngineChunk[] = [{ kind: "cached", tokens: 2 }, { kind: "evaluated" }, { kind: "text", text: "a", tokens: 1 }, { kind: "end", reason: "stop" }];
  const { service, app } = await scriptedApp({ script: (req) => (req.cachePrompt === false ? told.filter((c) => c.kind !== "evaluated" && c.kind !== "cached") : told) });
  const events = await drain((await service.start(ctx, request({ promptProgress: true }), new AbortController().signal)).events);
  const total = (events.at(-1) as Extract<GenerationEvent, { type: "usage" }>).usage.promptTokens;
  const progress = events.filter((e) => e.type === "progress") as Array<Extract<GenerationEvent, { type: "progress" }>>;
  assert.deepEqual(progress.map((p) => [p.total, p.cached, p.processed]), [[total, 2, 2], [total, 2, total]]);
  assert.ok(events.findIndex((e) => e.type === "progress" && e.processed === total) < events.findIndex((e) => e.type === "text"));
  assert.ok(progress[1].ms >= progress[0].ms);
  // An engine that never says when its prompt is evaluated (a remote upstream) gets no progress.
  const silent = await drain((await service.start(ctx, request({ promptProgress: true, cachePrompt: false }), new AbortController().signal)).events);
  assert.ok(silent.every((e) => e.type !== "progress"), JSON.stringify(silent));
  await app.close();
});

test("timings_per_token and return_progress (llama-server): timings on every chunk and the answer, prompt_progress chunks before the first token; unasked, neither", async () => {
  const script: EngineChunk[] = [{ kind: "cached", tokens: 1 }, { kind: "evaluated" }, { kind: "text", text: "x", tokens: 1 }, { kind: "text", text: "yz", tokens: 2 }, { kind: "end", reason: "length" }];
  const { app } = await scriptedApp({ script: () => script });
  const keys = ["cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"];
  for (const url of ["/v1/chat/completions", "/v1/completions"]) {
    const input = url === "/v1/completions" ? { prompt: "hi" } : { messages: [{ role: "user", content: "hi" }] };
    const payload = { model: "scripted", ...input, max_tokens: 3, stream: true, stream_options: { include_usage: true }, timings_per_token: true, return_progress: true };
    const r = await app.inject({ method: "POST", url, payload });
    assert.equal(r.statusCode, 200, r.body);
    const data = (sseData(r.body) as any[]).slice(0, -1);
    const progress = data.filter((c) => c.prompt_progress);
    assert.equal(progress.length, 2, r.body);
    const total = data.at(-1).usage.prompt_tokens;
    assert.deepEqual(progress.map((c) => [c.prompt_progress.total, c.prompt_progress.cache, c.prompt_progress.processed]), [[total, 1, 1], [total, 1, total]]);
    assert.ok(Number.isInteger(progress[1].prompt_progress.time_ms));
    // Every chunk after the role chunk carries timings; the last ones the whole answer's.
    const timed = data.filter((c) => c.timings);
    assert.ok(timed.length >= data.length - (url === "/v1/completions" ? 0 : 1), r.body);
    for (const c of timed) assert.deepEqual(Object.keys(c.timings), keys);
    const last = data.at(-1).timings;
    assert.equal(last.predicted_n, 3);
    assert.equal(last.cache_n, 1);
    assert.equal(last.prompt_n, total - 1);
    assert.ok(last.predicted_per_token_ms === 0 || Math.abs(last.predicted_per_token_ms - last.predicted_ms / 2) < 1e-9, "the first token comes with the prompt");
    // Whole microseconds, as llama-server reports them.
    for (const ms of [last.prompt_ms, last.predicted_ms]) assert.ok(Math.abs(ms * 1000 - Math.round(ms * 1000)) < 1e-6, String(ms));
    // Not streamed: the answer carries the timings; progress has nothing to go in.
    const whole = await app.inject({ method: "POST", url, payload: { ...payload, stream: false, stream_options: undefined } });
    assert.equal(whole.statusCode, 200, whole.body);
    assert.deepEqual(Object.keys(whole.json().timings), keys);
    assert.equal(whole.json().timings.predicted_n, 3);
    // Unasked (false too), as OpenAI clients expect: no timings anywhere, no progress chunks.
    for (const off of [{}, { timings_per_token: false, return_progress: false }]) {
      const { timings_per_token: _t, return_progress: _p, ...rest } = payload;
      const plain = await app.inject({ method: "POST", url, payload: { ...rest, ...off } });
      assert.equal(plain.statusCode, 200, plain.body);
      assert.ok(!plain.body.includes("timings") && !plain.body.includes("prompt_progress"), plain.body);
      const json = await app.inject({ method: "POST", url, payload: { ...rest, ...off, stream: false, stream_options: undefined } });
      assert.ok(!("timings" in json.json()), json.body);
    }
  }
  // A stored chat completion is kept in OpenAI's shape: the run's timings are the answer's, not the record's.
  const chat = { model: "scripted", messages: [{ role: "user", content: "hi" }], max_tokens: 3, timings_per_token: true, store: true };
  for (const stream of [false, true]) {
    const r = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...chat, stream } });
    assert.equal(r.statusCode, 200, r.body);
    const id = stream ? (sseData(r.body)[0] as { id: string }).id : r.json().id;
    if (!stream) assert.ok("timings" in r.json());
    const kept = await app.inject({ method: "GET", url: `/v1/chat/completions/${id}` });
    assert.equal(kept.statusCode, 200, kept.body);
    assert.ok(!("timings" in kept.json()), kept.body);
  }
  await app.close();
});

test("an engine failure after the stream began is a final event in the error envelope, then the stream ends", async () => {
  const { app } = await scriptedApp({ script: () => [{ kind: "text", text: "par", tokens: 1 }, new Error("engine broke")] });
  const r = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: "scripted", messages: [{ role: "user", content: "hi" }], stream: true } });
  const chunks = sseData(r.body) as any[];
  assert.equal(chunks.at(-1).error.type, "server_error");
  assert.equal(chunks.at(-1).error.code, "internal_error");
  assert.match(chunks.at(-1).error.message, new RegExp(`\\(request id: ${r.headers["x-request-id"]}\\)`));
  await app.close();
});

test("a server-side failure quotes the request id in its message (a caller's x-request-id is kept); a client error does not", async () => {
  const { app } = await scriptedApp({ script: () => [new Error("engine broke")] });
  const r = await app.inject({
    method: "POST",
    url: "/v1/chat/completions",
    headers: { "x-request-id": "support-ticket-42" },
    payload: { model: "scripted", messages: [{ role: "user", content: "hi" }] },
  });
  assert.equal(r.statusCode, 500);
  assert.equal(r.headers["x-request-id"], "support-ticket-42");
  assert.match(r.json().error.message, /\(request id: support-ticket-42\)$/);
  const bad = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: "scripted", messages: [] } });
  assert.equal(bad.statusCode, 400);
  assert.doesNotMatch(bad.json().error.message, /request id/);
  await app.close();
});

test("completions: a batch renders prompt_index * n + j, echo leads the text", async () => {
  const { app } = await scriptedApp({
    script: (req, run) => [
      ...(req.echo ? [{ kind: "prompt", text: (req.prompt as { text: string }).text } as EngineChunk] : []),
      { kind: "text", text: `-${run.sampling.seed % 2}`, tokens: 1 },
      { kind: "end", reason: "length" },
    ],
  });
  const r = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: "scripted", prompt: ["a", "b"], n: 2, echo: true, seed: 0 } });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(r.json().choices.map((c: any) => c.text), ["a-0", "a-1", "b-0", "b-1"]);
  await app.close();
});

test("an engine's open step runs only after admission, and a refusal there gives its queue room back", async () => {
  const { service, engine, app } = await scriptedApp({ script: () => [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }], maxQueue: 2 });
  const opened: string[] = [];
  let refuse = false;
  // The SCRIPTED engine with an open step, as a remote engine has (the upstream's generation starts there).
  (engine as any).open = async (_prep: unknown, signal: AbortSignal) => {
    signal.throwIfAborted();
    opened.push("open");
    if (refuse) throw new ApiError(400, "refused by the upstream", { field: "prompt" });
  };
  service.setGate({ authorize: () => {}, admit: () => { throw new ApiError(429, "over the key's limit", { code: "rate_limit_exceeded" }); } });
  await assert.rejects(service.start(ctx, request(), new AbortController().signal), /over the key's limit/);
  assert.deepEqual(opened, [], "a request refused at admission is never opened");
  service.setGate(undefined);
  refuse = true;
  // More refusals than the slots and queue hold: each gives its admitted room back.
  for (let i = 0; i < 6; i++) await assert.rejects(service.start(ctx, request(), new AbortController().signal), /refused by the upstream/);
  refuse = false;
  const started = await service.start(ctx, request(), new AbortController().signal);
  assert.equal((await drain(started.events)).at(-1)?.type, "usage");
  assert.equal(opened.length, 7);
  await app.close();
});
