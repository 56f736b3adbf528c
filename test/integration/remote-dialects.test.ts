import assert from "../helpers/assert.ts";
import { expectSchemaAnswers } from "../helpers/json-schema-check.ts";
import { after, before, test } from "node:test";
import { NO_EOG, postJson, requestJson, startTestServer, streamThenCancel, type TestServer } from "../helpers/server.ts";

// Two real Plinth servers on the fixture models are the upstreams; a third fronts them as "rt"
// (the tiny model), "rk" (the thinking/tool-calling model) and "rb" (an embedding-only model on the
// first) and serves its own local "tiny" beside.
let up: TestServer[] = [];
let router: TestServer;

before(async () => {
  up = [await startTestServer({ "ctx-size": "512" }, { think: true, bert: true }), await startTestServer({ "ctx-size": "512" }, { think: true })];
  const urls = up.map((u) => u.url);
  router = await startTestServer({
    upstream: [
      { name: "rt", url: urls, model: "tiny" },
      { name: "rk", url: urls.map((u) => `${u}/v1`), model: "think" },
      // The same upstream model under the DeepSeek-style dialect's one model name.
      { name: "SpAk-Aster-V1-MOE", url: urls, model: "think" },
      { name: "strict", url: urls[0], model: "tiny", unsupported: ["logitBias"] },
      { name: "rb", url: urls[0], model: "bert" },
      // Declared as the docs advise for vLLM: no thinking budget; and an upstream that takes no seed.
      { name: "vk", url: urls[0], model: "think", unsupported: ["reasoning.budgetTokens", "seed"] },
      { name: "narrow", url: urls[0], model: "tiny", unsupported: ["cacheKey", "logprobs"] },
    ],
    "health-interval": "0",
  });
});
after(async () => {
  await router?.close();
  for (const u of up) await u.close();
});

const ask = { messages: [{ role: "user" as const, content: "Tell me about the river and the king." }], max_tokens: 10, temperature: 0, logit_bias: NO_EOG };

test("chat through the router answers as the upstream does, names its replica and counts usage", async () => {
  const direct = await up[0].http.chat({ model: "tiny", ...ask });
  const r = await router.http.post("/v1/chat/completions", { model: "rt", ...ask });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.model, "rt");
  assert.equal(r.json.choices[0].message.content, direct.choices[0].message.content);
  assert.equal(r.json.choices[0].finish_reason, "length");
  assert.equal(r.json.usage!.prompt_tokens, direct.usage!.prompt_tokens);
  assert.equal(r.json.usage!.completion_tokens, 10);
  assert.ok(up.map((u) => u.url).includes(r.headers.get("x-plinth-upstream")!), String(r.headers.get("x-plinth-upstream")));
});

test("a stream with logprobs and usage: the same tokens and log probabilities as the upstream's own", async () => {
  const body = { ...ask, max_tokens: 6, logprobs: true, top_logprobs: 2, stream_options: { include_usage: true } };
  const direct = await up[1].http.chatStream({ model: "tiny", ...body });
  const s = await router.http.chatStream({ model: "rt", ...body } as any);
  assert.ok(s.done, s.text);
  assert.deepEqual(s.errors, []);
  assert.equal(s.content, direct.content);
  const lps = (x: typeof s) => x.chunks.flatMap((c) => c.choices.flatMap((ch: any) => ch.logprobs?.content ?? []));
  const mine = lps(s);
  assert.equal(mine.length, 6);
  assert.deepEqual(
    mine.map((e: any) => [e.token, e.bytes, e.top_logprobs.length]),
    lps(direct).map((e: any) => [e.token, e.bytes, e.top_logprobs.length]),
  );
  for (const [i, e] of mine.entries()) assert.ok(Math.abs(e.logprob - lps(direct)[i].logprob) < 1e-6);
  assert.equal(s.usage!.completion_tokens, 6);
  assert.ok(s.headers.get("x-plinth-upstream"));
});

test("n choices: each runs upstream with its own seed, as a local model would", async () => {
  const r = await router.http.chat({ model: "rt", ...ask, temperature: 1, seed: 7, n: 3 } as any);
  assert.equal(r.choices.length, 3);
  const local = await router.http.chat({ model: "tiny", ...ask, temperature: 1, seed: 7, n: 3 });
  assert.deepEqual(
    r.choices.map((c) => c.message.content),
    local.choices.map((c) => c.message.content),
  );
});

