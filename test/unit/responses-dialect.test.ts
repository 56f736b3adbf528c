import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { EngineChunk } from "../../src/core/engine.ts";
import { scriptedApp, sseEvents, type ScriptedApp } from "../helpers/scripted-app.ts";
import { fillStore } from "../helpers/test-store.ts";
import { BackgroundRuns } from "../../src/dialects/responses/background.ts";
import { failAbandonedRuns, type ResponsesDeps } from "../../src/dialects/responses/responses.ts";
import { outputFromEvents, ResponseBuilder, type ResponseEvent } from "../../src/dialects/responses/to-wire.ts";
import type { GenerationEvent } from "../../src/core/types.ts";

// The Responses dialect over the SCRIPTED engine (no model) and a real SQLite store: refusals, the
// event stream's shape for every kind of output item, and the non-streamed body as the drained
// stream. Real inference through the official client is in test/integration/responses.test.ts.

let script: EngineChunk[] = [];
let s: ScriptedApp;
before(async () => {
  s = await scriptedApp({ id: "m", contextSize: 300, script: () => script, reasoning: true });
});
after(async () => {
  await s.app.close();
});

const post = (payload: unknown, url = "/v1/responses") => s.app.inject({ method: "POST", url, payload: payload as object });

const EVERYTHING: EngineChunk[] = [
  { kind: "text", channel: "reasoning", text: "hmm", tokens: 1 },
  { kind: "usage", reasoningTokens: 1 },
  { kind: "text", text: "Let me check.", tokens: 3 },
  { kind: "tool-call", index: 0, name: "lookup" },
  { kind: "tool-call-arguments", index: 0, text: '{"q":', tokens: 2 },
  { kind: "tool-call-arguments", index: 0, text: '"x"}', tokens: 2 },
  { kind: "tool-call", index: 1, name: "sql" },
  { kind: "tool-call-arguments", index: 1, text: '{"input": "SELECT \\"a', tokens: 3 },
  { kind: "tool-call-arguments", index: 1, text: '\\u00e9\\n\\""}', tokens: 3 },
  { kind: "end", reason: "tool_calls" },
];
const TOOLS = [
  { type: "function", name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } },
  { type: "custom", name: "sql", description: "Runs SQL" },
];

/** [description, body, status, param] */
const refusals: Array<[string, Record<string, unknown>, number, string | null]> = [
  ["a built-in tool", { tools: [{ type: "web_search" }] }, 400, "tools[0].type"],
  ["an unknown tool type", { tools: [{ type: "teleport" }] }, 400, "tools[0].type"],
  ["a stored prompt template", { prompt: { id: "pmpt_1" } }, 400, "prompt"],
  // The engine (a text-only model) refuses the image; the dialect names it by its input position,
  // past the instructions and the merged call items.
  [
    "an image part, by its input position",
    {
      instructions: "Be brief.",
      input: [
        { role: "user", content: "hi" },
        { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: "ok" },
        { role: "user", content: [{ type: "input_text", text: "and this?" }, { type: "input_image", image_url: "http://x/y.png", detail: "low" }] },
      ],
    },
    400,
    "input[3].content[1]",
  ],
  ["an image by file id", { input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1" }] }] }, 400, "input[0].content[0].file_id"],
  // OpenAI's own rule (an assistant's parts are output_text and refusal), named by the part's type.
  ["an image in an assistant message", { input: [{ role: "assistant", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }, 400, "input[0].content[0].type"],
  // A role that may hold images at OpenAI, but not on this server (the templates put them in user turns).
  ["an image in a system message", { input: [{ role: "system", content: [{ type: "input_image", image_url: "http://x/y.png" }] }, { role: "user", content: "hi" }] }, 400, "input[0].content[0]"],
  ["a file part", { input: [{ role: "user", content: [{ type: "input_file", file_id: "file_1" }] }] }, 400, "input[0].content[0].type"],
  ["a text part whose text is not a string", { input: [{ role: "user", content: [{ type: "input_text", text: 5 }] }] }, 400, "input[0].content[0].text"],
  ["an output part whose text is missing", { input: [{ role: "assistant", content: [{ type: "output_text" }] }] }, 400, "input[0].content[0].text"],
  ["a refusal part without its refusal", { input: [{ role: "assistant", content: [{ type: "refusal", refusal: null }] }] }, 400, "input[0].content[0].refusal"],
  [
    "a call output part whose text is not a string",
    { input: [{ type: "function_call", call_id: "c1", name: "f", arguments: "{}" }, { type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: {} }] }] },
    400,
    "input[1].output[0].text",
  ],
  // OpenAI takes an image in a function call's output; here a tool result is text (the refusal says so).
  [
    "an image in a function call's output",
    {
      input: [
        { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: [{ type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=" }] },
      ],
    },
    400,
    "input[1].output[0]",
  ],
  ["background without store", { background: true, store: false }, 400, "background"],
  ["top_logprobs without include", { top_logprobs: 3 }, 400, "top_logprobs"],
  ["an include Plinth cannot fill", { include: ["file_search_call.results"] }, 400, "include"],
  ["previous_response_id with conversation", { previous_response_id: "resp_x", conversation: "conv_x" }, 400, "conversation"],
  ["an unknown previous response (OpenAI's 400, not the 404 of a GET)", { previous_response_id: "resp_nope" }, 400, "previous_response_id"],
  ["tool_choice required without tools", { tool_choice: "required" }, 400, "tool_choice"],
  ["an unknown conversation", { conversation: "conv_nope" }, 404, "conversation"],
  ["an unknown item reference", { input: [{ type: "item_reference", id: "msg_nope" }] }, 404, "input[0].id"],
  // OpenAI's ItemReference leaves its type out or null: an untyped item that is only an id is one.
  ["an unknown item reference without its type", { input: [{ id: "msg_nope" }] }, 404, "input[0].id"],
  ["an unknown item reference whose type is null", { input: [{ type: null, id: "msg_nope" }] }, 404, "input[0].id"],
  ["an untyped item with an id and a role is a message, not a reference", { input: [{ id: "msg_x", role: "robot", content: "x" }] }, 400, "input[0].role"],
  ["tool_choice naming no tool", { tools: TOOLS, tool_choice: { type: "function", name: "other" } }, 400, "tool_choice"],
  // A choice of the wrong type would force a call of the other kind (JSON arguments or free text).
  ["tool_choice of a function naming a custom tool", { tools: TOOLS, tool_choice: { type: "function", name: "sql" } }, 400, "tool_choice.type"],
  ["tool_choice of a custom tool naming a function", { tools: TOOLS, tool_choice: { type: "custom", name: "lookup" } }, 400, "tool_choice.type"],
  [
    "allowed tools listing a function as custom",
    { tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "custom", name: "lookup" }] } },
    400,
    "tool_choice.tools[0].type",
  ],
  ["metadata with too many pairs", { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, 400, "metadata"],
  ["a metadata value that is too long", { metadata: { k: "v".repeat(513) } }, 400, "metadata.k"],
  ["an empty metadata key (the same rule as Chat Completions and Conversations)", { metadata: { "": "v" } }, 400, "metadata"],
  ["max_output_tokens past the context", { max_output_tokens: 295 }, 400, "max_output_tokens"],
  ["a prompt past the context", { input: "w".repeat(400) }, 400, "input"],
  ["reasoning sealed by someone else", { input: [{ type: "reasoning", summary: [], encrypted_content: "plinth-v1:AAAA" }, { role: "user", content: "x" }] }, 400, "input[0].encrypted_content"],
  ["an effort level that does not exist", { reasoning: { effort: "extreme" } }, 400, "reasoning.effort"],
  ["moderation", { moderation: { model: "omni-moderation-latest" } }, 400, "moderation"],
  ["a verbosity other than the default (as in chat)", { text: { verbosity: "high" } }, 400, "text.verbosity"],
  ["stream_options without stream", { stream_options: { include_obfuscation: false } }, 400, "stream_options"],
  ["a required tool call with max_tool_calls 0", { tools: TOOLS, tool_choice: "required", max_tool_calls: 0 }, 400, "tool_choice"],
  // A named tool, or allowed tools in required mode, demand a call as 'required' does.
  ["a forced function with max_tool_calls 0", { tools: TOOLS, tool_choice: { type: "function", name: "lookup" }, max_tool_calls: 0 }, 400, "tool_choice"],
  ["a forced custom tool with max_tool_calls 0", { tools: TOOLS, tool_choice: { type: "custom", name: "sql" }, max_tool_calls: 0 }, 400, "tool_choice"],
  [
    "allowed tools in required mode with max_tool_calls 0",
    { tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "lookup" }] }, max_tool_calls: 0 },
    400,
    "tool_choice",
  ],
  ["context compaction", { context_management: [{ type: "compaction", compact_threshold: 2000 }] }, 400, "context_management"],
  ["prompt_cache_retention of an unknown value", { prompt_cache_retention: "forever" }, 400, "prompt_cache_retention"],
  ["prompt_cache_options with explicit breakpoints", { prompt_cache_options: { mode: "explicit" } }, 400, "prompt_cache_options.mode"],
  // A malformed function or custom tool is its own type's refusal, not a built-in tool's pass.
  ["a function tool without a name", { tools: [{ type: "function" }] }, 400, "tools[0].name"],
  ["a function tool whose name is a number", { tools: [{ type: "function", name: 5 }] }, 400, "tools[0].name"],
  ["a function tool whose name has a space", { tools: [{ type: "function", name: "a b" }] }, 400, "tools[0].name"],
  ["a custom tool without a name", { tools: [{ type: "custom" }] }, 400, "tools[0].name"],
  ["tool_choice of a function without its name", { tools: TOOLS, tool_choice: { type: "function" } }, 400, "tool_choice.name"],
  ["a message with an unknown role", { input: [{ role: "bot", content: "x" }] }, 400, "input[0].role"],
  ["an item of an unknown type", { input: [{ type: "foo" }] }, 400, "input[0].type"],
  ["a safety_identifier over OpenAI's 64 characters", { safety_identifier: "s".repeat(65) }, 400, "safety_identifier"],
  // OpenAI's newer fields that ask for what this server has not got: refused by name, not dropped.
  ["a reasoning mode other than standard", { reasoning: { mode: "pro" } }, 400, "reasoning.mode"],
  ["reasoning context over all turns", { reasoning: { context: "all_turns" } }, 400, "reasoning.context"],
  ["reasoning context of the current turn", { reasoning: { context: "current_turn" } }, 400, "reasoning.context"],
  ["a function loaded by tool search", { tools: [{ type: "function", name: "f", defer_loading: true }] }, 400, "tools[0].defer_loading"],
  ["a custom tool called by a program", { tools: [TOOLS[0], { type: "custom", name: "c", allowed_callers: ["programmatic"] }] }, 400, "tools[1].allowed_callers"],
  // Chat's names for what this API spells otherwise: dropped, they left the answer without its limit
  // or its format.
  ["Chat's max_tokens", { max_tokens: 3 }, 400, "max_tokens"],
  ["Chat's response_format", { response_format: { type: "json_object" } }, 400, "response_format"],
  ["Chat's messages", { messages: [{ role: "user", content: "x" }] }, 400, "messages"],
  ["Chat's n", { n: 2 }, 400, "n"],
  ["a misspelt field", { max_output_token: 3 }, 400, "max_output_token"],
  // Fields of an item sent back, held to OpenAI's values.
  ["a message's phase of another type", { input: [{ type: "message", role: "assistant", content: "x", phase: 12345 }, { role: "user", content: "hi" }] }, 400, "input[0].phase"],
  ["a cache breakpoint of another mode", { input: [{ role: "user", content: [{ type: "input_text", text: "hi", prompt_cache_breakpoint: { mode: "implicit" } }] }] }, 400, "input[0].content[0].prompt_cache_breakpoint.mode"],
  ["a message's status that OpenAI has not got", { input: [{ type: "message", role: "assistant", content: "x", status: "bogus" }, { role: "user", content: "hi" }] }, 400, "input[0].status"],
];

