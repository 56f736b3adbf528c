import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { AIMessageChunk } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { FIXTURE_TOKENS } from "../fixtures/models.ts";
import { useTestServer } from "../helpers/server.ts";

// LangChain JS's ChatOpenAI (Chat Completions) against the real server: invoke, stream,
// withStructuredOutput with a zod schema (LangChain's default method, a json_schema
// response_format) and bindTools with a forced call, in both invoke and stream.

const s = useTestServer({}, { think: true });

/** Keeps the random model from ending its turn, so answers run to the token limit. */
const NO_END = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

/** The request bodies LangChain sent, newest last: what a test claims about the wire is checked. */
const sent: Array<Record<string, any>> = [];
const recording: typeof fetch = async (input, init) => {
  if (typeof init?.body === "string") sent.push(JSON.parse(init.body));
  return fetch(input, init);
};

const chat = (fields: ConstructorParameters<typeof ChatOpenAI>[0] = {}) =>
  new ChatOpenAI({ model: "tiny", apiKey: "unused", configuration: { baseURL: `${s.url}/v1`, fetch: recording }, maxRetries: 0, ...fields });

/** Joins a stream's chunks the way LangChain documents it. */
async function joined(chunks: AsyncIterable<AIMessageChunk>) {
  let all: AIMessageChunk | undefined;
  let count = 0;
  for await (const c of chunks) {
    all = all === undefined ? c : all.concat(c);
    count++;
  }
  assert.ok(all, "no chunks");
  return { message: all, count };
}

const City = z.object({
  name: z.string().max(10),
  population: z.number().int().min(0).max(1000),
  coastal: z.boolean(),
  climate: z.enum(["dry", "wet"]),
});
const Weather = z.object({ city: z.string().max(12), unit: z.enum(["c", "f"]) });
const getWeather = tool(async () => "21 degrees", { name: "get_weather", description: "Weather for a city", schema: Weather });

test("invoke: the server's text, finish reason and token usage", async () => {
  const m = await chat({ maxTokens: 12, temperature: 0, modelKwargs: { logit_bias: NO_END } }).invoke("Tell me a story");
  const direct = await s.http.chat({
    model: "tiny",
    messages: [{ role: "user", content: "Tell me a story" }],
    max_tokens: 12,
    temperature: 0,
    logit_bias: NO_END,
  });
  assert.equal(m.content, direct.choices[0].message.content);
  assert.equal(m.response_metadata.finish_reason, "length");
  assert.equal(m.usage_metadata?.input_tokens, direct.usage!.prompt_tokens);
  assert.equal(m.usage_metadata?.output_tokens, 12);
  assert.equal(m.usage_metadata?.total_tokens, direct.usage!.prompt_tokens + 12);
});

test("stream: the chunks join to invoke's text, with usage", async () => {
  const model = chat({ maxTokens: 16, temperature: 0, modelKwargs: { logit_bias: NO_END } });
  const whole = await model.invoke("Tell me a story");
  const { message, count } = await joined(await model.stream("Tell me a story"));
  assert.ok(count > 2, `${count} chunks`);
  assert.equal(message.content, whole.content);
  assert.equal(message.usage_metadata?.output_tokens, 16);
  assert.equal(message.usage_metadata?.input_tokens, whole.usage_metadata?.input_tokens);
});

test("withStructuredOutput(zod): parsed objects that hold to the schema, over several seeds", async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const structured = chat({ maxTokens: 120, temperature: 1, modelKwargs: { seed } }).withStructuredOutput(City, { name: "city" });
    const city = await structured.invoke("A city as JSON");
    assert.ok(City.safeParse(city).success, JSON.stringify(city));
    assert.equal(sent.at(-1)?.response_format?.type, "json_schema", "LangChain's default method");
  }
});

test("withStructuredOutput(zod, strict): the same with strict: true", async () => {
  const structured = chat({ maxTokens: 120, temperature: 1, modelKwargs: { seed: 7 } }).withStructuredOutput(City, { name: "city", strict: true });
  const r = await structured.invoke("A city as JSON");
  assert.ok(City.safeParse(r).success, JSON.stringify(r));
  assert.equal(sent.at(-1)?.response_format?.json_schema?.strict, true);
});

test("bindTools with a forced call: parsed tool_calls in invoke and in stream", async () => {
  const model = chat({ model: "think", maxTokens: 120, temperature: 0, modelKwargs: { reasoning_effort: "none" } }).bindTools([getWeather], {
    tool_choice: "required",
  });
  const m = await model.invoke("What is the weather in Paris?");
  assert.equal(sent.at(-1)?.tool_choice, "required");
  assert.ok(m.tool_calls && m.tool_calls.length >= 1, JSON.stringify(m));
  for (const call of m.tool_calls) {
    assert.equal(call.name, "get_weather");
    assert.match(call.id ?? "", /^call_/);
    assert.ok(Weather.safeParse(call.args).success, JSON.stringify(call.args));
  }
  assert.equal(m.content, "");
  assert.equal(m.invalid_tool_calls?.length ?? 0, 0);
  assert.equal(m.response_metadata.finish_reason, "tool_calls");

  const { message } = await joined(await model.stream("What is the weather in Paris?"));
  assert.deepEqual(
    message.tool_calls?.map((c) => [c.name, c.args]),
    m.tool_calls.map((c) => [c.name, c.args]),
  );
  assert.equal(message.content, "");
  assert.equal(message.invalid_tool_calls?.length ?? 0, 0);

  // The call runs, its result goes back as a tool message, and the conversation continues.
  const result = await getWeather.invoke(m.tool_calls[0]);
  const next = await chat({ model: "think", maxTokens: 8, modelKwargs: { reasoning_effort: "none" } })
    .bindTools([getWeather])
    .invoke([["user", "What is the weather in Paris?"], m, result]);
  assert.equal(typeof next.content, "string");
});
