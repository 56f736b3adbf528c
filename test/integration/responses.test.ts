import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Ajv } from "ajv";
import { zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import { EXTRA_TOKENS, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { startTestServer, streamThenCancel, type TestServer } from "../helpers/server.ts";

// The Responses API end to end: the real server, real inference on the fixture models, the official
// `openai` client, and the SQLite store in a data directory of its own.

const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-responses-"));
let s: TestServer;
before(async () => {
  s = await startTestServer({ "data-dir": dataDir }, { think: true });
});
after(async () => {
  await s.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Keeps the random model from ending its turn, so answers run to max_output_tokens. */
const NO_END = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };
const weather = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const validWeather = new Ajv({ strict: false }).compile(weather);
const WEATHER_TOOL = { type: "function" as const, name: "get_weather", description: "Weather for a city", parameters: weather, strict: true };

/** A create call with Plinth's sampling extensions, which the client's types do not know. */
const create = (body: Record<string, unknown>) => s.client.responses.create({ model: "tiny", ...body } as never) as Promise<any>;

test("a plain response: the object, its message item and usage", async () => {
  const r = await create({ input: "Hello there", max_output_tokens: 8, temperature: 0, logit_bias: NO_END });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, "response");
  assert.equal(r.status, "incomplete");
  assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
  assert.equal(r.output.length, 1);
  const msg = r.output[0];
  assert.equal(msg.type, "message");
  assert.equal(msg.role, "assistant");
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.content[0].type, "output_text");
  assert.deepEqual(msg.content[0].annotations, []);
  assert.ok(msg.content[0].text.length > 0);
  assert.equal(r.output_text, msg.content[0].text, "the client's output_text helper reads it");
  assert.equal(r.usage.output_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, "number");
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  for (const key of ["created_at", "error", "instructions", "model", "tools", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"])
    assert.ok(key in r, `the response has ${key}`);
});

test("responses.parse with a zod schema: the answer parses and validates", async () => {
  const City = z.object({ name: z.string().max(10), population: z.int().min(0).max(1000) });
  const r = await s.client.responses.parse({
    model: "tiny",
    input: "A city as JSON",
    text: { format: zodTextFormat(City, "city") },
    max_output_tokens: 80,
    temperature: 0,
  });
  assert.equal(r.status, "completed", JSON.stringify(r.output));
  assert.ok(City.safeParse(r.output_parsed).success, JSON.stringify(r.output_parsed));
});

test("a forced function tool: a function_call item whose arguments hold to the schema", async () => {
  for (const tool_choice of [{ type: "function", name: "get_weather" }, "required"]) {
    const r = await create({ input: "Weather in Paris?", tools: [WEATHER_TOOL], tool_choice, max_output_tokens: 80, temperature: 1, seed: 3 });
    const call = r.output.find((o: any) => o.type === "function_call");
    assert.ok(call, JSON.stringify(r.output));
    assert.match(call.call_id, /^call_/);
    assert.equal(call.name, "get_weather");
    assert.equal(call.status, "completed");
    assert.ok(validWeather(JSON.parse(call.arguments)), call.arguments);
    assert.equal(r.tools[0].strict, true);
  }
});

test("auto tool choice: the model may call or answer; either way the output is well formed", async () => {
  const r = await create({
    model: "think",
    reasoning: { effort: "none" },
    input: "Weather?",
    tools: [WEATHER_TOOL],
    parallel_tool_calls: false,
    max_output_tokens: 200,
    temperature: 0,
    logit_bias: { [EXTRA_TOKENS.toolCallOpen]: 100 },
  });
  const call = r.output.find((o: any) => o.type === "function_call");
  assert.ok(call, "the boosted call marker starts a call");
  assert.equal(call.status, "completed", JSON.stringify(r.output));
  assert.ok(validWeather(JSON.parse(call.arguments)), call.arguments);
});

test("the stream: OpenAI's event order, sequence numbers, and the same response as without streaming", async () => {
  const body = { model: "tiny", input: "Tell me", max_output_tokens: 12, temperature: 0, logit_bias: NO_END };
  const whole = await create(body);
  const stream = s.client.responses.stream(body as never);
  const types: string[] = [];
  const seqs: number[] = [];
  for await (const ev of stream) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
  }
  const final = await stream.finalResponse();
  assert.deepEqual(seqs, seqs.map((_, i) => i), "sequence numbers count up from 0");
  assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
  assert.ok(types.includes("response.output_text.delta"));
  assert.deepEqual(types.slice(-4), ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]);
  assert.equal(final.output_text, whole.output_text, "streamed text equals the non-streamed text at temperature 0");
  assert.equal(final.usage?.output_tokens, whole.usage.output_tokens);
});

test("stream_options.include_obfuscation pads every delta event to a multiple of 32 characters; without it nothing is added", async () => {
  const deltas = async (extra: Record<string, unknown>, url = `${s.url}/v1/responses`, init?: RequestInit) => {
    const res = await fetch(url, init ?? {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", input: "Tell me", max_output_tokens: 8, logit_bias: NO_END, stream: true, ...extra }),
    });
    assert.equal(res.status, 200);
    const events = (await res.text()).split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
    return events.filter((e) => e.type.endsWith(".delta"));
  };
  const padded = await deltas({ stream_options: { include_obfuscation: true } });
  assert.ok(padded.length > 0);
  for (const e of padded) {
    assert.equal(typeof e.obfuscation, "string", JSON.stringify(e));
    assert.ok(e.obfuscation.length >= 1 && (e.delta.length + e.obfuscation.length) % 32 === 0, JSON.stringify(e));
  }
  assert.ok((await deltas({})).every((e) => !("obfuscation" in e)));
  assert.ok((await deltas({ stream_options: { include_obfuscation: false } })).every((e) => !("obfuscation" in e)));
  // A resumed background stream pads when its query asks.
  const bg = await create({ input: "Tell me", max_output_tokens: 6, logit_bias: NO_END, background: true });
  for (let i = 0; i < 100 && (await s.client.responses.retrieve(bg.id)).status !== "incomplete"; i++) await new Promise((r) => setTimeout(r, 100));
  const resumed = await deltas({}, `${s.url}/v1/responses/${bg.id}?stream=true&include_obfuscation=true`, { method: "GET" });
  assert.ok(resumed.length > 0 && resumed.every((e) => typeof e.obfuscation === "string"));
  // The tier that served it, whatever the request said, as OpenAI reports it.
  assert.equal((await create({ input: "hi", max_output_tokens: 2 })).service_tier, "default");
  const chat = await s.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  assert.equal(chat.service_tier, "default");
});

test("a three-turn chain through previous_response_id, with a function call and its output; turns 2 and 3 hit the cache", async () => {
  const first = await create({ input: "Weather in Paris?", tools: [WEATHER_TOOL], tool_choice: "required", max_output_tokens: 80, temperature: 0 });
  const call = first.output.find((o: any) => o.type === "function_call");
  assert.ok(call);
  const second = await create({
    previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ temp: 21 }) }],
    tools: [WEATHER_TOOL],
    max_output_tokens: 6,
    temperature: 0,
    logit_bias: NO_END,
  });
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.usage.input_tokens_details.cached_tokens > 0, `turn 2 cached ${second.usage.input_tokens_details.cached_tokens}`);
  const third = await create({ previous_response_id: second.id, input: "And tomorrow?", tools: [WEATHER_TOOL], max_output_tokens: 4, temperature: 0, logit_bias: NO_END });
  assert.ok(third.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens, "turn 3 reuses all of turn 2's prompt");
  const items = await s.client.responses.inputItems.list(third.id, { limit: 100 });
  const types = items.data.map((i: any) => i.type).reverse();
  assert.deepEqual(types.slice(0, 3), ["message", "function_call", "function_call_output"], types.join());
});

