import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { EngineChunk } from "../../src/core/engine.ts";
import { ChunkReader, refusedByUpstream, UpstreamShortage, UpstreamStreamError } from "../../src/engines/remote/wire.ts";
import { chatFieldNames, completionFieldNames } from "../../src/dialects/openai/field-names.ts";
import { ApiError } from "../../src/core/errors.ts";

// The remote engine's reading of an upstream's chat chunks into engine chunks, one parsed chunk at a
// time (no HTTP: the SSE reader and the wire are tested apart).

const chunk = (delta: unknown, finish: string | null = null) => ({ choices: [{ index: 0, delta, finish_reason: finish }] });
const readAll = (reader: ChunkReader, chunks: unknown[]): EngineChunk[] => [...chunks.flatMap((c) => reader.read(c)), ...reader.finish()];

test("a tool call whose arguments come before its name is announced by its name, then its arguments in order", () => {
  const out = readAll(new ChunkReader("chat", "m"), [
    chunk({ tool_calls: [{ index: 0, id: "call_a", function: { arguments: '{"q":' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { name: "lookup", arguments: '"x"' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: "}" } }] }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(
    out.filter((c) => c.kind === "tool-call" || c.kind === "tool-call-arguments"),
    [
      { kind: "tool-call", index: 0, name: "lookup" },
      { kind: "tool-call-arguments", index: 0, text: '{"q":', tokens: 1 },
      { kind: "tool-call-arguments", index: 0, text: '"x"', tokens: 1 },
      { kind: "tool-call-arguments", index: 0, text: "}", tokens: 1 },
    ],
  );
  assert.deepEqual(out.at(-1), { kind: "end", reason: "tool_calls" });
});

test("a call that never gets a name is a protocol failure of the upstream", () => {
  const reader = new ChunkReader("chat", "m");
  reader.read(chunk({ tool_calls: [{ index: 0, function: { arguments: "{}" } }] }));
  assert.throws(() => reader.finish(), UpstreamStreamError);
});

test("an error event before output: a 4xx is the client's refusal naming its field, anything else the upstream's failure", () => {
  const refusal = () => new ChunkReader("chat", "m").read({ error: { message: "bad schema", type: "BadRequestError", param: "response_format", code: 400 } });
  assert.throws(refusal, (e: unknown) => e instanceof ApiError && e.status === 400 && e.field === "responseFormat");
  assert.throws(() => new ChunkReader("chat", "m").read({ error: { message: "boom", code: 500 } }), UpstreamStreamError);
  // After output has gone out, even a 4xx ends the stream as the upstream's failure.
  const started = new ChunkReader("chat", "m");
  started.read(chunk({ content: "Hi" }));
  assert.throws(() => started.read({ error: { message: "late", code: 400 } }), UpstreamStreamError);
});

test("a finish reason the engine contract knows is kept, content_filter included; others read as stop", () => {
  for (const [given, kept] of [["length", "length"], ["content_filter", "content_filter"], ["function_call", "stop"]] as const) {
    const out = readAll(new ChunkReader("chat", "m"), [chunk({ content: "x" }, given)]);
    assert.deepEqual(out.at(-1), { kind: "end", reason: kept });
  }
  // An answer the upstream gave up for lack of capacity (DeepSeek's insufficient_system_resource,
  // vLLM's abort) is no finished answer: a replica out of room, with the counts it sent.
  for (const given of ["insufficient_system_resource", "abort"])
    assert.throws(
      () => readAll(new ChunkReader("chat", "m"), [chunk({ content: "x" }, given), { choices: [], usage: { prompt_tokens: 10, completion_tokens: 3 } }]),
      (e: unknown) => e instanceof UpstreamShortage && e.status === 503 && e.usage.some((c) => c.kind === "usage" && c.promptTokens === 10),
    );
});

test("cache hits an upstream counts only DeepSeek's way (prompt_cache_hit_tokens) are kept", () => {
  const out = readAll(new ChunkReader("chat", "m"), [chunk({ content: "x" }, "stop"), { choices: [], usage: { prompt_tokens: 40, completion_tokens: 1, prompt_cache_hit_tokens: 32, prompt_cache_miss_tokens: 8 } }]);
  assert.deepEqual(out.find((c) => c.kind === "cached"), { kind: "cached", tokens: 32 });
});

test("an upstream's refusal keeps the exact place it names, which the dialect names back in its own terms", () => {
  const cases: Array<[unknown, string, string]> = [
    [{ error: { param: "messages[1].tool_calls[0].function.arguments" } }, "prompt.messages[1].toolCalls[0].arguments", "messages[1].tool_calls[0].function.arguments"],
    [{ error: { param: "messages[1].tool_call_id" } }, "prompt.messages[1].toolCallId", "messages[1].tool_call_id"],
    [{ error: { param: "messages[0].content[0]" } }, "prompt.messages[0].parts[0]", "messages[0].content[0]"],
    [{ error: { param: "tools[0].function.parameters" } }, "tools[0].parameters", "tools[0].function.parameters"],
    [{ error: { param: "tools[2].function.description" } }, "tools[2].description", "tools[2].function.description"],
    [{ error: { param: "tools[1].function.name" } }, "tools[1].name", "tools[1].function.name"],
    [{ error: { param: "temperature" } }, "temperature", "temperature"],
    // FastAPI's 422 (vLLM, SGLang): the union member pydantic tried is not a field.
    [{ detail: [{ loc: ["body", "messages", 1, "ChatCompletionUserMessageParam", "content"], msg: "x" }] }, "prompt.messages[1].content", "messages[1].content"],
  ];
  for (const [body, canonical, wire] of cases) {
    const err = refusedByUpstream(400, body, "refused", "r");
    assert.equal(err.field, canonical, JSON.stringify(body));
    assert.equal(chatFieldNames({})(err.field!), wire);
  }
  assert.equal(refusedByUpstream(400, { error: { param: "prompt[3]" } }, "bad token", "r").field, "prompt.tokens[3]");
  assert.equal(completionFieldNames({ prompt: [1, 2] })("prompt.tokens[3]"), "prompt[3]");
});

test("one choice is asked of every upstream request: a second one, or one numbered otherwise, is the upstream's failure", () => {
  const two = { choices: [{ index: 0, delta: { content: "a" } }, { index: 1, delta: { content: "b" } }] };
  assert.throws(() => new ChunkReader("chat", "m").read(two), UpstreamStreamError);
  const other = { choices: [{ index: 1, delta: { content: "b" }, finish_reason: null }] };
  assert.throws(() => new ChunkReader("chat", "m").read(other), /choice 1 where one choice/);
  assert.throws(() => new ChunkReader("completion", "m").read({ choices: [{ index: 2, text: "x" }] }), UpstreamStreamError);
  // llama-server and others may leave the index out of a single choice: that is choice 0.
  const bare = readAll(new ChunkReader("chat", "m"), [{ choices: [{ delta: { content: "ok" } }] }, { choices: [{ delta: {}, finish_reason: "stop" }] }]);
  assert.deepEqual(bare[0], { kind: "text", text: "ok", tokens: 1 });
});

test("text fields of the wrong type are the upstream's protocol failure, not an empty answer; text parts and JSON-valued arguments are read", () => {
  for (const delta of [{ content: { text: "hi" } }, { content: 42 }, { reasoning_content: ["x"] }, { refusal: true }, { content: [{ type: "image_url" }] }])
    assert.throws(() => new ChunkReader("chat", "m").read(chunk(delta)), UpstreamStreamError, JSON.stringify(delta));
  assert.throws(() => new ChunkReader("completion", "m").read({ choices: [{ index: 0, text: 7 }] }), UpstreamStreamError);
  assert.throws(() => new ChunkReader("chat", "m").read(chunk({ tool_calls: [{ index: 0, function: { name: "f", arguments: 5 } }] })), UpstreamStreamError);
  // OpenAI's array form of content, which some servers answer in.
  const parts = new ChunkReader("chat", "m").read(chunk({ content: [{ type: "text", text: "Hel" }, { type: "text", text: "lo" }] }));
  assert.deepEqual(parts, [{ kind: "text", text: "Hello", tokens: 1 }]);
  // Arguments sent as the JSON value instead of its text: read as that value's text.
  const call = new ChunkReader("chat", "m").read(chunk({ tool_calls: [{ index: 0, function: { name: "f", arguments: { q: "x" } } }] }));
  assert.deepEqual(call, [
    { kind: "tool-call", index: 0, name: "f" },
    { kind: "tool-call-arguments", index: 0, text: '{"q":"x"}', tokens: 1 },
  ]);
  // null is no value, as before.
  assert.deepEqual(new ChunkReader("chat", "m").read(chunk({ content: null, role: "assistant" })), []);
});
