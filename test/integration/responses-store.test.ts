import assert from "../helpers/assert.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import Database from "better-sqlite3";
import { EXTRA_TOKENS } from "../fixtures/models.ts";
import { NO_EOG, requestJson, useTestServer } from "../helpers/server.ts";

// The Responses API's stored objects over real HTTP on the tiny fixture: conversations and their
// items as the reference shapes them, and what a stored response looks like while it runs.

// Its own data directory, so a test can see what is stored before the API says where.
const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-responses-store-"));
const s = useTestServer({ "data-dir": dataDir }, { think: true });
after(() => rmSync(dataDir, { recursive: true, force: true }));

/** The id of the one response stored as running (none or several: undefined), read from the store's file. */
function runningId(): string | undefined {
  const db = new Database(path.join(dataDir, "plinth.db"), { readonly: true });
  try {
    const rows = db.prepare("SELECT id FROM responses WHERE status = 'in_progress'").all() as Array<{ id: string }>;
    return rows.length === 1 ? rows[0].id : undefined;
  } finally {
    db.close();
  }
}

const call = (method: string, path: string, body?: unknown) => requestJson(`${s.url}/v1${path}`, method, body);

test("a conversation's metadata set to null is cleared, as the reference and the SDK allow", async () => {
  const conv = await s.client.conversations.create({ metadata: { who: "test" } });
  const cleared = await s.client.conversations.update(conv.id, { metadata: null });
  assert.deepEqual(cleared.metadata, {});
  assert.deepEqual((await s.client.conversations.retrieve(conv.id)).metadata, {});
  // Left out, it is still refused: the body's one field is required.
  const missing = await call("POST", `/conversations/${conv.id}`, {});
  assert.equal(missing.status, 400);
  assert.equal(missing.json.error.param, "metadata");
});

