import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/app.ts";
import type { ChoiceRun, EngineChunk } from "../../src/core/engine.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import type { GenerationRequest, ModelDescription, TokenLogprob } from "../../src/core/types.ts";
import { THINKING_BUDGET } from "../../src/dialects/spak/to-canonical.ts";
import { scriptedApp, sseData } from "../helpers/scripted-app.ts";
import { ScriptedEngine, type ScriptedEngineOptions } from "../helpers/scripted-engine.ts";
import { testStore } from "../helpers/test-store.ts";

// SpAk-Aster (DeepSeek style, POST /chat/completions at the root) over the SCRIPTED engine: request
// validation, the canonical request each field makes, and rendering. Real inference (thinking,
// logprobs, the prompt cache) is in test/integration/spak-chat.test.ts.

const MODEL = "SpAk-Aster-V1-MOE";

/** A scripted model whose template "has" a thinking section, with a fixed fingerprint. */
class ThinkingScriptedEngine extends ScriptedEngine {
  override describe(): ModelDescription {
    return { ...super.describe(), reasoning: true, fingerprint: "scripted-build-1" };
  }
}

const lp = (token: string, logprob: number, bytes = [...Buffer.from(token)]): TokenLogprob => ({ token, bytes, logprob, top: [] });

function script(req: GenerationRequest, _run: ChoiceRun): EngineChunk[] {
  const out: EngineChunk[] = [{ kind: "cached", tokens: 3 }];
  const withLp = req.logprobs !== undefined;
  if (req.reasoning?.enabled) out.push({ kind: "text", text: "hmm", tokens: 2, channel: "reasoning", ...(withLp ? { logprobs: [lp("hm", -0.5), lp("m", -0.25)] } : {}) });
  out.push({ kind: "text", text: "Hello", tokens: 1, ...(withLp ? { logprobs: [{ ...lp("Hello", -0.1), top: [{ token: "Hello", bytes: [72], logprob: -0.1 }] }] } : {}) });
  if (withLp) out.push({ kind: "text", text: "", tokens: 1, logprobs: [lp("", -9999, [])] });
  if (req.reasoning?.enabled) out.push({ kind: "usage", reasoningTokens: 2 });
  out.push({ kind: "end", reason: "stop" });
  return out;
}

async function spakApp(opts: ScriptedEngineOptions & { queueTimeoutMs?: number } = {}) {
  const registry = new ModelRegistry(8, opts.queueTimeoutMs ?? 0);
  const engine = new ThinkingScriptedEngine({ id: MODEL, contextSize: 4096, script, ...opts });
  registry.register(engine.id);
  registry.ready(engine);
  const service = new GenerationService(registry);
  const { store, sealer, dispose } = testStore();
  const app = buildApp(service, { bodyLimit: 1024 * 1024, store, sealer });
  app.addHook("onClose", dispose);
  await app.ready();
  return { app, engine, service };
}

let app: FastifyInstance;
let engine: ThinkingScriptedEngine;
before(async () => {
  ({ app, engine } = await spakApp());
});
after(async () => {
  await app.close();
});

const ok = { model: MODEL, messages: [{ role: "user", content: "hi" }] };
type Body = Record<string, unknown>;

async function post(payload: unknown, headers: Record<string, string> = {}, on: FastifyInstance = app) {
  const r = await on.inject({
    method: "POST",
    url: "/chat/completions",
    headers: { "content-type": "application/json", ...headers },
    payload: typeof payload === "string" ? payload : JSON.stringify(payload),
  });
  return { status: r.statusCode, headers: r.headers, body: r.body, json: r.body.startsWith("{") ? r.json() : undefined };
}

/** The canonical request the engine was given for a body. */
async function canonical(extra: Body, headers: Record<string, string> = {}): Promise<GenerationRequest> {
  const r = await post({ ...ok, ...extra }, headers);
  assert.equal(r.status, 200, r.body);
  return engine.prepared.at(-1)!;
}

async function refused(extra: Body | string, param: string | null) {
  const r = await post(typeof extra === "string" ? extra : { ...ok, ...extra });
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.param, param, r.body);
  assert.equal(typeof r.json.error.message, "string");
  assert.equal(r.json.error.type, "invalid_request_error");
}