test("a function_call item whose arguments are not JSON (a call cut by max_output_tokens) is kept as its text, and the turn goes on", async () => {
  const r = await create({
    input: [
      { role: "user", content: "Weather in Paris?" },
      { type: "function_call", call_id: "c1", name: "get_weather", arguments: '{"city": "Par' },
      { type: "function_call_output", call_id: "c1", output: "sunny" },
    ],
    tools: [WEATHER_TOOL],
    max_output_tokens: 3,
  });
  assert.ok(["completed", "incomplete"].includes(r.status), r.status);
});

test("retrieve, input items, delete", async () => {
  const r = await create({ input: [{ role: "user", content: "Hi" }], max_output_tokens: 3, metadata: { topic: "greeting" }, logit_bias: NO_END });
  const back = await s.client.responses.retrieve(r.id);
  assert.deepEqual(back.output, r.output);
  assert.deepEqual(back.metadata, { topic: "greeting" });
  // The query is read whole: what it cannot honour is a 400 naming it, not a JSON answer instead.
  for (const [query, param] of [["stream=1", "stream"], ["starting_after=2", "starting_after"], ["include[]=file_search_call.results", "include"], ["colour=red", "colour"]]) {
    const refused = await fetch(`${s.url}/v1/responses/${r.id}?${query}`);
    assert.equal(refused.status, 400, query);
    assert.equal(((await refused.json()) as any).error.param, param, query);
  }
  assert.equal((await fetch(`${s.url}/v1/responses/${r.id}?stream=false&include_obfuscation=false`)).status, 200);
  // include is read (see the store's tests): logprobs the create did not compute are none.
  const included = await fetch(`${s.url}/v1/responses/${r.id}?include[]=message.output_text.logprobs`);
  assert.equal(included.status, 200);
  assert.deepEqual(((await included.json()) as any).output, r.output);
  const items = await s.client.responses.inputItems.list(r.id);
  assert.equal(items.data.length, 1);
  // OpenAI's item resource, not the shorthand sent: content as parts, and a status.
  assert.deepEqual({ ...items.data[0], id: "" }, { id: "", type: "message", role: "user", content: [{ type: "input_text", text: "Hi" }], status: "completed" });
  const deleted: unknown = await s.client.responses.delete(r.id);
  assert.deepEqual(deleted, { id: r.id, object: "response", deleted: true });
  await assert.rejects(s.client.responses.retrieve(r.id), (e: any) => e.status === 404);
});

