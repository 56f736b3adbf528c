import assert from "../helpers/assert.ts";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { rawHttp } from "../helpers/raw-http.ts";
import { after, before, test } from "node:test";
import { NO_EOG, startTestServer, streamThenCancel, type TestServer, waitFor } from "../helpers/server.ts";

// A tiny OTLP/HTTP JSON receiver: it keeps every span it is sent.
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}
const spans: OtlpSpan[] = [];
let receiver: Server;
let s: TestServer;

before(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url === "/v1/traces") {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans.push(...ss.spans);
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const port = (receiver.address() as AddressInfo).port;
  s = await startTestServer({ parallel: "1", "otlp-endpoint": `http://127.0.0.1:${port}` });
});

after(async () => {
  await s.close();
  receiver.close();
});

const attr = (span: OtlpSpan, key: string) => {
  const v = span.attributes.find((a) => a.key === key)?.value;
  return v && (v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.arrayValue));
};

test("a request's span carries the caller's trace and has queue, prefill and decode children", async () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const parentId = "00f067aa0ba902b7";
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", traceparent: `00-${traceId}-${parentId}-01`, "x-request-id": "traced-1" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 3, logit_bias: NO_EOG }),
  });
  const answer = await res.json();
  assert.equal(res.status, 200);
  const traced = () => spans.filter((sp) => sp.traceId === traceId);
  await waitFor(() => traced().length >= 4, 15_000);

  const root = traced().find((sp) => sp.name === "POST /v1/chat/completions")!;
  assert.ok(root, JSON.stringify(traced().map((sp) => sp.name)));
  assert.equal(root.parentSpanId, parentId);
  assert.equal(attr(root, "plinth.request_id"), "traced-1");
  assert.equal(attr(root, "gen_ai.request.model"), "tiny");
  assert.equal(attr(root, "gen_ai.operation.name"), "chat");
  assert.equal(attr(root, "gen_ai.usage.input_tokens"), answer.usage.prompt_tokens);
  assert.equal(attr(root, "gen_ai.usage.output_tokens"), answer.usage.completion_tokens);
  assert.equal(attr(root, "http.response.status_code"), 200);
  const children = traced().filter((sp) => sp.parentSpanId === root.spanId).map((sp) => sp.name);
  assert.deepEqual(children.sort(), ["decode", "prefill", "queue"]);
});

test("a request without traceparent starts its own trace", async () => {
  const r = await s.http.chat({ model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 2 });
  assert.ok(r.id);
  await waitFor(() => spans.some((sp) => sp.name === "POST /v1/chat/completions" && !sp.parentSpanId), 15_000);
});

test("a stream its client cancels midway still ends its span, marked as abandoned by the client", async () => {
  const traceId = "5cf92f3577b34da6a3ce929d0e0e4737";
  await streamThenCancel(
    `${s.url}/v1/chat/completions`,
    { model: "tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 400, stream: true, logit_bias: NO_EOG },
    { headers: { traceparent: `00-${traceId}-00f067aa0ba902b8-01` }, count: 3 },
  );
  await waitFor(() => spans.some((sp) => sp.traceId === traceId && sp.name === "POST /v1/chat/completions"), 15_000);
  const root = spans.find((sp) => sp.traceId === traceId && sp.name === "POST /v1/chat/completions")!;
  assert.equal(root.attributes.find((a) => a.key === "plinth.client_aborted")?.value.boolValue, true);
  // It still says what was sent and what was used, as the log line and the ledger row do.
  assert.equal(attr(root, "http.response.status_code"), 200);
  assert.ok(Number(attr(root, "gen_ai.usage.output_tokens")) >= 3, JSON.stringify(root.attributes));
});

test("the operation is named by what is generated, whatever the dialect: chat, or text_completion for a raw prompt", async () => {
  const cases: Array<[string, string, unknown, string]> = [
    ["6cf92f3577b34da6a3ce929d0e0e4738", "/serving-endpoints/tiny/invocations", { messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }, "chat"],
    ["8cf92f3577b34da6a3ce929d0e0e473a", "/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 2 }, "text_completion"],
  ];
  for (const [traceId, route, body, operation] of cases) {
    const res = await fetch(`${s.url}${route}`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: `00-${traceId}-00f067aa0ba902b9-01` },
      body: JSON.stringify(body),
    });
    assert.equal(res.status, 200, await res.text());
    await waitFor(() => spans.some((sp) => sp.traceId === traceId && sp.name.startsWith("POST ")), 15_000);
    const root = spans.find((sp) => sp.traceId === traceId && sp.name.startsWith("POST "))!;
    assert.equal(attr(root, "gen_ai.operation.name"), operation, route);
  }
});

test("requests answered before the tracing hook ran (a Host refusal, an undecodable URL) still get a span", async () => {
  const traceId = "9cf92f3577b34da6a3ce929d0e0e473b";
  // The Host guard answers in an onRequest hook installed before the tracing one.
  const host = await rawHttp(
    new URL(s.url).port,
    `GET /v1/models HTTP/1.1\r\nHost: evil.example\r\ntraceparent: 00-${traceId}-00f067aa0ba902ba-01\r\nX-Request-Id: host-refused\r\nConnection: close\r\n\r\n`,
  );
  assert.match(host, /^HTTP\/1\.1 403 /);
  // Fastify answers a URL it cannot decode without running any hook.
  const url = await rawHttp(new URL(s.url).port, "GET /v1/models/%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: bad-url\r\nConnection: close\r\n\r\n");
  assert.match(url, /^HTTP\/1\.1 400 /);
  await waitFor(() => spans.some((sp) => attr(sp, "plinth.request_id") === "host-refused") && spans.some((sp) => attr(sp, "plinth.request_id") === "bad-url"), 15_000);
  const refused = spans.find((sp) => attr(sp, "plinth.request_id") === "host-refused")!;
  assert.equal(refused.traceId, traceId);
  assert.equal(attr(refused, "http.response.status_code"), 403);
  const undecodable = spans.find((sp) => attr(sp, "plinth.request_id") === "bad-url")!;
  assert.equal(undecodable.name, "GET unmatched");
  assert.equal(attr(undecodable, "http.response.status_code"), 400);
  // One span each, not one per hook that saw the answer.
  assert.equal(spans.filter((sp) => attr(sp, "plinth.request_id") === "host-refused").length, 1);
});

test("an embeddings request's span names the system, as a generation's does", async () => {
  const traceId = "acf92f3577b34da6a3ce929d0e0e473c";
  const res = await fetch(`${s.url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json", traceparent: `00-${traceId}-00f067aa0ba902bb-01` },
    body: JSON.stringify({ model: "tiny", input: "a river" }),
  });
  assert.equal(res.status, 200, await res.text());
  await waitFor(() => spans.some((sp) => sp.traceId === traceId), 15_000);
  const root = spans.find((sp) => sp.traceId === traceId)!;
  assert.equal(attr(root, "gen_ai.operation.name"), "embeddings");
  assert.equal(attr(root, "gen_ai.system"), "plinth");
});
