import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import OpenAI from "openai";
import { dbx, sseData, waitForEndpoint } from "../helpers/databricks.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// The Databricks dialect's checklist (SPEC 4.2): endpoints, usage and Chat Completions, against the
// real server. "tiny" and "think" are pay-per-token endpoints (the models the server started with);
// "pt" is a provisioned-throughput endpoint created over tiny.
let s: TestServer;
const user = (content: string) => ({ role: "user", content });
const chat = (name: string, body: Record<string, unknown>) => dbx(s, "POST", `/serving-endpoints/${name}/invocations`, body);
const hi = { messages: [user("hello there")], max_tokens: 4 };

/** A 400 in Databricks' envelope whose message names `word`. */
function refused(r: { status: number; json: any; text: string }, word: string) {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error_code, "INVALID_PARAMETER_VALUE", r.text);
  assert.ok(r.json.message.includes(word), `message should name ${word}: ${r.json.message}`);
}

// The strings are bounded: the fixtures sample at random, and an unbounded string argument can run
// past max_tokens, leaving the arguments cut short (finish_reason "length").
const TOOL = (name: string, properties = 1) => ({
  type: "function",
  function: {
    name,
    description: `tool ${name}`,
    parameters: { type: "object", properties: Object.fromEntries(Array.from({ length: properties }, (_, i) => [`p${i}`, { type: "string", maxLength: 16 }])) },
  },
});

before(async () => {
  s = await startTestServer({}, { think: true });
  const r = await dbx(s, "POST", "/api/2.0/serving-endpoints", { name: "pt", config: { served_entities: [{ name: "tiny-pt", entity_name: "tiny" }] } });
  assert.equal(r.status, 200, r.text);
  await waitForEndpoint(s, "pt");
});
after(() => s.close());

test("001-01 chat, completions and embeddings requests are served at /serving-endpoints/{name}/invocations; the body picks the schema", async () => {
  const c = await chat("tiny", hi);
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json.object, "chat.completion");
  const p = await chat("tiny", { prompt: "once", max_tokens: 3 });
  assert.equal(p.status, 200, p.text);
  assert.equal(p.json.object, "text_completion");
});

test("001-02 a request without model succeeds: the endpoint in the path picks the model", async () => {
  const r = await chat("tiny", hi);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.model, "tiny");
  assert.equal(r.headers.get("served-model-name"), "tiny");
});

test("001-03 pay-per-token and provisioned endpoints take the same body, except n (PT only), error_behavior (PPT only)", async () => {
  for (const name of ["tiny", "pt"]) assert.equal((await chat(name, hi)).status, 200);
  refused(await chat("tiny", { ...hi, n: 2 }), "n");
  assert.equal((await chat("pt", { ...hi, n: 2 })).status, 200);
  assert.equal((await chat("tiny", { prompt: "a", max_tokens: 2, error_behavior: "error" })).status, 200);
  refused(await chat("pt", { prompt: "a", max_tokens: 2, error_behavior: "error" }), "error_behavior");
});