test("tools: a forced call arrives as a tool call with valid arguments, JSON and streamed", async () => {
  const tools = [
    {
      type: "function" as const,
      function: {
        name: "get_weather",
        parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false },
        strict: true,
      },
    },
  ];
  const body = { messages: [{ role: "user" as const, content: "Weather in Paris?" }], tools, tool_choice: "required" as const, reasoning_effort: "none" as const, max_tokens: 80, seed: 3 };
  const r = await router.http.chat({ model: "rk", ...body } as any);
  const call = r.choices[0].message.tool_calls![0];
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(call.function.name, "get_weather");
  assert.equal(typeof JSON.parse(call.function.arguments).city, "string");
  const s = await router.http.chatStream({ model: "rk", ...body } as any);
  const deltas = s.chunks.flatMap((c) => c.choices.flatMap((ch: any) => ch.delta.tool_calls ?? []));
  assert.equal(deltas[0].function.name, "get_weather");
  assert.match(deltas[0].id, /^call_/);
  assert.equal(typeof JSON.parse(deltas.map((d: any) => d.function.arguments ?? "").join("")).city, "string");
  assert.equal(s.finishReason, "tool_calls");
});

test("json_schema: the upstream's constrained answer validates", () => expectSchemaAnswers(router.http, "rt"));

test("thinking is passed through as reasoning, and switching it off reaches the upstream", async () => {
  const body = { messages: [{ role: "user" as const, content: "Think first." }], max_tokens: 30, seed: 5, temperature: 0 };
  const direct = await up[0].http.chat({ model: "think", ...body, reasoning: { budget_tokens: 8 } } as any);
  const r = await router.http.chat({ model: "rk", ...body, reasoning: { budget_tokens: 8 } } as any);
  assert.equal((r.choices[0].message as any).reasoning_content, (direct.choices[0].message as any).reasoning_content);
  assert.ok(((r.choices[0].message as any).reasoning_content ?? "").length > 0);
  assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, direct.usage!.completion_tokens_details.reasoning_tokens);
  const off = await router.http.chat({ model: "rk", ...body, reasoning_effort: "none" } as any);
  assert.equal((off.choices[0].message as any).reasoning_content, undefined);
});

test("thinking controls reach the upstream as the client gave them: an effort alone, no seed it did not send", async () => {
  const body = { messages: [{ role: "user" as const, content: "Think first." }], max_tokens: 12, temperature: 0 };
  // An effort level is passed on as itself, not as a budget the client never sent (which the
  // entry declares unsupported), and a seed nobody gave is not sent to an upstream that takes none.
  for (const effort of ["minimal", "low", "medium"] as const) {
    const r = await router.http.post("/v1/chat/completions", { model: "vk", ...body, reasoning_effort: effort });
    assert.equal(r.status, 200, `${effort}: ${r.text}`);
  }
  const responses = await postJson(`${router.url}/v1/responses`, { model: "vk", input: "Think first.", max_output_tokens: 12, reasoning: { effort: "low" }, store: false });
  assert.equal(responses.status, 200, responses.text);
  const seeded = await router.http.post("/v1/chat/completions", { model: "vk", ...body, seed: 3 });
  assert.equal(seeded.status, 400, seeded.text);
  assert.equal(seeded.error!.param, "seed");
  const budget = await router.http.post("/v1/chat/completions", { model: "vk", ...body, reasoning: { budget_tokens: 8 } });
  assert.equal(budget.status, 400, budget.text);
});

