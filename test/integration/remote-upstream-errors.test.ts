import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import zlib from "node:zlib";
import type { AddressInfo } from "node:net";
import type { RemoteEngine } from "../../src/engines/remote/remote-engine.ts";
import { postJson, startTestServer, type TestServer, waitFor } from "../helpers/server.ts";

// How a router reads an upstream's refusals, against a stand-in upstream (a small real HTTP server
// speaking just enough of OpenAI's chat API) whose answer each test sets: who is at fault decides
// the status the client sees and whether the replica is charged a failure.

type Answer =
  | "ok"
  | "break-mid"
  | "tokenize-500"
  | "401"
  | "404"
  | "404-route"
  | "413"
  | "302"
  | "204"
  | "error-event-400"
  | "error-event-500"
  | "refusal"
  | "whole"
  | "logprobs-many"
  | "bad-tokens"
  | "gzip"
  | "deflate"
  | "br"
  | "zstd"
  | "gzip-400"
  | "runaway"
  | "done-only"
  | "no-choices"
  | "vllm-effort"
  | "cached-over"
  | "500-html"
  | "503-later"
  | "400-text"
  | "500-image"
  | "tools-no-index";
let answer: Answer = "ok";
/** Runaway streams the upstream has seen closed by the router. */
let runawaysClosed = 0;
/** While set, a compressed stream holds its last chunks until the test calls it (see the gzip test). */
let hold: Promise<void> | undefined;
/** The last generation request the upstream received, parsed. */
let lastBody: any;
let upstream: http.Server;
/** /tokenize requests the stand-in has seen. */
let tokenizeCalls = 0;
let url = "";
let r: TestServer;

const chunk = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/**
 * A server (or a proxy before it) that compresses whatever the client asked for, flushing after each
 * event as a streaming server must. "zstd" is a coding Node 20 cannot read: it sends gzip bytes under
 * that name.
 */
async function compressed(res: http.ServerResponse, mode: "gzip" | "deflate" | "br" | "zstd" | "gzip-400") {
  const coder = mode === "deflate" ? zlib.createDeflate() : mode === "br" ? zlib.createBrotliCompress() : zlib.createGzip();
  const flush = () => new Promise<void>((resolve) => (mode === "br" ? (coder as zlib.BrotliCompress).flush(zlib.constants.BROTLI_OPERATION_FLUSH, resolve) : coder.flush(resolve)));
  const status = mode === "gzip-400" ? 400 : 200;
  res.writeHead(status, { "content-type": status === 200 ? "text/event-stream" : "application/json", "content-encoding": mode === "gzip-400" ? "gzip" : mode });
  coder.pipe(res);
  if (status === 400) return void coder.end(JSON.stringify({ error: { message: "temperature must be at most 2", type: "invalid_request_error", param: "temperature" } }));
  coder.write(chunk({ role: "assistant", content: "" }));
  coder.write(chunk({ content: "Hello" }));
  await flush();
  await hold;
  coder.write(chunk({ content: " there" }));
  coder.write(chunk({}, "stop"));
  coder.end("data: [DONE]\n\n");
}

/** A second port of the same stand-in: another replica, for the failover tests. */
let upstream2: http.Server;
let url2 = "";
/** The port whose replica took the last "hold" request (see the failover tests). */
let holdingPort: number | undefined;
/** "fail-free" requests failed with a 500 on the replica that was not holding. */
let freeFailures = 0;