describe("validation", () => {
  test("003-01 POST /chat/completions at the root answers 200 with a chat completion", async () => {
    const r = await post(ok);
    assert.equal(r.status, 200);
    assert.equal(r.json.object, "chat.completion");
    assert.equal(r.json.choices[0].message.content, "Hello");
  });

  test("003-02 a request without messages is rejected", () => refused({ messages: undefined }, "messages"));
  test("003-03 messages: [] is rejected", () => refused({ messages: [] }, "messages"));
  test("003-04 a request without model is rejected", () => refused({ model: undefined }, "model"));
  test("003-05 a model that is not served is rejected with 400 naming model", async () => {
    await refused({ model: "gpt-4o" }, "model");
    await refused({ model: "spak-aster-v1-moe" }, "model");
  });

  test("on a server that does not serve the API's model, a request for it is 404 model_not_found, as on every other route", async () => {
    const other = await scriptedApp();
    try {
      const r = await post(ok, {}, other.app);
      assert.equal(r.status, 404, r.body);
      assert.equal(r.json.error.code, "model_not_found");
      assert.equal(r.json.error.param, "model");
    } finally {
      await other.app.close();
    }
  });

  test("003-06 a system message needs role and content; name is optional", async () => {
    const r = await canonical({ messages: [{ role: "system", content: "Be brief.", name: "policy" }, { role: "user", content: "hi" }] });
    assert.deepEqual(r.prompt, {
      kind: "chat",
      messages: [
        { role: "system", content: "Be brief.", name: "policy" },
        { role: "user", content: "hi", name: undefined },
      ],
    });
    await refused({ messages: [{ role: "system" }] }, "messages[0].content");
    await refused({ messages: [{ content: "x" }] }, "messages[0].role");
    await refused({ messages: [{ role: "system", content: "x", name: 5 }] }, "messages[0].name");
  });

  test("003-07 user, assistant and tool messages are accepted", async () => {
    const r = await canonical({
      messages: [
        { role: "user", content: "weather?" },
        { role: "assistant", content: null, reasoning_content: "look it up", tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
        { role: "user", content: [{ type: "text", text: "thanks" }] },
      ],
    });
    assert.equal(r.prompt.kind === "chat" && r.prompt.messages.length, 4);
    await refused({ messages: [{ role: "developer", content: "x" }] }, "messages[0].role");
    await refused({ messages: [{ role: "tool", content: "x" }] }, "messages[0].tool_call_id");
  });

  test("an unknown key in a message, a text part, a tool call or its function is a 400 naming it (it was dropped without a word)", async () => {
    const call = { id: "c1", type: "function", function: { name: "w", arguments: "{}" } };
    const loop = (assistant: Body, tool: Body = { role: "tool", tool_call_id: "c1", content: "sunny" }) => [{ role: "user", content: "weather?" }, { role: "assistant", content: null, tool_calls: [call], ...assistant }, tool];
    const cases: Array<[unknown[], string]> = [
      [[{ role: "user", content: "hi", foo: 1 }], "messages[0].foo"],
      [[{ role: "system", content: "x", foo: 1 }, { role: "user", content: "hi" }], "messages[0].foo"],
      [[{ role: "user", content: [{ type: "text", text: "hi", bar: 2 }] }], "messages[0].content[0].bar"],
      [loop({ reasoning: "x" }), "messages[1].reasoning"],
      [loop({ tool_calls: [{ ...call, foo: 1 }] }), "messages[1].tool_calls[0].foo"],
      [loop({ tool_calls: [{ ...call, function: { ...call.function, foo: 1 } }] }), "messages[1].tool_calls[0].function.foo"],
      [loop({}, { role: "tool", tool_call_id: "c1", content: "sunny", foo: 1 }), "messages[2].foo"],
    ];
    for (const [messages, param] of cases) {
      const r = await post({ ...ok, messages });
      assert.equal(r.status, 400, `${param}: ${r.body}`);
      assert.equal(r.json.error.param, param, r.body);
      assert.equal(r.json.error.code, "unknown_field", r.body);
    }
  });

  test("what clients send back from an answer is taken: the SDK's additions, a call's index, nulls, a tool message's name, DeepSeek's prefix", async () => {
    const call = { id: "c1", type: "function", function: { name: "w", arguments: "{}", parsed_arguments: {} }, index: 0 };
    const r = await canonical({
      messages: [
        { role: "user", content: "weather?", name: null },
        { role: "assistant", content: null, reasoning_content: "look it up", refusal: null, parsed: null, name: null, tool_calls: [call] },
        { role: "tool", tool_call_id: "c1", content: "sunny", name: "w" },
        { role: "assistant", content: "Sunny.", tool_calls: null, reasoning_content: null },
        { role: "user", content: "And tomorrow?" },
        { role: "assistant", content: "Tomorrow it will be", prefix: true },
      ],
    });
    assert.ok(r.prompt.kind === "chat");
    assert.equal(r.prompt.messages.length, 6);
    assert.equal(r.prompt.messages[2].name, undefined, "a tool message's name is not used");
    assert.equal(r.prompt.messages[5].content, "Tomorrow it will be");
    // Only the last message is a prefix to continue; a refusal with text is not something this API answers.
    await refused({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a", prefix: true }, { role: "user", content: "b" }] }, "messages[1].prefix");
    await refused({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a", refusal: "no" }, { role: "user", content: "b" }] }, "messages[1].refusal");
  });

  test("003-11 thinking.type other than enabled/disabled is rejected", () => refused({ thinking: { type: "auto" } }, "thinking.type"));

  test("003-22 response_format json_schema is rejected (text or json_object only)", async () => {
    await refused({ response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } }, "response_format.type");
    await refused({ response_format: { type: "yaml" } }, "response_format.type");
  });

  test("003-23 stop: a string and 16 strings are accepted, 17 are rejected", async () => {
    assert.deepEqual((await canonical({ stop: "END" })).stop, ["END"]);
    const sixteen = Array.from({ length: 16 }, (_, i) => `s${i}`);
    assert.deepEqual((await canonical({ stop: sixteen })).stop, sixteen);
    await refused({ stop: [...sixteen, "s16"] }, "stop");
  });

  test("003-26 stream_options without stream: true is rejected", async () => {
    await refused({ stream_options: { include_usage: true } }, "stream_options");
    await refused({ stream: false, stream_options: { include_usage: true } }, "stream_options");
  });

  test("003-29 temperature defaults to 1; 2 is accepted; 2.1 is rejected", async () => {
    assert.equal((await canonical({})).sampling.temperature, 1);
    assert.equal((await canonical({ temperature: 2 })).sampling.temperature, 2);
    await refused({ temperature: 2.1 }, "temperature");
    await refused({ temperature: -0.1 }, "temperature");
  });

  test("003-30 top_p defaults to 1; 1 is accepted; 1.1 is rejected", async () => {
    assert.equal((await canonical({})).sampling.topP, 1);
    assert.equal((await canonical({ top_p: 1 })).sampling.topP, 1);
    await refused({ top_p: 1.1 }, "top_p");
  });

  const fn = (name: string) => ({ type: "function", function: { name, parameters: { type: "object", properties: {} } } });

  test("003-31 128 tools are accepted; 129 are rejected", async () => {
    const tools = Array.from({ length: 128 }, (_, i) => fn(`f${i}`));
    assert.equal((await canonical({ tools })).tools!.length, 128);
    await refused({ tools: [...tools, fn("f128")] }, "tools");
  });

  test("003-32 a tool whose type is not function, or without function, is rejected", async () => {
    await refused({ tools: [{ type: "custom", function: { name: "f" } }] }, "tools[0].type");
    await refused({ tools: [{ type: "function" }] }, "tools[0].function");
  });

  test("003-33 function names follow ^[A-Za-z0-9_-]{1,64}$", async () => {
    assert.equal((await canonical({ tools: [fn("get_weather-2")] })).tools![0].name, "get_weather-2");
    await refused({ tools: [fn("a".repeat(65))] }, "tools[0].function.name");
    await refused({ tools: [fn("get.weather")] }, "tools[0].function.name");
    assert.equal((await canonical({ tools: [fn("a".repeat(64))] })).tools![0].name.length, 64);
  });

  test("003-34 strict omitted is false; strict: true is passed on", async () => {
    assert.equal((await canonical({ tools: [fn("f")] })).tools![0].strict, false);
    const strict = { type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: {} } } };
    assert.equal((await canonical({ tools: [strict] })).tools![0].strict, true);
  });

  test("003-35 without tools, tool_choice is none (no tools reach the model)", async () => {
    const r = await canonical({});
    assert.equal(r.tools, undefined);
    assert.equal(r.toolChoice, undefined);
    assert.equal((await canonical({ tool_choice: "none" })).tools, undefined);
    // `auto` over no tools (an agent with an empty tool list) has nothing to call: answered as none.
    for (const body of [{ tool_choice: "auto" }, { tool_choice: "auto", tools: [] }]) {
      const r = await canonical(body);
      assert.equal(r.tools, undefined);
      assert.equal(r.toolChoice, undefined);
    }
    await refused({ tool_choice: "required" }, "tool_choice");
    await refused({ tool_choice: { type: "function", function: { name: "f" } } }, "tool_choice");
  });

  test("003-36 with tools, tool_choice defaults to auto", async () => {
    assert.equal((await canonical({ tools: [fn("f")] })).toolChoice, "auto");
    // A key of its own in a named choice, or a schema beside a text format, is refused, not dropped.
    const extra = await post({ ...ok, tools: [fn("f")], tool_choice: { type: "function", function: { name: "f" }, x: 1 } });
    assert.equal(extra.status, 400, extra.body);
    assert.match(extra.json.error.param, /^tool_choice/);
    assert.match(extra.json.error.message, /'x'|"x"|\bx\b/);
    const format = await post({ ...ok, response_format: { type: "text", json_schema: { name: "s" } } });
    assert.equal(format.status, 400, format.body);
    assert.match(format.json.error.param, /^response_format/);
    assert.deepEqual((await canonical({ tools: [fn("f")], tool_choice: { type: "function", function: { name: "f" } } })).toolChoice, { name: "f" });
    await refused({ tools: [fn("f")], tool_choice: { type: "function", function: { name: "g" } } }, "tool_choice");
  });

  test("003-44 top_logprobs: 21 is rejected; 0 and 20 are accepted", async () => {
    await refused({ logprobs: true, top_logprobs: 21 }, "top_logprobs");
    assert.equal((await canonical({ logprobs: true, top_logprobs: 20 })).logprobs, 20);
    assert.equal((await canonical({ logprobs: true, top_logprobs: 0 })).logprobs, 0);
  });

  test("003-45 top_logprobs without logprobs: true is rejected", async () => {
    await refused({ top_logprobs: 2 }, "top_logprobs");
    await refused({ logprobs: false, top_logprobs: 2 }, "top_logprobs");
  });

  test("003-49 user_id: 512 characters of [A-Za-z0-9_-] are accepted; 513, '@' or '' are rejected", async () => {
    await canonical({ user_id: "a".repeat(512) });
    await canonical({ user_id: "Team_7-x" });
    await refused({ user_id: "a".repeat(513) }, "user_id");
    await refused({ user_id: "me@example.com" }, "user_id");
    await refused({ user_id: "" }, "user_id");
  });

  test("003-51 frequency_penalty and presence_penalty (any value) are accepted and have no effect", async () => {
    for (const v of [5, -7, 0.5, "high", null]) {
      const r = await canonical({ frequency_penalty: v, presence_penalty: v });
      assert.equal(r.sampling.frequencyPenalty, 0);
      assert.equal(r.sampling.presencePenalty, 0);
    }
  });

  test("errors use OpenAI's envelope; bad JSON and unknown root paths too", async () => {
    const bad = await post("{\"model\": ");
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, "invalid_json");
    const missing = await app.inject({ method: "GET", url: "/no/such/path" });
    assert.equal(missing.statusCode, 404);
    assert.ok(missing.json().error);
  });

  test("GET /models lists this API's one model; another id is not found here", async () => {
    const r = await app.inject({ method: "GET", url: "/models" });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json().data.map((m: { id: string }) => m.id), [MODEL]);
    assert.equal((await app.inject({ method: "GET", url: `/models/${MODEL}` })).statusCode, 200);
    const other = await app.inject({ method: "GET", url: "/models/tiny" });
    assert.equal(other.statusCode, 404, other.body);
    assert.equal(other.json().error.param, "model");
  });
});