test("001-04 chat responses carry usage with prompt_tokens, completion_tokens and total_tokens", async () => {
  // Greedy: sampled at the dialect's default temperature (1.0) the model may end before max_tokens
  // (CI once saw it end after 2 of 4); greedy it never ends by itself.
  const r = await chat("tiny", { ...hi, temperature: 0 });
  const u = r.json.usage;
  assert.equal(u.completion_tokens, 4, JSON.stringify(u));
  assert.ok(u.prompt_tokens > 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(u.prompt_tokens_details, undefined, "no *_details objects");
});

test("001-06 usage.reasoning_tokens appears only for reasoning models", async () => {
  const plain = await chat("tiny", hi);
  assert.equal("reasoning_tokens" in plain.json.usage, false);
  // Greedy: sampled, the model may end its turn at the first token, before any thinking.
  const thinking = await chat("think", { messages: [user("why?")], reasoning_effort: "low", max_tokens: 8, temperature: 0 });
  assert.equal(thinking.status, 200, thinking.text);
  assert.equal(typeof thinking.json.usage.reasoning_tokens, "number");
  assert.ok(thinking.json.usage.reasoning_tokens > 0);
});

test("001-07 prompt_tokens counts the prompt template, so it exceeds the user text's own tokens", async () => {
  const text = "the quick brown fox";
  const raw = await dbx(s, "POST", "/tokenize", { model: "tiny", prompt: text, add_special_tokens: false });
  const r = await chat("tiny", { messages: [user(text)], max_tokens: 1 });
  assert.ok(r.json.usage.prompt_tokens > raw.json.tokens.length, `${r.json.usage.prompt_tokens} vs ${raw.json.tokens.length}`);
});

test("001-59 a chat request without messages is rejected", async () => {
  refused(await dbx(s, "POST", "/serving-endpoints/chat/completions", { model: "tiny" }), "messages");
  // A model of the wrong type is there, only not a name: the answer says so rather than "required".
  const typed = await dbx(s, "POST", "/serving-endpoints/chat/completions", { model: 7, messages: [user("hi")] });
  refused(typed, "expected a string");
  assert.ok(!typed.json.message.includes("required"), typed.json.message);
  refused(await dbx(s, "POST", "/serving-endpoints/chat/completions", { messages: [user("hi")] }), "required");
});

test("001-60 stream pinned: omitted gives one JSON object, true gives an event stream", async () => {
  const json = await chat("tiny", hi);
  assert.equal(json.headers.get("content-type")?.startsWith("application/json"), true);
  const sse = await chat("tiny", { ...hi, stream: true });
  assert.equal(sse.headers.get("content-type")?.startsWith("text/event-stream"), true);
});

test("001-61 temperature [0,2] and top_p (0,1]; omitted they are 1.0 (the same answer as sending 1.0)", async () => {
  refused(await chat("tiny", { ...hi, temperature: 2.5 }), "temperature");
  refused(await chat("tiny", { ...hi, top_p: 0 }), "top_p");
  assert.equal((await chat("tiny", { ...hi, temperature: 0, top_p: 1 })).status, 200);
  assert.equal((await chat("tiny", { ...hi, temperature: 2, top_p: 0.5 })).status, 200);
});

test("001-62 top_k: 1 is deterministic, null means no limit, 0 is rejected", async () => {
  const a = await chat("tiny", { messages: [user("tell me")], max_tokens: 12, temperature: 1.5, top_k: 1 });
  const b = await chat("tiny", { messages: [user("tell me")], max_tokens: 12, temperature: 1.5, top_k: 1 });
  assert.equal(a.json.choices[0].message.content, b.json.choices[0].message.content);
  const texts = new Set<string>();
  for (let i = 0; i < 4; i++) texts.add((await chat("tiny", { messages: [user("tell me")], max_tokens: 12, temperature: 1.5, top_k: null })).json.choices[0].message.content);
  assert.ok(texts.size > 1, "without top_k, sampling at temperature 1.5 varies");
  refused(await chat("tiny", { ...hi, top_k: 0 }), "top_k");
});

test("001-63 stop accepts a string and a list (default: none)", async () => {
  const free = await chat("tiny", { messages: [user("go")], max_tokens: 20, top_k: 1 });
  const text: string = free.json.choices[0].message.content;
  const cut = text.slice(3, 5);
  const one = await chat("tiny", { messages: [user("go")], max_tokens: 20, top_k: 1, stop: cut });
  assert.equal(one.json.choices[0].finish_reason, "stop");
  assert.ok(!one.json.choices[0].message.content.includes(cut));
  const list = await chat("tiny", { messages: [user("go")], max_tokens: 20, top_k: 1, stop: [cut, "zzzz"] });
  assert.equal(list.json.choices[0].message.content, one.json.choices[0].message.content);
});

test("001-64 max_tokens: null is no limit; 0 is rejected", async () => {
  refused(await chat("tiny", { ...hi, max_tokens: 0 }), "max_tokens");
  const r = await chat("tiny", { messages: [user("hi")], max_tokens: null, stop: [" ", "e", "a", "o", "i", "t"] });
  assert.equal(r.status, 200, r.text);
});

test("001-65 n: 3 on a provisioned endpoint returns three choices, indexes 0-2", async () => {
  const r = await chat("pt", { ...hi, n: 3 });
  assert.deepEqual(r.json.choices.map((c: any) => c.index), [0, 1, 2]);
  assert.equal(r.json.model, "tiny-pt");
});

test("001-66 n > 1 on a pay-per-token endpoint is rejected", async () => {
  refused(await chat("tiny", { ...hi, n: 3 }), "n");
});

test("001-67 tool_choice omitted: auto with tools (the schema is sent), none without (plain answer)", async () => {
  const plain = await chat("tiny", hi);
  assert.equal(plain.json.choices[0].message.tool_calls, undefined);
  // "none" without tools says the same as leaving it out (as the Responses route already took it).
  const none = await chat("tiny", { ...hi, tool_choice: "none" });
  assert.equal(none.status, 200, none.text);
  assert.equal(none.json.choices[0].message.tool_calls, undefined);
  // So does "auto" over no tools (nothing to call); "required" needs a tool.
  const auto = await chat("tiny", { ...hi, tool_choice: "auto", tools: [] });
  assert.equal(auto.status, 200, auto.text);
  assert.equal(auto.json.choices[0].message.tool_calls, undefined);
  refused(await chat("tiny", { ...hi, tool_choice: "required" }), "tool_choice");
  const withTools = await chat("think", { messages: [user("weather?")], tools: [TOOL("weather")], reasoning_effort: "low", max_tokens: 700 });
  assert.equal(withTools.status, 200, withTools.text);
  assert.ok(["stop", "length", "tool_calls"].includes(withTools.json.choices[0].finish_reason));
});

test("001-68 tool_choice required returns at least one tool call", async () => {
  const r = await chat("think", { messages: [user("weather?")], tools: [TOOL("weather")], tool_choice: "required", reasoning_effort: "low", max_tokens: 900 });
  assert.equal(r.status, 200, r.text);
  const calls = r.json.choices[0].message.tool_calls;
  assert.ok(calls.length >= 1, r.text);
  assert.equal(calls[0].function.name, "weather");
});

test("the tool loop: a thinking model's call turn goes back as it came (reasoning parts and all), and so does LangChain's empty content", async () => {
  const tools = [TOOL("weather")];
  // The random fixture's arguments can hold one of its markers (`<think>`, `<tool_call>`), which a
  // call given back may not (a 400 naming the arguments: the README's "Client text never becomes
  // control tokens"); this route takes no seed, so such a draw is asked again.
  let first = await chat("think", { messages: [user("weather?")], tools, tool_choice: "required", reasoning_effort: "low", max_tokens: 900 });
  for (let i = 0; i < 4 && /<\/?(think|tool_call)>/.test(JSON.stringify(first.json?.choices?.[0]?.message?.tool_calls ?? null)); i++)
    first = await chat("think", { messages: [user("weather?")], tools, tool_choice: "required", reasoning_effort: "low", max_tokens: 900 });
  assert.equal(first.status, 200, first.text);
  const message = first.json.choices[0].message;
  assert.ok(message.tool_calls?.length >= 1, first.text);
  // Every call gets its answer (the model may have made several: parallel calls are on by default).
  const answers = message.tool_calls.map((c: { id: string }) => ({ role: "tool", tool_call_id: c.id, content: "sunny" }));
  const second = await chat("think", { messages: [user("weather?"), message, ...answers], tools, reasoning_effort: "low", max_tokens: 4 });
  assert.equal(second.status, 200, second.text);
  const call = { id: "call_1", type: "function", function: { name: "weather", arguments: '{"p0":"x"}' } };
  const echoed = await chat("tiny", { messages: [user("weather?"), { role: "assistant", content: "", tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "sunny" }], tools, max_tokens: 4 });
  assert.equal(echoed.status, 200, echoed.text);
  // Text beside the calls is still refused, as the reference says.
  refused(await chat("tiny", { messages: [user("weather?"), { role: "assistant", content: "let me see", tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "sunny" }], tools, max_tokens: 4 }), "content");
});

test("the openai SDK's helpers' additions to a message it hands back (refusal null, parsed, parsed_arguments) go back with it; a refusal with text is still refused", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  const final = await client.chat.completions.stream({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3 }).finalChatCompletion();
  const message = final.choices[0].message;
  assert.equal(message.refusal, null);
  assert.ok("parsed" in message, JSON.stringify(message));
  const next = await chat("tiny", { messages: [user("hi"), message, user("and then?")], max_tokens: 3 });
  assert.equal(next.status, 200, next.text);
  const call = { id: "call_1", type: "function", function: { name: "weather", arguments: '{"p0":"x"}', parsed_arguments: { p0: "x" } } };
  const sent = { role: "assistant", content: null, refusal: null, parsed: null, tool_calls: [call] };
  const withCall = await chat("tiny", { messages: [user("weather?"), sent, { role: "tool", tool_call_id: "call_1", content: "sunny" }], tools: [TOOL("weather")], max_tokens: 3 });
  assert.equal(withCall.status, 200, withCall.text);
  refused(await chat("tiny", { messages: [user("hi"), { role: "assistant", content: "no", refusal: "I will not" }, user("why?")], max_tokens: 3 }), "refusal");
});

