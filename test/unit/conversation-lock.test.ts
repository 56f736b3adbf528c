import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { scriptedApp } from "../helpers/scripted-app.ts";

// One turn at a time on a conversation: a second one, or items added, while a stored turn runs are
// refused with OpenAI's 400 `conversation_locked`, so the stored history never holds an answer to a
// turn its model did not see. Real app, SCRIPTED engine (no model), 40 ms per chunk.

async function withApp(run: (post: (url: string, payload: object) => Promise<{ status: number; json: any }>) => Promise<void>) {
  const s = await scriptedApp({ delayMs: 40, script: () => [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }] });
  const post = async (url: string, payload: object) => {
    const r = await s.app.inject({ method: "POST", url, payload });
    return { status: r.statusCode, json: r.json() };
  };
  try {
    await run(post);
  } finally {
    await s.app.close();
  }
}

const texts = (items: any[]) => items.map((i) => `${i.role}:${i.content[0].text}`);

test("a second turn, or items added, while a stored turn runs are refused; afterwards the history is in order", async () => {
  await withApp(async (post) => {
    const conv = (await post("/v1/conversations", { items: [{ role: "user", content: "start" }] })).json.id as string;
    const first = post("/v1/responses", { model: "scripted", conversation: conv, input: "A" });
    await new Promise((r) => setTimeout(r, 20));
    const second = await post("/v1/responses", { model: "scripted", conversation: { id: conv }, input: "B" });
    assert.equal(second.status, 400, JSON.stringify(second.json));
    assert.deepEqual([second.json.error.code, second.json.error.param], ["conversation_locked", "conversation"]);
    const added = await post(`/v1/conversations/${conv}/items`, { items: [{ role: "user", content: "late" }] });
    assert.equal(added.status, 400, JSON.stringify(added.json));
    assert.equal(added.json.error.code, "conversation_locked");
    assert.equal((await first).status, 200);
    // Free again once the first turn's items are in.
    assert.equal((await post("/v1/responses", { model: "scripted", conversation: conv, input: "B" })).status, 200);
  });
});

test("the history after turns one at a time holds each answer right after its own question", async () => {
  await withApp(async (post) => {
    const conv = (await post("/v1/conversations", { items: [{ role: "user", content: "start" }] })).json.id as string;
    const results = await Promise.all(["A", "B", "C"].map((t) => post("/v1/responses", { model: "scripted", conversation: conv, input: t })));
    const ok = results.filter((r) => r.status === 200);
    assert.equal(ok.length, 1, "one turn runs, the others are refused while it does");
    assert.ok(results.every((r) => r.status === 200 || r.json.error.code === "conversation_locked"));
    for (const t of ["D", "E"]) assert.equal((await post("/v1/responses", { model: "scripted", conversation: conv, input: t })).status, 200);
  });
});

test("a background turn holds the conversation until it ends; one not stored neither waits nor holds it", async () => {
  const s = await scriptedApp({ delayMs: 40, script: () => [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }] });
  try {
    const post = async (payload: object, url = "/v1/responses") => {
      const r = await s.app.inject({ method: "POST", url, payload });
      return { status: r.statusCode, json: r.json() };
    };
    const conv = (await post({}, "/v1/conversations")).json.id as string;
    const bg = await post({ model: "scripted", conversation: conv, input: "bg", background: true });
    assert.equal(bg.status, 200);
    const during = await post({ model: "scripted", conversation: conv, input: "now" });
    assert.deepEqual([during.status, during.json.error.code], [400, "conversation_locked"]);
    // Not stored: it appends nothing, so it neither waits for the conversation nor holds it.
    assert.equal((await post({ model: "scripted", conversation: conv, input: "peek", store: false })).status, 200);
    for (let i = 0; i < 200; i++) {
      const r = await s.app.inject({ method: "GET", url: `/v1/responses/${bg.json.id}` });
      if (r.json().status === "completed") break;
      await new Promise((res) => setTimeout(res, 20));
    }
    assert.equal((await post({ model: "scripted", conversation: conv, input: "after" })).status, 200);
  } finally {
    await s.app.close();
  }
});

test("a turn that fails gives the conversation back", async () => {
  const s = await scriptedApp({
    script: (req) => (JSON.stringify(req.prompt).includes("fail") ? [new Error("the engine broke")] : [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }]),
  });
  try {
    const post = (payload: object, url = "/v1/responses") => s.app.inject({ method: "POST", url, payload });
    const conv = (await post({}, "/v1/conversations")).json().id as string;
    assert.equal((await post({ model: "scripted", conversation: conv, input: "fail" })).statusCode, 500);
    assert.equal((await post({ model: "scripted", conversation: conv, input: "fail", stream: true })).statusCode, 500);
    assert.equal((await post({ model: "scripted", conversation: "conv_missing", input: "x" })).statusCode, 404);
    assert.equal((await post({ model: "scripted", conversation: conv, input: "fine" })).statusCode, 200);
  } finally {
    await s.app.close();
  }
});

test("stored items keep the order of the turns", async () => {
  const s = await scriptedApp({ delayMs: 10, script: () => [{ kind: "text", text: "ok", tokens: 1 }, { kind: "end", reason: "stop" }] });
  try {
    const post = (url: string, payload: object) => s.app.inject({ method: "POST", url, payload });
    const conv = (await post("/v1/conversations", { items: [{ role: "user", content: "start" }] })).json().id as string;
    await Promise.all(["A", "B"].map((t) => post("/v1/responses", { model: "scripted", conversation: conv, input: t })));
    const items = (await s.app.inject({ method: "GET", url: `/v1/conversations/${conv}/items?order=asc` })).json().data;
    const said = texts(items);
    // Whichever turn ran, its answer follows its own question, and nothing else was appended.
    assert.equal(said.length, 3, said.join(" | "));
    assert.equal(said[0], "user:start");
    assert.match(said[1], /^user:[AB]$/);
    assert.equal(said[2], "assistant:ok");
  } finally {
    await s.app.close();
  }
});