test("an assistant message sent back with its phase and status, as OpenAI's clients keep them, and a cache breakpoint on a text part are taken", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const r = await post({
    model: "m",
    input: [
      { type: "message", role: "assistant", content: "x", phase: "commentary", status: "completed" },
      { role: "user", content: [{ type: "input_text", text: "hi", prompt_cache_breakpoint: { mode: "explicit" } }] },
    ],
  });
  assert.equal(r.statusCode, 200, r.body);
});

test("an unknown field's refusal says what this API takes instead, on /v1/responses and /v1/responses/input_tokens", async () => {
  for (const url of ["/v1/responses", "/v1/responses/input_tokens"]) {
    const chat = (await post({ model: "m", input: "hi", max_tokens: 3 }, url)).json().error;
    assert.equal(chat.code, "unknown_field");
    // input_tokens takes no length limit either: it is not sent to max_output_tokens, which it refuses too.
    const instead = url === "/v1/responses" ? "The Responses API takes 'max_output_tokens'" : "input_tokens only counts the prompt";
    assert.match(chat.message, new RegExp(`^Unrecognized request argument supplied: "max_tokens"\\. .*${instead}`));
    assert.match((await post({ model: "m", input: "hi", response_format: { type: "json_object" } }, url)).json().error.message, /'text\.format'/);
    assert.match((await post({ model: "m", input: "hi", instructons: "x" }, url)).json().error.message, /Did you mean 'instructions'\?/);
  }
  assert.match((await post({ model: "m", input: "hi", max_output_token: 3 })).json().error.message, /Did you mean 'max_output_tokens'\?/);
});

for (const [name, extra, status, param] of refusals) {
  test(`refused: ${name} → ${status} naming ${param}`, async () => {
    const r = await post({ model: "m", input: "hi", ...extra });
    assert.equal(r.statusCode, status, r.body);
    assert.equal(r.json().error.param, param, r.body);
    assert.ok(!r.json().error.message.includes("{field}"), r.json().error.message);
    if (name.includes("function call's output")) assert.match(r.json().error.message, /output .*text/, r.json().error.message);
  });
}

test("OpenAI's tool loading and reasoning fields at their defaults are accepted", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const tools = [{ type: "function", name: "f", defer_loading: false, allowed_callers: ["direct"] }];
  const r = await post({ model: "m", input: "hi", store: false, tools, reasoning: { mode: "standard", context: "auto" }, text: { verbosity: "medium" } });
  assert.equal(r.statusCode, 200, r.body);
});

test("client_metadata (the Codex CLI's thread and turn ids) is accepted and not echoed; a value that is not a string is a 400 naming it", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const client_metadata = { thread_id: "t1", turn_id: "u1", "x-codex-turn-metadata": '{"session_id":"t1"}' };
  const r = await post({ model: "m", input: "hi", store: false, client_metadata });
  assert.equal(r.statusCode, 200, r.body);
  assert.equal(r.json().client_metadata, undefined);
  const bad = await post({ model: "m", input: "hi", store: false, client_metadata: { n: 1 } });
  assert.equal(bad.statusCode, 400, bad.body);
  assert.equal(bad.json().error.param, "client_metadata.n");
});

test("a namespace's tools are offered as top-level ones; a call of one names its namespace, and goes back as input", async () => {
  // As the Codex CLI sends its sub-agent tools and each MCP server's tools.
  const tools = [
    { type: "function", name: "exec_command", parameters: { type: "object", properties: {} } },
    {
      type: "namespace",
      name: "mcp__demo",
      description: "Tools in the mcp__demo namespace.",
      tools: [
        { type: "function", name: "get_weather", strict: false, parameters: { type: "object", properties: { city: { type: "string" } } } },
        { type: "custom", name: "patch", description: "Free text" },
      ],
    },
  ];
  script = [
    { kind: "tool-call", index: 0, name: "get_weather" },
    { kind: "tool-call-arguments", index: 0, text: '{"city":"Paris"}', tokens: 3 },
    { kind: "tool-call", index: 1, name: "patch" },
    { kind: "tool-call-arguments", index: 1, text: '{"input":"x"}', tokens: 2 },
    { kind: "end", reason: "tool_calls" },
  ];
  const streamed = await post({ model: "m", input: "weather?", store: false, tools, stream: true });
  assert.equal(streamed.statusCode, 200, streamed.body);
  const added = sseEvents(streamed.body).filter((e) => e.event === "response.output_item.added").map((e) => (e.data as { item: Record<string, unknown> }).item);
  assert.deepEqual(added.map((i) => [i.type, i.name, i.namespace]), [["function_call", "get_weather", "mcp__demo"], ["custom_tool_call", "patch", "mcp__demo"]]);
  const r = await post({ model: "m", input: "weather?", store: false, tools });
  assert.equal(r.statusCode, 200, r.body);
  const calls = r.json().output.filter((i: { type: string }) => i.type.endsWith("_call"));
  assert.deepEqual(calls.map((i: Record<string, unknown>) => [i.type, i.name, i.namespace]), [["function_call", "get_weather", "mcp__demo"], ["custom_tool_call", "patch", "mcp__demo"]]);
  assert.equal(calls[1].input, "x");
  assert.equal(r.json().tools[1].type, "namespace");
  // The calls and their outputs go back as the next input, namespace and all.
  script = [{ kind: "text", text: "sunny", tokens: 1 }, { kind: "end", reason: "stop" }];
  const outputs = calls.map((c: { type: string; call_id: string }) => ({ type: c.type === "function_call" ? "function_call_output" : "custom_tool_call_output", call_id: c.call_id, output: "ok" }));
  const next = await post({ model: "m", input: [{ role: "user", content: "weather?" }, ...calls, ...outputs], store: false, tools });
  assert.equal(next.statusCode, 200, next.body);
  // A name two tools share (in a namespace or not) and a built-in tool in a namespace are named where they are.
  const clash = await post({ model: "m", input: "x", tools: [tools[0], { ...tools[1], tools: [{ type: "function", name: "exec_command" }] }] });
  assert.deepEqual([clash.statusCode, clash.json().error.param], [400, "tools[1].tools[0].name"], clash.body);
  const builtIn = await post({ model: "m", input: "x", tools: [{ type: "namespace", name: "n", tools: [{ type: "web_search" }] }] });
  assert.deepEqual([builtIn.statusCode, builtIn.json().error.param], [400, "tools[0].tools[0].type"], builtIn.body);
  const empty = await post({ model: "m", input: "x", tools: [{ type: "namespace", name: "n", tools: [] }] });
  assert.equal(empty.statusCode, 400, empty.body);
});

test("a function's output_schema is told to the model with its description, and echoed", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const output_schema = { type: "object", properties: { celsius: { type: "number" } } };
  const tools = [
    { type: "function", name: "weather", description: "Current weather.", parameters: { type: "object", properties: {} }, output_schema },
    { type: "function", name: "bare", parameters: { type: "object", properties: {} }, output_schema },
  ];
  const r = await post({ model: "m", input: "hi", store: false, tools });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(r.json().tools[0].output_schema, output_schema);
  const seen = s.engine.prepared.at(-1)!.tools!;
  assert.equal(seen[0].description, `Current weather.\n\nThe function's output is JSON matching this schema: ${JSON.stringify(output_schema)}`);
  assert.match(seen[1].description!, /^The function's output is JSON matching this schema: \{/);
  const bad = await post({ model: "m", input: "hi", store: false, tools: [{ ...tools[0], output_schema: "number" }] });
  assert.equal(bad.statusCode, 400, bad.body);
  assert.equal(bad.json().error.param, "tools[0].output_schema");
});