test("store: false keeps nothing", async () => {
  const r = await create({ input: "Hi", store: false, max_output_tokens: 2 });
  await assert.rejects(s.client.responses.retrieve(r.id), (e: any) => e.status === 404);
});

test("a conversation collects each turn's input and output", async () => {
  const conv = await s.client.conversations.create({ metadata: { who: "test" }, items: [{ type: "message", role: "user", content: "Remember me" }] });
  assert.match(conv.id, /^conv_/);
  const r = await create({ conversation: conv.id, input: "And now?", max_output_tokens: 3, logit_bias: NO_END });
  assert.deepEqual(r.conversation, { id: conv.id });
  const items = await s.client.conversations.items.list(conv.id, { order: "asc" });
  const kinds = items.data.map((i: any) => `${i.type}:${i.role ?? ""}`);
  assert.deepEqual(kinds, ["message:user", "message:user", "message:assistant"]);
  // The turn's input was the shorthand "And now?"; the item reads as OpenAI lists it.
  assert.deepEqual(items.data[1], { ...items.data[1], content: [{ type: "input_text", text: "And now?" }], status: "completed" });
  const again = await create({ conversation: conv.id, input: "Third", max_output_tokens: 2, logit_bias: NO_END });
  assert.ok(again.usage.input_tokens > r.usage.input_tokens, "the conversation's items are part of the prompt");
  const got = await s.client.conversations.retrieve(conv.id);
  assert.deepEqual(got.metadata, { who: "test" });
  await s.client.conversations.delete(conv.id);
  await assert.rejects(s.client.conversations.retrieve(conv.id), (e: any) => e.status === 404);
});

test("reasoning on a thinking model: a reasoning item, counted tokens, and sealed reasoning that comes back", async () => {
  const r = await create({
    model: "think",
    input: "Think first",
    reasoning: { effort: "low", summary: "auto" },
    include: ["reasoning.encrypted_content"],
    max_output_tokens: 30,
    temperature: 0,
    logit_bias: { ...NO_END, [EXTRA_TOKENS.thinkClose]: -100 },
  });
  const reasoning = r.output.find((o: any) => o.type === "reasoning");
  assert.ok(reasoning, JSON.stringify(r.output));
  assert.equal(reasoning.content[0].type, "reasoning_text");
  assert.ok(reasoning.content[0].text.length > 0);
  assert.equal(reasoning.summary[0].text, reasoning.content[0].text, "the summary is the reasoning text (no separate summariser)");
  assert.equal(typeof reasoning.encrypted_content, "string");
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  const next = await create({ model: "think", store: false, input: [reasoning, { role: "user", content: "Go on" }], max_output_tokens: 2, reasoning: { effort: "none" } });
  assert.equal(next.status === "completed" || next.status === "incomplete", true);
  const tampered = { ...reasoning, encrypted_content: reasoning.encrypted_content.slice(0, -4) + "AAAA" };
  await assert.rejects(create({ model: "think", input: [tampered, { role: "user", content: "x" }], max_output_tokens: 2 }), (e: any) => e.status === 400 && /encrypted_content/.test(e.error?.param));
});