test("a remote model that may think: the DeepSeek-style and Databricks dialects let its thinking through", async () => {
  const body = { model: "SpAk-Aster-V1-MOE", messages: [{ role: "user", content: "Think first." }], max_tokens: 12, temperature: 0 };
  const thinking = await postJson(`${router.url}/chat/completions`, body);
  assert.equal(thinking.status, 200, thinking.text);
  assert.ok(typeof thinking.json.choices[0].message.reasoning_content === "string" && thinking.json.choices[0].message.reasoning_content.length > 0, thinking.text);
  const off = await postJson(`${router.url}/chat/completions`, { ...body, thinking: { type: "disabled" } });
  assert.equal(off.status, 200, off.text);
  assert.equal(off.json.usage.completion_tokens_details.reasoning_tokens, 0, off.text);
  const dbx = await postJson(`${router.url}/serving-endpoints/SpAk-Aster-V1-MOE/invocations`, { messages: body.messages, max_tokens: 12, reasoning_effort: "low" });
  assert.equal(dbx.status, 200, dbx.text);
  assert.equal(typeof dbx.json.usage.reasoning_tokens, "number", dbx.text);
  // Not knowing whether a remote model thinks adds no thinking setting the client did not send: a
  // model that does not think (whose Plinth upstream refuses any) answers these dialects' defaults.
  // A Plinth upstream's model list says whether the model thinks, so a model that does not answers
  // through the router as it does straight: no thinking fields, and the thinking controls that these
  // dialects ignore on such a model are ignored, not refused.
  const plain = { messages: body.messages, max_tokens: 4 };
  const r = await postJson(`${router.url}/serving-endpoints/rt/invocations`, plain);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.reasoning_tokens, undefined, r.text);
  // The DeepSeek-style dialect's one model name on the model that does not think: a router of its own.
  const other = await startTestServer({ upstream: [{ name: "SpAk-Aster-V1-MOE", url: up[0].url, model: "tiny" }], "health-interval": "0" });
  try {
    for (const extra of [{}, { thinking: { type: "disabled" } }, { reasoning_effort: "high" }, { logprobs: true }]) {
      const spak = await postJson(`${other.url}/chat/completions`, { model: "SpAk-Aster-V1-MOE", ...plain, ...extra });
      assert.equal(spak.status, 200, `${JSON.stringify(extra)}: ${spak.text}`);
      assert.equal(spak.json.choices[0].message.reasoning_content, null, spak.text);
      if ("logprobs" in extra) assert.equal(spak.json.choices[0].logprobs.reasoning_content, null, spak.text);
    }
  } finally {
    await other.close();
  }
  const dbxResponses = await postJson(`${router.url}/serving-endpoints/responses`, { model: "rt", input: "hi", max_output_tokens: 4 });
  assert.equal(dbxResponses.status, 200, dbxResponses.text);
});

test("completions (text and token prompts, logprobs) and embeddings through the router", async () => {
  const body = { prompt: "Once upon a time", max_tokens: 5, temperature: 0, logprobs: 2, logit_bias: NO_EOG };
  const direct = await up[0].http.complete({ model: "tiny", ...body });
  const r = await router.http.complete({ model: "rt", ...body });
  assert.equal(r.choices[0].text, direct.choices[0].text);
  assert.deepEqual(r.choices[0].logprobs!.tokens, direct.choices[0].logprobs!.tokens);
  assert.equal(r.usage!.prompt_tokens, direct.usage!.prompt_tokens);
  const tokens = (await up[0].http.tokenize({ model: "tiny", prompt: "Once upon a time" })).tokens;
  const byTokens = await router.http.complete({ model: "rt", ...body, prompt: tokens });
  assert.equal(byTokens.choices[0].text, direct.choices[0].text);
  // The tokenizer endpoints name the replica that answered, as generation does.
  const counted = await postJson(`${router.url}/tokenize`, { model: "rt", prompt: "Once upon a time" });
  assert.deepEqual(counted.json.tokens, tokens);
  assert.ok(up.map((u) => u.url).includes(counted.headers.get("x-plinth-upstream")!), String(counted.headers.get("x-plinth-upstream")));
  const text = await postJson(`${router.url}/detokenize`, { model: "rt", tokens });
  assert.equal(text.json.prompt, "Once upon a time");
  assert.ok(up.map((u) => u.url).includes(text.headers.get("x-plinth-upstream")!), String(text.headers.get("x-plinth-upstream")));

  const e = await router.http.embed({ model: "rt", input: ["hello world", "thanks"], encoding_format: "float" });
  const d = await up[1].http.embed({ model: "tiny", input: ["hello world", "thanks"], encoding_format: "float" });
  assert.equal(e.data.length, 2);
  for (let i = 0; i < 2; i++) {
    const a = e.data[i].embedding as number[];
    const b = d.data[i].embedding as number[];
    assert.equal(a.length, b.length);
    assert.ok(a.every((x, j) => Math.abs(x - b[j]) < 1e-5));
  }
  assert.equal(e.usage.prompt_tokens, d.usage.prompt_tokens);
});

