import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { samplerSeed } from "../../src/core/random.ts";
import { scriptedApp, type ScriptedApp } from "../helpers/scripted-app.ts";

// Request validation and the error envelope, through the real app over the SCRIPTED engine (no
// model): every refusal happens before an engine would generate, so a model adds nothing here.
// test/integration/chat-errors.test.ts keeps the cases whose answer depends on a real model.

let s: ScriptedApp;
before(async () => {
  s = await scriptedApp({ id: "tiny", contextSize: 256, bodyLimit: 65536 });
});
after(async () => {
  await s.app.close();
});

const ok = { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 };

const post = (payload: unknown, headers: Record<string, string> = {}) =>
  s.app.inject({
    method: "POST",
    url: "/v1/chat/completions",
    headers: { "content-type": "application/json", ...headers },
    payload: typeof payload === "string" ? payload : JSON.stringify(payload),
  });

/** [description, body, expected status, expected param, expected code (optional)] */
const cases: Array<[string, unknown, number, string | null, string?]> = [
  ["malformed JSON", "{\"model\": \"tiny\", ", 400, null, "invalid_json"],
  ["body is not an object", "[1,2]", 400, null],
  ["unknown model", { ...ok, model: "no-such-model" }, 404, "model", "model_not_found"],
  ["missing messages", { model: "tiny" }, 400, "messages"],
  ["empty messages", { ...ok, messages: [] }, 400, "messages"],
  ["messages is a string", { ...ok, messages: "hello" }, 400, "messages"],
  ["unknown role", { ...ok, messages: [{ role: "wizard", content: "x" }] }, 400, "messages[0].role"],
  ["content of the wrong type", { ...ok, messages: [{ role: "user", content: 42 }] }, 400, "messages[0].content"],
  [
    "image content part, refused by the text-only engine by position",
    { ...ok, messages: [{ role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: "http://x/y.png" } }] }] },
    400,
    "messages[0].content[1]",
    "unsupported_content",
  ],
  ["image part with an unknown detail", { ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png", detail: "ultra" } }] }] }, 400, "messages[0].content[0].image_url.detail", "invalid_value"],
  ["a service tier that is none of OpenAI's", { ...ok, service_tier: "gold" }, 400, "service_tier", "invalid_value"],
  ["one of OpenAI's service tiers this server does not offer", { ...ok, service_tier: "flex" }, 400, "service_tier", "unsupported_parameter"],
  ["text part without its text", { ...ok, messages: [{ role: "user", content: [{ type: "text" }] }] }, 400, "messages[0].content[0].text", "missing_required_parameter"],
  ["text part whose text is not a string", { ...ok, messages: [{ role: "user", content: [{ type: "text", text: 5 }] }] }, 400, "messages[0].content[0].text", "invalid_type"],
  ["a cache breakpoint of another mode on a text part", { ...ok, messages: [{ role: "user", content: [{ type: "text", text: "hi", prompt_cache_breakpoint: { mode: "implicit" } }] }] }, 400, "messages[0].content[0].prompt_cache_breakpoint"],
  ["Anthropic's cache marker of another type on a text part", { ...ok, messages: [{ role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "persistent" } }] }] }, 400, "messages[0].content[0].cache_control"],
  ["Anthropic's cache marker with a ttl it does not define", { ...ok, messages: [{ role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral", ttl: "2d" } }] }] }, 400, "messages[0].content[0].cache_control"],
  ["a cache breakpoint that is not an object on an image part", { ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" }, prompt_cache_breakpoint: true }] }] }, 400, "messages[0].content[0].prompt_cache_breakpoint"],
  ["image part with an unknown field", { ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png", size: 3 } }] }] }, 400, "messages[0].content[0].image_url.size"],
  ["image part in a system message", { ...ok, messages: [{ role: "system", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }, ok.messages[0]] }, 400, "messages[0].content[0]"],
  ["audio content part", { ...ok, messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "", format: "wav" } }] }] }, 400, "messages[0].content[0].type"],
  ["temperature above 2", { ...ok, temperature: 2.5 }, 400, "temperature"],
  ["temperature as a string", { ...ok, temperature: "hot" }, 400, "temperature"],
  ["top_p below 0", { ...ok, top_p: -0.1 }, 400, "top_p"],
  ["n of 0", { ...ok, n: 0 }, 400, "n"],
  ["fractional n", { ...ok, n: 1.5 }, 400, "n"],
  ["max_tokens of 0", { ...ok, max_tokens: 0 }, 400, "max_tokens"],
  ["frequency_penalty out of range", { ...ok, frequency_penalty: -3 }, 400, "frequency_penalty"],
  ["presence_penalty out of range", { ...ok, presence_penalty: 2.5 }, 400, "presence_penalty"],
  ["repetition_penalty of 0", { ...ok, repetition_penalty: 0 }, 400, "repetition_penalty"],
  ["logit_bias key not a token id", { ...ok, logit_bias: { hello: 1 } }, 400, "logit_bias.hello"],
  // "05" and "5" would name one token twice, the last one silently winning.
  ["logit_bias key with a leading zero", { ...ok, logit_bias: { "05": 1 } }, 400, "logit_bias.05"],
  ["logit_bias value out of range", { ...ok, logit_bias: { "5": 150 } }, 400, "logit_bias.5"],
  ["logit_bias token outside the vocabulary (raised by the engine)", { ...ok, logit_bias: { "999999": 5 } }, 400, "logit_bias"],
  ["too many stop strings", { ...ok, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, 400, "stop"],
  ["max_tokens and max_completion_tokens that disagree", { ...ok, max_tokens: 5, max_completion_tokens: 2 }, 400, "max_tokens"],
  ["stream_options without stream", { ...ok, stream_options: { include_usage: true } }, 400, "stream_options"],
  // vLLM's continuous usage stats are streamed usage: not without a stream, as every stream_options.
  ["continuous_usage_stats without stream", { ...ok, stream_options: { include_usage: true, continuous_usage_stats: true } }, 400, "stream_options"],
  ["continuous_usage_stats that is not a boolean", { ...ok, stream: true, stream_options: { include_usage: true, continuous_usage_stats: "yes" } }, 400, "stream_options.continuous_usage_stats"],
  ["tools that are not a list", { ...ok, tools: { type: "function" } }, 400, "tools"],
  ["response_format json_schema without its schema object", { ...ok, response_format: { type: "json_schema" } }, 400, "response_format.json_schema"],
  ["response_format of an unknown type", { ...ok, response_format: { type: "yaml" } }, 400, "response_format.type"],
  ["tool_choice without tools", { ...ok, tool_choice: "auto" }, 400, "tool_choice"],
  ["top_logprobs above 20", { ...ok, logprobs: true, top_logprobs: 21 }, 400, "top_logprobs"],
  ["top_logprobs without logprobs", { ...ok, top_logprobs: 2 }, 400, "top_logprobs"],
  ["metadata with 17 pairs", { ...ok, metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, 400, "metadata"],
  ["functions (deprecated)", { ...ok, functions: [{ name: "f" }] }, 400, "functions"],
  // OpenAI's service fields: moderation and explicit cache breakpoints are refused, bad values named.
  ["moderation", { ...ok, moderation: { model: "omni-moderation-latest" } }, 400, "moderation", "unsupported_parameter"],
  // 'medium' is the default and what the model does anyway; shorter or longer is not offered.
  ["verbosity other than the default", { ...ok, verbosity: "low" }, 400, "verbosity", "unsupported_parameter"],
  ["prompt_cache_retention of an unknown value", { ...ok, prompt_cache_retention: "bogus" }, 400, "prompt_cache_retention"],
  ["prompt_cache_options with explicit breakpoints", { ...ok, prompt_cache_options: { mode: "explicit" } }, 400, "prompt_cache_options.mode", "unsupported_parameter"],
  ["prompt_cache_options with an unknown ttl", { ...ok, prompt_cache_options: { ttl: "1h" } }, 400, "prompt_cache_options.ttl"],
  ["chat_template_kwargs other than enable_thinking", { ...ok, chat_template_kwargs: { foo: 1 } }, 400, "chat_template_kwargs.foo"],
  ["duplicate tool names", { ...ok, tools: [1, 2].map(() => ({ type: "function", function: { name: "f" } })) }, 400, "tools[1].function.name"],
  // Context checks are the core's: the scripted engine counts one token per character.
  ["prompt longer than the context", { ...ok, messages: [{ role: "user", content: "w".repeat(400) }] }, 400, "messages", "context_length_exceeded"],
  ["max_tokens that cannot fit", { ...ok, max_tokens: 250 }, 400, "max_tokens", "context_length_exceeded"],
  ["max_completion_tokens that cannot fit", { ...ok, max_tokens: undefined, max_completion_tokens: 5000 }, 400, "max_completion_tokens", "context_length_exceeded"],
];

for (const [name, body, status, param, code] of cases) {
  test(`${name} → ${status} naming ${param ?? "no param"}`, async () => {
    const r = await post(body);
    assert.equal(r.statusCode, status, r.body);
    const e = r.json().error;
    assert.equal(typeof e?.message, "string", r.body);
    assert.ok(e.message.length > 10, r.body);
    assert.ok(!e.message.includes("{field}"), `the message names the wire field: ${e.message}`);
    assert.equal(typeof e.type, "string");
    assert.equal(e.param, param, r.body);
    if (code) assert.equal(e.code, code);
    assert.ok("code" in e);
  });
}

test("a canonical field in an engine error is worded with the field the client sent", async () => {
  const r = await post({ ...ok, max_tokens: undefined, max_completion_tokens: 5000 });
  assert.match(r.json().error.message, /^max_completion_tokens is 5000/);
});

test("a body over the size limit → 413 in the error envelope", async () => {
  const r = await post({ ...ok, messages: [{ role: "user", content: "x".repeat(100_000) }] });
  assert.equal(r.statusCode, 413);
  assert.equal(r.json().error.code, "request_too_large");
});

test("unknown routes → 404 in the error envelope, under /v1 and at the root", async () => {
  for (const url of ["/v1/nothing-here", "/nothing-here"]) {
    const r = await s.app.inject({ method: "POST", url, payload: {} });
    assert.equal(r.statusCode, 404, url);
    assert.equal(r.json().error.code, "not_found", url);
  }
});

test("prompt_cache_retention and implicit prompt_cache_options are taken (the cache is in memory either way)", async () => {
  for (const extra of [{ prompt_cache_retention: "24h" }, { prompt_cache_retention: "in_memory" }, { prompt_cache_options: { ttl: "30m", mode: "implicit" } }, { moderation: null }, { verbosity: "medium" }, { verbosity: null }]) {
    const r = await post({ ...ok, ...extra });
    assert.equal(r.statusCode, 200, `${JSON.stringify(extra)}: ${r.body}`);
  }
});

test("a message without its role says the role is required", async () => {
  const r = await post({ ...ok, messages: [{ content: "hi" }] });
  assert.equal(r.statusCode, 400);
  assert.equal(r.json().error.param, "messages[0].role");
  assert.match(r.json().error.message, /required/);
});

test("OpenAI's explicit cache breakpoint on a text part is taken (every prefix the cache sees can be reused)", async () => {
  const r = await post({ ...ok, messages: [{ role: "user", content: [{ type: "text", text: "hi", prompt_cache_breakpoint: { mode: "explicit" } }] }] });
  assert.equal(r.statusCode, 200, r.body);
});

test("Anthropic's cache marker on a text part, as gateways' clients send it, is taken like OpenAI's breakpoint", async () => {
  for (const cache_control of [{ type: "ephemeral" }, { type: "ephemeral", ttl: "1h" }, null]) {
    const r = await post({ ...ok, messages: [{ role: "system", content: [{ type: "text", text: "be brief", cache_control }] }, { role: "user", content: "hi" }] });
    assert.equal(r.statusCode, 200, r.body);
  }
});

test("an unknown top-level field is a 400 naming it, as OpenAI answers; fields of other endpoints and misspellings say what to send", async () => {
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ some_vendor_extra: { a: 1 } }, "some_vendor_extra", /^Unrecognized request argument supplied: "some_vendor_extra"\.$/],
    // The Responses API's names: the limit they set was lost without a word.
    [{ max_output_tokens: 3 }, "max_output_tokens", /takes 'max_completion_tokens'/],
    [{ instructions: "be brief" }, "instructions", /'system' or 'developer' message/],
    [{ previous_response_id: "resp_1" }, "previous_response_id", /Responses API/],
    [{ max_tokns: 3 }, "max_tokns", /Did you mean 'max_tokens'\?/],
    [{ Temperature: 0 }, "Temperature", /Did you mean 'temperature'\?/],
  ];
  for (const [extra, param, message] of cases) {
    const r = await post({ ...ok, ...extra });
    assert.equal(r.statusCode, 400, r.body);
    const error = r.json().error;
    assert.equal(error.param, param);
    assert.equal(error.code, "unknown_field");
    assert.equal(error.type, "invalid_request_error");
    assert.match(error.message, message);
  }
  // Fields other servers define are read from their table (foreign-fields.ts), not refused as unknown.
  const vllm = await post({ ...ok, top_k: 1, min_p: 0, repetition_penalty: 1, skip_special_tokens: true, cache_prompt: true });
  assert.equal(vllm.statusCode, 200, vllm.body);
});

test("a body without a JSON content type → 415 in the error envelope (a web page cannot post without a preflight)", async () => {
  for (const type of ["application/x-www-form-urlencoded", "text/plain;charset=UTF-8", "multipart/form-data; boundary=x"]) {
    const r = await post(JSON.stringify(ok), { "content-type": type });
    assert.equal(r.statusCode, 415, r.body);
    assert.equal(r.json().error.code, "unsupported_media_type");
    assert.match(r.json().error.message, /application\/json/);
  }
  const plusJson = await post(JSON.stringify(ok), { "content-type": "application/vnd.example+json; charset=utf-8" });
  assert.equal(plusJson.statusCode, 200, plusJson.body);
});

test("a full queue → 429 with Retry-After; nothing was started for the refused request", async () => {
  const busy = await scriptedApp({ id: "tiny", slots: 1, maxQueue: 0, delayMs: 50 });
  try {
    const first = busy.app.inject({ method: "POST", url: "/v1/chat/completions", payload: ok });
    // Until the first holds the one slot (a fixed 10 ms wait could end before it got there).
    for (let i = 0; i < 5000 && busy.registry.resolve("tiny").scheduler.busy === 0; i++) await new Promise((r) => setTimeout(r, 1));
    const second = await busy.app.inject({ method: "POST", url: "/v1/chat/completions", payload: ok });
    assert.equal(second.statusCode, 429, second.body);
    assert.equal(second.headers["retry-after"], "1");
    assert.equal(second.json().error.type, "rate_limit_error");
    assert.equal((await first).statusCode, 200);
  } finally {
    await busy.app.close();
  }
});

test("scripted engine: an assistant turn's refusal (a refusal part, or the refusal field alone) reaches the engine as what it said", async () => {
  const messages = (...assistant: object[]) => [{ role: "user", content: "x" }, ...assistant, { role: "user", content: "y" }];
  const said = () => (s.engine.prepared.at(-1)!.prompt as { messages: Array<{ role: string; content: string }> }).messages[1].content;
  const part = await post({ ...ok, messages: messages({ role: "assistant", content: [{ type: "refusal", refusal: "no" }] }) });
  assert.equal(part.statusCode, 200, part.body);
  assert.equal(said(), "no");
  const mixed = await post({ ...ok, messages: messages({ role: "assistant", content: [{ type: "text", text: "well" }, { type: "refusal", refusal: "no" }] }) });
  assert.equal(mixed.statusCode, 200, mixed.body);
  assert.equal(said(), "well\nno");
  const field = await post({ ...ok, messages: messages({ role: "assistant", content: null, refusal: "I can't help with that." }) });
  assert.equal(field.statusCode, 200, field.body);
  assert.equal(said(), "I can't help with that.");
  const bad = await post({ ...ok, messages: messages({ role: "assistant", content: [{ type: "refusal", refusal: 3 }] }) });
  assert.equal(bad.statusCode, 400, bad.body);
  assert.equal(bad.json().error.param, "messages[1].content[0].refusal");
  // In a user message a refusal part is still not something to show the model.
  const user = await post({ ...ok, messages: [{ role: "user", content: [{ type: "refusal", refusal: "no" }] }] });
  assert.equal(user.statusCode, 400, user.body);
});

test("a named tool_choice without its type is a function's, as vLLM and TGI read it (@huggingface/inference's typed choice writes no type)", async () => {
  const tools = ["f", "g"].map((name) => ({ type: "function", function: { name, parameters: { type: "object", properties: {} } } }));
  const r = await post({ ...ok, tools, tool_choice: { function: { name: "g" } } });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(s.engine.prepared.at(-1)!.toolChoice, { name: "g" });
  // It is still checked as a named choice: a tool that is not there, a key of its own, no name.
  const missing = await post({ ...ok, tools, tool_choice: { function: { name: "h" } } });
  assert.equal(missing.statusCode, 400, missing.body);
  assert.equal(missing.json().error.param, "tool_choice");
  const extra = await post({ ...ok, tools, tool_choice: { function: { name: "g" }, x: 1 } });
  assert.equal(extra.statusCode, 400, extra.body);
  const nameless = await post({ ...ok, tools, tool_choice: { function: {} } });
  assert.equal(nameless.statusCode, 400, nameless.body);
  assert.equal(nameless.json().error.param, "tool_choice.function.name");
  // An object with neither type nor function is still refused naming its type.
  const typeless = await post({ ...ok, tools, tool_choice: { name: "g" } });
  assert.equal(typeless.statusCode, 400, typeless.body);
});

test("/tokenize answers vLLM's whole shape: token_strs is there as null when not asked for", async () => {
  const r = await s.app.inject({ method: "POST", url: "/tokenize", payload: { model: "tiny", prompt: "hi" } });
  assert.equal(r.statusCode, 200, r.body);
  assert.deepEqual(Object.keys(r.json()).sort(), ["count", "max_model_len", "token_strs", "tokens"]);
  assert.equal(r.json().token_strs, null);
  assert.equal(r.json().count, r.json().tokens.length);
});

test("tokenizer and completions routes name their own fields", async () => {
  const tok = await s.app.inject({ method: "POST", url: "/detokenize", payload: { model: "tiny", tokens: [1, 5000] } });
  assert.equal(tok.statusCode, 400, tok.body);
  assert.equal(tok.json().error.param, "tokens[1]");
  const batch = await s.app.inject({
    method: "POST",
    url: "/v1/completions",
    payload: { model: "tiny", prompt: ["short", "x".repeat(300)], max_tokens: 1 },
  });
  assert.equal(batch.statusCode, 400, batch.body);
  assert.equal(batch.json().error.param, "prompt[1]", "the batch entry that does not fit");
  assert.equal(batch.json().error.code, "context_length_exceeded");
});

test("a 64-bit seed is taken (OpenAI's seed is an int64, past JavaScript's safe integers); past int64, as written, or a fraction is a 400", async () => {
  const seedSeen = () => s.engine.prepared.at(-1)!.sampling.seed;
  const json = { "content-type": "application/json" };
  for (const [url, body] of [
    ["/v1/chat/completions", ok],
    ["/v1/completions", { model: "tiny", prompt: "hi", max_tokens: 2 }],
    ["/v1/responses", { model: "tiny", input: "hi", max_output_tokens: 2, store: false }],
  ] as const) {
    // 2^62 + 2^40 + 7 arrives as the double 2^62 + 2^40, whose low 32 bits are all 0: the seed is
    // folded from all its bits instead (samplerSeed), so it is not seed 0.
    const withSeed = (seed: string) => `${JSON.stringify(body).slice(0, -1)},"seed":${seed}}`;
    const big = await s.app.inject({ method: "POST", url, headers: json, payload: withSeed("4611687117939015687") });
    assert.equal(big.statusCode, 200, `${url}: ${big.body}`);
    assert.equal(seedSeen(), samplerSeed(2 ** 62 + 2 ** 40));
    assert.notEqual(seedSeen(), 0);
    const low = await s.app.inject({ method: "POST", url, headers: json, payload: withSeed("-9223372036854775808") });
    assert.equal(low.statusCode, 200, `${url}: ${low.body}`);
    assert.ok(Object.is(seedSeen(), samplerSeed(-(2 ** 63))) && !Object.is(seedSeen(), -0), "-2^63 is a seed of its own, not -0");
    // int64's largest arrives as the double 2^63, as 2^63 itself does: the number as written tells them apart.
    for (const top of ["9223372036854775807", "9.223372036854775807e18", "9223372036854775807.0", "-9223372036854776000", "-9.223372036854776e18"]) {
      const r = await s.app.inject({ method: "POST", url, headers: json, payload: withSeed(top) });
      assert.equal(r.statusCode, 200, `${url} seed ${top}: ${r.body}`);
      assert.equal(seedSeen(), samplerSeed(top.startsWith("-") ? -(2 ** 63) : 2 ** 63));
    }
    for (const past of ["9223372036854775808", "9223372036854776000", "-9223372036854775809", "9223372036854775807.5", "18446744073709551616", "1e400"]) {
      const r = await s.app.inject({ method: "POST", url, headers: json, payload: withSeed(past) });
      assert.equal(r.statusCode, 400, `${url} seed ${past}: ${r.body}`);
      assert.equal(r.json().error.param, "seed");
      assert.equal(r.json().error.code, "invalid_value");
      assert.ok(r.json().error.message.includes(past), r.body);
    }
    const odd = await s.app.inject({ method: "POST", url, payload: { ...body, seed: 2 ** 53 + 2 } });
    assert.equal(odd.statusCode, 200, `${url}: ${odd.body}`);
    assert.equal(seedSeen(), samplerSeed(2 ** 53 + 2));
    const reserved = await s.app.inject({ method: "POST", url, payload: { ...body, seed: 2 ** 32 - 1 } });
    assert.equal(reserved.statusCode, 200, `${url}: ${reserved.body}`);
    assert.ok(seedSeen() < 2 ** 32 - 1, "2^32 - 1 is llama.cpp's random seed");
    for (const bad of [1e19, -1e19, 1.5]) {
      const r = await s.app.inject({ method: "POST", url, payload: { ...body, seed: bad } });
      assert.equal(r.statusCode, 400, `${url} seed ${bad}: ${r.body}`);
      assert.equal(r.json().error.param, "seed");
      // int64's bound as int64 writes it, not as the double 9223372036854776000.
      if (bad === 1e19) assert.match(r.json().error.message, /at most 9223372036854775807\b/, r.body);
      if (bad === -1e19) assert.match(r.json().error.message, /at least -9223372036854775808\b/, r.body);
    }
  }
});

test("separate_reasoning / stream_reasoning: false are taken on a model with no thinking section (nothing to separate) and refused on one that thinks", async () => {
  const routes = [
    ["/v1/chat/completions", ok],
    ["/v1/responses", { model: "tiny", input: "hi", max_output_tokens: 2, store: false }],
  ] as const;
  for (const [url, body] of routes) {
    const plain = await s.app.inject({ method: "POST", url, payload: { ...body, separate_reasoning: false } });
    assert.equal(plain.statusCode, 200, `${url}: ${plain.body}`);
    const wrongType = await s.app.inject({ method: "POST", url, payload: { ...body, separate_reasoning: "no" } });
    assert.equal(wrongType.statusCode, 400, `${url}: ${wrongType.body}`);
    assert.equal(wrongType.json().error.param, "separate_reasoning");
  }
  // SGLang's stream_reasoning: false, on a model with no thinking to hold back, streamed or not.
  for (const stream of [true, false]) {
    const r = await s.app.inject({ method: "POST", url: "/v1/chat/completions", payload: { ...ok, stream, stream_reasoning: false } });
    assert.equal(r.statusCode, 200, `stream ${stream}: ${r.body}`);
  }
  const completion = await s.app.inject({ method: "POST", url: "/v1/completions", payload: { model: "tiny", prompt: "hi", max_tokens: 2, separate_reasoning: false } });
  assert.equal(completion.statusCode, 200, `a completion's text is never separated: ${completion.body}`);
  const thinker = await scriptedApp({ id: "tiny", contextSize: 256, reasoning: true });
  try {
    for (const [url, body] of routes) {
      const r = await thinker.app.inject({ method: "POST", url, payload: { ...body, separate_reasoning: false } });
      assert.equal(r.statusCode, 400, `${url}: ${r.body}`);
      assert.equal(r.json().error.param, "separate_reasoning");
      if (url === "/v1/chat/completions") {
        const held = await thinker.app.inject({ method: "POST", url, payload: { ...body, stream: true, stream_reasoning: false } });
        assert.equal(held.statusCode, 400, `${url}: ${held.body}`);
        assert.equal(held.json().error.param, "stream_reasoning");
        const whole = await thinker.app.inject({ method: "POST", url, payload: { ...body, stream_reasoning: false } });
        assert.equal(whole.statusCode, 200, `not streamed, nothing is held back: ${whole.body}`);
      }
      const taken = await thinker.app.inject({ method: "POST", url, payload: { ...body, separate_reasoning: true } });
      assert.equal(taken.statusCode, 200, `${url}: ${taken.body}`);
      // Thinking turned off: nothing to separate on this request either.
      const off = url === "/v1/responses" ? { reasoning: { effort: "none" } } : { reasoning_effort: "none" };
      const unthought = await thinker.app.inject({ method: "POST", url, payload: { ...body, ...off, separate_reasoning: false } });
      assert.equal(unthought.statusCode, 200, `${url}: ${unthought.body}`);
    }
  } finally {
    await thinker.app.close();
  }
});

test("an unknown key in a message, a text or refusal part, a tool call or its function is a 400 naming it (it was dropped without a word)", async () => {
  const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
  const turn = (assistant: object, tool: object = { role: "tool", tool_call_id: "c1", content: "r" }) => [{ role: "user", content: "hi" }, { role: "assistant", content: null, tool_calls: [call], ...assistant }, tool];
  const cases: Array<[unknown[], string]> = [
    [[{ role: "user", content: "hi", foo: 1 }], "messages[0].foo"],
    [[{ role: "system", content: "s", foo: 1 }, { role: "user", content: "hi" }], "messages[0].foo"],
    [[{ role: "developer", content: "s", temperature: 0 }, { role: "user", content: "hi" }], "messages[0].temperature"],
    [[{ role: "user", content: [{ type: "text", text: "hi", bar: 2 }] }], "messages[0].content[0].bar"],
    [[{ role: "system", content: [{ type: "text", text: "s", cache_point: { type: "default" } }] }, { role: "user", content: "hi" }], "messages[0].content[0].cache_point"],
    [[{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "refusal", refusal: "no", bar: 2 }] }, { role: "user", content: "y" }], "messages[1].content[0].bar"],
    [turn({ thinking: "x" }), "messages[1].thinking"],
    [turn({ tool_calls: [{ ...call, foo: 1 }] }), "messages[1].tool_calls[0].foo"],
    [turn({ tool_calls: [{ ...call, function: { ...call.function, foo: 1 } }] }), "messages[1].tool_calls[0].function.foo"],
    [turn({ tool_calls: [{ id: "c1", type: "custom", custom: { name: "g", input: "x", foo: 1 } }] }), "messages[1].tool_calls[0].custom.foo"],
    [turn({}, { role: "tool", tool_call_id: "c1", content: "r", foo: 1 }), "messages[2].foo"],
    [turn({}, { role: "tool", tool_call_id: "c1", content: [{ type: "text", text: "r", foo: 1 }] }), "messages[2].content[0].foo"],
  ];
  for (const [messages, param] of cases) {
    const r = await post({ ...ok, messages });
    assert.equal(r.statusCode, 400, `${param}: ${r.body}`);
    const e = r.json().error;
    assert.equal(e.param, param, r.body);
    assert.equal(e.code, "unknown_field", r.body);
    assert.equal(e.type, "invalid_request_error");
    assert.ok(e.message.includes(param.split(".").at(-1)!), `the message names the key: ${e.message}`);
  }
});