test("background: queued at once, polled to completion; another cancelled while it runs", async () => {
  const bg = await create({ input: "Work", background: true, max_output_tokens: 10, logit_bias: NO_END });
  assert.equal(bg.status, "queued");
  let polled = bg;
  for (let i = 0; i < 200 && ["queued", "in_progress"].includes(polled.status); i++) {
    await new Promise((r) => setTimeout(r, 50));
    polled = await s.client.responses.retrieve(bg.id);
  }
  assert.equal(polled.status, "incomplete");
  assert.equal(polled.usage?.output_tokens, 10);

  const long = await create({ input: "Long", background: true, max_output_tokens: 3000, logit_bias: NO_END });
  // Cancelled once it has written some text (read from its event stream), not after a fixed wait that
  // a busy machine could spend before the first token.
  const watching = new AbortController();
  const events = await fetch(`${s.url}/v1/responses/${long.id}?stream=true`, { signal: watching.signal });
  const reader = events.body!.getReader();
  const decoder = new TextDecoder();
  for (let seen = ""; !seen.includes("response.output_text.delta"); ) {
    const { done, value } = await reader.read();
    assert.ok(!done, `the run's events ended before any text: ${seen.slice(-300)}`);
    seen += decoder.decode(value, { stream: true });
  }
  watching.abort();
  await reader.cancel().catch(() => {});
  const cancelled = await s.client.responses.cancel(long.id);
  assert.equal(cancelled.status, "cancelled");
  const stored = await s.client.responses.retrieve(long.id);
  assert.equal(stored.status, "cancelled");
  // What it used before the cancel (and was booked for) is in its usage.
  assert.ok(stored.usage && stored.usage.output_tokens > 0 && stored.usage.input_tokens > 0, JSON.stringify(stored.usage));
  assert.equal(stored.usage.total_tokens, stored.usage.input_tokens + stored.usage.output_tokens);
});

test("a background response waits queued while every sequence of the model is busy, and is in progress once it runs", async () => {
  // Four runs hold the fixture's four sequences; each says in_progress once it has one.
  const hogs = await Promise.all(Array.from({ length: 4 }, () => create({ input: "Long", background: true, max_output_tokens: 3000, logit_bias: NO_END })));
  const statuses = async (ids: string[]) => Promise.all(ids.map(async (id) => (await s.client.responses.retrieve(id)).status));
  for (let i = 0; i < 200 && (await statuses(hogs.map((h) => h.id))).some((st) => st !== "in_progress"); i++) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(await statuses(hogs.map((h) => h.id)), ["in_progress", "in_progress", "in_progress", "in_progress"]);
  try {
    // It waits behind them for a sequence: queued, as its stream so far says (it read in_progress).
    const waiting = await create({ input: "Short", background: true, max_output_tokens: 3 });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await s.client.responses.retrieve(waiting.id)).status, "queued");
    const watching = new AbortController();
    const reader = (await fetch(`${s.url}/v1/responses/${waiting.id}?stream=true`, { signal: watching.signal })).body!.getReader();
    let sofar = "";
    const reading = (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        sofar += new TextDecoder().decode(value);
      }
    })().catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    watching.abort();
    await reading;
    assert.match(sofar, /response\.queued/);
    assert.ok(!sofar.includes("response.in_progress"), sofar.slice(0, 300));
    for (const h of hogs) await s.client.responses.cancel(h.id);
    let done = await s.client.responses.retrieve(waiting.id);
    for (let i = 0; i < 200 && ["queued", "in_progress"].includes(done.status ?? ""); i++) {
      await new Promise((r) => setTimeout(r, 50));
      done = await s.client.responses.retrieve(waiting.id);
    }
    assert.ok(["completed", "incomplete"].includes(done.status ?? ""), done.status);
    const types = [...(await (await fetch(`${s.url}/v1/responses/${waiting.id}?stream=true`)).text()).matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
    assert.deepEqual(types.slice(0, 4), ["response.created", "response.queued", "response.in_progress", "response.output_item.added"]);
  } finally {
    await Promise.all(hogs.map((h) => s.client.responses.cancel(h.id).catch(() => {})));
  }
});

test("a stored stream whose client goes away midway is stored as cancelled, with what it had written", async () => {
  const { text } = await streamThenCancel(
    `${s.url}/v1/responses`,
    { model: "tiny", input: "Long", stream: true, store: true, max_output_tokens: 3000, logit_bias: NO_END },
    { marker: /response\.output_text\.delta/g },
  );
  const id = /"id":"(resp_[^"]+)"/.exec(text)![1];
  // Stored as in_progress from its start; cancelled once its run has seen the client go.
  let stored: { status: string; error: unknown; output_text: string } | undefined;
  for (let i = 0; i < 100 && (!stored || stored.status === "in_progress"); i++) {
    await new Promise((r) => setTimeout(r, 50));
    stored = (await s.client.responses.retrieve(id).catch(() => undefined)) as typeof stored;
  }
  assert.ok(stored, "the response was stored");
  assert.equal(stored.status, "cancelled");
  assert.equal(stored.error, null);
  assert.ok(stored.output_text.length > 0);
});