test("reasoning.effort takes OpenAI's whole scale, xhigh and max included (no budget, as high)", async () => {
  for (const effort of ["high", "xhigh", "max"]) {
    script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
    const r = await post({ model: "m", input: "hi", store: false, reasoning: { effort } });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().reasoning.effort, effort);
    const seen = s.engine.prepared.at(-1)!;
    assert.equal(seen.reasoning?.effort, effort);
    assert.equal(seen.reasoning?.budgetTokens, undefined);
  }
});

test("the chat path's reasoning budget (budget_tokens, max_tokens) and enabled switch are honoured here too, not dropped", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  for (const [reasoning, budget] of [
    [{ budget_tokens: 5 }, 5],
    [{ max_tokens: 7 }, 7],
    [{ effort: "medium", budget_tokens: 9 }, 9],
  ] as const) {
    const r = await post({ model: "m", input: "hi", store: false, reasoning });
    assert.equal(r.statusCode, 200, r.body);
    const seen = s.engine.prepared.at(-1)!;
    assert.notEqual(seen.reasoning?.enabled, false, JSON.stringify(reasoning));
    assert.equal(seen.reasoning?.budgetTokens, budget, JSON.stringify(reasoning));
  }
  const off = await post({ model: "m", input: "hi", store: false, reasoning: { enabled: false } });
  assert.equal(off.statusCode, 200, off.body);
  assert.equal(s.engine.prepared.at(-1)!.reasoning?.enabled, false);
  for (const [body, param] of [
    [{ reasoning: { budget_tokens: 5 }, thinking_token_budget: 6 }, "thinking_token_budget"],
    [{ reasoning: { enabled: false, budget_tokens: 5 } }, "reasoning.budget_tokens"],
    [{ reasoning: { enabled: false, effort: "low" } }, "reasoning.enabled"],
    [{ reasoning: { budget_tokens: 0 } }, "reasoning.budget_tokens"],
  ] as const) {
    const r = await post({ model: "m", input: "hi", store: false, ...body });
    assert.equal(r.statusCode, 400, r.body);
    assert.equal(r.json().error.param, param, JSON.stringify(body));
  }
});

test("an unknown previous response is OpenAI's previous_response_not_found", async () => {
  const r = await post({ model: "m", input: "hi", previous_response_id: "resp_nope" });
  assert.equal(r.statusCode, 400, r.body);
  assert.equal(r.json().error.code, "previous_response_not_found");
  assert.equal(r.json().error.message, "Previous response with id 'resp_nope' not found.");
});

test("tool_choice auto or none without tools is what a response reports by default, and is accepted", async () => {
  for (const tool_choice of ["auto", "none"]) {
    script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
    for (const tools of [undefined, []]) {
      const r = await post({ model: "m", input: "hi", store: false, tool_choice, ...(tools ? { tools } : {}) });
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.json().tool_choice, tool_choice);
    }
  }
});

test("top_logprobs 0, the value every response echoes, is accepted without include and asks for no logprobs", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const r = await post({ model: "m", input: "hi", store: false, top_logprobs: 0 });
  assert.equal(r.statusCode, 200, r.body);
  assert.equal(r.json().top_logprobs, 0);
  assert.equal(s.engine.prepared.at(-1)!.logprobs, undefined);
});

test("truncation auto drops the oldest turns until the prompt fits; disabled refuses", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const input = [
    { role: "user", content: "a".repeat(150) },
    { role: "assistant", content: "b".repeat(290) },
    { role: "user", content: "the question" },
  ];
  const refused = await post({ model: "m", input, instructions: "Be brief." });
  assert.equal(refused.statusCode, 400, refused.body);
  assert.equal(refused.json().error.code, "context_length_exceeded");
  const fits = await post({ model: "m", input, instructions: "Be brief.", truncation: "auto", store: false });
  assert.equal(fits.statusCode, 200, fits.body);
  const seen = s.engine.prepared.at(-1)!.prompt as { messages: Array<{ role: string; content: string }> };
  assert.deepEqual(seen.messages.map((m) => m.role), ["system", "user"], "instructions and the last user turn stay");
  assert.equal(seen.messages[1].content, "the question");
  // input_tokens counts what that create used (it refused the whole input, ignoring truncation).
  const counted = await post({ model: "m", input, instructions: "Be brief.", truncation: "auto" }, "/v1/responses/input_tokens");
  assert.equal(counted.statusCode, 200, counted.body);
  assert.equal(counted.json().input_tokens, fits.json().usage.input_tokens);
  const overflow = await post({ model: "m", input, instructions: "Be brief." }, "/v1/responses/input_tokens");
  assert.equal(overflow.statusCode, 400, overflow.body);
  assert.equal(overflow.json().error.code, "context_length_exceeded");
});

test("truncation auto drops exactly the oldest turns that must go, found without rendering once per turn", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const turns = Array.from({ length: 30 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `${i}`.padEnd(20, "x") }));
  const input = [...turns, { role: "user", content: "the question" }];
  const before = s.engine.prepared.length;
  const r = await post({ model: "m", input, instructions: "Be brief.", truncation: "auto", store: false });
  assert.equal(r.statusCode, 200, r.body);
  const seen = s.engine.prepared.at(-1)!.prompt as { kind: "chat"; messages: Array<{ role: string; content: string }> };
  const kept = seen.messages.length - 1;
  assert.deepEqual(seen.messages.slice(1).map((m) => m.content), input.slice(input.length - kept).map((m) => m.content), "the newest turns stay");
  // No more went than had to: with the next older turn back, the prompt overflows the 256-token context.
  const older = input[input.length - kept - 1];
  const withOneMore = { ...seen, messages: [seen.messages[0], { ...seen.messages[1], role: older.role, content: older.content }, ...seen.messages.slice(1)] };
  assert.ok((await s.engine.tokenize(withOneMore as never, false)).length >= 256);
  // One try that overflows, one that runs: the search counts tokens in between.
  assert.ok(s.engine.prepared.length - before <= 2, `${s.engine.prepared.length - before} prompts prepared`);
});

test("truncation auto leaves room for max_output_tokens: turns go until the budget fits, not only the prompt", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const CONTEXT = 300; // the scripted model's
  const turns = Array.from({ length: 8 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `${i}`.padEnd(20, "x") }));
  const input = [...turns, { role: "user", content: "the question" }];
  // The prompt alone fits; with the budget below it does not, though the budget alone would.
  const alone = await post({ model: "m", input, instructions: "Be brief." }, "/v1/responses/input_tokens");
  assert.equal(alone.statusCode, 200, alone.body);
  const budget = CONTEXT - alone.json().input_tokens + 20;
  assert.ok(budget > 20 && budget < CONTEXT - 60, alone.body);
  const refused = await post({ model: "m", input, instructions: "Be brief.", max_output_tokens: budget, store: false });
  assert.equal(refused.statusCode, 400, refused.body);
  assert.equal(refused.json().error.param, "max_output_tokens");
  const r = await post({ model: "m", input, instructions: "Be brief.", max_output_tokens: budget, truncation: "auto", store: false });
  assert.equal(r.statusCode, 200, r.body);
  assert.ok(r.json().usage.input_tokens + budget <= CONTEXT, r.body);
  const seen = s.engine.prepared.at(-1)!.prompt as { kind: "chat"; messages: Array<{ role: string; content: string }> };
  assert.equal(seen.messages.at(-1)!.content, "the question");
  assert.ok(seen.messages.length < input.length + 1, "some turns went");
  // A budget the context cannot hold even with every droppable turn gone is still refused, naming it.
  const never = await post({ model: "m", input, instructions: "Be brief.", max_output_tokens: CONTEXT, truncation: "auto", store: false });
  assert.equal(never.statusCode, 400, never.body);
  assert.equal(never.json().error.param, "max_output_tokens");
});

test("the stream has OpenAI's events for reasoning, text, a function call and a custom tool call; the JSON body is its last response", async () => {
  script = EVERYTHING;
  const body = { model: "m", input: "go", tools: TOOLS, reasoning: { summary: "auto" } };
  const streamed = await post({ ...body, stream: true, store: false });
  const events = sseEvents(streamed.body).map((e) => e.data as Record<string, any>);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const types = events.map((e) => e.type);
  assert.deepEqual(types, [
    "response.created", "response.in_progress",
    "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.content_part.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
    "response.output_item.done",
    "response.output_item.added", "response.content_part.added", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done",
    "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.output_item.done",
    "response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done", "response.output_item.done",
    "response.completed",
  ]);
  const final = events.at(-1)!.response;
  assert.deepEqual(final.output.map((o: any) => o.type), ["reasoning", "message", "function_call", "custom_tool_call"]);
  const custom = final.output[3];
  assert.equal(custom.input, 'SELECT "aé\n"', "the custom tool's input is the decoded text, not JSON");
  const deltas = events.filter((e) => e.type === "response.custom_tool_call_input.delta").map((e) => e.delta).join("");
  assert.equal(deltas, custom.input);
  assert.equal(final.output[2].arguments, '{"q":"x"}');
  assert.equal(final.output[0].summary[0].text, "hmm");
  assert.equal(final.usage.output_tokens_details.reasoning_tokens, 1);
  // OpenAI's schema requires both details; what was not read from the cache was written to it.
  const details = final.usage.input_tokens_details;
  assert.equal(details.cache_write_tokens, final.usage.input_tokens - details.cached_tokens);

  const whole = (await post(body)).json();
  const strip = (r: any) => JSON.parse(JSON.stringify({ ...r, id: "", created_at: 0, completed_at: 0, store: null }).replace(/"(msg|rs|fc|ctc|call)_[A-Za-z0-9_-]+"/g, '"id"'));
  assert.deepEqual(strip(whole), strip(final), "the JSON body equals the stream's final response");
});