test("the OpenAI SDK pointed at /serving-endpoints sees an error's code and message; the control plane keeps the plain envelope", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  const err = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], top_p: 7 }).catch((e: unknown) => e);
  assert.ok(err instanceof OpenAI.BadRequestError, String(err));
  assert.equal(err.code, "INVALID_PARAMETER_VALUE");
  assert.match(err.message, /top_p/);
  const missing = await client.chat.completions.create({ model: "no-such-endpoint", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
  assert.ok(missing instanceof OpenAI.NotFoundError, String(missing));
  assert.match(missing.message, /no-such-endpoint/);
  const raw = await chat("tiny", { ...hi, top_p: 7 });
  assert.deepEqual(raw.json.error, { code: raw.json.error_code, message: raw.json.message });
  const control = await dbx(s, "GET", "/api/2.0/serving-endpoints/no-such-endpoint");
  assert.equal(control.status, 404, control.text);
  assert.deepEqual(Object.keys(control.json).sort(), ["error_code", "message"]);
});

test("stream_options, which OpenAI clients send when they stream, is accepted with stream: true on chat and completions (usage is on the last chunk either way)", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused" });
  const stream = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3, stream: true, stream_options: { include_usage: true } });
  let usage: unknown;
  for await (const chunk of stream) usage = chunk.usage ?? usage;
  assert.equal((usage as { completion_tokens: number }).completion_tokens, 3);
  const completion = await dbx(s, "POST", "/serving-endpoints/completions", { model: "tiny", prompt: "once", max_tokens: 2, stream: true, stream_options: { include_usage: false } });
  assert.equal(completion.status, 200, completion.text);
  refused(await chat("tiny", { ...hi, stream_options: { include_usage: true } }), "stream_options");
  refused(await chat("tiny", { prompt: "once", max_tokens: 2, stream_options: { include_usage: true } }), "stream_options");
  refused(await chat("tiny", { ...hi, stream: true, stream_options: { include_obfuscation: true } }), "include_obfuscation");
});

