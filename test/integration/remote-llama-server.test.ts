import assert from "../helpers/assert.ts";
import { expectSchemaAnswers } from "../helpers/json-schema-check.ts";
import { after, before, describe, test } from "node:test";
import { ensureBertFixtureModel, ensureFixtureModel, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { type LlamaServer, startLlamaServer } from "../helpers/llama-server.ts";
import { NO_EOG, postJson, requestJson, startTestServer, type TestServer } from "../helpers/server.ts";

// A real llama-server (built from the llama.cpp node-llama-cpp bundles) on the tiny fixture model,
// two slots of 256 tokens each, behind a Plinth router as "ls". Every check compares what comes
// through the router with what llama-server answers when asked directly.
const bin = process.env.LLAMA_SERVER_BIN;
const skip = bin ? false : "LLAMA_SERVER_BIN is not set: it names a llama-server binary to run as an upstream (CI has none)";
const SLOT_CONTEXT = 256;

/**
 * Registers hooks that start a llama-server on the model `model()` writes, with `args`, behind a
 * Plinth router whose upstreams `upstreams(url)` lists, and stop both after the suite. The returned
 * object is filled in when the hooks have run.
 */
function llamaBehindRouter(model: () => Promise<string>, args: string[], upstreams: (url: string) => object[]) {
  const started = {} as { llama: LlamaServer; router: TestServer };
  before(async () => {
    started.llama = await startLlamaServer(bin!, await model(), args);
    try {
      started.router = await startTestServer({ upstream: upstreams(started.llama.url), "health-interval": "0" });
    } catch (err) {
      await started.llama.close();
      throw err;
    }
  });
  after(async () => {
    await started.router?.close();
    await started.llama?.close();
  });
  return started;
}

describe("llama-server behind a Plinth router", { skip }, () => {
  let llama: LlamaServer;
  let router: TestServer;
  // "ls-own" never counts, so llama-server's own context error is what refuses.
  const started = llamaBehindRouter(ensureFixtureModel, ["-np", "2", "-c", String(2 * SLOT_CONTEXT), "-t", "1"], (url) => [
    { name: "ls", url: [url] },
    { name: "ls-own", url: [url], tokenize: false },
  ]);
  before(() => ({ llama, router } = started));

  const messages = [{ role: "user" as const, content: "Tell me about the river and the king." }];
  const ask = { messages, max_tokens: 8, temperature: 0, logit_bias: NO_EOG };
  const direct = (path: string, body: unknown) => postJson(`${llama.url}${path}`, body);

  test("discovery: llama-server's only model, one slot's context, its slot count, no embeddings", async () => {
    const r = await fetch(`${router.url}/v1/models`).then((x) => x.json());
    const m = r.data.find((e: any) => e.id === "ls");
    assert.equal(m.max_model_len, SLOT_CONTEXT, "meta.n_ctx of llama-server's /v1/models, the context one request can use");
    assert.equal(m.parallel, 2, "total_slots of llama-server's /props: the router sends it no more than its -np");
    assert.equal(m.embedding, undefined, "a llama-server without --embeddings does not embed");
    const e = await postJson(`${router.url}/v1/embeddings`, { model: "ls", input: "hello" });
    assert.equal(e.status, 400, e.text);
    assert.match(e.json.error.message, /embed/);
  });

  test("chat, not streamed: llama-server's own answer and usage", async () => {
    const d = await direct("/v1/chat/completions", ask);
    const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", ...ask });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, d.json.choices[0].message.content);
    assert.ok(r.json.choices[0].message.content.length > 0);
    assert.equal(r.json.choices[0].finish_reason, "length");
    assert.equal(r.json.usage.prompt_tokens, d.json.usage.prompt_tokens);
    assert.equal(r.json.usage.completion_tokens, 8);
    assert.equal(r.headers.get("x-plinth-upstream"), llama.url);
  });

  test("a regex or a list of choices reaches llama-server as a GBNF grammar, and its answer holds to it; ignore_eos passes on", async () => {
    for (const [field, shape] of [
      [{ guided_regex: "[0-9]{2}-[a-z]{3}" }, /^[0-9]{2}-[a-z]{3}$/],
      [{ guided_choice: ["red", "green (dark)"] }, /^(red|green \(dark\))$/],
    ] as const) {
      const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages, max_tokens: 20, ...field });
      assert.equal(r.status, 200, r.text);
      assert.match(r.json.choices[0].message.content, shape);
    }
    const bad = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages, guided_regex: "(a" });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.param, "guided_regex");
    const ran = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages, max_tokens: 6, ignore_eos: true, logit_bias: { [FIXTURE_TOKENS.eos]: 100 } });
    assert.equal(ran.status, 200, ran.text);
    assert.equal(ran.json.usage.completion_tokens, 6);
  });

  test("chat, streamed, with logprobs: the same tokens and log probabilities, usage at the end", async () => {
    const body = { ...ask, logprobs: true, top_logprobs: 2, stream_options: { include_usage: true } };
    const d = await direct("/v1/chat/completions", { ...body, stream: false });
    const s = await router.http.chatStream({ model: "ls", ...body });
    assert.ok(s.done, s.text);
    assert.deepEqual(s.errors, []);
    assert.equal(s.content, d.json.choices[0].message.content);
    assert.ok(s.pieces.length > 1, "text arrives in pieces");
    const mine = s.chunks.flatMap((c) => c.choices.flatMap((ch: any) => ch.logprobs?.content ?? []));
    const theirs = d.json.choices[0].logprobs.content;
    assert.equal(mine.length, 8);
    assert.deepEqual(
      mine.map((e: any) => [e.token, e.bytes, e.top_logprobs.map((t: any) => t.token)]),
      theirs.map((e: any) => [e.token, e.bytes, e.top_logprobs.map((t: any) => t.token)]),
    );
    for (const [i, e] of mine.entries()) assert.ok(Math.abs(e.logprob - theirs[i].logprob) < 1e-4);
    assert.equal(s.usage!.completion_tokens, 8);
    assert.equal(s.usage!.prompt_tokens, d.json.usage.prompt_tokens);
  });

  test("completions with logprobs (llama-server sends chat-style entries; they arrive as legacy arrays)", async () => {
    const body = { prompt: "Once upon a time", max_tokens: 5, temperature: 0, logprobs: 2, logit_bias: NO_EOG };
    const d = await direct("/v1/completions", body);
    const r = await router.http.complete({ model: "ls", ...body });
    assert.equal(r.choices[0].text, d.json.choices[0].text);
    const theirs = d.json.choices[0].logprobs.content;
    assert.deepEqual(r.choices[0].logprobs!.tokens, theirs.map((e: any) => e.token));
    assert.ok(r.choices[0].logprobs!.token_logprobs.every((l, i) => Math.abs(l! - theirs[i].logprob) < 1e-4));
    assert.equal(r.usage!.prompt_tokens, d.json.usage.prompt_tokens);
  });

  test("a prompt too long for a slot is refused with Plinth's 400 before any output, streamed or not", async () => {
    const long = Array.from({ length: 120 }, () => "river king city").join(" ");
    for (const stream of [false, true]) {
      const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages: [{ role: "user", content: long }], max_tokens: 4, stream });
      assert.equal(r.status, 400, r.text);
      assert.match(r.headers.get("content-type")!, /application\/json/);
      assert.equal(r.json.error.code, "context_length_exceeded");
      assert.equal(r.json.error.param, "messages");
    }
    const c = await postJson(`${router.url}/v1/completions`, { model: "ls", prompt: long, max_tokens: 4 });
    assert.equal(c.status, 400, c.text);
    assert.equal(c.json.error.code, "context_length_exceeded");
    assert.equal(c.json.error.param, "prompt");
  });

  test("without counting, llama-server's own context error becomes the same 400, before any output", async () => {
    const long = Array.from({ length: 120 }, () => "river king city").join(" ");
    const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls-own", messages: [{ role: "user", content: long }], max_tokens: 4, stream: true });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, "context_length_exceeded");
    assert.equal(r.json.error.param, "messages");
    assert.match(r.json.error.message, /exceeds the available context size/);
  });

  test("max_tokens beyond the room a slot has left is refused, counted by llama-server's tokenizer", async () => {
    // llama-server itself would stop at the slot's end and call it "length"; Plinth refuses instead.
    const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages, max_tokens: SLOT_CONTEXT });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, "max_tokens");
    assert.equal(r.json.error.code, "context_length_exceeded");
    const d = await direct("/v1/chat/completions", { messages, max_tokens: 1 });
    assert.match(r.json.error.message, new RegExp(`uses ${d.json.usage.prompt_tokens} of`));
  });

  test("/tokenize and /detokenize through the router use llama-server's own endpoints", async () => {
    const d = await direct("/v1/chat/completions", { messages, max_tokens: 1 });
    const t = await router.http.tokenize({ model: "ls", messages } as any);
    assert.equal(t.count, d.json.usage.prompt_tokens, "the rendered chat prompt, as llama-server counts it");
    const plain = await router.http.tokenize({ model: "ls", prompt: "Hello world", add_special_tokens: false } as any);
    assert.deepEqual(plain.tokens, (await direct("/tokenize", { content: "Hello world" })).json.tokens);
    assert.equal((await router.http.detokenize({ model: "ls", tokens: plain.tokens } as any)).prompt, "Hello world");
    const named = await postJson(`${router.url}/tokenize`, { model: "ls", prompt: "Hello world" });
    assert.equal(named.headers.get("x-plinth-upstream"), llama.url, "the replica that counted is named");
  });

  test("json_schema: llama-server's grammar-constrained answer validates", () => expectSchemaAnswers(router.http, "ls"));

  test("repetition_penalty reaches llama-server under its own name (repeat_penalty)", async () => {
    const body = { messages, max_tokens: 40, temperature: 0, logit_bias: NO_EOG };
    const plain = (await direct("/v1/chat/completions", body)).json.choices[0].message.content;
    const penalised = (await direct("/v1/chat/completions", { ...body, repeat_penalty: 1.8 })).json.choices[0].message.content;
    assert.notEqual(penalised, plain, "the penalty changes this answer, so the check below means something");
    const r = await router.http.chat({ model: "ls", ...body, repetition_penalty: 1.8 });
    assert.equal(r.choices[0].message.content, penalised);
  });

  test("what llama-server would ignore or Plinth cannot carry is refused with a 400 naming the field", async () => {
    // The fixture's chat template has no tools; llama-server's /props says so, and it would
    // otherwise answer with plain text even under tool_choice "required".
    const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const t = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages, tools, tool_choice: "required" });
    assert.equal(t.status, 400, t.text);
    assert.equal(t.json.error.param, "tools");
    assert.match(t.json.error.message, /not supported by the upstream serving 'ls'/);
    const echo = await postJson(`${router.url}/v1/completions`, { model: "ls", prompt: "Once", max_tokens: 2, echo: true });
    assert.equal(echo.status, 400, echo.text);
    assert.equal(echo.json.error.param, "echo");
    const fim = await postJson(`${router.url}/v1/completions`, { model: "ls", prompt: "def f(", suffix: "return x", max_tokens: 2 });
    assert.equal(fim.status, 400, fim.text);
    assert.equal(fim.json.error.param, "suffix");
  });

  test("an image for a llama-server without --mmproj is refused by its part (its /props says no vision), and never ejects the replica", async () => {
    const PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    const content = [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: PNG } }];
    // More than --eject-after (3): llama-server's own answer is a 500, which ejected the replica.
    for (let i = 0; i < 4; i++) {
      const r = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", messages: [{ role: "user", content }], max_tokens: 2 });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, "messages[0].content[1]");
    }
    const plain = await postJson(`${router.url}/v1/chat/completions`, { model: "ls", ...ask });
    assert.equal(plain.status, 200, plain.text);
  });
});