test("a custom tool call output item has no status (OpenAI's CustomToolCall has none), in events and body", async () => {
  script = EVERYTHING;
  const streamed = await post({ model: "m", input: "go", tools: TOOLS, stream: true, store: false });
  const events = sseEvents(streamed.body).map((e) => e.data as Record<string, any>);
  const items = events.flatMap((e) => [e.item, ...(e.response?.output ?? [])]).filter((i) => i?.type === "custom_tool_call");
  assert.ok(items.length >= 3, "added, done and the final response's item");
  for (const item of items) assert.ok(!("status" in item), JSON.stringify(item));
  // A function call keeps its status: FunctionToolCall has one.
  assert.equal(events.at(-1)!.response.output.find((o: any) => o.type === "function_call").status, "completed");
});

test("output_text events carry ResponseLogProb entries (no bytes); the part's logprobs keep bytes", async () => {
  const lp = (token: string, logprob: number) => ({ token, bytes: [...Buffer.from(token)], logprob, top: [{ token, bytes: [...Buffer.from(token)], logprob }] });
  script = [
    { kind: "text", text: "Hi", tokens: 1, logprobs: [lp("Hi", -0.5)] },
    { kind: "text", text: " there", tokens: 1, logprobs: [lp(" there", -1)] },
    { kind: "end", reason: "stop" },
  ];
  const streamed = await post({ model: "m", input: "go", stream: true, store: false, include: ["message.output_text.logprobs"], top_logprobs: 1 });
  const events = sseEvents(streamed.body).map((e) => e.data as Record<string, any>);
  const textEvents = events.filter((e) => e.type === "response.output_text.delta" || e.type === "response.output_text.done");
  assert.equal(textEvents.length, 3);
  for (const e of textEvents) {
    assert.ok(e.logprobs.length > 0, JSON.stringify(e));
    for (const entry of e.logprobs) {
      assert.deepEqual(Object.keys(entry).sort(), ["logprob", "token", "top_logprobs"], JSON.stringify(entry));
      for (const t of entry.top_logprobs) assert.deepEqual(Object.keys(t).sort(), ["logprob", "token"], JSON.stringify(t));
    }
  }
  const part = events.at(-1)!.response.output[0].content[0];
  assert.deepEqual(part.logprobs[1].bytes, [...Buffer.from(" there")]);
  assert.deepEqual(part.logprobs[1].top_logprobs[0].bytes, [...Buffer.from(" there")]);
});

test("max_tool_calls: calls past the limit are ignored", async () => {
  script = [
    ...[0, 1, 2].flatMap((i): EngineChunk[] => [
      { kind: "tool-call", index: i, name: "lookup" },
      { kind: "tool-call-arguments", index: i, text: "{}", tokens: 1 },
    ]),
    { kind: "end", reason: "tool_calls" },
  ];
  const r = await post({ model: "m", input: "go", tools: TOOLS, max_tool_calls: 2, store: false });
  assert.equal(r.json().output.filter((o: any) => o.type === "function_call").length, 2);
});

test("a failure after the stream began: an error event, then response.failed, stored as failed", async () => {
  script = [{ kind: "text", text: "par", tokens: 1 }];
  (script as unknown[]).push(new Error("engine broke"));
  const r = await post({ model: "m", input: "go", stream: true });
  const events = sseEvents(r.body).map((e) => e.data as Record<string, any>);
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
  const failed = events.at(-1)!.response;
  assert.equal(failed.status, "failed");
  // The response's error.code is one of OpenAI's (ResponseErrorCode); the error event keeps Plinth's own.
  assert.equal(failed.error.code, "server_error");
  assert.equal(events.at(-2)!.code, "internal_error");
  // A failure of the server's quotes the request id, in the event and in the stored object.
  const quoted = `(request id: ${r.headers["x-request-id"]})`;
  assert.ok(failed.error.message.includes(quoted), failed.error.message);
  assert.ok(events.at(-2)!.message.includes(quoted), events.at(-2)!.message);
  assert.equal(failed.output[0].status, "incomplete");
  // The open message is closed before the error, as incomplete (never completed), as a cut by the
  // token budget closes it; the item in response.failed is the same.
  const closing = events.slice(-5, -2);
  assert.deepEqual(closing.map((e) => e.type), ["response.output_text.done", "response.content_part.done", "response.output_item.done"]);
  assert.deepEqual(closing[2].item, failed.output[0]);
  const stored = await s.app.inject({ method: "GET", url: `/v1/responses/${failed.id}` });
  assert.equal(stored.json().status, "failed");
});

test("allowed_tools: only the listed tools may be called", async () => {
  script = [{ kind: "end", reason: "stop" }];
  await post({ model: "m", input: "go", tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "lookup" }] }, store: false });
  assert.deepEqual(s.engine.prepared.at(-1)!.toolChoice, { allowed: ["lookup"], required: true });
  const bad = await post({ model: "m", input: "go", tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "nope" }] } });
  assert.equal(bad.json().error.param, "tool_choice.tools[0]");
});

test("POST /v1/responses/compact is a 404 naming compaction, not a 405 about a response id", async () => {
  const r = await post({ model: "m", input: "hi" }, "/v1/responses/compact");
  assert.equal(r.statusCode, 404, r.body);
  assert.match(r.json().error.message, /compact/);
});

test("conversations: a malformed text part is refused where it is, not stored to break later turns", async () => {
  const bad = await post({ items: [{ role: "user", content: [{ type: "input_text", text: 5 }] }] }, "/v1/conversations");
  assert.equal(bad.statusCode, 400, bad.body);
  assert.equal(bad.json().error.param, "items[0].content[0].text");
  const c = (await post({ items: [{ role: "user", content: "hi" }] }, "/v1/conversations")).json();
  const add = await post({ items: [{ role: "user", content: [{ type: "output_text", text: null }] }] }, `/v1/conversations/${c.id}/items`);
  assert.equal(add.statusCode, 400, add.body);
  assert.equal(add.json().error.param, "items[0].content[0].text");
  const items = (await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items` })).json().data;
  assert.equal(items.length, 1);
});

test("conversations: a body key the route does not read is a 400 naming it, not a conversation made without it", async () => {
  const c = (await post({ items: [{ role: "user", content: "hi" }] }, "/v1/conversations")).json();
  for (const [url, body, param] of [
    ["/v1/conversations", { item: [{ role: "user", content: "hi" }] }, "item"],
    [`/v1/conversations/${c.id}`, { metadata: { a: "1" }, metdata: { a: "1" } }, "metdata"],
    [`/v1/conversations/${c.id}/items`, { items: [{ role: "user", content: "x" }], conversation: c.id }, "conversation"],
  ] as const) {
    const r = await post(body, url);
    assert.equal(r.statusCode, 400, `${url}: ${r.body}`);
    assert.equal(r.json().error.param, param, url);
  }
  const items = (await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items` })).json().data;
  assert.equal(items.length, 1, "nothing was added");
});

test("conversations: create, items; an end user named in the query changes nothing (objects are the key's)", async () => {
  const c = (await post({ metadata: { a: "1" }, items: [{ role: "user", content: "hi" }] }, "/v1/conversations?user=ann")).json();
  assert.match(c.id, /^conv_/);
  assert.equal(c.object, "conversation");
  const items = await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items` });
  assert.equal(items.json().data[0].content[0].type, "input_text");
  const other = await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}?user=bob` });
  assert.equal(other.statusCode, 200);
  const bad = await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items?user=ann&limit=500` });
  assert.equal(bad.statusCode, 400);
  assert.equal(bad.json().error.param, "limit");
});

test("conversations: an item already in the conversation is refused before generating, and a reference to one is not added twice", async () => {
  script = [
    { kind: "text", text: "ok", tokens: 1 },
    { kind: "end", reason: "stop" },
  ];
  const c = (await post({ items: [{ role: "user", content: "hello" }] }, "/v1/conversations")).json();
  const itemsOf = async () => (await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items?order=asc` })).json().data;
  const [first] = await itemsOf();
  // A resent message with the id it already has there: a 400 naming it (it was a 409 after the
  // response had been generated and stored, with the conversation left as it was).
  for (const stream of [false, true]) {
    const dup = await post({ model: "m", conversation: c.id, stream, input: [{ type: "message", id: first.id, role: "user", content: "hello" }] });
    assert.equal(dup.statusCode, 400, dup.body);
    assert.equal(dup.json().error.param, "input[0].id");
  }
  // Referring to it is fine: it is in the prompt where it stands, and not added again.
  const r = await post({ model: "m", conversation: c.id, input: [{ type: "item_reference", id: first.id }, { role: "user", content: "x" }] });
  assert.equal(r.statusCode, 200, r.body);
  // As OpenAI's ItemReference allows, without its type or with a null one.
  for (const ref of [{ id: first.id }, { type: null, id: first.id }]) {
    const untyped = await post({ model: "m", store: false, input: [ref, { role: "user", content: "x" }] });
    assert.equal(untyped.statusCode, 200, untyped.body);
  }
  const after = await itemsOf();
  assert.deepEqual(
    after.map((i: { type: string; role?: string }) => i.role ?? i.type),
    ["user", "user", "assistant"],
  );
  assert.equal(new Set(after.map((i: { id: string }) => i.id)).size, after.length);
  // One id on two items of one input, and an id of the response being continued.
  const twice = await post({ model: "m", input: [{ type: "message", id: "msg_same", role: "user", content: "a" }, { type: "message", id: "msg_same", role: "user", content: "b" }] });
  assert.equal(twice.statusCode, 400, twice.body);
  assert.equal(twice.json().error.param, "input[1].id");
  assert.match(twice.json().error.message, /two items of input/);
  const prev = (await post({ model: "m", input: [{ type: "message", id: "msg_prev", role: "user", content: "a" }] })).json();
  const again = await post({ model: "m", previous_response_id: prev.id, input: [{ type: "message", id: "msg_prev", role: "user", content: "a" }] });
  assert.equal(again.statusCode, 400, again.body);
  assert.equal(again.json().error.param, "input[0].id");
});