test("001-69 tool_choice none with tools returns an answer without tool calls", async () => {
  const r = await chat("think", { messages: [user("weather?")], tools: [TOOL("weather")], tool_choice: "none", reasoning_effort: "low", max_tokens: 20 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.tool_calls, undefined);
});

test("001-70 tools: 32 functions are accepted, 33 are rejected", async () => {
  const tools = (k: number) => Array.from({ length: k }, (_, i) => TOOL(`f${i}`));
  const ok = await chat("tiny", { ...hi, tools: tools(32), tool_choice: "none" });
  assert.equal(ok.status, 200, ok.text);
  refused(await chat("tiny", { ...hi, tools: tools(33) }), "tools");
});

test("001-71 a chat tool whose type is not function is rejected", async () => {
  refused(await chat("tiny", { ...hi, tools: [{ type: "custom", name: "x", description: "d" }] }), "tools[0].type");
});

test("001-72 response_format takes text, json_object and json_schema; json_schema without its object is rejected", async () => {
  for (const rf of [{ type: "text" }, { type: "json_object" }]) assert.equal((await chat("tiny", { ...hi, response_format: rf })).status, 200);
  refused(await chat("tiny", { ...hi, response_format: { type: "json_schema" } }), "json_schema");
});

test("001-73 a json_schema response validates against the schema; a missing name or schema is rejected", async () => {
  const schema = { type: "object", properties: { c: { enum: ["yes", "no"] } }, required: ["c"], additionalProperties: false };
  const r = await chat("tiny", { messages: [user("answer")], max_tokens: 40, response_format: { type: "json_schema", json_schema: { name: "a", schema, strict: true } } });
  assert.equal(r.status, 200, r.text);
  const out = JSON.parse(r.json.choices[0].message.content);
  assert.ok(["yes", "no"].includes(out.c));
  assert.deepEqual(Object.keys(out), ["c"]);
  refused(await chat("tiny", { ...hi, response_format: { type: "json_schema", json_schema: { schema } } }), "name");
  refused(await chat("tiny", { ...hi, response_format: { type: "json_schema", json_schema: { name: "a" } } }), "schema");
});

test("001-74 logprobs default false; top_logprobs 0-20 needs logprobs: true", async () => {
  const plain = await chat("tiny", hi);
  assert.equal(plain.json.choices[0].logprobs, undefined);
  // Greedy, so the answer runs to its 4 tokens (sampled, it may end sooner, with fewer entries).
  const lp = await chat("tiny", { ...hi, temperature: 0, logprobs: true, top_logprobs: 2 });
  assert.equal(lp.json.choices[0].logprobs.content.length, 4);
  assert.equal(lp.json.choices[0].logprobs.content[0].top_logprobs.length, 2);
  // Databricks' choice logprobs are the content list alone (no OpenAI `refusal`).
  assert.deepEqual(Object.keys(lp.json.choices[0].logprobs), ["content"]);
  refused(await chat("tiny", { ...hi, top_logprobs: 2 }), "top_logprobs");
  refused(await chat("tiny", { ...hi, logprobs: true, top_logprobs: 21 }), "top_logprobs");
});

test("001-75 reasoning_effort low/medium/high on a reasoning model; omitted it is medium (the medium thinking budget)", async () => {
  for (const effort of ["low", "medium", "high"]) {
    const r = await chat("think", { messages: [user("why?")], reasoning_effort: effort, max_tokens: 6 });
    assert.equal(r.status, 200, r.text);
  }
  // Medium allows 2048 thinking tokens and low 512: with room for 600, low stops thinking at 512 and answers.
  const low = await chat("think", { messages: [user("why?")], reasoning_effort: "low", max_tokens: 600, temperature: 0 });
  const omitted = await chat("think", { messages: [user("why?")], max_tokens: 600, temperature: 0 });
  const medium = await chat("think", { messages: [user("why?")], reasoning_effort: "medium", max_tokens: 600, temperature: 0 });
  assert.deepEqual(omitted.json.usage, medium.json.usage);
  assert.ok(low.json.usage.reasoning_tokens < medium.json.usage.reasoning_tokens, `${JSON.stringify(low.json.usage)} vs ${JSON.stringify(medium.json.usage)}`);
  refused(await chat("tiny", { ...hi, reasoning_effort: "low" }), "reasoning_effort");
});

test("001-76 a message role outside system/user/assistant/tool (developer) is rejected", async () => {
  refused(await chat("tiny", { messages: [{ role: "developer", content: "x" }, user("hi")] }), "role");
});

test("001-77 a system message that is not first is rejected", async () => {
  refused(await chat("tiny", { messages: [user("hi"), { role: "system", content: "be brief" }] }), "system");
});

test("001-78 two system messages are rejected", async () => {
  refused(await chat("tiny", { messages: [{ role: "system", content: "a" }, { role: "system", content: "b" }, user("hi")] }), "system");
});

test("001-79 a leading system message is the only system prompt: the prompt is exactly the template of these messages", async () => {
  const messages = [{ role: "system", content: "you are terse" }, user("hi")];
  const tok = await dbx(s, "POST", "/tokenize", { model: "tiny", messages, add_generation_prompt: true });
  const r = await chat("tiny", { messages, max_tokens: 1 });
  assert.equal(r.json.usage.prompt_tokens, tok.json.tokens.length);
});

const CALL = { id: "call_1", type: "function", function: { name: "weather", arguments: { city: "Paris" } } };

test("001-80 an assistant message with tool_calls and content is rejected; without content it is accepted", async () => {
  const tail = [{ role: "tool", tool_call_id: "call_1", content: "sunny" }];
  refused(await chat("tiny", { messages: [user("w?"), { role: "assistant", content: "x", tool_calls: [CALL] }, ...tail], max_tokens: 2 }), "content");
  const ok = await chat("tiny", { messages: [user("w?"), { role: "assistant", tool_calls: [CALL] }, ...tail], max_tokens: 2, tools: [TOOL("weather")] });
  assert.equal(ok.status, 200, ok.text);
});

test("001-81 a tool message answers an earlier call id; tool_call_id on another role is rejected", async () => {
  refused(await chat("tiny", { messages: [{ role: "user", content: "x", tool_call_id: "call_1" }] }), "tool_call_id");
  refused(await chat("tiny", { messages: [user("w?"), { role: "assistant", tool_calls: [CALL] }, { role: "tool", tool_call_id: "call_9", content: "s" }] }), "tool_call_id");
});

test("001-82 array content: text items are read by every served model; what it cannot read (images) is refused", async () => {
  const r = await chat("tiny", { messages: [{ role: "user", content: [{ type: "text", text: "hello" }, { type: "text", text: "there" }] }], max_tokens: 2 });
  assert.equal(r.status, 200, r.text);
  refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "aGVsbG8=" } }] }] }), "image");
});

