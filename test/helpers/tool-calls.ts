import { Ajv } from "ajv";
import assert from "./assert.ts";
import { ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { startTestServer, type TestServer } from "./server.ts";
import type { ChatBody, ChatChunk, ChatCompletion, ChatMessageBody } from "./requests.ts";

// What the tool-call layout tests (one file per family of templates) share: putting a streamed
// answer's calls back together, and checking calls against their tools' schemas with no layout
// text left in the content.

/** A call as the non-streamed answer gives it, or as a streamed one is put back together. */
type CallLike = { id?: string; function: { name: string; arguments: string } } | { id?: string; name: string; arguments: string };

/**
 * A check of an answer's calls: there is at least one, each names a tool of `schemas` and its
 * arguments are JSON valid against that tool's schema, each id is Plinth's (or, on Mistral Nemo, the
 * 9 letters or digits the model wrote); none of `leaks` is in the content.
 */
export function toolCallChecker(schemas: Record<string, object>, leaks: readonly string[]) {
  const ajv = new Ajv({ strict: false });
  const validators = Object.fromEntries(Object.entries(schemas).map(([name, schema]) => [name, ajv.compile(schema)]));
  return (calls: readonly CallLike[] | undefined, content: string | null): void => {
    assert.ok(calls && calls.length > 0, "expected tool calls");
    for (const call of calls) {
      const { name, arguments: args } = "function" in call ? call.function : call;
      if (call.id !== undefined) assert.match(call.id, /^call_|^[A-Za-z0-9]{9}$/);
      const validate = validators[name];
      assert.ok(validate, `unknown tool ${name}`);
      assert.ok(validate(JSON.parse(args)), `${args}: ${JSON.stringify(validate.errors)}`);
    }
    for (const leak of leaks) assert.ok(!(content ?? "").includes(leak), `${leak} leaked into ${content}`);
  };
}

/** A streamed chat answer put back together: content, reasoning, the calls by index, the finish reason, how many argument deltas came. */
export async function streamedCalls(url: string, body: ChatBody) {
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(res.status, 200);
  let content = "";
  let reasoning = "";
  let finish: string | null = null;
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  let deltas = 0;
  for (const line of (await res.text()).split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const choice = (JSON.parse(line.slice(6)) as ChatChunk).choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? "";
    reasoning += choice.delta.reasoning_content ?? "";
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) calls[d.index] = { id: d.id, name: d.function?.name ?? "", arguments: "" };
      calls[d.index].arguments += d.function?.arguments ?? "";
      if (d.function?.arguments) deltas++;
    }
    finish = choice.finish_reason ?? finish;
  }
  return { content, reasoning, calls, finish, deltas };
}

type Http = { chat(body: ChatBody): Promise<ChatCompletion> };
type Check = (calls: readonly CallLike[] | undefined, content: string | null) => void;

/**
 * In `auto` mode, the model's sampling `marker` (made near certain by `body`'s logit_bias) starts a
 * call held to the schema; streamed, the same calls come and the marker is not in the content.
 */
export async function assertMarkerStartsCall(http: Http, url: string, body: ChatBody, marker: string, checkCalls: Check): Promise<void> {
  const c = (await http.chat(body)).choices[0];
  assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
  checkCalls(c.message.tool_calls, c.message.content);
  const stream = await streamedCalls(url, body);
  assert.equal(stream.finish, "tool_calls");
  assert.ok(!stream.content.includes(marker), stream.content);
  assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
}

/** A call Plinth returned goes back with its result after `opening` (the system and user turns), and the conversation continues. */
export async function assertConversationContinues(http: Http, ask: (extra: Partial<ChatBody>) => ChatBody, opening: ChatMessageBody[]): Promise<void> {
  const first = (await http.chat(ask({ tool_choice: "required", parallel_tool_calls: false, seed: 5 }))).choices[0];
  const call = first.message.tool_calls![0];
  const next = await http.chat({
    ...ask({ max_tokens: 8 }),
    messages: [...opening, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: '{"temp": 20}' }],
  });
  assert.ok(next.usage!.prompt_tokens > 0);
}

/** The two tools the JSON-argument layout tests offer: a string and an integer argument, and one bounded string. */
export const WEATHER_SCHEMA = {
  type: "object",
  properties: { city: { type: "string", description: "City name", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"],
  additionalProperties: false,
};
export const CLOCK_SCHEMA = { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"], additionalProperties: false };
export const WEATHER_AND_CLOCK = [
  { type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: WEATHER_SCHEMA } },
  { type: "function" as const, function: { name: "get_time", description: "Time in a zone", parameters: CLOCK_SCHEMA } },
];

/** A family file's fixtures, by model name: each one's spec and the markers its vocabulary holds as single tokens. */
export type FamilyFixtures = Record<string, { spec: FixtureSpec; markers: readonly string[] }>;

/**
 * Starts one test server on every fixture of a family file and reads each model's marker token ids
 * (each marker must be one token, as in the real vocabularies), for the file's `before()`.
 */
export async function startFamilyServer(fixtures: FamilyFixtures): Promise<{ server: TestServer; ids: Record<string, Record<string, number>> }> {
  const models = Object.keys(fixtures);
  const paths = await Promise.all(models.map((m) => ensureFixtureModel(fixtures[m].spec)));
  const server = await startTestServer({ model: models.map((m, i) => `${m}=${paths[i]}`) });
  const ids: Record<string, Record<string, number>> = {};
  for (const model of models) {
    const { markers } = fixtures[model];
    const { tokens } = await server.http.tokenize({ model, prompt: markers.join(""), add_special_tokens: false });
    assert.equal(tokens.length, markers.length, `${model}: each marker is one token`);
    ids[model] = Object.fromEntries(markers.map((m, i) => [m, tokens[i]]));
  }
  return { server, ids };
}