test("routes that read only their path refuse a query key or body field by name, and delete nothing then", async () => {
  const conv = await s.client.conversations.create({ items: [{ type: "message", role: "user", content: "kept" }] });
  const [item] = (await s.client.conversations.items.list(conv.id)).data;
  const response = await s.client.responses.create({ model: "tiny", input: "hi", max_output_tokens: 2 });
  const stored = await s.http.post("/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2, store: true });
  const chatId = stored.json.id as string;
  const cases: Array<[string, string, unknown, string]> = [
    ["GET", `/conversations/${conv.id}?bogus=1`, undefined, "bogus"],
    ["POST", `/conversations/${conv.id}?bogus=1`, { metadata: {} }, "bogus"],
    ["DELETE", `/conversations/${conv.id}`, { bogus: 1 }, "bogus"],
    ["DELETE", `/conversations/${conv.id}/items/${item.id}?bogus=1`, undefined, "bogus"],
    ["DELETE", `/responses/${response.id}?bogus=1`, undefined, "bogus"],
    ["POST", `/responses/${response.id}/cancel`, { bogus: 1 }, "bogus"],
    ["GET", `/chat/completions/${chatId}?bogus=1`, undefined, "bogus"],
    ["DELETE", `/chat/completions/${chatId}`, { bogus: 1 }, "bogus"],
  ];
  for (const [method, path, body, param] of cases) {
    const r = await call(method, path, body);
    assert.equal(r.status, 400, `${method} ${path}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error.param, param, `${method} ${path}`);
  }
  // Nothing was deleted; `user` is still accepted, as on a retrieve.
  assert.equal((await call("GET", `/conversations/${conv.id}/items/${item.id}?user=u`)).status, 200);
  assert.equal((await call("GET", `/responses/${response.id}`)).status, 200);
  assert.equal((await call("DELETE", `/chat/completions/${chatId}`)).status, 200);
});

test("an item_reference added to a conversation is stored as the item it names; one that names nothing is a 400 naming it", async () => {
  const earlier = await s.client.responses.create({ model: "tiny", input: "elsewhere", max_output_tokens: 2 });
  const [said] = earlier.output as any[];
  // On creation and added later, as the audit's client did.
  const conv = await s.client.conversations.create({ items: [{ type: "item_reference", id: said.id }] });
  await s.client.conversations.items.create(conv.id, { items: [{ type: "message", role: "user", content: "hi" }] });
  const earlierInput = (await s.client.responses.inputItems.list(earlier.id)).data[0];
  await s.client.conversations.items.create(conv.id, { items: [{ type: "item_reference", id: earlierInput.id }] });
  for (const [path, items, param] of [
    [`/conversations/${conv.id}/items`, [{ type: "item_reference", id: "msg_nothing" }], "items[0].id"],
    ["/conversations", [{ role: "user", content: "x" }, { type: "item_reference", id: "msg_nothing" }], "items[1].id"],
  ] as const) {
    const refused = await call("POST", path, { items });
    assert.equal(refused.status, 400, path);
    assert.equal(refused.json.error.param, param, path);
  }
  // An id the conversation already holds, or one given twice, is a conflict named by the item's own
  // field (the store's refusal named 'id', no field of the request).
  for (const [path, items, param] of [
    [`/conversations/${conv.id}/items`, [{ type: "item_reference", id: said.id }], "items[0].id"],
    [`/conversations/${conv.id}/items`, [{ role: "user", content: "a" }, { id: said.id, role: "user", content: "b" }], "items[1].id"],
    ["/conversations", [{ id: "msg_twice", role: "user", content: "a" }, { id: "msg_twice", role: "user", content: "b" }], "items[1].id"],
    ["/conversations", [{ type: "item_reference", id: said.id }, { type: "item_reference", id: said.id }], "items[1].id"],
  ] as const) {
    const refused = await call("POST", path, { items });
    assert.equal(refused.status, 409, path);
    assert.equal(refused.json.error.param, param, path);
    assert.equal(refused.json.error.code, "conflict", path);
  }

  // The stored items, not the references: listed whole, with their own ids.
  const items = (await s.client.conversations.items.list(conv.id, { order: "asc" })).data as any[];
  assert.deepEqual(
    items.map((i) => [i.type, i.role, i.id]),
    [
      ["message", "assistant", said.id],
      ["message", "user", items[1].id],
      ["message", "user", earlierInput.id],
    ],
  );
  assert.deepEqual(items[0].content, said.content);
  assert.deepEqual(items[2].content, [{ type: "input_text", text: "elsewhere" }]);
  assert.deepEqual(await s.client.conversations.items.retrieve(said.id, { conversation_id: conv.id }), items[0]);

  // And a turn goes on from them.
  const next = await s.client.responses.create({ model: "tiny", conversation: conv.id, input: "and then", max_output_tokens: 2 });
  assert.ok(next.status === "completed" || next.status === "incomplete", next.status);
});

test("an item_reference to an id that two stored responses hold names the one stored last, in a response's input and a conversation's items", async () => {
  // Ids a client chooses can recur: each of these unrelated turns sent its own msg_dup.
  for (const text of ["FIRST", "SECOND"])
    await s.client.responses.create({ model: "tiny", input: [{ id: "msg_dup", type: "message", role: "user", content: text }] as never, max_output_tokens: 1 });
  const text = (item: any) => item.content[0].text;
  const referred = await s.client.responses.create({ model: "tiny", input: [{ type: "item_reference", id: "msg_dup" }], max_output_tokens: 1 });
  assert.deepEqual((await s.client.responses.inputItems.list(referred.id)).data.map(text), ["SECOND"]);
  const conv = await s.client.conversations.create({ items: [{ type: "item_reference", id: "msg_dup" }] });
  assert.deepEqual((await s.client.conversations.items.list(conv.id)).data.map(text), ["SECOND"]);
  // Sent again, it is the latest once more.
  await s.client.responses.create({ model: "tiny", input: [{ id: "msg_dup", type: "message", role: "user", content: "THIRD" }] as never, max_output_tokens: 1 });
  const again = await s.client.responses.create({ model: "tiny", input: [{ type: "item_reference", id: "msg_dup" }], max_output_tokens: 1 });
  assert.deepEqual((await s.client.responses.inputItems.list(again.id)).data.map(text), ["THIRD"]);
});

test("include on the item reads: logprobs and sealed reasoning when asked, left out otherwise; what cannot be filled is a 400 naming include", async () => {
  const conv = await s.client.conversations.create({});
  const withLogprobs = await s.client.responses.create({
    model: "tiny",
    conversation: conv.id,
    input: "Hi",
    include: ["message.output_text.logprobs"],
    top_logprobs: 2,
    max_output_tokens: 3,
  });
  const reasoned = await s.client.responses.create({
    model: "think",
    conversation: conv.id,
    input: "Think first",
    reasoning: { effort: "low" },
    max_output_tokens: 20,
    temperature: 0,
    logit_bias: { ...NO_EOG, [EXTRA_TOKENS.thinkClose]: -100 },
  } as never);
  const said = withLogprobs.output[0] as any;
  assert.ok(said.content[0].logprobs.length > 0);
  const thought = reasoned.output.find((o) => o.type === "reasoning") as any;
  assert.ok(thought && thought.content[0].text.length > 0, JSON.stringify(reasoned.output));
  assert.equal(thought.encrypted_content, undefined);

  const ofConversation = async (query: string) => (await call("GET", `/conversations/${conv.id}/items?order=asc&${query}`)).json.data as any[];
  const find = (items: any[], id: string) => items.find((i) => i.id === id);
  // Not asked: none (the response that wrote them had asked).
  const plain = await ofConversation("");
  assert.deepEqual(find(plain, said.id).content[0].logprobs, []);
  assert.equal("encrypted_content" in find(plain, thought.id), false);
  // Asked, in either spelling of a list (the openai SDK writes include[]=…).
  for (const query of ["include=message.output_text.logprobs&include=reasoning.encrypted_content", "include[]=message.output_text.logprobs&include[]=reasoning.encrypted_content"]) {
    const full = await ofConversation(query);
    assert.deepEqual(find(full, said.id).content[0].logprobs, said.content[0].logprobs, query);
    assert.equal(typeof find(full, thought.id).encrypted_content, "string", query);
  }
  const one = (await s.client.conversations.items.retrieve(thought.id, { conversation_id: conv.id, include: ["reasoning.encrypted_content"] })) as any;
  // A retrieve of the response with include (the openai SDK sends include[]=…) adds the seal to what was stored.
  const retrieved = (await s.client.responses.retrieve(reasoned.id, { include: ["reasoning.encrypted_content"] } as never)) as any;
  assert.match(retrieved.output.find((o: any) => o.type === "reasoning").encrypted_content, /^plinth-v1:/);
  assert.equal((await s.client.responses.retrieve(reasoned.id)).output.find((o: any) => o.type === "reasoning")!.hasOwnProperty("encrypted_content"), false);
  const unknownInclude = await call("GET", `/responses/${reasoned.id}?include=file_search_call.results`);
  assert.equal(unknownInclude.status, 400);
  assert.equal(unknownInclude.json.error.param, "include");
  // The item reads' queries are strict too: a key they do not know is named, not dropped.
  for (const [query, param] of [["include%5B0%5D=reasoning.encrypted_content", "include[0]"], ["limt=2", "limt"]]) {
    const r = await call("GET", `/conversations/${conv.id}/items?${query}`);
    assert.equal(r.status, 400, query);
    assert.equal(r.json.error.param, param, query);
  }
  const long = await call("GET", `/responses/${reasoned.id}/input_items?include=${"x".repeat(5000)}`);
  assert.equal(long.status, 400);
  assert.ok(long.json.error.message.length < 400, long.json.error.message.length);
  // Sealed now, it goes back as input like any sealed reasoning (an altered one is refused).
  const next = await s.client.responses.create({
    model: "think",
    input: [one as never, { role: "user", content: "Go on" }],
    reasoning: { effort: "none" },
    max_output_tokens: 2,
  });
  assert.ok(next.status === "completed" || next.status === "incomplete", next.status);
  // A response's input items, the same way.
  const input = async (query: string) => find((await call("GET", `/responses/${next.id}/input_items?${query}`)).json.data, thought.id);
  assert.equal((await input("")).encrypted_content, undefined);
  assert.equal((await input("include=reasoning.encrypted_content")).encrypted_content, one.encrypted_content);
  // And the items a POST adds.
  const logprobs = [{ token: "x", logprob: -1, bytes: [120], top_logprobs: [] }];
  const items = [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "x", logprobs }] }];
  const added = await call("POST", `/conversations/${conv.id}/items?include=message.output_text.logprobs`, { items });
  assert.deepEqual(added.json.data[0].content[0].logprobs, logprobs);
  assert.deepEqual((await call("GET", `/conversations/${conv.id}/items/${added.json.data[0].id}`)).json.content[0].logprobs, []);

  for (const path of [
    `/conversations/${conv.id}/items?include=file_search_call.results`,
    `/conversations/${conv.id}/items/${said.id}?include[]=message.input_image.image_url`,
    `/responses/${reasoned.id}/input_items?include=nonsense`,
  ]) {
    const refused = await call("GET", path);
    assert.equal(refused.status, 400, path);
    assert.equal(refused.json.error.param, "include", path);
  }
  const refused = await call("POST", `/conversations/${conv.id}/items?include=code_interpreter_call.outputs`, { items: [{ role: "user", content: "x" }] });
  assert.equal(refused.status, 400);
  assert.equal(refused.json.error.param, "include");
});

/** Reads a stream until `pattern` has come; returns what it read. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, pattern: RegExp, seen = ""): Promise<string> {
  const decoder = new TextDecoder();
  while (!pattern.test(seen)) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended before ${pattern}: ${seen.slice(-300)}`);
    seen += decoder.decode(value, { stream: true });
  }
  return seen;
}

test("a resumed background stream with include: the reasoning it replays is sealed where asked, as a retrieve's is", async () => {
  const bg = (await s.client.responses.create({
    model: "think",
    input: "Think first",
    reasoning: { effort: "low" },
    background: true,
    max_output_tokens: 12,
    temperature: 0,
    logit_bias: { ...NO_EOG, [EXTRA_TOKENS.thinkClose]: -100 },
  } as never)) as any;
  for (let i = 0; i < 100 && !["completed", "incomplete"].includes((await s.client.responses.retrieve(bg.id)).status!); i++) await new Promise((r) => setTimeout(r, 100));
  const events = async (query: string) => {
    const res = await fetch(`${s.url}/v1/responses/${bg.id}?stream=true${query}`);
    assert.equal(res.status, 200, query);
    return (await res.text()).split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
  };
  const reasoningDone = (evs: any[]) => evs.find((e) => e.type === "response.output_item.done" && e.item.type === "reasoning")?.item;
  const ending = (evs: any[]) => evs.at(-1).response.output.find((o: any) => o.type === "reasoning");
  const plain = await events("");
  assert.ok(reasoningDone(plain), JSON.stringify(plain.map((e) => e.type)));
  assert.equal("encrypted_content" in reasoningDone(plain), false);
  assert.equal("encrypted_content" in ending(plain), false);
  for (const query of ["&include=reasoning.encrypted_content", "&include[]=reasoning.encrypted_content&include[]=message.output_text.logprobs"]) {
    const sealed = await events(query);
    assert.equal(sealed.length, plain.length, query);
    assert.match(reasoningDone(sealed).encrypted_content, /^plinth-v1:/, query);
    // Sealed again for each read (a fresh nonce), as a retrieve with include does.
    assert.match(ending(sealed).encrypted_content, /^plinth-v1:/, query);
  }
  const bad = await call("GET", `/responses/${bg.id}?stream=true&include=file_search_call.results`);
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, "include");
});

test("a stored response is there while it runs: read as in_progress, not continued yet, and a DELETE stops it for good", async () => {
  const res = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", input: "Long", stream: true, max_output_tokens: 3000, logit_bias: NO_EOG }),
  });
  const reader = res.body!.getReader();
  const opened = await readUntil(reader, /response\.output_text\.delta/);
  const id = /"id":"(resp_[^"]+)"/.exec(opened)![1];

  const running = await call("GET", `/responses/${id}`);
  assert.equal(running.status, 200);
  assert.equal(running.json.id, id);
  assert.equal(running.json.status, "in_progress");
  const continued = await call("POST", "/responses", { model: "tiny", previous_response_id: id, input: "x", max_output_tokens: 1 });
  assert.equal(continued.status, 400);
  assert.equal(continued.json.error.param, "previous_response_id");

  const deleted = await call("DELETE", `/responses/${id}`);
  assert.deepEqual(deleted.json, { id, object: "response", deleted: true });
  // Its stream ends, and says why.
  const rest = await readUntil(reader, /event: error\n/);
  assert.match(rest, /"code":"cancelled"/);
  assert.equal((await reader.read()).done, true);
  // Gone, and it stays gone now that the run has ended.
  assert.equal((await call("GET", `/responses/${id}`)).status, 404);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal((await call("GET", `/responses/${id}`)).status, 404);
});