test("001-83 a text item with char_location citations is accepted", async () => {
  const citations = [{ type: "char_location", cited_text: "x", document_index: 0, start_char_index: 0, end_char_index: 1 }];
  const r = await chat("tiny", { messages: [{ role: "user", content: [{ type: "text", text: "hello", citations }] }], max_tokens: 2 });
  assert.equal(r.status, 200, r.text);
});

test("001-84 cache_control (Databricks-hosted Claude only) is refused by name on every served model", async () => {
  refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "text", text: "hi", cache_control: "ephemeral" }] }] }), "cache_control");
  refused(await chat("tiny", { messages: [user("w?"), { role: "assistant", tool_calls: [{ ...CALL, cache_control: "ephemeral" }] }] }), "cache_control");
});

test("001-85 image content needs a vision model: the served text model refuses it, base64 or URL", async () => {
  for (const url of ["iVBORw0KGgo=", "https://example.com/a.png"])
    refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }] }), "image");
});

test("001-86 document content: text sources are read; PDF sources need a model that reads PDF; source missing is rejected", async () => {
  const doc = (source: unknown) => ({ messages: [{ role: "user", content: [{ type: "document", title: "T", source }, { type: "text", text: "sum up" }] }], max_tokens: 2 });
  assert.equal((await chat("tiny", doc({ type: "text", media_type: "text/plain", data: "a story" }))).status, 200);
  assert.equal((await chat("tiny", doc({ type: "content", content: [{ type: "text", text: "a story" }] }))).status, 200);
  refused(await chat("tiny", doc({ type: "base64", media_type: "application/pdf", data: "JVBERi0=" })), "PDF");
  refused(await chat("tiny", doc({ type: "url", url: "https://example.com/a.pdf" })), "PDF");
  refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "document", title: "T" }] }] }), "source");
  // A field of another kind of source, or citations the model cannot give, is refused by name, not dropped.
  refused(await chat("tiny", doc({ type: "text", data: "a story", url: "https://example.com/a.pdf" })), "source.url");
  refused(await chat("tiny", doc({ type: "content", content: "a story", data: "another" })), "source.data");
  refused(await chat("tiny", doc({ type: "content", content: "a story", media_type: "application/pdf" })), "source.media_type");
  const cited = { messages: [{ role: "user", content: [{ type: "document", source: { type: "text", data: "a story" }, citations: { enabled: true } }] }], max_tokens: 2 };
  refused(await chat("tiny", cited), "citations");
  assert.equal((await chat("tiny", { ...cited, messages: [{ role: "user", content: [{ ...cited.messages[0].content[0], citations: { enabled: false } }] }] })).status, 200);
});

