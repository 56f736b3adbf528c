import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { postJson, startTestServer, type TestServer, waitFor } from "../helpers/server.ts";

// A request without max_tokens, routed to an upstream that never stops: the router cuts the answer
// where the model's context ends, as a local model stops there, instead of holding it (or streaming
// it) for hours. The upstream is a scripted fake (a small real HTTP server, not a model): its model
// list says a 300-token context, its /tokenize counts every prompt as 20 tokens, and its chat
// stream sends " w" deltas until the router hangs up, never a finish reason or [DONE].
const CONTEXT = 300;
const PROMPT_TOKENS = 20;
let upstream: http.Server;
let r: TestServer;
/** Endless streams the upstream has seen closed by the router. */
let closed = 0;

const chunk = (delta: unknown) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;

before(async () => {
  upstream = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      const json = (body: unknown) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.url === "/v1/models") return json({ object: "list", data: [{ id: "m", object: "model", max_model_len: CONTEXT }] });
      if (req.url === "/tokenize") return json({ count: PROMPT_TOKENS, max_model_len: CONTEXT, tokens: [] });
      if (req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: "" }));
      if (body.includes("only empty events")) {
        // One token, then every 20 ms an event with nothing in it: an empty delta, an empty content,
        // or usage alone, never a finish reason or [DONE].
        res.write(chunk({ content: " w" }));
        const empty = [
          chunk({}),
          chunk({ content: "" }),
          `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "m", choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })}\n\n`,
        ];
        let i = 0;
        const timer = setInterval(() => res.write(empty[i++ % empty.length]), 20);
        res.on("close", () => {
          clearInterval(timer);
          closed++;
        });
        return;
      }
      // Ten deltas a millisecond or so, for as long as the router reads.
      const timer = setInterval(() => {
        for (let i = 0; i < 10; i++) res.write(chunk({ content: " w" }));
      }, 1);
      res.on("close", () => {
        clearInterval(timer);
        closed++;
      });
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  r = await startTestServer({
    upstream: [
      // Never counted: the whole context is the most the answer can take.
      { name: "uncounted", url: [url], model: "m", tokenize: false },
      // Counted when its bound cannot show that it fits: the context less the prompt's 20 tokens.
      { name: "counted", url: [url], model: "m" },
      // A short idle timeout, for the upstream that goes on sending events with nothing in them.
      { name: "quiet", url: [url], model: "m", tokenize: false, "idle-timeout": 1 },
    ],
    "health-interval": "0",
  });
});
after(async () => {
  await r?.close();
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

async function cutAt(model: string, content: string, expected: number) {
  for (const stream of [false, true]) {
    const before = closed;
    const res = await postJson(`${r.url}/v1/chat/completions`, { model, stream, messages: [{ role: "user", content }] });
    assert.equal(res.status, 200, res.text);
    if (stream) {
      assert.ok(res.text.trimEnd().endsWith("data: [DONE]"), res.text.slice(-300));
      assert.match(res.text, /"finish_reason":"length"/);
      assert.equal((res.text.match(/ w/g) ?? []).length, expected, `${model}, streamed`);
    } else {
      assert.equal(res.json.choices[0].finish_reason, "length");
      assert.equal(res.json.choices[0].message.content, " w".repeat(expected));
      assert.equal(res.json.usage.completion_tokens, expected);
    }
    await waitFor(() => closed > before, 5_000);
  }
}

test("without max_tokens, an endless upstream is cut at the whole context when the prompt was not counted", { timeout: 30_000 }, async () => {
  await cutAt("uncounted", "hi", CONTEXT);
});

test("without max_tokens, an endless upstream is cut at what the context leaves after the counted prompt", { timeout: 30_000 }, async () => {
  // Long enough that its bound (see prompt-bound.ts) cannot show it fits, so it is counted.
  await cutAt("counted", "a".repeat(100), CONTEXT - PROMPT_TOKENS);
});

test("an upstream that sends only empty events after its first token is cut at the idle timeout, streamed or not", { timeout: 30_000 }, async () => {
  // Before, each empty event restarted the idle timer and none counted against the token budget,
  // so such a request held its client and its slot for ever.
  for (const stream of [false, true]) {
    const before = closed;
    const started = performance.now();
    const res = await fetch(`${r.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "quiet", stream, max_tokens: 16, messages: [{ role: "user", content: "only empty events" }] }),
    });
    const text = await res.text();
    const took = performance.now() - started;
    assert.ok(took < 8_000, `took ${Math.round(took)} ms`);
    if (stream) {
      // The first token went out, so the stream ends in the dialect's mid-stream error form.
      assert.equal(res.status, 200, text);
      assert.match(text, / w/);
      assert.match(text, /no output for 1000 ms/);
    } else {
      assert.equal(res.status, 503, text);
      assert.match(text, /no output for 1000 ms/);
    }
    await waitFor(() => closed > before, 5_000);
  }
});

test("an answer cut here at the client's budget (the upstream's usage never comes) reports the prompt counted by the upstream's tokenizer", { timeout: 30_000 }, async () => {
  // "hi" surely fits, so the router did not count it before sending it, and relied on the usage
  // the upstream sends at its end, which a stream cut here never reaches: prompt_tokens was 0.
  for (const stream of [false, true]) {
    const before = closed;
    const res = await postJson(`${r.url}/v1/chat/completions`, {
      model: "counted",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 5,
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
    assert.equal(res.status, 200, res.text);
    const usage = stream ? JSON.parse(res.text.split("\n\n").filter((e) => e.includes('"usage":{')).at(-1)!.slice(6)).usage : res.json.usage;
    assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [PROMPT_TOKENS, 5], res.text.slice(-400));
    await waitFor(() => closed > before, 5_000);
  }
});
