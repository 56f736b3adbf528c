import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { MAX_MESSAGES } from "../../src/dialects/openai/chat-protocol.ts";
import { scriptedApp, type ScriptedApp } from "../helpers/scripted-app.ts";

// Over the SCRIPTED engine: every route that takes a message list or a list of input items refuses
// more than MAX_MESSAGES before any template is rendered over them, in its own dialect's envelope and
// naming the field. (Konan, SpAk and Databricks had no cap: 12,000 messages through a Jinja template
// held the event loop for over a second before the prompt was refused as too long.)

const MODEL = "SpAk-Aster-V1-MOE";

let s: ScriptedApp;
before(async () => {
  // A context wide enough that MAX_MESSAGES short messages fit: the cap, not the context, decides.
  s = await scriptedApp({ id: MODEL, contextSize: 1_000_000, bodyLimit: 8 * 1024 * 1024 });
});
after(async () => {
  await s.app.close();
});

const messages = (n: number) => Array.from({ length: n }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: "hi" }));

type Envelope = "openai" | "databricks";
const routes: Array<{ url: string; field: string; envelope: Envelope; body: (n: number) => object }> = [
  { url: "/v1/chat/completions", field: "messages", envelope: "openai", body: (n) => ({ model: MODEL, messages: messages(n), max_tokens: 1 }) },
  { url: "/tokenize", field: "messages", envelope: "openai", body: (n) => ({ model: MODEL, messages: messages(n) }) },
  { url: "/v1/responses", field: "input", envelope: "openai", body: (n) => ({ model: MODEL, input: messages(n), max_output_tokens: 1, store: false }) },
  { url: "/v3/chat/completions", field: "messages", envelope: "openai", body: (n) => ({ model: MODEL, messages: messages(n), max_completion_tokens: 1 }) },
  { url: "/chat/completions", field: "messages", envelope: "openai", body: (n) => ({ model: MODEL, messages: messages(n), max_tokens: 1 }) },
  { url: `/serving-endpoints/${MODEL}/invocations`, field: "messages", envelope: "databricks", body: (n) => ({ messages: messages(n), max_tokens: 1 }) },
  { url: "/serving-endpoints/chat/completions", field: "messages", envelope: "databricks", body: (n) => ({ model: MODEL, messages: messages(n), max_tokens: 1 }) },
  { url: "/serving-endpoints/responses", field: "input", envelope: "databricks", body: (n) => ({ model: MODEL, input: messages(n), max_output_tokens: 1 }) },
];

for (const route of routes) {
  test(`scripted engine: POST ${route.url} refuses ${MAX_MESSAGES + 1} ${route.field} with a 400 naming it, and takes ${MAX_MESSAGES}`, async () => {
    const over = await s.app.inject({ method: "POST", url: route.url, payload: route.body(MAX_MESSAGES + 1) });
    assert.equal(over.statusCode, 400, over.body);
    const json = over.json();
    if (route.envelope === "openai") {
      assert.equal(json.error.param, route.field, over.body);
      assert.match(json.error.message, /at most 10000/, over.body);
    } else {
      assert.equal(json.error_code, "INVALID_PARAMETER_VALUE", over.body);
      assert.match(json.message, new RegExp(`'${route.field}'.*at most 10000`), over.body);
    }
    // No prompt was prepared: the list was refused before anything rendered it.
    const prepared = s.engine.prepared.length;
    const at = await s.app.inject({ method: "POST", url: route.url, payload: route.body(MAX_MESSAGES) });
    assert.equal(at.statusCode, 200, at.body.slice(0, 500));
    assert.ok(s.engine.prepared.length > prepared || route.url === "/tokenize");
  });
}