before(async () => {
  const handler: http.RequestListener = (req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      // "m1": a model whose replicas run one request at once (the router learns it from `parallel`).
      if (req.url === "/v1/models") return void res.writeHead(200, { "content-type": "application/json" }).end('{"object":"list","data":[{"id":"m","object":"model"},{"id":"m1","object":"model","parallel":1}]}');
      const json = (status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.url === "/tokenize") tokenizeCalls++;
      if (req.url === "/tokenize" && answer === "tokenize-500") return json(500, { error: { message: "tokenizer crashed", type: "InternalServerError" } });
      if (req.url === "/tokenize" && answer === "bad-tokens") return json(200, { tokens: [1, null, "x", 2.5, -1], count: 5, max_model_len: 4096 });
      if (req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      lastBody = JSON.parse(raw);
      const port = req.socket.localPort;
      const said = lastBody.messages?.[0]?.content;
      if (said === "hold") {
        // A long answer that holds its replica's one slot until the client leaves.
        // Kept after it ends: the replica that held stays the one "fail-free" succeeds on.
        holdingPort = port;
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(chunk({ role: "assistant", content: "" }));
        const timer = setInterval(() => res.write(chunk({ content: " word" })), 20);
        res.on("close", () => clearInterval(timer));
        return;
      }
      if (said === "fail-free" && port !== holdingPort) {
        freeFailures++;
        return json(500, { error: { message: "replica on fire", type: "server_error" } });
      }
      // Plinth's and vLLM's refusal of a token outside the vocabulary.
      if (lastBody.logit_bias?.["99999"] !== undefined) return json(400, { error: { message: "logit_bias: token 99999 is out of vocabulary", type: "invalid_request_error", param: "logit_bias" } });
      // vLLM's schema takes only these efforts; anything else fails its validation, a 400 naming no param.
      if (answer === "vllm-effort" && lastBody.reasoning_effort !== undefined && !["low", "medium", "high"].includes(lastBody.reasoning_effort))
        return json(400, { object: "error", message: `1 validation error: reasoning_effort: Input should be 'low', 'medium' or 'high'`, type: "Bad Request", param: null, code: 400 });
      if (answer === "gzip" || answer === "deflate" || answer === "br" || answer === "zstd" || answer === "gzip-400") return void compressed(res, answer);
      if (answer === "302") return void res.writeHead(302, { location: "https://elsewhere.example/v1/chat/completions" }).end();
      if (answer === "204") return void res.writeHead(204).end();
      if (answer === "500-html")
        return void res.writeHead(500, { "content-type": "text/html" }).end("<html><body><h1>Internal Server Error</h1><pre>Traceback (most recent call last):\n  File \"/srv/app.py\", line 3\nKeyError: secret=/srv/key</pre></body></html>");
      if (answer === "503-later") return void res.writeHead(503, { "retry-after": "9", "content-type": "text/plain" }).end("warming up");
      // llama-server without --mmproj, sent an image.
      if (answer === "500-image") return json(500, { error: { code: 500, message: "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj", type: "server_error" } });
      if (answer === "400-text") return void res.writeHead(400, { "content-type": "text/plain" }).end("prompt is not a string");
      if (answer === "401") return json(401, { error: { message: "invalid api key", type: "authentication_error" } });
      if (answer === "404") return json(404, { error: { message: "The model `m` does not exist.", type: "NotFoundError", code: 404 } });
      if (answer === "404-route") return json(404, { error: { message: "This is a chat model and not supported in this endpoint.", type: "invalid_request_error" } });
      if (answer === "413") return json(413, { error: { message: "request entity too large", type: "invalid_request_error" } });
      if (answer === "whole")
        // A server (or a proxy before it) that ignores stream: true and answers in one piece.
        return json(200, {
          id: "c",
          object: "chat.completion",
          created: 0,
          model: "m",
          choices: [{ index: 0, message: { role: "assistant", content: "Whole answer." }, finish_reason: "length" }],
          usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
        });
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (answer === "done-only") return void res.end("data: [DONE]\n\n");
      if (answer === "no-choices") return void res.end('data: {"foo":1}\n\ndata: [DONE]\n\n');
      if (answer === "runaway") {
        // Ignores max_tokens: a token every 5 ms until the router hangs up.
        res.write(chunk({ role: "assistant", content: "" }));
        const timer = setInterval(() => res.write(chunk({ content: " word" })), 5);
        res.on("close", () => {
          clearInterval(timer);
          runawaysClosed++;
        });
        return;
      }
      if (answer === "error-event-400" || answer === "error-event-500") {
        // vLLM's way: a 200, then the error as an event of the stream, before any output.
        const code = answer === "error-event-400" ? 400 : 500;
        res.write(`data: ${JSON.stringify({ error: { object: "error", message: "guided_json schema invalid", type: code === 400 ? "BadRequestError" : "InternalServerError", param: "response_format", code } })}\n\n`);
        return void res.end("data: [DONE]\n\n");
      }
      res.write(chunk({ role: "assistant", content: "" }));
      if (answer === "tools-no-index") {
        // Tool calls without `index` (some servers and proxies leave it out): a call in pieces,
        // a second one by its own id, then two in one delta.
        const call = (id: string | undefined, name: string | undefined, args: string) => ({ ...(id ? { id, type: "function" } : {}), function: { ...(name ? { name } : {}), arguments: args } });
        res.write(chunk({ tool_calls: [call("a", "f", "")] }));
        res.write(chunk({ tool_calls: [call(undefined, undefined, '{"x":')] }));
        res.write(chunk({ tool_calls: [call(undefined, undefined, "1}")] }));
        res.write(chunk({ tool_calls: [call("b", "g", '{"y":2}')] }));
        res.write(chunk({ tool_calls: [call("c", "h", "{}"), call("d", "k", '{"z":3}')] }));
        res.write(chunk({}, "tool_calls"));
        return void res.end("data: [DONE]\n\n");
      }
      if (answer === "break-mid") {
        // Output, then the connection drops without a finish reason or [DONE].
        res.write(chunk({ content: "Hel" }));
        return void setTimeout(() => res.destroy(), 20);
      }
      if (answer === "logprobs-many") {
        // One chunk with more log probabilities than a call can take as arguments.
        const content = Array.from({ length: 150_000 }, () => ({ token: "a", logprob: -0.5, top_logprobs: [] }));
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "a" }, logprobs: { content }, finish_reason: null }] })}\n\n`);
      } else if (answer === "cached-over") {
        // More cached tokens than the prompt has.
        res.write(chunk({ content: "Hello" }));
        res.write(chunk({}, "stop"));
        res.write(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6, prompt_tokens_details: { cached_tokens: 50 } } })}\n\n`);
        return void res.end("data: [DONE]\n\n");
      } else if (answer === "refusal") {
        res.write(chunk({ refusal: "I can't help" }));
        res.write(chunk({ refusal: " with that." }));
      } else res.write(chunk({ content: "Hello" }));
      res.write(chunk({}, "stop"));
      res.end("data: [DONE]\n\n");
    });
  };
  upstream = http.createServer(handler);
  upstream2 = http.createServer(handler);
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  await new Promise<void>((resolve) => upstream2.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  url2 = `http://127.0.0.1:${(upstream2.address() as AddressInfo).port}`;
  r = await startTestServer({
    upstream: [
      { name: "r", url: [url], model: "m", tokenize: false },
      // The DeepSeek-style dialect's one model, on the same stand-in.
      { name: "SpAk-Aster-V1-MOE", url: [url], model: "m", tokenize: false },
      // Counted through /tokenize where a prompt might not fit.
      { name: "counted", url: [url], model: "m" },
      // One slot (as the upstream reports) on one replica, and on two.
      { name: "one", url: [url], model: "m1", tokenize: false },
      { name: "pair", url: [url, url2], model: "m1", tokenize: false },
      // Declared not to think.
      { name: "plain", url: [url], model: "m", tokenize: false, unsupported: ["reasoning"] },
    ],
    "health-interval": "0",
    "eject-after": "3",
  });
});
after(async () => {
  await r?.close();
  for (const u of [upstream, upstream2]) {
    u.closeAllConnections();
    await new Promise<void>((resolve) => u.close(() => resolve()));
  }
});

