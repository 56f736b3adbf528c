import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { postJson, startTestServer, type TestServer } from "../helpers/server.ts";

// Vectors a broken upstream sends are the upstream's fault: the router answers 502 `upstream_error`
// naming what was wrong, as for any other malformed upstream answer, never a 500 of its own and
// never a vector of another size than the model's. The upstream is a scripted fake (a small real
// HTTP server, not a model) whose embeddings have 8 components, except for inputs that name a fault.
const SIZE = 8;
let upstream: http.Server;
let r: TestServer;

/** The vector the fake upstream answers for one input: 8 numbers, or the fault the input names. */
function vectorFor(input: unknown): unknown[] {
  const text = String(input);
  if (text.includes("short")) return [0.1, 0.2, 0.3];
  if (text.includes("long")) return Array.from({ length: SIZE + 1 }, () => 0.5);
  if (text.includes("not-numbers")) return ["a", null, {}, 1, 2, 3, 4, 5];
  if (text.includes("null")) return [1, 2, 3, null, 5, 6, 7, 8];
  if (text.includes("past-float32")) return [1e300, 1, 1, 1, 1, 1, 1, 1];
  return Array.from({ length: SIZE }, (_, k) => (k + 1) / 10);
}

before(async () => {
  upstream = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (d: Buffer) => (raw += d.toString()));
    req.on("end", () => {
      const json = (body: unknown) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
      if (req.url === "/v1/models") return json({ object: "list", data: [{ id: "m", object: "model", max_model_len: 512 }] });
      if (req.url !== "/v1/embeddings") return void res.writeHead(404).end();
      const body = JSON.parse(raw);
      const inputs: unknown[] = Array.isArray(body.input) ? body.input : [body.input];
      json({
        object: "list",
        data: inputs.map((input, index) => ({ object: "embedding", index, embedding: vectorFor(input) })),
        usage: { prompt_tokens: 3 * inputs.length, total_tokens: 3 * inputs.length },
      });
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  r = await startTestServer({ upstream: [{ name: "e", url: [url], model: "m", tokenize: false }], "health-interval": "0" });
});
after(async () => {
  await r?.close();
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

const embed = (body: Record<string, unknown>) => postJson(`${r.url}/v1/embeddings`, { model: "e", ...body });

test("a well-formed upstream vector comes through at the model's size, or shortened to dimensions", async () => {
  const full = await embed({ input: "fine" });
  assert.equal(full.status, 200, full.text);
  assert.equal(full.json.data[0].embedding.length, SIZE);
  const cut = await embed({ input: "fine", dimensions: 4 });
  assert.equal(cut.status, 200, cut.text);
  assert.equal(cut.json.data[0].embedding.length, 4);
});

test("an upstream vector shorter or longer than the model's size is the upstream's 502, never passed on", async () => {
  for (const [input, extra, count] of [
    ["short", {}, 3],
    ["short", { dimensions: SIZE }, 3],
    ["short", { dimensions: 2 }, 3],
    ["long", {}, SIZE + 1],
  ] as const) {
    const res = await embed({ input, ...extra });
    assert.equal(res.status, 502, `${input} ${JSON.stringify(extra)}: ${res.text}`);
    assert.equal(res.json.error.code, "upstream_error");
    assert.match(res.json.error.message, new RegExp(`${count} components where the model's embeddings have ${SIZE}`));
  }
});

test("an upstream vector holding values that are not finite numbers is the upstream's 502 naming the value, not a 500", async () => {
  for (const [input, said] of [
    ["not-numbers", /component 0 is "a", not a finite number/],
    ["null", /component 3 is null, not a finite number/],
    ["past-float32", /component 0 is 1e\+300, not a finite number/],
  ] as const) {
    const res = await embed({ input });
    assert.equal(res.status, 502, `${input}: ${res.text}`);
    assert.equal(res.json.error.code, "upstream_error");
    assert.match(res.json.error.message, said);
  }
  // One bad vector among several inputs fails the request, and says which input it was.
  const batch = await embed({ input: ["fine", "fine", "null"] });
  assert.equal(batch.status, 502, batch.text);
  assert.match(batch.json.error.message, /for input 2: component 3 is null/);
});