describe("thinking and reasoning_effort", () => {
  test("003-08 thinking omitted: thinking mode, reasoning_content holds the reasoning", async () => {
    const r = await post(ok);
    assert.equal(r.json.choices[0].message.reasoning_content, "hmm");
    assert.equal(engine.prepared.at(-1)!.reasoning?.enabled, true);
  });

  test("003-09 thinking disabled: non-thinking mode, reasoning_content null", async () => {
    const r = await post({ ...ok, thinking: { type: "disabled" } });
    assert.equal(r.json.choices[0].message.reasoning_content, null);
    assert.deepEqual(engine.prepared.at(-1)!.reasoning, { enabled: false });
  });

  test("003-10 thinking enabled is the same request as thinking omitted", async () => {
    const omitted = await canonical({});
    const enabled = await canonical({ thinking: { type: "enabled" } });
    const empty = await canonical({ thinking: {} });
    assert.deepEqual(enabled.reasoning, omitted.reasoning);
    assert.deepEqual(empty.reasoning, omitted.reasoning);
  });

  test("003-12 high and max are accepted; max gives a larger thinking budget than high", async () => {
    const high = (await canonical({ reasoning_effort: "high" })).reasoning!;
    const max = (await canonical({ reasoning_effort: "max" })).reasoning!;
    assert.equal(high.budgetTokens, THINKING_BUDGET.high);
    assert.equal(max.budgetTokens, undefined, "max: bounded only by max_tokens and the context");
    await refused({ reasoning_effort: "minimal" }, "reasoning_effort");
    await refused({ reasoning_effort: "none" }, "reasoning_effort");
  });

  test("003-13 low behaves as high", async () => {
    assert.deepEqual((await canonical({ reasoning_effort: "low" })).reasoning, (await canonical({ reasoning_effort: "high" })).reasoning);
  });

  test("003-14 medium behaves as high", async () => {
    assert.deepEqual((await canonical({ reasoning_effort: "medium" })).reasoning, (await canonical({ reasoning_effort: "high" })).reasoning);
  });

  test("003-15 xhigh behaves as max", async () => {
    assert.deepEqual((await canonical({ reasoning_effort: "xhigh" })).reasoning, (await canonical({ reasoning_effort: "max" })).reasoning);
  });

  test("003-16 reasoning_effort omitted on an ordinary request is high", async () => {
    assert.deepEqual((await canonical({})).reasoning, (await canonical({ reasoning_effort: "high" })).reasoning);
    // Tools alone do not make an agent request.
    const tools = [{ type: "function", function: { name: "f" } }];
    assert.equal((await canonical({ tools })).reasoning!.budgetTokens, THINKING_BUDGET.high);
  });

  test("003-17 reasoning_effort omitted on an agent request (coding-agent User-Agent, or a tool loop) is max", async () => {
    const max = (await canonical({ reasoning_effort: "max" })).reasoning;
    for (const ua of ["claude-cli/2.0.14 (external, cli)", "opencode/0.15.3", "Claude-Code/1.0"])
      assert.deepEqual((await canonical({}, { "user-agent": ua })).reasoning, max, ua);
    const loop = {
      tools: [{ type: "function", function: { name: "f" } }],
      messages: [
        { role: "user", content: "go" },
        { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c1", content: "done" },
      ],
    };
    assert.deepEqual((await canonical(loop)).reasoning, max);
    // An explicit effort wins over the rule.
    assert.equal((await canonical({ reasoning_effort: "high" }, { "user-agent": "opencode/0.15.3" })).reasoning!.budgetTokens, THINKING_BUDGET.high);
    assert.equal((await canonical({}, { "user-agent": "curl/8.5" })).reasoning!.budgetTokens, THINKING_BUDGET.high);
  });
});

describe("rendering", () => {
  test("003-20 response_format omitted or text: plain text, no format constraint", async () => {
    assert.equal((await canonical({})).responseFormat, undefined);
    assert.equal((await canonical({ response_format: { type: "text" } })).responseFormat, undefined);
    assert.deepEqual((await canonical({ response_format: { type: "json_object" } })).responseFormat, { type: "json_object" });
  });

  test("003-27 include_usage: one extra chunk with choices [] and the usage, right before [DONE]", async () => {
    const r = await post({ ...ok, stream: true, stream_options: { include_usage: true } });
    assert.match(String(r.headers["content-type"]), /text\/event-stream/);
    const events = sseData(r.body) as any[];
    assert.equal(events.at(-1), "[DONE]");
    const last = events.at(-2);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.prompt_tokens, last.usage.prompt_cache_hit_tokens + last.usage.prompt_cache_miss_tokens);
    assert.equal(events.filter((e) => e !== "[DONE]" && e.usage).length, 1);
  });

  test("003-28 with include_usage every other chunk has usage: null; without it, no usage key", async () => {
    const r = await post({ ...ok, stream: true, stream_options: { include_usage: true } });
    const chunks = (sseData(r.body) as any[]).slice(0, -2);
    assert.ok(chunks.length >= 3);
    for (const c of chunks) assert.equal(c.usage, null, JSON.stringify(c));
    const plain = (sseData((await post({ ...ok, stream: true })).body) as any[]).slice(0, -1);
    for (const c of plain) assert.equal("usage" in c, false);
  });

  test("003-25 stream: reasoning_content deltas, content deltas, finish_reason, data: [DONE]", async () => {
    const r = await post({ ...ok, stream: true });
    const events = sseData(r.body) as any[];
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1);
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    for (const c of chunks) {
      assert.equal(c.object, "chat.completion.chunk");
      assert.equal(c.system_fingerprint, chunks[0].system_fingerprint);
      assert.equal(c.id, chunks[0].id);
    }
    const reasoning = chunks.map((c) => c.choices[0].delta.reasoning_content ?? "").join("");
    const content = chunks.map((c) => c.choices[0].delta.content ?? "").join("");
    assert.equal(reasoning, "hmm");
    assert.equal(content, "Hello");
    assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
  });

  test("003-42 without logprobs the logprobs key is present and null", async () => {
    for (const extra of [{}, { logprobs: false }]) {
      const r = await post({ ...ok, ...extra });
      assert.ok("logprobs" in r.json.choices[0]);
      assert.equal(r.json.choices[0].logprobs, null);
    }
  });

  test("003-47 bytes are the token's UTF-8 values, or null for a token with no bytes; 003-46 the floor is -9999.0", async () => {
    const r = await post({ ...ok, logprobs: true, top_logprobs: 1 });
    const { content, reasoning_content } = r.json.choices[0].logprobs;
    assert.deepEqual(content[0], { token: "Hello", logprob: -0.1, bytes: [72, 101, 108, 108, 111], top_logprobs: [{ token: "Hello", logprob: -0.1, bytes: [72] }] });
    assert.deepEqual(content[1], { token: "", logprob: -9999, bytes: null, top_logprobs: [] });
    assert.deepEqual(reasoning_content.map((e: { token: string }) => e.token), ["hm", "m"]);
  });

  test("003-50 user_id is the request's isolation namespace", async () => {
    await post({ ...ok, user_id: "alice" });
    const a = engine.prepared.at(-1)!.isolationKey;
    await post({ ...ok, user_id: "bob" });
    const b = engine.prepared.at(-1)!.isolationKey;
    await post(ok);
    const anon = engine.prepared.at(-1)!.isolationKey;
    assert.ok(a && b && a !== b);
    assert.equal(anon, undefined);
  });

  test("OpenAI's user is the isolation namespace too, as user_id is; user_id wins when both are sent", async () => {
    await post({ ...ok, user_id: "alice" });
    const alice = engine.prepared.at(-1)!.isolationKey;
    await post({ ...ok, user: "alice" });
    assert.equal(engine.prepared.at(-1)!.isolationKey, alice);
    await post({ ...ok, user: "bob", user_id: "alice" });
    assert.equal(engine.prepared.at(-1)!.isolationKey, alice);
  });

  test("a key the document does not list is a 400 naming it; OpenAI's seed, logit_bias and n of 1 are run", async () => {
    const r = await post({ ...ok, temprature: 1 });
    assert.equal(r.status, 400, r.body);
    assert.equal(r.json.error.param, "temprature");
    assert.equal(r.json.error.code, "unknown_field");
    assert.match(r.json.error.message, /temperature/);
    const hinted = await post({ ...ok, reasoning: { effort: "high" } });
    assert.equal(hinted.json.error.param, "reasoning");
    assert.match(hinted.json.error.message, /'thinking'/);
    const req = await canonical({ seed: 42, logit_bias: { "7": 5 }, n: 1 });
    assert.equal(req.sampling.seed, 42);
    assert.equal(req.sampling.logitBias.get(7), 5);
    await refused({ n: 2 }, "n");
    await refused({ seed: 1.5 }, "seed");
  });

  test("003-52 the response has id, choices, created (seconds), model, system_fingerprint and object", async () => {
    const r = (await post(ok)).json;
    assert.match(r.id, /^chatcmpl-/);
    assert.ok(Array.isArray(r.choices));
    assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 60);
    assert.equal(r.model, MODEL);
    assert.match(r.system_fingerprint, /^fp_[0-9a-f]{12}$/);
    assert.equal(r.object, "chat.completion");
    assert.equal((await post(ok)).json.system_fingerprint, r.system_fingerprint);
  });

  test("003-53 message.role is assistant and the content key is always present", async () => {
    const m = (await post(ok)).json.choices[0].message;
    assert.equal(m.role, "assistant");
    assert.ok("content" in m);
  });

  test("003-54 finish_reason is one of the five documented values", async () => {
    const reasons = new Set(["stop", "length", "content_filter", "tool_calls", "insufficient_system_resource"]);
    assert.ok(reasons.has((await post(ok)).json.choices[0].finish_reason));
  });

  test("003-57 prompt_tokens == prompt_cache_hit_tokens + prompt_cache_miss_tokens; 003-58 total = prompt + completion", async () => {
    const u = (await post(ok)).json.usage;
    assert.equal(u.prompt_cache_hit_tokens, 3);
    assert.equal(u.prompt_tokens, u.prompt_cache_hit_tokens + u.prompt_cache_miss_tokens);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert.equal("prompt_tokens_details" in u, false);
  });

  test("003-59 thinking mode reports completion_tokens_details.reasoning_tokens", async () => {
    assert.equal((await post(ok)).json.usage.completion_tokens_details.reasoning_tokens, 2);
    assert.equal((await post({ ...ok, thinking: { type: "disabled" } })).json.usage.completion_tokens_details.reasoning_tokens, 0);
  });
});