const replica = () => (r.registry.resolve("r").engine as RemoteEngine).pool.replicas[0];
const ask = (extra: Record<string, unknown> = {}) => postJson(`${r.url}/v1/chat/completions`, { model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 5, ...extra });
/** Puts the stand-in back to answering well, and waits until its replica is admitted again. */
async function recover(): Promise<void> {
  answer = "ok";
  for (let i = 0; i < 40 && replica().state !== "up"; i++) {
    await new Promise((res) => setTimeout(res, 100));
    await ask();
  }
}

test("an error event before any output that blames the request is the client's 400, naming its field, and never ejects the replica", async () => {
  answer = "error-event-400";
  for (let i = 0; i < 4; i++) {
    for (const stream of [false, true]) {
      const res = await ask({ stream });
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.param, "response_format", res.text);
      assert.match(res.json.error.message, /guided_json schema invalid/);
    }
  }
  assert.equal(replica().state, "up");
  answer = "ok";
  assert.equal((await ask()).status, 200);
});

test("a schema no value satisfies, or past Plinth's limits, is refused as a local model refuses it, before anything is sent; one Plinth only cannot enforce is sent", async () => {
  const impossible = { type: "string", minLength: 5, maxLength: 2 };
  const refused = [
    { response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: impossible } } },
    { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", maxLength: 1e8 } } } },
    { tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { a: impossible }, required: ["a"] } } }] },
    { tools: [{ type: "function", function: { name: "f", parameters: { $ref: "#/$defs/a", $defs: { a: { anyOf: [{ $ref: "#/$defs/a" }, { type: "object" }] } } } } }] },
  ];
  for (const extra of refused)
    for (const stream of [false, true]) {
      lastBody = undefined;
      const res = await ask({ ...extra, stream });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error.param, extra.tools ? /^tools/ : /^response_format/, res.text);
      assert.equal(lastBody, undefined, "nothing went upstream");
    }
  // A keyword Plinth's compiler cannot enforce (`not`), under strict: the upstream may, so it goes.
  const relaxable = { type: "object", properties: { a: { type: "string", not: { const: "x" } } } };
  const ok = await ask({ response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: relaxable } } });
  assert.equal(ok.status, 200, ok.text);
  assert.deepEqual(lastBody.response_format.json_schema.schema, relaxable);
});