test("what clients send back from an answer is taken: reasoning, annotations, the SDK's additions, a call's index, nulls, a tool message's name", async () => {
  const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
  const echoed = [
    { role: "user", content: "hi", name: null },
    // As Plinth answers (reasoning_content and reasoning), as OpenAI answers (annotations, the nulls),
    // as the openai SDK's parse() and stream helpers hand it back (parsed, parsed_arguments), as a
    // client that built it from the chunks keeps it (index).
    {
      role: "assistant",
      content: null,
      refusal: null,
      audio: null,
      function_call: null,
      annotations: [],
      reasoning_content: "thought",
      reasoning: "thought",
      parsed: null,
      name: null,
      tool_calls: [{ ...call, index: 0, function: { ...call.function, parsed_arguments: {} } }],
    },
    // LangChain and LlamaIndex name the called function on the result.
    { role: "tool", tool_call_id: "c1", content: "r", name: "f" },
    { role: "assistant", content: "done", tool_calls: null, reasoning_content: null, reasoning: null, annotations: [{ type: "url_citation", url_citation: { url: "https://x", title: "x", start_index: 0, end_index: 1 } }] },
    { role: "assistant", content: [{ type: "text", text: "and", prompt_cache_breakpoint: null }], tool_calls: [] },
    { role: "user", content: [{ type: "text", text: "more" }] },
  ];
  const r = await post({ ...ok, messages: echoed });
  assert.equal(r.statusCode, 200, r.body);
  const seen = (s.engine.prepared.at(-1)!.prompt as unknown as { messages: Array<Record<string, unknown>> }).messages;
  assert.deepEqual(
    seen.map((m) => m.role),
    ["user", "assistant", "tool", "assistant", "assistant", "user"],
  );
  assert.equal(seen[0].name, undefined, "a null name is no name");
  assert.deepEqual(seen[1].toolCalls, [{ id: "c1", name: "f", arguments: "{}" }]);
  assert.equal(seen[2].name, undefined, "a tool message's name is not used");
  // Keys of another type than they are sent back with are still refused.
  const bad = await post({ ...ok, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a", annotations: "x" }, { role: "user", content: "b" }] });
  assert.equal(bad.statusCode, 400, bad.body);
  assert.equal(bad.json().error.param, "messages[1].annotations");
});

test("a key another role defines is taken as null (one class for every message writes the rest as null); with a value it is a 400 naming it", async () => {
  const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
  const nulls = { tool_calls: null, tool_call_id: null, refusal: null, function_call: null, audio: null, reasoning_content: null, reasoning: null, annotations: null, prefix: null, name: null };
  const { tool_call_id: _, ...assistantNulls } = nulls;
  const r = await post({
    ...ok,
    messages: [
      { role: "system", content: "s", ...nulls },
      { role: "user", content: "hi", ...nulls },
      { role: "assistant", content: null, ...assistantNulls, tool_call_id: null, tool_calls: [call] },
      { role: "tool", content: "r", ...nulls, tool_call_id: "c1" },
    ],
  });
  assert.equal(r.statusCode, 200, r.body);
  for (const [messages, param] of [
    [[{ role: "user", content: "hi", tool_call_id: "c1" }], "messages[0].tool_call_id"],
    [[{ role: "user", content: "hi", tool_calls: [call] }], "messages[0].tool_calls"],
    [[{ role: "user", content: "x" }, { role: "assistant", content: "y", tool_call_id: "c1" }, { role: "user", content: "z" }], "messages[1].tool_call_id"],
  ] as Array<[unknown[], string]>) {
    const bad = await post({ ...ok, messages });
    assert.equal(bad.statusCode, 400, `${param}: ${bad.body}`);
    assert.equal(bad.json().error.param, param, bad.body);
  }
});

test("DeepSeek's and Mistral's prefix: true on the last message, an assistant's, is taken (it is continued anyway); elsewhere it is a 400", async () => {
  const r = await post({ ...ok, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "Sure,", prefix: true }] });
  assert.equal(r.statusCode, 200, r.body);
  const seen = (s.engine.prepared.at(-1)!.prompt as unknown as { messages: Array<Record<string, unknown>> }).messages;
  assert.deepEqual(seen.at(-1), { role: "assistant", content: "Sure,", name: undefined, toolCalls: undefined });
  const off = await post({ ...ok, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a", prefix: false }, { role: "user", content: "b" }] });
  assert.equal(off.statusCode, 200, off.body);
  const early = await post({ ...ok, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a", prefix: true }, { role: "user", content: "b" }] });
  assert.equal(early.statusCode, 400, early.body);
  assert.equal(early.json().error.param, "messages[1].prefix");
  const user = await post({ ...ok, messages: [{ role: "user", content: "hi", prefix: true }] });
  assert.equal(user.statusCode, 400, user.body);
  assert.equal(user.json().error.param, "messages[0].prefix");
  assert.match(user.json().error.message, /expected null/);
});

test("a message's name is held to OpenAI's pattern (no whitespace, none of < | \\ / >, not empty) on every role, and on /tokenize", async () => {
  const on = (name: unknown) => [
    { role: "system", content: "s", name },
    { role: "developer", content: "d", name },
    { role: "user", content: "hi", name },
    { role: "assistant", content: null, name, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "c1", content: "r", name },
  ];
  for (const good of ["alice", "Bob_2", "jean-luc.picard", "名前", "a:b@c"]) {
    const r = await post({ ...ok, messages: on(good) });
    assert.equal(r.statusCode, 200, `${JSON.stringify(good)}: ${r.body}`);
  }
  for (const bad of ["", "a b", "tab\there", "line\nbreak", "ideographic\u3000space", "a<b", "a>b", "a|b", "a\\b", "a/b", "<|im_start|>"]) {
    for (let i = 0; i < 5; i++) {
      const messages = on("fine");
      messages[i].name = bad;
      const r = await post({ ...ok, messages });
      assert.equal(r.statusCode, 400, `${JSON.stringify(bad)} on ${messages[i].role}: ${r.body}`);
      assert.equal(r.json().error.param, `messages[${i}].name`);
      assert.equal(r.json().error.code, "invalid_value");
      assert.match(r.json().error.message, /name/);
    }
  }
  const tokenize = await s.app.inject({ method: "POST", url: "/tokenize", payload: { model: "tiny", messages: [{ role: "user", content: "hi", name: "a b" }] } });
  assert.equal(tokenize.statusCode, 400, tokenize.body);
  assert.equal(tokenize.json().error.param, "messages[0].name");
});