describe("insufficient_system_resource", () => {
  let busy: Awaited<ReturnType<typeof spakApp>>;
  before(async () => {
    busy = await spakApp({ slots: 1, delayMs: 150, queueTimeoutMs: 100 });
  });
  after(async () => {
    await busy.app.close();
  });

  test("003-56 a request that waits past --queue-timeout ends with finish_reason insufficient_system_resource", async () => {
    const first = post(ok, {}, busy.app);
    const waited = await post(ok, {}, busy.app);
    assert.equal(waited.status, 200, waited.body);
    assert.equal(waited.json.choices[0].finish_reason, "insufficient_system_resource");
    assert.equal(waited.json.choices[0].message.content, "");
    assert.equal(waited.json.usage.completion_tokens, 0);
    assert.equal((await first).json.choices[0].finish_reason, "stop");
  });

  test("003-56 streamed: the final chunk says insufficient_system_resource, then usage and [DONE]", async () => {
    const first = post(ok, {}, busy.app);
    const r = await post({ ...ok, stream: true, stream_options: { include_usage: true } }, {}, busy.app);
    const events = sseData(r.body) as any[];
    assert.equal(events.at(-1), "[DONE]");
    assert.deepEqual(events.at(-2).choices, []);
    assert.equal(events.at(-3).choices[0].finish_reason, "insufficient_system_resource");
    await first;
  });

  test("003-56 a request stopped midway by a shutdown reports what it had generated and reused, not zero", async () => {
    for (const stream of [false, true]) {
      // The scripted model takes 120 ms per step: cached prompt, two tokens of thinking, then the answer.
      const slow = await spakApp({ delayMs: 120 });
      // Shut down as soon as the thinking is out, 120 ms before the answer's token (a fixed 300 ms
      // wait was only 60 ms past the thinking's step, which a busy machine's late timers can use up).
      const thought = new Promise<void>((resolve) => slow.service.addHooks({ event: (_c, ev) => void (ev.type === "reasoning" && resolve()) }));
      const pending = post({ ...ok, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) }, {}, slow.app);
      await thought;
      await slow.service.shutdown(0);
      const r = await pending;
      assert.equal(r.status, 200, r.body);
      const usage = stream ? (sseData(r.body) as any[]).at(-2).usage : r.json.usage;
      const finish = stream ? (sseData(r.body) as any[]).at(-3).choices[0].finish_reason : r.json.choices[0].finish_reason;
      assert.equal(finish, "insufficient_system_resource");
      if (!stream) assert.equal(r.json.choices[0].message.reasoning_content, "hmm");
      else assert.ok(r.body.includes('"reasoning_content":"hmm"'), r.body);
      // Stopped at its next token: after the thinking, with or without the answer's one token.
      assert.ok(usage.completion_tokens === 2 || usage.completion_tokens === 3, JSON.stringify(usage));
      assert.equal(usage.completion_tokens_details.reasoning_tokens, 2);
      assert.equal(usage.prompt_cache_hit_tokens, 3);
      assert.equal(usage.prompt_tokens, usage.prompt_cache_hit_tokens + usage.prompt_cache_miss_tokens);
      assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
      await slow.app.close();
    }
  });

  test("003-25 a stream that fails midway still ends with the usage chunk and data: [DONE], after the error", async () => {
    const broken = await spakApp({ script: () => [{ kind: "text", text: "Hel", tokens: 1 }, new Error("the engine broke")] });
    try {
      const r = await post({ ...ok, stream: true, stream_options: { include_usage: true } }, {}, broken.app);
      const events = sseData(r.body) as any[];
      assert.equal(events.at(-1), "[DONE]", r.body);
      assert.deepEqual(events.at(-2).choices, []);
      assert.equal(events.at(-2).usage.completion_tokens, 1);
      assert.equal(typeof events.at(-3).error.message, "string", r.body);
      assert.ok(r.body.includes('"content":"Hel"'), r.body);
    } finally {
      await broken.app.close();
    }
  });

  test("the OpenAI dialect answers the same wait with 503 and Retry-After", async () => {
    const first = post(ok, {}, busy.app);
    const r = await busy.app.inject({ method: "POST", url: "/v1/chat/completions", payload: ok });
    assert.equal(r.statusCode, 503);
    assert.equal(r.headers["retry-after"], "1");
    assert.equal(r.json().error.code, "queue_timeout");
    await first;
  });
});