test("a background response deleted while streams read it: the creating stream and a resumed one each end with an error event, code cancelled", async () => {
  const res = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", input: "Long", background: true, stream: true, max_output_tokens: 3000, logit_bias: NO_EOG }),
  });
  const creating = res.body!.getReader();
  const opened = await readUntil(creating, /response\.output_text\.delta/);
  const id = /"id":"(resp_[^"]+)"/.exec(opened)![1];
  const resumed = (await fetch(`${s.url}/v1/responses/${id}?stream=true&starting_after=2`)).body!.getReader();
  await readUntil(resumed, /response\.output_text\.delta/);

  assert.equal((await call("DELETE", `/responses/${id}`)).status, 200);
  // Each says why it ended (they stopped after output_item.done, with no terminal event), and ends.
  for (const [reader, seen] of [[creating, opened], [resumed, ""]] as const) {
    const all = await readUntil(reader, /event: error\n.*\n\n/, seen);
    const last = JSON.parse(/event: error\ndata: (.*)\n\n$/.exec(all)![1]);
    assert.equal(last.code, "cancelled");
    assert.match(last.message, /deleted/);
    const seqs = [...all.matchAll(/"sequence_number":(\d+)/g)].map((m) => Number(m[1]));
    assert.equal(last.sequence_number, Math.max(...seqs.slice(0, -1)) + 1);
    assert.equal((await reader.read()).done, true);
  }
  assert.equal((await call("GET", `/responses/${id}`)).status, 404);
});