test("a turn whose history and input hold more than one request may send is a 400 naming where the history comes from", async () => {
  // Each stored response keeps its whole input and each turn reads, stores and indexes it again on
  // the event loop: with truncation: auto dropping what does not fit, a chain grew without end.
  script = [
    { kind: "text", text: "ok", tokens: 1 },
    { kind: "end", reason: "stop" },
  ];
  const many = (n: number) => Array.from({ length: n }, () => ({ role: "user", content: "a" }));
  const first = await post({ model: "m", input: many(9000), truncation: "auto" });
  assert.equal(first.statusCode, 200, first.body.slice(0, 300));
  const within = await post({ model: "m", previous_response_id: first.json().id, input: many(900), truncation: "auto" });
  assert.equal(within.statusCode, 200, within.body.slice(0, 300));
  const over = await post({ model: "m", previous_response_id: within.json().id, input: many(200), truncation: "auto" });
  assert.equal(over.statusCode, 400, over.body.slice(0, 300));
  assert.equal(over.json().error.param, "previous_response_id");
  assert.match(over.json().error.message, /10102 items \(at most 10000\)/);

  // Text counts too, and a conversation is read no further than the bound.
  const conv = (await post({ items: [] }, "/v1/conversations")).json();
  const part = { type: "message", role: "user", content: "b".repeat(45_000) };
  for (let i = 0; i < 19; i++) {
    const added = await post({ items: Array.from({ length: 20 }, () => part) }, `/v1/conversations/${conv.id}/items`);
    assert.equal(added.statusCode, 200, added.body.slice(0, 300));
  }
  const turn = await post({ model: "m", conversation: conv.id, input: "hi", truncation: "auto" });
  assert.equal(turn.statusCode, 400, turn.body.slice(0, 300));
  assert.equal(turn.json().error.param, "conversation");
  assert.match(turn.json().error.message, /more than 16777216 characters/);
});

test("completed_at is set only on a completed response (null when incomplete)", async () => {
  script = [
    { kind: "text", text: "abc", tokens: 3 },
    { kind: "end", reason: "length" },
  ];
  const cut = (await post({ model: "m", input: "go", max_output_tokens: 3, store: false })).json();
  assert.equal(cut.status, "incomplete");
  assert.equal(cut.completed_at, null);
  script = [
    { kind: "text", text: "abc", tokens: 3 },
    { kind: "end", reason: "stop" },
  ];
  const done = (await post({ model: "m", input: "go", store: false })).json();
  assert.equal(done.status, "completed");
  assert.equal(typeof done.completed_at, "number");
});

test("the response repeats presence_penalty and frequency_penalty (0 unless sent), which Open Responses' ResponseResource requires", async () => {
  script = [
    { kind: "text", text: "abc", tokens: 3 },
    { kind: "end", reason: "stop" },
  ];
  const plain = (await post({ model: "m", input: "go", store: false })).json();
  assert.equal(plain.presence_penalty, 0);
  assert.equal(plain.frequency_penalty, 0);
  const sent = await post({ model: "m", input: "go", presence_penalty: 0.5, frequency_penalty: -1, stream: true });
  const events = sseEvents(sent.body).map((x) => x.data as any);
  assert.ok(events.filter((x) => x.response).length >= 3);
  for (const e of events.filter((x) => x.response)) {
    assert.equal(e.response.presence_penalty, 0.5, e.type);
    assert.equal(e.response.frequency_penalty, -1, e.type);
  }
});

test("a call cut short by max_output_tokens is an incomplete item in an incomplete response", async () => {
  script = [
    { kind: "tool-call", index: 0, name: "lookup" },
    { kind: "tool-call-arguments", index: 0, text: '{"q": "abc', tokens: 5 },
    { kind: "end", reason: "length" },
  ];
  const r = (await post({ model: "m", input: "go", tools: TOOLS, max_output_tokens: 5, store: false })).json();
  assert.equal(r.status, "incomplete");
  assert.equal(r.output[0].type, "function_call");
  assert.equal(r.output[0].status, "incomplete");
});

test("a request that waits past the queue timeout is a 503 with Retry-After, as on Chat Completions (not a 500)", async () => {
  const busy = await scriptedApp({ id: "m", slots: 1, delayMs: 50, queueTimeoutMs: 100, script: () => Array.from({ length: 20 }, () => ({ kind: "text" as const, text: "a", tokens: 1 })) });
  try {
    const send = (url: string, payload: object) => busy.app.inject({ method: "POST", url, payload });
    const occupier = send("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "go" }] });
    await new Promise((r) => setTimeout(r, 20));
    const [responses, chat] = await Promise.all([send("/v1/responses", { model: "m", input: "hi" }), send("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] })]);
    assert.equal(chat.statusCode, 503, chat.body);
    assert.equal(responses.statusCode, 503, responses.body);
    assert.ok(responses.headers["retry-after"], JSON.stringify(responses.headers));
    assert.equal(responses.json().error.code, chat.json().error.code);
    assert.equal((await occupier).statusCode, 200);
    // Streamed: the head waits for the first event, so the wait past the timeout is the same 503
    // with Retry-After (a client's retry by status covers it), not a 200 that ends in an error event.
    const second = send("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "go" }] });
    await new Promise((r) => setTimeout(r, 20));
    const streamed = await send("/v1/responses", { model: "m", input: "hi", stream: true });
    assert.equal(streamed.statusCode, 503, streamed.body);
    assert.ok(streamed.headers["retry-after"], JSON.stringify(streamed.headers));
    assert.equal(streamed.json().error.code, "queue_timeout");
    assert.equal((await second).statusCode, 200);
  } finally {
    await busy.app.close();
  }
});

test("text.format json_schema is strict only when asked (the reference's default is false, as in chat)", async () => {
  const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false };
  const strictness: Array<boolean | undefined> = [];
  for (const strict of [undefined, null, false, true]) {
    const format = { type: "json_schema", name: "x", schema, ...(strict === undefined ? {} : { strict }) };
    const r = await post({ model: "m", input: "hi", text: { format } });
    assert.equal(r.statusCode, 200, r.body);
    const rf = s.engine.prepared.at(-1)!.responseFormat;
    strictness.push(rf?.type === "json_schema" ? rf.strict : undefined);
    // The response repeats the format as applied: its strictness; no description when none was sent
    // (OpenAI's schema types it as a string, never null).
    assert.deepEqual(r.json().text.format, { type: "json_schema", name: "x", schema, strict: strict === true });
  }
  assert.deepEqual(strictness, [false, false, false, true]);
  const described = { type: "json_schema", name: "x", description: "an a", schema, strict: true };
  assert.deepEqual((await post({ model: "m", input: "hi", text: { format: described } })).json().text.format, described);
});

// Input items as the outside probe sent them: a key OpenAI's schema does not give an item or part was
// taken, stored and listed back. OpenAI refuses it with the key's path; so does Plinth, with the code
// of an unknown top-level field, at every depth.
test("an unknown key anywhere in an input item, its parts or the request's nested objects is a 400 naming its path, code unknown_field", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const user = { role: "user", content: "hi" };
  const call = { type: "function_call", call_id: "c1", name: "lookup", arguments: "{}" };
  const custom = { type: "custom_tool_call", call_id: "c2", name: "sql", input: "x" };
  const answered = [{ type: "function_call_output", call_id: "c1", output: "ok" }, { type: "custom_tool_call_output", call_id: "c2", output: "ok" }];
  const said = (part: object) => ({ role: "assistant", content: [{ type: "output_text", text: "x", ...part }] });
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ input: [{ type: "message", role: "user", foo: 1, content: [{ type: "input_text", text: "x" }] }] }, "input[0].foo"],
    [{ input: [{ role: "user", content: [{ type: "input_text", text: "x", foo: 1 }] }] }, "input[0].content[0].foo"],
    [{ input: [said({ foo: 1 }), user] }, "input[0].content[0].foo"],
    // What the openai SDK's responses.parse adds to what it hands back; OpenAI refuses it too.
    [{ input: [said({ parsed: null }), user] }, "input[0].content[0].parsed"],
    [{ input: [said({ annotations: [{ type: "url_citation", url: "https://x", start_index: 0, end_index: 1, title: "t", foo: 1 }] }), user] }, "input[0].content[0].annotations[0].foo"],
    [{ input: [said({ logprobs: [{ token: "x", logprob: -1, bytes: [120], top_logprobs: [], foo: 1 }] }), user] }, "input[0].content[0].logprobs[0].foo"],
    [{ input: [said({ logprobs: [{ token: "x", logprob: -1, bytes: [120], top_logprobs: [{ token: "x", logprob: -1, bytes: [120], foo: 1 }] }] }), user] }, "input[0].content[0].logprobs[0].top_logprobs[0].foo"],
    [{ input: [{ role: "assistant", content: [{ type: "refusal", refusal: "no", foo: 1 }] }, user] }, "input[0].content[0].foo"],
    [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png", foo: 1 }] }] }, "input[0].content[0].foo"],
    [{ input: [{ role: "user", content: [{ type: "input_file", file_data: "x", foo: 1 }] }] }, "input[0].content[0].foo"],
    [{ input: [user, { ...call, foo: 1 }, answered[0]] }, "input[1].foo"],
    [{ input: [user, { ...call, parsed_arguments: {} }, answered[0]] }, "input[1].parsed_arguments"],
    [{ input: [user, call, { ...answered[0], foo: 1 }] }, "input[2].foo"],
    [{ input: [user, call, { ...answered[0], output: [{ type: "input_text", text: "ok", foo: 1 }] }] }, "input[2].output[0].foo"],
    [{ input: [user, { ...custom, foo: 1 }, answered[1]] }, "input[1].foo"],
    [{ input: [user, custom, { ...answered[1], foo: 1 }] }, "input[2].foo"],
    [{ input: [{ type: "reasoning", summary: [], foo: 1 }, user] }, "input[0].foo"],
    [{ input: [{ type: "reasoning", summary: [{ type: "summary_text", text: "t", foo: 1 }] }, user] }, "input[0].summary[0].foo"],
    [{ input: [{ type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "t", foo: 1 }] }, user] }, "input[0].content[0].foo"],
    [{ input: [{ type: "item_reference", id: "msg_x", foo: 1 }] }, "input[0].foo"],
    [{ input: [{ role: "user", content: "hi", foo: 1 }] }, "input[0].foo"],
    // Before the conversation is looked up: it was a 404 for the id, the key dropped.
    [{ conversation: { id: "conv_nope", foo: 1 } }, "conversation.foo"],
    [{ tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "lookup", foo: 1 }] } }, "tool_choice.tools[0].foo"],
    [{ tools: TOOLS, tool_choice: { type: "allowed_tools", mode: "auto", foo: 1, tools: [{ type: "function", name: "lookup" }] } }, "tool_choice.foo"],
    [{ reasoning: { efort: "high" } }, "reasoning.efort"],
  ];
  for (const [extra, param] of cases) {
    const r = await post({ model: "m", input: "hi", max_output_tokens: 1, tools: TOOLS, ...extra });
    assert.equal(r.statusCode, 400, `${param}: ${r.body}`);
    assert.equal(r.json().error.param, param, r.body);
    assert.equal(r.json().error.code, "unknown_field", r.body);
  }
  // An annotation of a kind OpenAI has not got is a bad value, not a bad key.
  const footnote = await post({ model: "m", input: [said({ annotations: [{ type: "footnote" }] }), user] });
  assert.equal(footnote.json().error?.param, "input[0].content[0].annotations[0].type", footnote.body);
  // Nothing of such a request is stored: a conversation refused this way holds no item.
  const items = { role: "user", content: [{ type: "input_text", text: "x", foo: 1 }] };
  for (const [url, body, param] of [
    ["/v1/conversations", { items: [items] }, "items[0].content[0].foo"],
    ["/v1/conversations", { items: [{ ...call, foo: 1 }] }, "items[0].foo"],
  ] as const) {
    const r = await post(body, url);
    assert.equal(r.statusCode, 400, r.body);
    assert.deepEqual([r.json().error.param, r.json().error.code], [param, "unknown_field"], r.body);
  }
  const conv = (await post({}, "/v1/conversations")).json();
  const added = await post({ items: [{ type: "reasoning", summary: [{ type: "summary_text", text: "t", foo: 1 }] }] }, `/v1/conversations/${conv.id}/items`);
  assert.equal(added.statusCode, 400, added.body);
  assert.deepEqual([added.json().error.param, added.json().error.code], ["items[0].summary[0].foo", "unknown_field"]);
  const listed = await s.app.inject({ method: "GET", url: `/v1/conversations/${conv.id}/items` });
  assert.deepEqual(listed.json().data, []);
});