test("001-87 file content needs a model that reads files; file.url is for Gemini only", async () => {
  refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "file", file: { file_data: "data:application/pdf;base64,JVBERi0=" } }] }] }), "file");
  refused(await chat("tiny", { messages: [{ role: "user", content: [{ type: "file", file: { url: "https://example.com/a.pdf" } }] }] }), "Gemini");
});

test("001-88 reasoning content with summary_text and summary_encrypted_text is accepted in assistant history", async () => {
  const reasoning = { type: "reasoning", summary: [{ type: "summary_text", text: "thought" }, { type: "summary_encrypted_text", data: "opaque" }] };
  const r = await chat("tiny", { messages: [user("a"), { role: "assistant", content: [reasoning, { type: "text", text: "b" }] }, user("c")], max_tokens: 2 });
  assert.equal(r.status, 200, r.text);
});

test("001-89 a chat response: object chat.completion (Plinth's decision 2), id, created, model, choices, usage", async () => {
  const r = await chat("tiny", hi);
  assert.equal(r.json.object, "chat.completion");
  assert.match(r.json.id, /^chatcmpl-/);
  assert.equal(typeof r.json.created, "number");
  assert.deepEqual(Object.keys(r.json).sort(), ["choices", "created", "id", "model", "object", "usage"]);
});