test("two turns of one conversation at once: the second is refused before it generates (conversation_locked), not after", async () => {
  const conv = await s.client.conversations.create({});
  const turn = (extra: Record<string, unknown>) => ({ model: "tiny", conversation: conv.id, input: [{ id: "msg_mine", role: "user", content: "Hi" }], ...extra });
  const res = await fetch(`${s.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(turn({ stream: true, max_output_tokens: 400, logit_bias: NO_EOG })),
  });
  const reader = res.body!.getReader();
  const opened = await readUntil(reader, /response\.output_text\.delta/);
  // The first has not stored its items yet; the second would have failed with a 409 once done (and
  // with other ids, its answer would have been stored after the first's, which it never saw).
  const second = await call("POST", "/responses", turn({ max_output_tokens: 2 }));
  assert.equal(second.status, 400, JSON.stringify(second.json));
  assert.deepEqual([second.json.error.code, second.json.error.param], ["conversation_locked", "conversation"]);
  // Nor can items be added to the conversation meanwhile (they would sit before the running turn's).
  const added = await call("POST", `/conversations/${conv.id}/items`, { items: [{ id: "msg_mine", role: "user", content: "Also" }] });
  assert.equal(added.status, 400, JSON.stringify(added.json));
  assert.equal(added.json.error.code, "conversation_locked");
  await readUntil(reader, /event: response\.incomplete\n/, opened);
  const items = (await s.client.conversations.items.list(conv.id, { order: "asc" })).data as any[];
  assert.deepEqual(items.map((i) => i.role), ["user", "assistant"]);
  assert.equal(items[0].id, "msg_mine");
  // Once it is stored, the id is the conversation's: refused as before, and without it a turn goes on.
  const third = await call("POST", "/responses", turn({ max_output_tokens: 2 }));
  assert.equal(third.status, 400);
  assert.equal(third.json.error.param, "input[0].id");
  const fourth = await call("POST", "/responses", { model: "tiny", conversation: conv.id, input: "Again", max_output_tokens: 2 });
  assert.equal(fourth.status, 200, JSON.stringify(fourth.json));
});

test("a stored response without a stream: read while it runs, and deleted, its client gets it cancelled", async () => {
  const pending = call("POST", "/responses", { model: "tiny", input: "Long", max_output_tokens: 3000, logit_bias: NO_EOG });
  // It is stored before its first event; its id is not known yet, so it is found by what it says.
  let id: string | undefined;
  for (let i = 0; i < 200 && !id; i++) {
    await new Promise((r) => setTimeout(r, 10));
    id = runningId();
  }
  assert.ok(id, "the response was stored while it ran");
  assert.equal((await call("DELETE", `/responses/${id}`)).status, 200);
  const answer = await pending;
  assert.equal(answer.status, 200);
  assert.equal(answer.json.id, id);
  assert.equal(answer.json.status, "cancelled");
  assert.equal((await call("GET", `/responses/${id}`)).status, 404);
});

test("cancels and a DELETE of one background response at once: each is answered 200 or 404, never a 5xx", async () => {
  // A cancel waits for the run to record that it stopped, then reads the response again; a DELETE
  // that came meanwhile (it waits for the same run) had removed it by then, and that read found nothing.
  const seen = new Set<string>();
  for (let round = 0; round < 16; round++) {
    // Some rounds race a run that is still going, some one that is just finishing on its own.
    const long = round % 2 === 0;
    const created = await call("POST", "/responses", {
      model: "tiny",
      input: "tell me a story",
      background: true,
      max_output_tokens: long ? 400 : 2 + round,
      ...(long ? { logit_bias: NO_EOG } : {}),
    });
    assert.equal(created.status, 200);
    const id = created.json.id as string;
    if (!long) await new Promise((r) => setTimeout(r, round));
    // Which of them reads the stopped run first follows the order they came in: the DELETE goes
    // first, between or last.
    const ops: Array<["cancel" | "delete", () => ReturnType<typeof call>]> = [
      ["cancel", () => call("POST", `/responses/${id}/cancel`)],
      ["cancel", () => call("POST", `/responses/${id}/cancel`)],
    ];
    ops.splice(round % 3, 0, ["delete", () => call("DELETE", `/responses/${id}`)]);
    const answers = await Promise.all(ops.map(([, send]) => send()));
    for (const [i, a] of answers.entries()) {
      const what = ops[i][0];
      assert.ok(a.status === 200 || a.status === 404, `${what} in round ${round}: ${a.status} ${a.text}`);
      seen.add(`${what} ${a.status}`);
      if (a.status === 404) assert.equal(a.json.error.code, "not_found");
      else if (what === "cancel") {
        assert.equal(a.json.id, id);
        assert.ok(["cancelled", "completed", "incomplete"].includes(a.json.status), a.json.status);
      } else assert.deepEqual(a.json, { id, object: "response", deleted: true });
    }
    assert.equal((await call("GET", `/responses/${id}`)).status, 404);
  }
  // The race was run: some cancel came after the delete had removed the response.
  assert.ok(seen.has("cancel 404"), [...seen].join(", "));
});

test("a conversation refuses content parts its later turns could not use, by the item's part; a user image is kept", async () => {
  const file = { type: "input_file", file_data: "data:application/pdf;base64,AAAA", filename: "x.pdf" };
  const created = await call("POST", "/conversations", { items: [{ type: "message", role: "user", content: [{ type: "input_text", text: "hello" }, file] }] });
  assert.equal(created.status, 400, created.text);
  assert.equal(created.json.error.param, "items[0].content[1].type");
  assert.match(created.json.error.message, /input_file/);

  const conv = await call("POST", "/conversations", { items: [{ type: "message", role: "user", content: "hello" }] });
  assert.equal(conv.status, 200);
  const audio = { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } };
  const added = await call("POST", `/conversations/${conv.json.id}/items`, { items: [{ type: "message", role: "user", content: [audio] }] });
  assert.equal(added.status, 400, added.text);
  assert.equal(added.json.error.param, "items[0].content[0].type");
  // An image is for user messages only, as in a response's input: an assistant's parts are never
  // images (OpenAI's rule, named by the part's type), and a system message's are not here.
  const image = { type: "input_image", image_url: "data:image/png;base64,AAAA" };
  const misplaced = await call("POST", `/conversations/${conv.json.id}/items`, { items: [{ type: "message", role: "assistant", content: [image] }] });
  assert.equal(misplaced.status, 400, misplaced.text);
  assert.equal(misplaced.json.error.param, "items[0].content[0].type");
  const system = await call("POST", `/conversations/${conv.json.id}/items`, { items: [{ type: "message", role: "system", content: [image] }] });
  assert.equal(system.status, 400, system.text);
  assert.equal(system.json.error.param, "items[0].content[0]");

  // Nothing refused was stored: the conversation's next turn works.
  const turn = await call("POST", "/responses", { model: "tiny", input: [{ role: "user", content: "hi" }], conversation: conv.json.id, max_output_tokens: 2 });
  assert.equal(turn.status, 200, turn.text);

  // A user image is kept (a remote model may read it); a text-only model's turn names the
  // conversation, not a position of its own input.
  const withImage = await call("POST", `/conversations/${conv.json.id}/items`, { items: [{ type: "message", role: "user", content: [{ type: "input_text", text: "see" }, image] }] });
  assert.equal(withImage.status, 200, withImage.text);
  const refused = await call("POST", "/responses", { model: "tiny", input: [{ role: "user", content: "hi" }], conversation: conv.json.id, max_output_tokens: 2 });
  assert.equal(refused.status, 400, refused.text);
  assert.equal(refused.json.error.param, "conversation");

  // One stored before its parts were checked (by an earlier version) is named by its id.
  const old = await call("POST", "/conversations", { items: [{ type: "message", role: "user", content: "hello" }] });
  const db = new Database(path.join(dataDir, "plinth.db"));
  try {
    const row = db.prepare("SELECT namespace, position FROM conversation_items WHERE conversation_id = ?").get(old.json.id) as { namespace: string; position: number };
    const item = { type: "message", id: "msg_stored_file", role: "user", content: [{ type: "input_text", text: "x" }, file] };
    db.prepare("INSERT INTO conversation_items (namespace, conversation_id, id, position, item, created_at) VALUES (?, ?, ?, ?, ?, ?)").run(
      row.namespace, old.json.id, item.id, row.position + 1, JSON.stringify(item), Math.floor(Date.now() / 1000),
    );
  } finally {
    db.close();
  }
  const stale = await call("POST", "/responses", { model: "tiny", input: [{ role: "user", content: "hi" }], conversation: old.json.id, max_output_tokens: 2 });
  assert.equal(stale.status, 400, stale.text);
  assert.equal(stale.json.error.param, "conversation");
  assert.match(stale.json.error.message, /'msg_stored_file' of the conversation .*content\[1\] has type 'input_file'/);
});