test("a 500 that the request's content caused (an image for a server without vision) is the client's 400 and never ejects the replica", async () => {
  answer = "500-image";
  for (let i = 0; i < 4; i++) {
    const res = await ask({ stream: i % 2 === 1 });
    assert.equal(res.status, 400, res.text);
    assert.match(res.json.error.message, /image input is not supported/);
  }
  assert.equal(replica().state, "up");
  assert.equal(replica().failures, 0);
  answer = "ok";
});

test("streamed tool calls without an index are told apart by their ids, names and places, not merged into one", async () => {
  answer = "tools-no-index";
  const tools = ["f", "g", "h", "k"].map((name) => ({ type: "function", function: { name, parameters: { type: "object" } } }));
  const res = await ask({ tools });
  answer = "ok";
  assert.equal(res.status, 200, res.text);
  const calls = res.json.choices[0].message.tool_calls.map((c: any) => [c.function.name, c.function.arguments]);
  assert.deepEqual(calls, [["f", '{"x":1}'], ["g", '{"y":2}'], ["h", "{}"], ["k", '{"z":3}']]);
});

test("an error event of the upstream's own (5xx) is still the replica's failure, streamed or not", async () => {
  // Streamed, the same status: no replica gave a first event, so the head was never written (a 200
  // that ended in an error event would escape the clients' retries by status).
  const asks: Array<[string, Record<string, unknown>]> = [
    ["/v1/chat/completions", { model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 5 }],
    ["/v1/chat/completions", { model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 5, stream: true }],
    ["/v1/responses", { model: "r", input: "hi", max_output_tokens: 5, stream: true }],
  ];
  for (const [path, body] of asks) {
    answer = "error-event-500";
    const res = await postJson(`${r.url}${path}`, body);
    assert.equal(res.status, 503, `${path} ${JSON.stringify(body)}: ${res.text}`);
    assert.match(String(res.headers.get("content-type")), /application\/json/, path);
    assert.ok(replica().failures > 0);
    answer = "ok";
    assert.equal((await ask()).status, 200);
    assert.equal(replica().failures, 0);
  }
});

