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

/**
 * Where real OpenAI responses (and Plinth's issues) knowingly differ from the published schema, the
 * differing paths are listed with the reason; other errors in the same body still fail.
 */
interface Deviation {
  paths: RegExp;
  why: string;
}

function check(name: string, body: unknown, label: string, deviation?: Deviation) {
  const validate = validator(name);
  if (validate(body)) {
    console.log(`ok   ${label} (${name})`);
    return;
  }
  const errors = (validate.errors ?? []).filter(
    (e) => !deviation || !(deviation.paths.test(e.instancePath) || e.keyword === "anyOf" || e.keyword === "oneOf"),
  );
  if (errors.length === 0) {
    console.log(`ok   ${label} (${name}) — known deviation: ${deviation!.why}`);
    return;
  }
  failures++;
  console.log(`FAIL ${label} (${name})`);
  console.log(JSON.stringify(errors.slice(0, 5), null, 2));
}

const s = await startTestServer({}, { think: true });
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

  check(
    "CreateChatCompletionResponse",
    (await postJson(`${s.url}/v1/chat/completions`, { ...chat, logprobs: true, top_logprobs: 2 })).json,
    "chat completion with logprobs",
  );
  const weather = { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"], additionalProperties: false };
  const tools = [{ type: "function", function: { name: "get_weather", parameters: weather, strict: true } }];
  const toolRequest = { ...chat, model: "think", tools, tool_choice: "required", reasoning_effort: "none", max_tokens: 60 };
  check("CreateChatCompletionRequest", toolRequest, "tool request");
  check("CreateChatCompletionResponse", (await postJson(`${s.url}/v1/chat/completions`, toolRequest)).json, "tool call response");
  const toolStream = await fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...toolRequest, stream: true }),
  });
  (await toolStream.text())
    .split("\n\n")
    .filter((e) => e.startsWith("data: {"))
    .forEach((e, i) => check("CreateChatCompletionStreamResponse", JSON.parse(e.slice(6)), `tool stream chunk ${i}`));
  const structured = { ...chat, max_tokens: 60, response_format: { type: "json_schema", json_schema: { name: "w", schema: weather, strict: true } } };
  check("CreateChatCompletionRequest", structured, "structured request");
  check("CreateChatCompletionResponse", (await postJson(`${s.url}/v1/chat/completions`, structured)).json, "structured response");

  const completion = { model: "tiny", prompt: ["hello", "world"], max_tokens: 4, logprobs: 2, echo: true };
  check("CreateCompletionRequest", { ...completion, logprobs: 2 }, "completion request");
  check("CreateCompletionResponse", (await postJson(`${s.url}/v1/completions`, completion)).json, "completion with echo + logprobs", {
    paths: /^\/choices\/\d+\/logprobs(\/(token_logprobs|top_logprobs)\/0)?$/,
    why: "the first echoed prompt token has null logprob and top_logprobs, as OpenAI returns it",
  });
  const completionStream = await fetch(`${s.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: 3, stream: true }),
  });
  (await completionStream.text())
    .split("\n\n")
    .filter((e) => e.startsWith("data: {"))
    .forEach((e, i) =>
      check("CreateCompletionResponse", JSON.parse(e.slice(6)), `completion stream chunk ${i}`, {
        paths: /^\/choices\/\d+\/finish_reason$/,
        why: "chunks before the last carry finish_reason null, as OpenAI streams them (the schema reuses the final shape)",
      }),
    );

  const embedding = { model: "tiny", input: ["a", "b"], dimensions: 8 };
  check("CreateEmbeddingRequest", embedding, "embedding request");
  check("CreateEmbeddingResponse", (await postJson(`${s.url}/v1/embeddings`, embedding)).json, "embeddings");
  check("CreateEmbeddingResponse", (await postJson(`${s.url}/v1/embeddings`, { ...embedding, encoding_format: "base64" })).json, "embeddings base64", {
    paths: /^\/data\/\d+\/embedding$/,
    why: "with encoding_format base64 the embedding is a base64 string, as OpenAI returns it",
  });

  check("ListModelsResponse", await (await fetch(`${s.url}/v1/models`)).json(), "model list");
  check("Model", await (await fetch(`${s.url}/v1/models/tiny`)).json(), "model");
  check("ErrorResponse", (await postJson(`${s.url}/v1/chat/completions`, { ...chat, temperature: 7 })).json, "400 error");
  check("ErrorResponse", (await postJson(`${s.url}/v1/chat/completions`, { ...chat, model: "nope" })).json, "404 error");
} finally {
  await s.close();
}
console.log(failures === 0 ? "\nall bodies validate" : `\n${failures} bodies failed`);
process.exit(failures === 0 ? 0 : 1);