test("an unknown key of any length is named, a long one cut (the answer does not send a megabyte back)", async () => {
  const key = "k".repeat(100_000);
  const r = await post({ model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "x", [key]: 1 }] }] });
  assert.equal(r.statusCode, 400);
  assert.equal(r.json().error.code, "unknown_field");
  assert.equal(r.json().error.param, `input[0].content[0].${"k".repeat(64)}…`);
  assert.ok(r.body.length < 2_000, `${r.body.length} bytes`);
});

test("a content part in the wrong role is a 400 naming its type (OpenAI's rule), in input and in a conversation's items", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const user = { role: "user", content: "hi" };
  const part = (type: string) => (type === "refusal" ? { type, refusal: "no" } : type === "input_image" ? { type, image_url: "http://x/y.png" } : type === "input_file" ? { type, file_data: "x" } : { type, text: "x" });
  const wrong: Array<[string, string]> = [
    ["user", "output_text"],
    ["user", "refusal"],
    ["system", "output_text"],
    ["developer", "refusal"],
    ["assistant", "input_text"],
    ["assistant", "input_image"],
    ["assistant", "input_file"],
  ];
  for (const [role, type] of wrong) {
    const r = await post({ model: "m", max_output_tokens: 1, input: [{ role, content: [{ type: "input_text", text: "a" }, part(type)].slice(role === "assistant" ? 1 : 0) }, user] });
    const at = role === "assistant" ? 0 : 1;
    assert.equal(r.statusCode, 400, `${role} ${type}: ${r.body}`);
    assert.equal(r.json().error.param, `input[0].content[${at}].type`, r.body);
    assert.match(r.json().error.message, new RegExp(`'${type}'`));
    assert.match(r.json().error.message, new RegExp(`\\b${role === "assistant" ? "an" : "a"} ${role} message's parts`));
    const c = await post({ items: [{ type: "message", role, content: [part(type)] }] }, "/v1/conversations");
    assert.equal(c.statusCode, 400, c.body);
    assert.equal(c.json().error.param, "items[0].content[0].type", c.body);
  }
  // How clients replay history: an assistant's text as a string or as output_text (with annotations,
  // as LangChain writes it) and a refusal; a user's, system's and developer's input parts.
  const r = await post({
    model: "m",
    max_output_tokens: 1,
    store: false,
    input: [
      { role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
      { role: "system", content: "Be kind." },
      { role: "user", content: [{ type: "input_text", text: "hi" }] },
      { role: "assistant", content: "hello" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "x", annotations: [] }, { type: "refusal", refusal: "no" }] },
      user,
    ],
  });
  assert.equal(r.statusCode, 200, r.body);
});

test("a response's output goes back as the next input, whole (ids, statuses, sealed reasoning, annotations and logprobs), and so do listed items", async () => {
  const lp = { token: "x", bytes: [120], logprob: -0.5, top: [{ token: "x", bytes: [120], logprob: -0.5 }] };
  script = EVERYTHING.map((c) => (c.kind === "text" && c.channel !== "reasoning" ? { ...c, logprobs: [lp] } : c));
  const include = ["reasoning.encrypted_content", "message.output_text.logprobs"];
  const first = await post({ model: "m", input: "go", tools: TOOLS, include, reasoning: { summary: "auto" } });
  assert.equal(first.statusCode, 200, first.body);
  const output = first.json().output;
  assert.ok(output[0].encrypted_content && output[1].content[0].logprobs.length > 0, JSON.stringify(output));
  const outputs = [
    { type: "function_call_output", call_id: output[2].call_id, output: [{ type: "input_text", text: "found" }], name: "lookup", status: "completed" },
    { type: "custom_tool_call_output", call_id: output[3].call_id, output: "rows" },
  ];
  // An output_text part as OpenAI writes it when it cites, with OpenAI's other fields of an item.
  const cited = {
    id: "msg_cited",
    type: "message",
    role: "assistant",
    status: "completed",
    phase: "final_answer",
    content: [{ type: "output_text", text: "See.", annotations: [{ type: "url_citation", url: "https://example.com", start_index: 0, end_index: 3, title: "Ex" }], logprobs: [] }],
  };
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const next = await post({ model: "m", tools: TOOLS, include, input: [{ role: "user", content: "go" }, ...output, ...outputs, cited, { role: "user", content: "And?" }] });
  assert.equal(next.statusCode, 200, next.body);
  // The items as GET lists them (calls and outputs with a status, messages' parts spelt out) go back too.
  const listed = (await s.app.inject({ method: "GET", url: `/v1/responses/${next.json().id}/input_items?order=asc&limit=100&include[]=reasoning.encrypted_content` })).json().data;
  assert.ok(listed.some((i: any) => i.type === "custom_tool_call_output" && i.status === "completed"), JSON.stringify(listed));
  const again = await post({ model: "m", tools: TOOLS, store: false, input: listed });
  assert.equal(again.statusCode, 200, again.body);
  // And into a conversation, whose items go back the same way.
  const conv = await post({ items: listed.slice(0, 20) }, "/v1/conversations");
  assert.equal(conv.statusCode, 200, conv.body);
  const items = (await s.app.inject({ method: "GET", url: `/v1/conversations/${conv.json().id}/items?order=asc&limit=100` })).json().data;
  const fresh = (await post({}, "/v1/conversations")).json();
  const copied = await post({ items: items.slice(0, 20) }, `/v1/conversations/${fresh.id}/items`);
  assert.equal(copied.statusCode, 200, copied.body);
});