test("a replica that refuses the router's key, or lacks the model, is the operator's 502, not the client's 400", async () => {
  for (const a of ["401", "404"] as const) {
    answer = a;
    const res = await ask();
    assert.equal(res.status, 502, res.text);
    assert.equal(res.json.error.code, "upstream_misconfigured");
    assert.match(res.json.error.message, /check its entry/);
    await recover();
  }
  // A 404 that is not about the model (a route the upstream lacks) is the request's: no failure counted.
  answer = "404-route";
  const route = await ask();
  assert.equal(route.status, 400, route.text);
  assert.equal(replica().failures, 0);
  answer = "413";
  const big = await ask();
  assert.equal(big.status, 413, big.text);
  answer = "ok";
});

/** With the upstream answering `mode`: the client's answer, whole and streamed (both must be 200). */
async function bothWays(mode: Answer) {
  answer = mode;
  try {
    const json = await ask();
    assert.equal(json.status, 200, json.text);
    const stream = await ask({ stream: true });
    assert.equal(stream.status, 200, stream.text);
    assert.ok(stream.text.trimEnd().endsWith("[DONE]"), stream.text);
    return { message: json.json.choices[0].message, choice: json.json.choices[0], usage: json.json.usage, streamed: stream.text };
  } finally {
    answer = "ok";
  }
}

test("an upstream's refusal text reaches the client as the answer's text, not dropped", async () => {
  const r = await bothWays("refusal");
  assert.equal(r.message.content, "I can't help with that.");
  assert.ok(r.streamed.includes("I can't help") && r.streamed.includes(" with that."), r.streamed);
});

test("an upstream that ignores stream: true and answers whole is read all the same, streamed or not to the client", async () => {
  const r = await bothWays("whole");
  assert.equal(r.message.content, "Whole answer.");
  assert.equal(r.choice.finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 3);
  assert.ok(r.streamed.includes("Whole answer."), r.streamed);
  assert.equal(replica().failures, 0);
});

test("a redirect is the operator's 502 and a 204 the replica's failure: neither is the client's 400", async () => {
  answer = "302";
  try {
    const moved = await ask();
    assert.equal(moved.status, 502, moved.text);
    assert.equal(moved.json.error.code, "upstream_misconfigured");
    answer = "204";
    const empty = await ask();
    assert.equal(empty.status, 503, empty.text);
    assert.equal(empty.json.error.code, "upstream_unavailable");
  } finally {
    await recover();
  }
});

test("one chunk carrying 150,000 log probabilities is rendered whole (chat and Responses), not a 500", async () => {
  answer = "logprobs-many";
  try {
    // A budget that allows them (the router holds an upstream to the client's max_tokens).
    const chat = await ask({ logprobs: true, max_tokens: 200_000 });
    assert.equal(chat.status, 200, chat.text.slice(0, 500));
    assert.equal(chat.json.choices[0].logprobs.content.length, 150_000);
    const responses = await postJson(`${r.url}/v1/responses`, { model: "r", input: "hi", max_output_tokens: 200_000 });
    assert.equal(responses.status, 200, responses.text.slice(0, 500));
  } finally {
    answer = "ok";
  }
});

test("a tokenizer answering values that are not token ids is the upstream's 502, not ids for the client", async () => {
  answer = "bad-tokens";
  try {
    const res = await postJson(`${r.url}/tokenize`, { model: "r", prompt: "hi" });
    assert.equal(res.status, 502, res.text);
    assert.equal(res.json.error.code, "upstream_error");
  } finally {
    answer = "ok";
  }
});