test("a background stream can be resumed from a sequence number", async () => {
  const first = s.client.responses.stream({ model: "tiny", input: "Go", background: true, max_output_tokens: 6, logit_bias: NO_END } as never);
  const seen: number[] = [];
  const types: string[] = [];
  let id = "";
  for await (const ev of first) {
    seen.push(ev.sequence_number);
    types.push(ev.type);
    if (ev.type === "response.created") id = ev.response.id;
  }
  // As OpenAI's background streams open: created and queued, then in progress once it runs.
  assert.deepEqual(types.slice(0, 3), ["response.created", "response.queued", "response.in_progress"]);
  const resumed = s.client.responses.stream({ response_id: id, starting_after: 3 } as never);
  const again: number[] = [];
  for await (const ev of resumed) again.push(ev.sequence_number);
  assert.deepEqual(again, seen.filter((n) => n > 3));
  // Only a sequence number in decimal: Number() would read these as 0, 16 and 10.
  for (const bad of ["", "0x10", "1e1", " 3", "-2"]) {
    const r = await fetch(`${s.url}/v1/responses/${id}?stream=true&starting_after=${encodeURIComponent(bad)}`);
    assert.equal(r.status, 400, JSON.stringify(bad));
    assert.equal(((await r.json()) as any).error.param, "starting_after", JSON.stringify(bad));
  }
});

test("a background run's streams miss no event: the first one, and ones resumed while it runs", async () => {
  const seqs = (text: string) => [...text.matchAll(/"sequence_number":(\d+)/g)].map((m) => Number(m[1]));
  const contiguous = (list: number[], from: number) => list.every((n, i) => n === from + i);
  // Its own stream: events are stored every 100 ms, so the first of them must not depend on the store.
  const first = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", input: "Go", background: true, stream: true, max_output_tokens: 40, logit_bias: NO_END }),
  });
  const firstSeqs = seqs(await first.text());
  assert.ok(contiguous(firstSeqs, 0) && firstSeqs.length > 40, `first stream: ${firstSeqs.join(",")}`);

  // Streams joining a run at different moments, from the start and from midway.
  const started = await create({ input: "Go", background: true, max_output_tokens: 200, logit_bias: NO_END });
  const joins = [0, 60, 150, 300].map(async (delay, i) => {
    await new Promise((r) => setTimeout(r, delay));
    const after = i % 2 === 0 ? -1 : 2;
    const r = await fetch(`${s.url}/v1/responses/${started.id}?stream=true&starting_after=${after}`);
    return { after, seqs: seqs(await r.text()) };
  });
  const all = await Promise.all(joins);
  const stored = seqs(await (await fetch(`${s.url}/v1/responses/${started.id}?stream=true`)).text());
  assert.ok(contiguous(stored, 0) && stored.length > 200, `stored: ${stored.length}`);
  for (const j of all) assert.deepEqual(j.seqs, stored.filter((n) => n > j.after), `joined after ${j.after}`);
});

test("a response stored for one end user is the application's: read back and continued without naming the user, as at OpenAI", async () => {
  const r = await create({ input: "Secret", safety_identifier: "alice", max_output_tokens: 2 });
  // The official client's plain retrieve (no query), and the old ?user= extension, which changes nothing.
  for (const q of ["", "?user=bob", "?safety_identifier=alice"]) {
    const got = await fetch(`${s.url}/v1/responses/${r.id}${q}`);
    assert.equal(got.status, 200, q);
    assert.equal((await got.json()).id, r.id);
  }
  const chained = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", previous_response_id: r.id, input: "x", max_output_tokens: 2 }),
  });
  assert.equal(chained.status, 200, await chained.clone().text());
});