describe("an --embeddings llama-server behind a Plinth router", { skip }, () => {
  let llama: LlamaServer;
  let router: TestServer;
  const started = llamaBehindRouter(ensureBertFixtureModel, ["--embeddings", "-c", "512", "-t", "1"], (url) => [{ name: "le", url: [url] }]);
  before(() => ({ llama, router } = started));

  const messages = [{ role: "user" as const, content: "Tell me about the river and the king." }];

  test("it embeds as llama-server does, is listed as embedding-only, and generation is refused before it reaches llama-server", async () => {
    const input = ["the river and the king", "a city"];
    const direct = await postJson(`${llama.url}/v1/embeddings`, { input });
    const routed = await postJson(`${router.url}/v1/embeddings`, { model: "le", input });
    assert.equal(routed.status, 200, routed.text);
    for (const [i, d] of routed.json.data.entries()) {
      const want = direct.json.data[i].embedding as number[];
      assert.equal(d.embedding.length, want.length);
      assert.ok(d.embedding.every((x: number, j: number) => Math.abs(x - want[j]) < 1e-5));
    }
    assert.equal(routed.json.usage.prompt_tokens, direct.json.usage.prompt_tokens);
    const listed = (await requestJson(`${router.url}/v1/models`, "GET")).json.data.find((m: any) => m.id === "le");
    assert.equal(listed?.embedding?.embedding_only, true, JSON.stringify(listed));
    // llama-server itself answers a generation with a 500, which would count against the replica.
    assert.equal((await postJson(`${llama.url}/v1/chat/completions`, { messages })).status, 500);
    for (const [path, body] of [["/v1/chat/completions", { messages }], ["/v1/completions", { prompt: "x" }]] as const) {
      const r = await postJson(`${router.url}${path}`, { model: "le", ...body, max_tokens: 2 });
      assert.equal(r.status, 400, `${path}: ${r.text}`);
      assert.equal(r.json.error.param, "model");
      assert.match(r.json.error.message, /'le' is an embedding model/);
    }
    // The replica is still in service.
    assert.equal((await postJson(`${router.url}/v1/embeddings`, { model: "le", input: "again" })).status, 200);
  });

  test("an input too long for llama-server is named by its index, which llama-server does not say", async () => {
    const long = "river king city ".repeat(400);
    const direct = await postJson(`${llama.url}/v1/embeddings`, { input: ["short", long] });
    assert.ok(direct.status >= 400, direct.text);
    for (const input of [["short", long], [long, "short", "a city"], [[1, 2, 3], long]]) {
      const r = await postJson(`${router.url}/v1/embeddings`, { model: "le", input });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, `input[${input.indexOf(long)}]`, r.text);
    }
    assert.equal((await postJson(`${router.url}/v1/embeddings`, { model: "le", input: "again" })).status, 200);
  });
});