test("OpenAI's item fields that Plinth cannot honour are refused by name; an output naming another tool than its call is a 400", async () => {
  script = [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }];
  const user = { role: "user", content: "hi" };
  const call = { type: "function_call", call_id: "c1", name: "lookup", arguments: "{}" };
  const output = { type: "function_call_output", call_id: "c1", output: "ok" };
  const body = (input: unknown[]) => ({ model: "m", max_output_tokens: 1, store: false, tools: TOOLS, input });
  const refused: Array<[unknown[], string]> = [
    [[user, { ...call, caller: { type: "program", caller_id: "p1" } }, output], "input[1].caller"],
    [[user, call, { ...output, caller: { type: "program", caller_id: "p1" } }], "input[2].caller"],
  ];
  for (const [input, param] of refused) {
    const r = await post(body(input));
    assert.equal(r.statusCode, 400, r.body);
    assert.deepEqual([r.json().error.param, r.json().error.code], [param, "unsupported_parameter"], r.body);
  }
  const misnamed = await post(body([user, call, { ...output, name: "sql" }]));
  assert.equal(misnamed.statusCode, 400, misnamed.body);
  assert.equal(misnamed.json().error.param, "input[2].name");
  // A direct caller and the call's own name are what every call here has; a namespace, as a call of
  // a namespaced tool names it, is taken.
  const ok = await post(body([user, { ...call, caller: { type: "direct" }, namespace: null }, { ...output, name: "lookup", caller: { type: "direct" }, id: null }]));
  assert.equal(ok.statusCode, 200, ok.body);
  const namespaced = await post(body([user, { ...call, namespace: "crm" }, { ...output, namespace: "crm" }]));
  assert.equal(namespaced.statusCode, 200, namespaced.body);
});

test("input_tokens takes OpenAI's TokenCountsBody only: a create's other fields are a 400 naming them", async () => {
  const fields: Record<string, unknown> = {
    stream: true,
    stream_options: { include_obfuscation: true },
    max_output_tokens: 5,
    background: false,
    store: false,
    metadata: { a: "b" },
    temperature: 0.5,
    top_logprobs: 0,
    include: ["reasoning.encrypted_content"],
    user: "u",
    seed: 1,
  };
  for (const [key, value] of Object.entries(fields)) {
    const r = await post({ model: "m", input: "hi", [key]: value }, "/v1/responses/input_tokens");
    assert.equal(r.statusCode, 400, `${key}: ${r.body}`);
    assert.deepEqual([r.json().error.param, r.json().error.code], [key, "unknown_field"], r.body);
    assert.match(r.json().error.message, /input_tokens only counts the prompt/);
  }
  const counted = await post(
    {
      model: "m",
      input: "hi",
      instructions: "Be brief.",
      tools: TOOLS,
      tool_choice: "auto",
      parallel_tool_calls: true,
      text: { format: { type: "text" } },
      reasoning: { effort: "low" },
      truncation: "disabled",
    },
    "/v1/responses/input_tokens",
  );
  assert.equal(counted.statusCode, 200, counted.body);
  assert.ok(counted.json().input_tokens > 0, counted.body);
});

// A store that cannot be written for a while (a full disk: SQLite's own SQLITE_FULL, from a store
// whose growth is capped) while stored responses run. Each test has an app of its own, whose
// scripted model writes 40 pieces of text 10 ms apart, so the disk fills up while it runs.

const PIECES = Array.from({ length: 40 }, (_, i) => `${"w".repeat(150)}${i} `);
const slowApp = (giveUpAfterMs = 10_000) =>
  scriptedApp({
    id: "m",
    contextSize: 20_000,
    delayMs: 10,
    script: () => [...PIECES.map((text): EngineChunk => ({ kind: "text", text, tokens: 1 })), { kind: "end", reason: "stop" }],
    storeRetry: { firstDelayMs: 20, maxDelayMs: 50, giveUpAfterMs },
  });

/** Polls until `check` holds (a few seconds at most). */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The process warnings that name `id`, from now until `stop()`. */
function warningsAbout(): { of: (id: string) => string[]; stop: () => void } {
  const seen: string[] = [];
  const listener = (w: Error) => seen.push(w.message);
  process.on("warning", listener);
  return { of: (id) => seen.filter((m) => m.includes(id)), stop: () => process.off("warning", listener) };
}

test("a background run whose store fills up keeps its events and writes them all, in order, once there is room; one warning, not one per write", async () => {
  const a = await slowApp();
  const warnings = warningsAbout();
  try {
    const created = await a.app.inject({ method: "POST", url: "/v1/responses", payload: { model: "m", input: "go", background: true } });
    assert.equal(created.statusCode, 200, created.body);
    const id = created.json().id as string;
    const free = await fillStore(a.store);
    // Over while its end is not stored: polling says so, and a resumed stream ends (from memory).
    await until(async () => (await a.app.inject({ method: "GET", url: `/v1/responses/${id}` })).json().status === "completed", "the run to end");
    assert.equal((await a.store.responses.get("", id))?.status, "in_progress", "the store is behind while it is full");
    const live = sseEvents((await a.app.inject({ method: "GET", url: `/v1/responses/${id}?stream=true` })).body);
    assert.equal(live.at(-1)?.event, "response.completed");
    await new Promise((r) => setTimeout(r, 150));
    free();
    await until(async () => (await a.store.responses.get("", id))?.status === "completed", "the end to be stored");
    // Every event is in the store, numbered without a gap, and the text is whole.
    const events = sseEvents((await a.app.inject({ method: "GET", url: `/v1/responses/${id}?stream=true` })).body).map((e) => e.data as Record<string, any>);
    events.forEach((e, i) => assert.equal(e.sequence_number, i));
    assert.equal(events.at(-1)!.type, "response.completed");
    const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    assert.equal(text, PIECES.join(""));
    // Said once when the writes began to fail and once when they went through, however many tries.
    assert.equal(warnings.of(id).length, 2, warnings.of(id).join("\n"));
  } finally {
    warnings.stop();
    await a.app.close();
  }
});

test("a stored response whose end cannot be stored yet is still answered; it reads as it ended, and is stored once there is room", async () => {
  const a = await slowApp();
  const warnings = warningsAbout();
  try {
    const answer = a.app.inject({ method: "POST", url: "/v1/responses", payload: { model: "m", input: "go" } });
    let id = "";
    await until(async () => {
      id = (await a.store.responses.withStatus(["in_progress"])).find((r) => r.namespace === "")?.id ?? "";
      return id !== "";
    }, "the response to be stored at its start");
    const free = await fillStore(a.store);
    const r = await answer;
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().status, "completed");
    assert.equal(r.json().output[0].content[0].text, PIECES.join(""));
    assert.equal((await a.store.responses.get("", id))?.status, "in_progress");
    assert.equal((await a.app.inject({ method: "GET", url: `/v1/responses/${id}` })).json().status, "completed");
    free();
    await until(async () => (await a.store.responses.get("", id))?.status === "completed", "the end to be stored");
    const next = await a.app.inject({ method: "POST", url: "/v1/responses", payload: { model: "m", input: "and?", previous_response_id: id } });
    assert.equal(next.statusCode, 200, next.body);
    assert.ok(warnings.of(id).length <= 2, warnings.of(id).join("\n"));
  } finally {
    warnings.stop();
    await a.app.close();
  }
});

test("a run whose end can never be stored gives up after its time: the store's state is read, streams end, and the next start fails it; a resumed stream then ends with error and response.failed", async () => {
  const a = await slowApp(300);
  const warnings = warningsAbout();
  try {
    const created = await a.app.inject({ method: "POST", url: "/v1/responses", payload: { model: "m", input: "go", background: true } });
    const id = created.json().id as string;
    const free = await fillStore(a.store);
    await until(async () => warnings.of(id).some((w) => /given up/.test(w)), "the writes to be given up");
    // The run is over: what the store has is read, and a resumed stream ends at once.
    const stored = (await a.app.inject({ method: "GET", url: `/v1/responses/${id}` })).json();
    assert.ok(stored.status === "queued" || stored.status === "in_progress", stored.status);
    const resumed = await a.app.inject({ method: "GET", url: `/v1/responses/${id}?stream=true` });
    assert.equal(resumed.statusCode, 200);
    assert.equal((await a.app.inject({ method: "POST", url: `/v1/responses/${id}/cancel` })).statusCode, 200);
    // A start on this store marks it failed; its stream's end is then made for any resume, even
    // from past the events that were stored (a client had them from memory).
    free();
    assert.equal(await failAbandonedRuns({ store: a.store, runs: new BackgroundRuns() } as unknown as ResponsesDeps), 1);
    assert.equal((await a.app.inject({ method: "GET", url: `/v1/responses/${id}` })).json().status, "failed");
    const ending = sseEvents((await a.app.inject({ method: "GET", url: `/v1/responses/${id}?stream=true&starting_after=1000` })).body).map((e) => e.data as Record<string, any>);
    assert.deepEqual(ending.map((e) => [e.type, e.sequence_number]), [["error", 1001], ["response.failed", 1002]]);
    assert.equal(ending[1].response.status, "failed");
  } finally {
    warnings.stop();
    await a.app.close();
  }
});