test("the Responses API and Konan's /v3 chat work over a remote model", async () => {
  const r = await postJson(`${router.url}/v1/responses`, { model: "rt", input: "Tell me about the river.", max_output_tokens: 8, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, "incomplete"); // max_output_tokens ran out, as it would locally
  const direct = await up[0].http.chat({ model: "tiny", messages: [{ role: "user", content: "Tell me about the river." }], max_tokens: 8, temperature: 0 });
  assert.equal(r.json.output.find((o: any) => o.type === "message").content[0].text, direct.choices[0].message.content);
  assert.ok(r.headers.get("x-plinth-upstream"));

  const k = await fetch(`${router.url}/v3/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "rt", messages: [{ role: "user", content: "Tell me about the river." }], max_completion_tokens: 8, temperature: 0, stream: true }),
  });
  const text = await k.text();
  assert.equal(k.status, 200, text);
  const content = text
    .split("\n\n")
    .filter((e) => e.startsWith("data: {"))
    .map((e) => JSON.parse(e.slice(6)))
    .map((c) => c.choices?.[0]?.delta?.content ?? "")
    .join("");
  assert.equal(content, direct.choices[0].message.content);
});

test("refusals: a prompt over the upstream's context, inexpressible and declared-unsupported fields are 400s naming the field", async () => {
  const long = await router.http.post("/v1/chat/completions", { model: "rt", messages: [{ role: "user", content: "the king and the river ".repeat(200) }], max_tokens: 4 });
  assert.equal(long.status, 400, long.text);
  assert.equal(long.error!.code, "context_length_exceeded");
  assert.equal(long.error!.param, "messages");

  const budget = await router.http.post("/v1/chat/completions", { model: "rt", ...ask, max_tokens: 100_000 });
  assert.equal(budget.status, 400);
  assert.equal(budget.error!.param, "max_tokens");

  const bias = await router.http.post("/v1/chat/completions", { model: "strict", ...ask });
  assert.equal(bias.status, 400, bias.text);
  assert.equal(bias.error!.param, "logit_bias");
  assert.match(bias.error!.message, /not supported by the upstream/);

  const echo = await router.http.post("/v1/completions", { model: "rt", prompt: "hi", echo: true, max_tokens: 2 });
  assert.equal(echo.status, 400, echo.text);
  assert.equal(echo.error!.param, "echo");

  const suffix = await router.http.post("/v1/completions", { model: "rt", prompt: "def f(", suffix: "return x", max_tokens: 2 });
  assert.equal(suffix.status, 400, suffix.text);
  assert.equal(suffix.error!.param, "suffix");

  // A thinking budget for the tiny model, which has no thinking section: a 400 naming the field (the
  // router refuses it itself, since the upstream's model list says the model does not think).
  const refused = await router.http.post("/v1/chat/completions", { model: "rt", ...ask, reasoning: { budget_tokens: 8 } });
  assert.equal(refused.status, 400, refused.text);
  assert.equal(refused.error!.param, "reasoning");
});

test("an embedding-only upstream model embeds through the router and refuses generation with the local model's 400", async () => {
  const listed = (await requestJson(`${router.url}/v1/models`, "GET")).json.data.find((m: any) => m.id === "rb");
  assert.equal(listed?.embedding?.embedding_only, true, JSON.stringify(listed));
  const input = ["the river and the king", "a city"];
  const direct = await postJson(`${up[0].url}/v1/embeddings`, { model: "bert", input });
  const routed = await postJson(`${router.url}/v1/embeddings`, { model: "rb", input });
  assert.equal(routed.status, 200, routed.text);
  assert.equal(routed.json.data.length, 2);
  for (const [i, d] of routed.json.data.entries()) {
    const want = direct.json.data[i].embedding as number[];
    assert.equal(d.embedding.length, want.length);
    assert.ok(d.embedding.every((x: number, j: number) => Math.abs(x - want[j]) < 1e-5));
  }
  // Token-id input: the usage is the upstream's count (its special tokens included), and so is a
  // batch's; many inputs go up in one request, in order.
  for (const tokenInput of [[[101, 200, 102], [101, 102]], [101, 200, 102]]) {
    const straight = await postJson(`${up[0].url}/v1/embeddings`, { model: "bert", input: tokenInput });
    const through = await postJson(`${router.url}/v1/embeddings`, { model: "rb", input: tokenInput });
    assert.equal(through.status, 200, through.text);
    assert.equal(through.json.usage.prompt_tokens, straight.json.usage.prompt_tokens, JSON.stringify(tokenInput));
  }
  // Refusals name the same field as straight: a token outside the vocabulary, an input too long.
  for (const bad of [[[101, 2000, 102]], [[101, 102], [101, 2000, 102]], ["word ".repeat(3000)]]) {
    const straight = await postJson(`${up[0].url}/v1/embeddings`, { model: "bert", input: bad });
    const through = await postJson(`${router.url}/v1/embeddings`, { model: "rb", input: bad });
    assert.equal(straight.status, 400, straight.text);
    assert.equal(through.status, 400, through.text);
    assert.equal(through.json.error.param, straight.json.error.param, `${through.text} / ${straight.text}`);
  }
  const many = Array.from({ length: 300 }, (_, i) => `line ${i} of the river`);
  const straight = await postJson(`${up[0].url}/v1/embeddings`, { model: "bert", input: many });
  const through = await postJson(`${router.url}/v1/embeddings`, { model: "rb", input: many });
  assert.equal(through.status, 200, through.text.slice(0, 300));
  assert.equal(through.json.usage.prompt_tokens, straight.json.usage.prompt_tokens);
  assert.equal(through.headers.get("x-plinth-upstream"), up[0].url, "the replica that embedded is named, as for generation");
  for (const i of [0, 150, 299]) {
    const want = straight.json.data[i].embedding as number[];
    assert.ok((through.json.data[i].embedding as number[]).every((x: number, j: number) => Math.abs(x - want[j]) < 1e-5), `input ${i}`);
  }
  const local = await postJson(`${up[0].url}/v1/chat/completions`, { model: "bert", ...ask });
  for (const [path, body] of [
    ["/v1/chat/completions", { model: "rb", ...ask }],
    ["/v1/completions", { model: "rb", prompt: "the river", max_tokens: 4 }],
    ["/v1/responses", { model: "rb", input: "the river", max_output_tokens: 16 }],
  ] as const) {
    const r = await postJson(`${router.url}${path}`, body);
    assert.equal(r.status, 400, `${path}: ${r.text}`);
    assert.equal(r.json.error.code, local.json.error.code, r.text);
    assert.equal(r.json.error.param, "model", r.text);
    assert.match(r.json.error.message, /'rb' is an embedding model/);
  }
});

test("a client that cancels a stream through the router stops the upstream's generation too", async () => {
  const scrape = async (url: string, pattern: RegExp) => Number(pattern.exec(await (await fetch(`${url}/metrics`)).text())?.[1] ?? 0);
  const closed = /^plinth_generation_failures_total\{model_name="tiny",code="client_closed"\} (\d+)/m;
  const generated = /^vllm:generation_tokens_total\{model_name="tiny"\} (\d+)/m;
  const before = await Promise.all(up.map(async (u) => [await scrape(u.url, closed), await scrape(u.url, generated)]));
  const res = await streamThenCancel(`${router.url}/v1/chat/completions`, { model: "rt", ...ask, max_tokens: 400, stream: true });
  const served = up.findIndex((u) => u.url === res.headers.get("x-plinth-upstream"));
  assert.ok(served >= 0);
  // The replica sees its own client (the router) go away and stops well short of the budget.
  const deadline = Date.now() + 10_000;
  while ((await scrape(up[served].url, closed)) === before[served][0] && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(await scrape(up[served].url, closed), before[served][0] + 1);
  const spent = (await scrape(up[served].url, generated)) - before[served][1];
  assert.ok(spent >= 5 && spent < 400, `the replica generated ${spent} tokens`);
  // The router books what the replica had streamed to it.
  assert.equal(await scrape(router.url, /^plinth_generation_failures_total\{model_name="rt",code="client_closed"\} (\d+)/m), 1);
});

test("a regex-held answer (guided_regex, guided_choice) goes upstream as structured_outputs and holds there", async () => {
  for (const [field, shape] of [
    [{ guided_regex: "[0-9]{2}-[a-z]{3}" }, /^[0-9]{2}-[a-z]{3}$/],
    [{ guided_choice: ["red", "green (dark)"] }, /^(red|green \(dark\))$/],
  ] as const) {
    const r = await router.http.post("/v1/chat/completions", { model: "rt", ...ask, max_tokens: 20, ...field } as never);
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].message.content!, shape);
  }
  // A pattern the upstream cannot enforce comes back named as the client sent it.
  const bad = await router.http.post("/v1/chat/completions", { model: "rt", ...ask, guided_regex: "(a" } as never);
  assert.equal(bad.status, 400, bad.text);
  assert.equal((bad.json as unknown as { error: { param: string } }).error.param, "guided_regex");
});

test("the router's model list describes an upstream's embeddings as the upstream does (pooling, input limit)", async () => {
  const list = async (s: TestServer) => ((await (await fetch(`${s.url}/v1/models`)).json()) as { data: Array<{ id: string; embedding?: unknown }> }).data;
  const upstream = await list(up[0]);
  const routed = await list(router);
  for (const [mine, theirs] of [["rb", "bert"], ["rt", "tiny"]]) {
    const a = routed.find((m) => m.id === mine)?.embedding;
    const b = upstream.find((m) => m.id === theirs)?.embedding;
    assert.ok(b, `the upstream's ${theirs} embeds`);
    // A router claimed "mean" pooling and one token more than the upstream takes.
    assert.deepEqual(a, b, mine);
  }
});

test("an upstream's refusal of the answer's schema names the field as each dialect spells it", async () => {
  const bogus = { type: "bogus" };
  const chat = await router.http.post("/v1/chat/completions", {
    model: "rt",
    ...ask,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: bogus } },
  } as never);
  assert.equal(chat.status, 400, chat.text);
  assert.equal((chat.json as any).error.param, "response_format.json_schema.schema");
  const responses = await fetch(`${router.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "rt", input: "hi", text: { format: { type: "json_schema", name: "x", schema: bogus } } }),
  });
  const body = (await responses.json()) as any;
  assert.equal(responses.status, 400, JSON.stringify(body));
  assert.equal(body.error.param, "text.format.schema");
});

test("reasoning controls on a model the upstream says does not think are refused as a local model refuses them", async () => {
  const body = { ...ask, reasoning_effort: "low" };
  const direct = await up[0].http.post("/v1/chat/completions", { model: "tiny", ...body } as never);
  const routed = await router.http.post("/v1/chat/completions", { model: "rt", ...body } as never);
  assert.equal(direct.status, 400, direct.text);
  assert.equal(routed.status, 400, routed.text);
  const [d, r] = [direct.json as any, routed.json as any];
  assert.equal(r.error.param, d.error.param);
  assert.equal(r.error.code, d.error.code);
  assert.equal(r.error.message, d.error.message.replace("'tiny'", "'rt'"));
});

test("an upstream's refusal keeps the upstream's own error code (a straight request's), not only that it was refused", async () => {
  const body = {
    ...ask,
    messages: [{ role: "user", content: [{ type: "text", text: "and this?" }, { type: "image_url", image_url: { url: "https://example.com/a.png" } }] }],
  };
  const direct = await up[0].http.post("/v1/chat/completions", { model: "tiny", ...body } as never);
  const routed = await router.http.post("/v1/chat/completions", { model: "rt", ...body } as never);
  assert.equal(direct.status, 400, direct.text);
  assert.equal(routed.status, 400, routed.text);
  assert.equal((routed.json as any).error.code, (direct.json as any).error.code);
  assert.equal((routed.json as any).error.param, (direct.json as any).error.param);
});

test("a refusal names the field the client sent, in its dialect's spelling, as a local model's does", async () => {
  const m = [{ role: "user", content: "hi" }];
  const param = async (path: string, body: object) => {
    const r = await postJson(`${router.url}${path}`, body);
    assert.equal(r.status, 400, r.text);
    return r.json.error.param;
  };
  assert.equal(await param("/v1/chat/completions", { model: "narrow", messages: m, prompt_cache_key: "k" }), "prompt_cache_key");
  assert.equal(await param("/v1/responses", { model: "narrow", input: "a", prompt_cache_key: "k" }), "prompt_cache_key");
  assert.equal(await param("/v1/responses", { model: "narrow", input: "a", include: ["message.output_text.logprobs"] }), "include");
  assert.equal(await param("/v1/chat/completions", { model: "vk", messages: m, thinking_budget_tokens: 10 }), "thinking_budget_tokens");
  assert.equal(await param("/v1/chat/completions", { model: "vk", messages: m, reasoning: { budget_tokens: 10 } }), "reasoning.budget_tokens");
  // Refused by the upstream (a Plinth): its field comes through as the local model names it.
  const long = "word ".repeat(3000);
  const direct = await postJson(`${up[0].url}/v1/embeddings`, { model: "bert", input: ["short", long] });
  assert.equal(direct.json.error?.param, "input[1]", direct.text);
  assert.equal(await param("/v1/embeddings", { model: "rb", input: ["short", long] }), "input[1]");
  const directIds = await postJson(`${up[0].url}/detokenize`, { model: "tiny", tokens: [99999999] });
  assert.equal(directIds.json.error?.param, "tokens[0]", directIds.text);
  assert.equal(await param("/detokenize", { model: "rt", tokens: [99999999] }), "tokens[0]");
});