test("a reasoning summary from a model that does not reason is refused, as effort is", async () => {
  for (const reasoning of [{ summary: "auto" }, { effort: "low" }]) {
    const r = await fetch(`${s.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", input: "x", max_output_tokens: 2, reasoning }),
    });
    assert.equal(r.status, 400, JSON.stringify(reasoning));
    assert.match((await r.json()).error.param, /^reasoning\./);
  }
  const thinking = await create({ model: "think", input: "x", max_output_tokens: 4, reasoning: { effort: "low", summary: "auto" }, store: false });
  assert.ok(["completed", "incomplete"].includes(thinking.status));
});

test("a function_call_output that answers no call is a 400 naming its call_id", async () => {
  const r = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", input: [{ role: "user", content: "hi" }, { type: "function_call_output", call_id: "nope", output: "x" }], max_output_tokens: 2 }),
  });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, "input[1].call_id");
});

/** A raw POST /v1/responses: what the official client would refuse to send is sent as it is. */
async function postResponse(body: Record<string, unknown>, path = "/v1/responses") {
  // input_tokens generates nothing, and refuses a length limit by name.
  const limit = path === "/v1/responses" ? { max_output_tokens: 2 } : {};
  const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", ...limit, ...body }) });
  return { status: r.status, json: (await r.json()) as any };
}

function assertNoToolOutput(r: { status: number; json: any }, what: string) {
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.deepEqual(r.json.error, { message: `No tool output found for ${what}.`, type: "invalid_request_error", param: "input", code: null });
}

test("a call with no output anywhere in the conversation is a 400, as OpenAI answers it: in the input, the previous response or the conversation", async () => {
  const call = { type: "function_call", call_id: "call_a", name: "get_weather", arguments: '{"city":"Paris","unit":"c"}' };
  const ask = { role: "user", content: "Weather in Paris?" };
  assertNoToolOutput(await postResponse({ input: [ask, call, { role: "user", content: "Well?" }], tools: [WEATHER_TOOL] }), "function call call_a");
  // One of two calls answered is not enough; a trailing call is refused too (no prefill here, unlike chat).
  const answered = { type: "function_call_output", call_id: "call_a", output: "sunny" };
  assertNoToolOutput(await postResponse({ input: [ask, call, { ...call, call_id: "call_b" }, answered], tools: [WEATHER_TOOL] }), "function call call_b");
  assertNoToolOutput(await postResponse({ input: [ask, call], tools: [WEATHER_TOOL] }), "function call call_a");
  const custom = { type: "custom_tool_call", call_id: "call_c", name: "dial", input: "555-0100" };
  assertNoToolOutput(await postResponse({ input: [ask, custom, { role: "user", content: "Well?" }] }), "custom tool call call_c");
  assertNoToolOutput(await postResponse({ input: [ask, call, { role: "user", content: "Well?" }], tools: [WEATHER_TOOL] }, "/v1/responses/input_tokens"), "function call call_a");

  // A previous response that ended with calls: a new message without their outputs is refused.
  const first = await create({ input: "Weather in Paris?", tools: [WEATHER_TOOL], tool_choice: "required", max_output_tokens: 80, temperature: 0 });
  const calls = first.output.filter((o: any) => o.type === "function_call");
  assert.ok(calls.length > 0, JSON.stringify(first.output));
  assertNoToolOutput(await postResponse({ previous_response_id: first.id, input: "And tomorrow?", tools: [WEATHER_TOOL] }), `function call ${calls[0].call_id}`);

  // A conversation holding a call whose output never came.
  const conv = await s.client.conversations.create({ items: [ask, call] as never });
  assertNoToolOutput(await postResponse({ conversation: conv.id, input: "Well?", tools: [WEATHER_TOOL] }), "function call call_a");
  const resumed = await postResponse({ conversation: conv.id, input: [answered], tools: [WEATHER_TOOL] });
  assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
});

test("the tool loop without storage: reasoning, calls and every output sent back as input go on", async () => {
  const first = await create({
    model: "think",
    store: false,
    input: "Weather in Paris?",
    // The random model thinks until its budget runs out: a small one leaves room for the call.
    reasoning: { effort: "minimal" },
    include: ["reasoning.encrypted_content"],
    tools: [WEATHER_TOOL],
    tool_choice: "required",
    max_output_tokens: 200,
    temperature: 0,
  });
  assert.equal(typeof first.output.find((o: any) => o.type === "reasoning")?.encrypted_content, "string", JSON.stringify(first.output));
  const calls = first.output.filter((o: any) => o.type === "function_call");
  assert.ok(calls.length > 0, JSON.stringify(first.output));
  const outputs = calls.map((c: any) => ({ type: "function_call_output", call_id: c.call_id, output: '{"temp": 21}' }));
  const next = await create({ model: "think", store: false, input: [{ role: "user", content: "Weather in Paris?" }, ...first.output, ...outputs], tools: [WEATHER_TOOL], reasoning: { effort: "none" }, max_output_tokens: 2 });
  assert.ok(["completed", "incomplete"].includes(next.status), next.status);
});

test("input_tokens counts the prompt without generating", async () => {
  const counted = await s.client.responses.inputTokens.count({ model: "tiny", input: "Count me" } as never);
  const r = await create({ input: "Count me", max_output_tokens: 1, store: false });
  assert.equal((counted as any).input_tokens, r.usage.input_tokens);
  // OpenAI's style preset is a field of this body; a server without presets refuses it by name.
  const preset = await fetch(`${s.url}/v1/responses/input_tokens`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", input: "Count me", personality: "friendly" }),
  });
  assert.equal(preset.status, 400);
  assert.equal(((await preset.json()) as any).error.param, "personality");
});

test("a stored response survives a restart on the same data directory; a second server on it meanwhile is refused", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-responses-restart-"));
  try {
    const first = await startTestServer({ "data-dir": dir });
    let r: any;
    try {
      r = await first.client.responses.create({ model: "tiny", input: "Keep me", max_output_tokens: 3 });
      await assert.rejects(startTestServer({ "data-dir": dir }), /in use by another running Plinth server/);
    } finally {
      await first.close();
    }
    const other = await startTestServer({ "data-dir": dir });
    try {
      const back = await other.client.responses.retrieve(r.id);
      assert.deepEqual(back.output, r.output);
    } finally {
      await other.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("custom tools: a Lark grammar and a regex hold the tool's input; the item carries the raw text", async () => {
  const sql = {
    type: "custom" as const,
    name: "run_sql",
    description: "Runs a query",
    format: { type: "grammar" as const, syntax: "lark" as const, definition: 'start: "SELECT " COL (", " COL)~0..2 " FROM " TABLE\nCOL: /[a-z]{1,6}/\nTABLE: "users" | "orders"' },
  };
  const phone = { type: "custom" as const, name: "dial", format: { type: "grammar" as const, syntax: "regex" as const, definition: "^[0-9]{3}-[0-9]{4}$" } };
  for (const [tool, pattern] of [
    [sql, /^SELECT [a-z]{1,6}(, [a-z]{1,6}){0,2} FROM (users|orders)$/],
    [phone, /^[0-9]{3}-[0-9]{4}$/],
  ] as const) {
    for (const seed of [1, 2]) {
      const r = await create({ model: "think", reasoning: { effort: "none" }, input: "Go", tools: [tool], tool_choice: { type: "custom", name: tool.name }, max_output_tokens: 120, temperature: 1, seed });
      const call = r.output.find((o: any) => o.type === "custom_tool_call");
      assert.ok(call, JSON.stringify(r.output));
      assert.equal(call.name, tool.name);
      assert.match(call.call_id, /^call_/);
      assert.match(call.input, pattern);
    }
  }
});

test("custom tools: a grammar that cannot be converted is a 400 naming its definition", async () => {
  const bad = { type: "custom", name: "x", format: { type: "grammar", syntax: "lark", definition: "start: a\n%declare A" } };
  await assert.rejects(create({ model: "think", input: "x", tools: [bad] }), (e: any) => e.status === 400 && e.error?.param === "tools[0].format.definition");
  // A grammar that requires a NUL matched no token and aborted the whole server: refused now.
  for (const [syntax, definition] of [["regex", "a\u0000b"], ["regex", "a\\x00b"], ["lark", 'start: "a\\0"']]) {
    const nul = { type: "custom", name: "x", format: { type: "grammar", syntax, definition } };
    await assert.rejects(create({ input: "x", tools: [nul], tool_choice: "required" }), (e: any) => e.status === 400 && e.error?.param === "tools[0].format.definition");
  }
  assert.equal((await fetch(`${s.url}/health`)).status, 200);
});

test("vLLM's Responses extensions and the chat route's foreign fields: honoured where they map onto the request, else a 400 naming them", async () => {
  const base = { input: "Hello there", max_output_tokens: 8, temperature: 0, logit_bias: NO_END };
  const plain = await create(base);
  const text: string = plain.output_text;
  assert.ok(text.length >= 3, text);
  // stop: the answer ends before the first stop string, as on chat.
  const stop = text.slice(1, 3);
  const stopped = await create({ ...base, stop: [stop] });
  assert.equal(stopped.output_text, text.slice(0, text.indexOf(stop)));
  assert.equal(stopped.status, "completed");
  // guided_choice / structured_outputs hold the answer, as on chat.
  const chosen = await create({ input: "yes or no?", max_output_tokens: 8, structured_outputs: { choice: ["yes", "no"] } });
  assert.ok(["yes", "no"].includes(chosen.output_text), chosen.output_text);
  // ignore_eos runs past the end of the turn; n_predict is the budget under llama-server's name.
  const END = { [FIXTURE_TOKENS.endOfSequence]: 100 };
  const ran = await create({ input: "Hi", max_output_tokens: 6, logit_bias: END, ignore_eos: true });
  assert.equal(ran.usage.output_tokens, 6);
  const predicted = await create({ input: "Hi", n_predict: 5, logit_bias: NO_END });
  assert.equal(predicted.usage.output_tokens, 5);
  // Neutral values, and the repetition penalty under both names.
  const neutral = { ...base, repetition_penalty: 1.1, repeat_penalty: 1.1, skip_special_tokens: true, include_stop_str_in_output: false, mirostat: 0, vllm_xargs: {}, enable_response_messages: false, include_reasoning: true };
  assert.equal((await create(neutral)).status, "incomplete");
  // Chat's penalties apply here too (they were dropped): a repeated token is pushed away.
  const long = { ...base, max_output_tokens: 32 };
  const unpenalised: string = (await create(long)).output_text;
  const penalised: string = (await create({ ...long, frequency_penalty: 2, presence_penalty: 2 })).output_text;
  assert.notEqual(penalised, unpenalised);
  // vLLM's prefill: a last assistant message is continued, as the switches say.
  const prefill = await create({ input: [{ role: "user", content: "A proverb" }, { role: "assistant", content: "An apple a day" }], max_output_tokens: 2, continue_final_message: true, add_generation_prompt: false });
  assert.equal(prefill.object, "response");
  // Thinking switched and budgeted through vLLM's fields on a thinking model.
  const thinkBias = { ...NO_END, [EXTRA_TOKENS.thinkClose]: -100 };
  const off = await create({ model: "think", input: "Think first", max_output_tokens: 6, logit_bias: thinkBias, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.usage.output_tokens_details.reasoning_tokens, 0);
  const budgeted = await create({ model: "think", input: "Think first", max_output_tokens: 30, temperature: 0, logit_bias: thinkBias, thinking_token_budget: 8 });
  const reasoningTokens = budgeted.usage.output_tokens_details.reasoning_tokens;
  assert.ok(reasoningTokens >= 8 && reasoningTokens <= 14, `reasoning tokens ${reasoningTokens}`);

  const refused: Array<[Record<string, unknown>, string]> = [
    [{ enable_response_messages: true }, "enable_response_messages"],
    [{ previous_input_messages: [{ role: "user", content: "x" }] }, "previous_input_messages"],
    [{ include_stop_str_in_output: true }, "include_stop_str_in_output"],
    [{ skip_special_tokens: false }, "skip_special_tokens"],
    [{ vllm_xargs: { k: 1 } }, "vllm_xargs"],
    [{ mirostat: 2 }, "mirostat"],
    [{ include_reasoning: false }, "include_reasoning"],
    [{ guided_grammar: "root ::= \"a\"" }, "guided_grammar"],
    [{ guided_regex: "a+", text: { format: { type: "json_object" } } }, "guided_regex"],
    [{ chat_template_kwargs: { foo: 1 } }, "chat_template_kwargs.foo"],
    [{ chat_template_kwargs: { enable_thinking: true }, reasoning: { effort: "none" } }, "chat_template_kwargs.enable_thinking"],
    [{ ignore_eos: true, text: { format: { type: "json_object" } } }, "ignore_eos"],
    [{ n_predict: 0 }, "n_predict"],
    [{ frequency_penalty: 3 }, "frequency_penalty"],
    [{ presence_penalty: -2.5 }, "presence_penalty"],
    // A model without a thinking section names the field that asked for thinking.
    [{ thinking_token_budget: 8 }, "thinking_token_budget"],
    [{ repeat_penalty: 1.1, repetition_penalty: 1.2 }, "repeat_penalty"],
    [{ add_generation_prompt: false }, "add_generation_prompt"],
    [{ input: [{ role: "user", content: "x" }, { role: "assistant", content: "y" }], continue_final_message: false }, "continue_final_message"],
  ];
  for (const [field, param] of refused) {
    const r = await s.http.postRaw("/v1/responses", { model: "tiny", input: "Hi", max_output_tokens: 3, ...field });
    assert.equal(r.status, 400, `${JSON.stringify(field)}: ${r.text}`);
    assert.equal(r.error?.param, param, r.text);
  }
});

test("a message that can never fit the context by itself is named: instructions, an input item, a tool output", async () => {
  const huge = "x".repeat(2_000_000);
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ instructions: huge, input: "Hi" }, "instructions"],
    [{ instructions: "Be brief.", input: huge }, "input"],
    [{ input: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello" }, { role: "user", content: huge }] }, "input[2].content"],
    [
      {
        tools: [WEATHER_TOOL],
        input: [
          { role: "user", content: "Weather?" },
          { type: "function_call", call_id: "c1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "function_call_output", call_id: "c1", output: huge },
        ],
      },
      "input[2].output",
    ],
  ];
  for (const [body, param] of cases) {
    const started = performance.now();
    const r = await s.http.postRaw("/v1/responses", { model: "tiny", max_output_tokens: 3, ...body });
    assert.equal(r.status, 400, r.text.slice(0, 300));
    assert.equal(r.error?.param, param, r.text.slice(0, 300));
    assert.equal(r.error?.code, "context_length_exceeded");
    assert.ok(performance.now() - started < 1000);
  }
});