test("the output read back from a run's stream events, cut anywhere, is the output the run's own failure would have given", () => {
  // Reasoning (summarised), text, a function call and a custom tool call, each opened, grown and
  // closed: whatever prefix of the events the store holds, the items rebuilt from it (cut ones
  // incomplete) equal what ResponseBuilder.fail makes of the same run at that point.
  const run: GenerationEvent[] = [
    { type: "part-start", choice: 0, part: "reasoning" },
    { type: "reasoning", choice: 0, text: "hm" },
    { type: "reasoning", choice: 0, text: "m." },
    { type: "part-end", choice: 0, part: "reasoning" },
    { type: "part-start", choice: 0, part: "text" },
    { type: "text", choice: 0, text: "Let me " },
    { type: "text", choice: 0, text: "check." },
    { type: "part-end", choice: 0, part: "text" },
    { type: "tool-call", choice: 0, index: 0, id: "call_1", name: "lookup" },
    { type: "tool-call-arguments", choice: 0, index: 0, text: '{"q":' },
    { type: "tool-call-arguments", choice: 0, index: 0, text: '"x"}' },
    { type: "part-end", choice: 0, part: "tool-call", index: 0 },
    { type: "tool-call", choice: 0, index: 1, id: "call_2", name: "sql" },
    { type: "tool-call-arguments", choice: 0, index: 1, text: '{"input": "SELECT' },
    { type: "tool-call-arguments", choice: 0, index: 1, text: ' 1"}' },
    { type: "part-end", choice: 0, part: "tool-call", index: 1 },
  ];
  const failedAfter = (cut: number) => {
    const events: ResponseEvent[] = [];
    const builder = new ResponseBuilder(
      { id: "resp_1", createdAt: 0, model: "m", echo: {} },
      { logprobs: false, summary: true, customTools: new Set(["sql"]) },
      (e) => events.push(e),
    );
    builder.start("in_progress");
    for (const ev of run.slice(0, cut)) builder.push(ev);
    const stored = [...events];
    builder.fail("server_error", "stopped");
    return { stored, output: builder.snapshot().output };
  };
  for (let cut = 0; cut <= run.length; cut++) {
    const { stored, output } = failedAfter(cut);
    assert.deepEqual(outputFromEvents(stored, true), output, `cut after ${cut} generation events`);
    // Events are stored in batches, so the store may end inside the events that close an item (its
    // text's done, a summary): until its output_item.done, the item reads as cut.
    const closed = run[cut - 1];
    if (cut === 0 || closed.type !== "part-end") continue;
    // (Another run of the same events: its items have other ids.)
    const withoutIds = (items: unknown) => (items as Array<Record<string, unknown>>).map(({ id: _, ...item }) => item);
    const before = failedAfter(cut - 1);
    for (let k = before.stored.length; k < stored.length; k++)
      assert.deepEqual(withoutIds(outputFromEvents(stored.slice(0, k), true)), withoutIds(before.output), `cut inside the close of ${closed.part}, after ${stored[k - 1].type}`);
  }
});

test("an item id no item route could address is a 400 naming it wherever an id is taken; the ids clients send are taken, and read and deleted alone", async () => {
  script = [
    { kind: "text", text: "ok", tokens: 1 },
    { kind: "end", reason: "stop" },
  ];
  // Too long for a path segment once percent-encoded (the routes answer a longer one 414), steps
  // of a path, whitespace and control characters: stored, such an item could never be addressed.
  const unaddressable = ["msg_" + "a".repeat(600), "é".repeat(84), ".", "..", "a b", "a\u0000b", "a\tb", "\u00a0", "msg_1\n"];
  const c = (await post({}, "/v1/conversations")).json();
  for (const id of unaddressable) {
    const shown = JSON.stringify(id).slice(0, 24);
    const created = await post({ items: [{ type: "message", role: "user", content: "x", id }] }, "/v1/conversations");
    assert.equal(created.statusCode, 400, `${shown}: ${created.body}`);
    assert.equal(created.json().error.param, "items[0].id");
    const added = await post({ items: [{ role: "user", content: "x" }, { type: "function_call", call_id: "c1", name: "f", arguments: "{}", id }] }, `/v1/conversations/${c.id}/items`);
    assert.equal(added.statusCode, 400, `${shown}: ${added.body}`);
    assert.equal(added.json().error.param, "items[1].id");
    const turn = await post({
      model: "m",
      conversation: c.id,
      input: [
        { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: "x", id },
      ],
    });
    assert.equal(turn.statusCode, 400, `${shown}: ${turn.body}`);
    assert.equal(turn.json().error.param, "input[1].id");
  }
  // Nothing was stored.
  assert.deepEqual((await s.app.inject({ method: "GET", url: `/v1/conversations/${c.id}/items` })).json().data, []);
  // Real clients' ids: OpenAI's prefixes, the Agents SDK's placeholder, UUIDs, LangChain's run ids,
  // and ids that only need percent-encoding (up to the segment's 500 characters).
  const ids = [
    "msg_abc",
    "fc_1",
    "rs_1",
    "__fake_id__",
    "0b0e9c1f-8ab5-4a3a-9d1c-7f9b0c7e2a11",
    "run-0b0e9c1f-8ab5-4a3a-9d1c-7f9b0c7e2a11",
    "lc_run--0b0e9c1f-8ab5-4a3a-9d1c-7f9b0c7e2a11",
    "a/b?c#d%",
    "...",
    "msg_" + "a".repeat(496),
    "é".repeat(83),
  ];
  const taken = await post({ items: ids.map((id) => ({ type: "message", role: "user", content: "x", id })) }, "/v1/conversations");
  assert.equal(taken.statusCode, 200, taken.body);
  for (const id of ids) {
    const url = `/v1/conversations/${taken.json().id}/items/${encodeURIComponent(id)}`;
    const got = await s.app.inject({ method: "GET", url });
    assert.equal(got.statusCode, 200, `${id.slice(0, 24)}: ${got.body}`);
    assert.equal(got.json().id, id);
    assert.equal((await s.app.inject({ method: "DELETE", url })).statusCode, 200);
  }
  const turn = await post({ model: "m", input: [{ type: "message", role: "user", content: "x", id: "lc_run--1" }] });
  assert.equal(turn.statusCode, 200, turn.body);
});

test("a tool result that answers no earlier call is named by its own field: its input position, or the conversation's item whose call was deleted", async () => {
  script = [
    { kind: "text", text: "ok", tokens: 1 },
    { kind: "end", reason: "stop" },
  ];
  // Instructions lead the prompt's messages; the refusal counts input items, not messages.
  const stray = await post({ model: "m", instructions: "be brief", input: [{ role: "user", content: "hi" }, { type: "function_call_output", call_id: "c9", output: "x" }] });
  assert.equal(stray.statusCode, 400, stray.body);
  assert.equal(stray.json().error.param, "input[1].call_id");
  assert.equal(stray.json().error.message, "input[1] is a tool result whose call_id 'c9' matches no earlier tool call.");
  // Before its call is not after it.
  const early = await post({
    model: "m",
    input: [
      { type: "function_call_output", call_id: "c1", output: "x" },
      { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
    ],
  });
  assert.equal(early.statusCode, 400, early.body);
  assert.equal(early.json().error.param, "input[0].call_id");
  const c = (
    await post(
      {
        items: [
          { role: "user", content: "hi" },
          { type: "function_call", call_id: "c1", name: "f", arguments: "{}", id: "fc_1" },
          { type: "function_call_output", call_id: "c1", output: "ok", id: "fco_1" },
        ],
      },
      "/v1/conversations",
    )
  ).json();
  assert.equal((await post({ model: "m", conversation: c.id, input: "go" })).statusCode, 200);
  assert.equal((await s.app.inject({ method: "DELETE", url: `/v1/conversations/${c.id}/items/fc_1` })).statusCode, 200);
  const orphan = await post({ model: "m", conversation: c.id, input: "go on" });
  assert.equal(orphan.statusCode, 400, orphan.body);
  assert.equal(orphan.json().error.param, "conversation");
  assert.equal(orphan.json().error.message, "The item 'fco_1' of the conversation is a tool result whose call_id 'c1' matches no earlier tool call: the item of its call is not there.");
});

test("limit on the list routes is a plain decimal integer: what Number() would read otherwise is a 400 naming it", async () => {
  script = [
    { kind: "text", text: "ok", tokens: 1 },
    { kind: "end", reason: "stop" },
  ];
  const r = (await post({ model: "m", input: "hi" })).json();
  const c = (await post({ items: [{ role: "user", content: "hi" }] }, "/v1/conversations")).json();
  for (const list of [`/v1/responses/${r.id}/input_items`, `/v1/conversations/${c.id}/items`, "/v1/chat/completions"]) {
    for (const limit of ["0x10", "1e1", "%20%207", "0b11", "", "5.0", "+5", "Infinity"]) {
      const got = await s.app.inject({ method: "GET", url: `${list}?limit=${limit}` });
      assert.equal(got.statusCode, 400, `${list}?limit=${limit}: ${got.body}`);
      assert.equal(got.json().error.param, "limit");
      assert.equal(got.json().error.message, "Invalid 'limit': must be an integer.", `${list}?limit=${limit}`);
    }
    for (const [limit, status] of [["0", 400], ["101", 400], ["1", 200], ["100", 200], ["07", 200]] as const)
      assert.equal((await s.app.inject({ method: "GET", url: `${list}?limit=${limit}` })).statusCode, status, `${list}?limit=${limit}`);
  }
});

test("a reasoning summary on a model that does not reason is refused naming the field sent (summary, or its older name generate_summary)", async () => {
  const plain = await scriptedApp({ id: "plain" });
  try {
    for (const field of ["summary", "generate_summary"]) {
      const r = await plain.app.inject({ method: "POST", url: "/v1/responses", payload: { model: "plain", input: "x", reasoning: { [field]: "auto" } } });
      assert.equal(r.statusCode, 400, r.body);
      assert.equal(r.json().error.param, `reasoning.${field}`);
      assert.match(r.json().error.message, new RegExp(`^'reasoning\\.${field}'`));
    }
  } finally {
    await plain.app.close();
  }
});

test("an input image's unknown detail is a 400 naming it, code invalid_value (OpenAI's for a value outside an enum)", async () => {
  const r = await post({ model: "m", input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png", detail: "ultra" }] }] });
  assert.equal(r.statusCode, 400, r.body);
  assert.equal(r.json().error.param, "input[0].content[0].detail", r.body);
  assert.equal(r.json().error.code, "invalid_value", r.body);
});

test("a refused service_tier carries a code: invalid_value for no tier of OpenAI's, unsupported_parameter for one not offered here", async () => {
  for (const [tier, code] of [["gold", "invalid_value"], ["priority", "unsupported_parameter"]]) {
    const r = await post({ model: "m", input: "hi", service_tier: tier });
    assert.equal(r.statusCode, 400, r.body);
    assert.equal(r.json().error.param, "service_tier", r.body);
    assert.equal(r.json().error.code, code, r.body);
  }
});