test("001-90 each choice has index, message with role assistant, and finish_reason", async () => {
  // Greedy: at the dialect's default temperature (1.0) the tiny model sometimes ends within 4 tokens.
  const c = (await chat("tiny", { ...hi, temperature: 0 })).json.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, "assistant");
  assert.equal(c.finish_reason, "length");
});

test("001-91 returned tool_calls have id, type function and function {name, arguments as serialised JSON}", async () => {
  const r = await chat("think", { messages: [user("weather?")], tools: [TOOL("weather")], tool_choice: { type: "function", function: { name: "weather" } }, reasoning_effort: "low", max_tokens: 900 });
  assert.equal(r.json.choices[0].finish_reason, "tool_calls", r.text);
  const call = r.json.choices[0].message.tool_calls[0];
  assert.equal(typeof call.id, "string");
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "weather");
  assert.equal(typeof JSON.parse(call.function.arguments), "object");
});

test("001-92 a chat stream is text/event-stream of chat.completion.chunk events", async () => {
  const r = await chat("tiny", { ...hi, stream: true });
  assert.ok(r.headers.get("content-type")?.startsWith("text/event-stream"));
  const events = sseData(r.text);
  assert.equal(events.at(-1), "[DONE]");
  for (const e of events.slice(0, -1)) assert.equal(e.object, "chat.completion.chunk");
});

test("001-93 the first chunk's delta has role assistant; only the last has a finish_reason", async () => {
  const events = sseData((await chat("tiny", { ...hi, temperature: 0, stream: true })).text).slice(0, -1);
  assert.equal(events[0].choices[0].delta.role, "assistant");
  const finishes = events.map((e) => e.choices[0]?.finish_reason ?? null);
  assert.deepEqual(finishes.slice(0, -1).filter((f) => f !== null), []);
  assert.equal(finishes.at(-1), "length");
});

test("001-94 a stream's usage is optional: the openai client reads a stream whether or not usage comes", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  // Greedy: sampled, the first token may end the turn, leaving no text to read.
  const stream = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
  assert.ok(text.length > 0);
});

test("001-95 no provider extra_fields (Gemini's safetyRating) on choices: no served model has them", async () => {
  const r = await chat("tiny", hi);
  assert.equal("extra_fields" in r.json.choices[0], false);
});

test("001-89 the openai client with base_url <host>/serving-endpoints: chat, model naming the endpoint", async () => {
  const client = new OpenAI({ baseURL: `${s.url}/serving-endpoints`, apiKey: "unused", maxRetries: 0 });
  const r = await client.chat.completions.create({ model: "pt", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
  assert.equal(r.model, "tiny-pt");
  assert.equal(r.choices[0].message.role, "assistant");
});