describe("Scheduler queue timeout (--queue-timeout)", () => {
  // The limit's timer does not hold the process open (a server's socket does); this one does, here.
  let alive: NodeJS.Timeout;
  before(() => {
    alive = setInterval(() => {}, 1000);
  });
  after(() => clearInterval(alive));

  test("a job granted a slot before the limit runs; one still waiting at the limit is refused as overloaded and leaves the queue", async () => {
    const { Scheduler } = await import("../../src/core/scheduler.ts");
    const s = new Scheduler(1, 4, 80);
    const held = await s.acquire(new AbortController().signal);
    const early = s.acquire(new AbortController().signal);
    setTimeout(() => held.release(), 20);
    const got = await early;
    assert.equal(got.slot, 0);
    const late = s.acquire(new AbortController().signal);
    assert.equal(s.queued, 1);
    await assert.rejects(late, (err: { status: number; reason: string; headers: Record<string, string> }) => {
      assert.equal(err.status, 503);
      assert.equal(err.reason, "overloaded");
      assert.equal(err.headers["retry-after"], "1");
      return true;
    });
    assert.equal(s.queued, 0);
    got.release();
    assert.equal(s.busy, 0, "the slot went back to the pool, not to the refused job");
  });

  test("0 means no limit", async () => {
    const { Scheduler } = await import("../../src/core/scheduler.ts");
    const s = new Scheduler(1, 4, 0);
    const held = await s.acquire(new AbortController().signal);
    const waiting = s.acquire(new AbortController().signal);
    await new Promise((r) => setTimeout(r, 50));
    held.release();
    assert.equal((await waiting).slot, 0);
  });
});
