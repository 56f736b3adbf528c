/**
 * Checks that Plinth's OpenAI-dialect bodies validate against OpenAI's published OpenAPI schema.
 * Not part of the test suite (the schema is not in the repository):
 *
 *   node --import tsx scripts/check-openapi.ts path/to/openai-openapi.json
 *
 * It starts the real server on the fixture model, sends requests, and validates every response body
 * (and every streamed chunk) against the matching component schema.
 */
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import { startTestServer, postJson } from "../test/helpers/server.ts";

const specPath = process.argv[2];
if (!specPath) {
  console.error("usage: check-openapi.ts <openai-openapi.json>");
  process.exit(2);
}
const spec = toJsonSchema(JSON.parse(readFileSync(specPath, "utf8")));

/** OpenAPI's `nullable: true` is not JSON Schema; rewrite it as a union with null. */
function toJsonSchema(node: any): any {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (node === null || typeof node !== "object") return node;
  const out: any = {};
  for (const [k, v] of Object.entries(node)) if (k !== "nullable") out[k] = toJsonSchema(v);
  if (node.nullable === true) {
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    if (typeof out.type === "string") out.type = [out.type, "null"];
    else if (!out.type) return { anyOf: [out, { type: "null" }] };
  }
  return out;
}

// OpenAPI 3.1 schemas are JSON Schema 2020-12 plus a few annotation keywords ajv must tolerate.
const ajv = new (Ajv2020 as unknown as typeof Ajv2020.default)({ strict: false, allErrors: true, validateFormats: false });
for (const kw of ["x-oaiTypeLabel", "x-oaiExpandable", "x-oaiMeta", "x-stainless-const", "discriminator", "example", "deprecated", "x-oaiRef"]) {
  try {
    ajv.addKeyword(kw);
  } catch {
    /* already known */
  }
}
ajv.addSchema({ ...spec, $id: "openapi" }, "openapi");
const validator = (name: string) => ajv.compile({ $ref: `openapi#/components/schemas/${name}` });

let failures = 0;
function check(name: string, body: unknown, label: string) {
  const validate = validator(name);
  if (validate(body)) {
    console.log(`ok   ${label} (${name})`);
  } else {
    failures++;
    console.log(`FAIL ${label} (${name})`);
    console.log(JSON.stringify(validate.errors?.slice(0, 5), null, 2));
  }
}

const s = await startTestServer();
try {
  const chat = { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 8 };
  check("CreateChatCompletionRequest", chat, "request body used here");
  check("CreateChatCompletionResponse", (await postJson(`${s.url}/v1/chat/completions`, chat)).json, "chat completion");
  check("CreateChatCompletionResponse", (await postJson(`${s.url}/v1/chat/completions`, { ...chat, n: 2, stop: ["x"] })).json, "chat completion n=2");

  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...chat, stream: true, stream_options: { include_usage: true } }),
  });
  const events = (await res.text()).split("\n\n").filter((e) => e.startsWith("data: {"));
  events.forEach((e, i) => check("CreateChatCompletionStreamResponse", JSON.parse(e.slice(6)), `stream chunk ${i}`));

  check("ListModelsResponse", await (await fetch(`${s.url}/v1/models`)).json(), "model list");
  check("Model", await (await fetch(`${s.url}/v1/models/tiny`)).json(), "model");
  check("ErrorResponse", (await postJson(`${s.url}/v1/chat/completions`, { ...chat, temperature: 7 })).json, "400 error");
  check("ErrorResponse", (await postJson(`${s.url}/v1/chat/completions`, { ...chat, model: "nope" })).json, "404 error");
} finally {
  await s.close();
}
console.log(failures === 0 ? "\nall bodies validate" : `\n${failures} bodies failed`);
process.exit(failures === 0 ? 0 : 1);