test("an upstream that compresses its answer although asked not to (gzip, deflate, br) is read, and still streams", async () => {
  for (const mode of ["gzip", "deflate", "br"] as const) {
    const r = await bothWays(mode);
    assert.equal(r.message.content, "Hello there", mode);
    assert.ok(r.streamed.includes('"Hello"') && r.streamed.includes('" there"'), r.streamed);
  }
  // The first words reach the client while the upstream still holds the rest: the router passes on
  // each flushed block instead of waiting for the compressed body to end.
  answer = "gzip";
  let release!: () => void;
  hold = new Promise<void>((resolve) => (release = resolve));
  const safety = setTimeout(() => release(), 20_000);
  try {
    const res = await fetch(`${r.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "r", messages: [{ role: "user", content: "hi" }], max_tokens: 5, stream: true }),
    });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let seen = "";
    while (!seen.includes('"Hello"')) {
      const { value, done } = await reader.read();
      assert.ok(!done, seen);
      seen += decoder.decode(value, { stream: true });
    }
    assert.ok(!seen.includes(" there"), "the rest was sent before the upstream let it go");
    release();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += decoder.decode(value, { stream: true });
    }
    assert.ok(seen.includes('" there"') && seen.trimEnd().endsWith("[DONE]"), seen);
  } finally {
    clearTimeout(safety);
    hold = undefined;
    answer = "ok";
  }
  assert.equal(replica().failures, 0);
});

test("a compressed error body is read as one (its message and field reach the client); a coding the router cannot read is the replica's failure", async () => {
  answer = "gzip-400";
  try {
    const refused = await ask();
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.json.error.message, /temperature must be at most 2/);
    assert.equal(refused.json.error.param, "temperature");
    answer = "zstd";
    const unreadable = await ask();
    assert.equal(unreadable.status, 503, unreadable.text);
    assert.ok(replica().failures > 0);
  } finally {
    await recover();
  }
  assert.equal((await ask()).status, 200);
});

test("an upstream that ignores max_tokens is cut at the budget (length), streamed or not, and its stream is closed", async () => {
  answer = "runaway";
  try {
    const whole = await ask({ max_tokens: 5 });
    assert.equal(whole.status, 200, whole.text);
    assert.equal(whole.json.choices[0].finish_reason, "length");
    assert.equal(whole.json.choices[0].message.content, " word".repeat(5));
    assert.equal(whole.json.usage.completion_tokens, 5);
    const streamed = await ask({ max_tokens: 5, stream: true });
    assert.equal(streamed.status, 200, streamed.text);
    assert.ok(streamed.text.trimEnd().endsWith("[DONE]"), streamed.text);
    assert.equal((streamed.text.match(/ word/g) ?? []).length, 5, streamed.text);
    await waitFor(() => runawaysClosed >= 2, 5_000);
  } finally {
    answer = "ok";
  }
  assert.equal(replica().failures, 0);
});

test("a stream without any choice ([DONE] alone, or chunks with no choices) is the replica's failure, not an empty answer", async () => {
  for (const mode of ["done-only", "no-choices"] as const) {
    answer = mode;
    try {
      const res = await ask();
      assert.equal(res.status, 503, `${mode}: ${res.text}`);
      assert.ok(replica().failures > 0, mode);
    } finally {
      await recover();
    }
  }
  assert.equal((await ask()).status, 200);
});

test("a replica that breaks its stream after output is a failure, not a lack of capacity: SpAk answers 503 like the other dialects, not an empty 200", async () => {
  answer = "break-mid";
  try {
    const spak = await postJson(`${r.url}/chat/completions`, { model: "SpAk-Aster-V1-MOE", messages: [{ role: "user", content: "hi" }], max_tokens: 5 });
    assert.equal(spak.status, 503, spak.text);
    assert.equal(spak.json.error.code, "upstream_unavailable", spak.text);
    const openai = await ask();
    assert.equal(openai.status, 503, openai.text);
  } finally {
    await recover();
  }
  assert.equal((await ask()).status, 200);
});

test("a /tokenize that fails does not fail generations the replica serves, nor eject it: the upstream checks its own context", async () => {
  answer = "tokenize-500";
  tokenizeCalls = 0;
  const counted = () => (r.registry.resolve("counted").engine as RemoteEngine).pool.replicas[0];
  try {
    // Long enough that its bound cannot show it fits, so the router asks for a count each time.
    const long = "word ".repeat(3000);
    for (let i = 0; i < 5; i++) {
      const res = await postJson(`${r.url}/v1/chat/completions`, { model: "counted", messages: [{ role: "user", content: long }], max_tokens: 5 });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json.choices[0].message.content, "Hello");
    }
    assert.equal(counted().state, "up");
    assert.equal(counted().failures, 0);
    // Asked once, then left alone for a while rather than on every request.
    assert.equal(tokenizeCalls, 1);
  } finally {
    answer = "ok";
  }
});

test("thinking switched off (Konan's default, SpAk's disabled, enable_thinking: false) reaches a vLLM-style upstream as the template switch, not as an effort vLLM refuses", async () => {
  answer = "vllm-effort";
  try {
    const messages = [{ role: "user", content: "hi" }];
    const asks: [string, Record<string, unknown>][] = [
      ["/v3/chat/completions", { model: "r", messages, max_tokens: 5 }],
      ["/v1/chat/completions", { model: "r", messages, max_tokens: 5, chat_template_kwargs: { enable_thinking: false } }],
      ["/v1/chat/completions", { model: "r", messages, max_tokens: 5, reasoning_effort: "none" }],
      ["/chat/completions", { model: "SpAk-Aster-V1-MOE", messages, max_tokens: 5, thinking: { type: "disabled" } }],
    ];
    for (const [path, body] of asks) {
      const res = await postJson(`${r.url}${path}`, body);
      assert.equal(res.status, 200, `${path} ${JSON.stringify(body)}: ${res.text}`);
      assert.deepEqual(lastBody.chat_template_kwargs, { enable_thinking: false }, JSON.stringify(lastBody));
      assert.equal(lastBody.reasoning_effort, undefined, JSON.stringify(lastBody));
    }
    // An effort the client names still goes up as itself.
    const low = await ask({ reasoning_effort: "low" });
    assert.equal(low.status, 200, low.text);
    assert.equal(lastBody.reasoning_effort, "low");
  } finally {
    answer = "ok";
  }
});

test("a model declared unsupported: [reasoning] answers a request for no thinking (as a local model that does not think does), sending no switch up; thinking asked for is refused", async () => {
  const messages = [{ role: "user", content: "hi" }];
  const asks: [string, Record<string, unknown>][] = [
    ["/v1/chat/completions", { model: "plain", messages, max_tokens: 5, reasoning_effort: "none" }],
    ["/v1/chat/completions", { model: "plain", messages, max_tokens: 5, chat_template_kwargs: { enable_thinking: false } }],
    ["/v1/responses", { model: "plain", input: "hi", max_output_tokens: 16, reasoning: { effort: "none" } }],
  ];
  for (const [path, body] of asks) {
    lastBody = undefined;
    const res = await postJson(`${r.url}${path}`, body);
    assert.equal(res.status, 200, `${path} ${JSON.stringify(body)}: ${res.text}`);
    assert.ok(lastBody, "it reached the upstream");
    assert.equal(lastBody.chat_template_kwargs, undefined, JSON.stringify(lastBody));
    assert.equal(lastBody.reasoning_effort, undefined, JSON.stringify(lastBody));
  }
  const high = await postJson(`${r.url}/v1/chat/completions`, { model: "plain", messages, max_tokens: 5, reasoning_effort: "high" });
  assert.equal(high.status, 400, high.text);
  assert.equal(high.json.error.param, "reasoning_effort");
});

test("an upstream reporting more cached tokens than its prompt has is held to the prompt's count (chat, Responses)", async () => {
  answer = "cached-over";
  try {
    const chat = await ask();
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.usage.prompt_tokens, 5);
    assert.equal(chat.json.usage.prompt_tokens_details.cached_tokens, 5, chat.text);
    const responses = await postJson(`${r.url}/v1/responses`, { model: "r", input: "hi", max_output_tokens: 5, store: false });
    assert.equal(responses.status, 200, responses.text);
    assert.equal(responses.json.usage.input_tokens_details.cached_tokens, 5, responses.text);
  } finally {
    answer = "ok";
  }
});

test("an upstream's error body that is not a message (an HTML page, a traceback) is described to the client, not passed on; a short plain-text one is; a 503's Retry-After is kept", async () => {
  // Each failure is followed by a success, so the replica is never ejected (--eject-after 3).
  const failing = async (a: Answer, extra: Record<string, unknown> = {}) => {
    answer = a;
    const res = await ask(extra);
    answer = "ok";
    assert.equal((await ask()).status, 200);
    return res;
  };
  for (const stream of [false, true]) {
    const res = await failing("500-html", { stream });
    assert.equal(res.status, 503, res.text);
    assert.doesNotMatch(res.text, /Traceback|secret|<html/, res.text);
    assert.match(res.json.error.message, /text\/html body of \d+ bytes/);
  }
  const later = await failing("503-later");
  assert.equal(later.status, 503, later.text);
  assert.equal(later.headers.get("retry-after"), "9");
  assert.match(later.json.error.message, /warming up/);
  const text = await failing("400-text");
  assert.equal(text.status, 400, text.text);
  assert.match(text.json.error.message, /prompt is not a string/);
});

/** Starts a streamed "hold" request on `model` (it holds a replica's one slot) and waits until the upstream has it. */
async function holdSlot(model: string): Promise<AbortController> {
  const stop = new AbortController();
  holdingPort = undefined;
  void fetch(`${r.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hold" }], stream: true }),
    signal: stop.signal,
  })
    .then((res) => res.text())
    .catch(() => {});
  await waitFor(() => holdingPort !== undefined, 5_000);
  return stop;
}

test("a streamed request the upstream refuses is its 400 even while it waits for a replica slot, not a 200 with an error event", async () => {
  const busy = await holdSlot("one");
  const bad = postJson(`${r.url}/v1/chat/completions`, { model: "one", messages: [{ role: "user", content: "x" }], max_tokens: 5, logit_bias: { "99999": 5 }, stream: true });
  // The refusal comes only once the slot is free and the upstream has seen the request.
  await new Promise((res) => setTimeout(res, 300));
  busy.abort();
  const res = await bad;
  assert.equal(res.status, 400, res.text);
  assert.equal(res.json.error.param, "logit_bias");
});

test("a choice that failed on a replica while opening is not retried there, and the header names the replica that served it", async () => {
  const busy = await holdSlot("pair");
  const held = holdingPort === (upstream.address() as AddressInfo).port ? url : url2;
  freeFailures = 0;
  const asked = postJson(`${r.url}/v1/chat/completions`, { model: "pair", messages: [{ role: "user", content: "fail-free" }], max_tokens: 5, stream: true });
  // The free replica fails it at once; it then waits for the held one.
  await waitFor(() => freeFailures === 1, 5_000);
  await new Promise((res) => setTimeout(res, 200));
  busy.abort();
  const res = await asked;
  assert.equal(res.status, 200, res.text);
  assert.match(res.text, /Hello/);
  assert.equal(freeFailures, 1, "the replica it failed on was not tried again");
  assert.equal(res.headers.get("x-plinth-upstream"), held);
});
