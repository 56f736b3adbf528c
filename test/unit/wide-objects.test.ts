import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { chatCompletionRequest } from "../../src/dialects/openai/chat-protocol.ts";
import { createResponseRequest } from "../../src/dialects/responses/protocol.ts";
import { LOGIT_BIAS_MAX_ENTRIES } from "../../src/dialects/openai/sampling-fields.ts";

// A body within the size limit can hold a million keys in one object. zod's record validated every
// key and value of metadata and logit_bias before the count refusal (3–4 s of the JavaScript thread
// every request shares, measured over HTTP); tool parameters and schemas were copied key by key.
// These tests watch the work itself, not the clock: a proxy counts the values the schema reads.

function watched<T extends object>(target: T): { value: T; reads: () => number } {
  let reads = 0;
  const value = new Proxy(target, {
    get(t, key, receiver) {
      if (typeof key === "string") reads++;
      return Reflect.get(t, key, receiver);
    },
  });
  return { value, reads: () => reads };
}

const base = { model: "tiny", messages: [{ role: "user", content: "hi" }] };

test("oversized metadata is refused by its count, before any key or value is read", () => {
  const wide: Record<string, string> = {};
  for (let i = 0; i < 50_000; i++) wide[`k${i}`] = "v".repeat(600);
  const { value, reads } = watched(wide);
  const parsed = chatCompletionRequest.safeParse({ ...base, metadata: value });
  assert.equal(parsed.success, false);
  const issues = parsed.error!.issues;
  assert.equal(issues.length, 1, "one issue, not one per key");
  assert.deepEqual(issues[0].path, ["metadata"]);
  assert.match(issues[0].message, /at most 16/);
  assert.equal(reads(), 0, "no value was read");
  // The Responses request shares the schema.
  const responses = createResponseRequest.safeParse({ model: "tiny", input: "hi", metadata: wide });
  assert.equal(responses.success, false);
  assert.equal(responses.error!.issues.length, 1);
});

test("metadata within the count is still checked key by key", () => {
  const parsed = chatCompletionRequest.safeParse({ ...base, metadata: { ok: "v", [""]: "empty key", long: "x".repeat(513) } });
  assert.equal(parsed.success, false);
  // A key's own rule is nested in zod's "invalid_key" issue.
  const messages = parsed.error!.issues.flatMap((i) => [i.message, ...((i as { issues?: Array<{ message: string }> }).issues ?? []).map((n) => n.message)]).join(" | ");
  assert.match(messages, /must not be empty/);
  assert.match(messages, /at most 512/);
});

test("logit_bias past the largest vocabulary is refused by its count without reading a bias", () => {
  const wide: Record<string, number> = {};
  for (let i = 0; i <= LOGIT_BIAS_MAX_ENTRIES; i++) wide[String(1_000_000_000 + i)] = 500;
  const { value, reads } = watched(wide);
  const parsed = chatCompletionRequest.safeParse({ ...base, logit_bias: value });
  assert.equal(parsed.success, false);
  assert.equal(parsed.error!.issues.length, 1);
  assert.deepEqual(parsed.error!.issues[0].path, ["logit_bias"]);
  assert.match(parsed.error!.issues[0].message, new RegExp(`at most ${LOGIT_BIAS_MAX_ENTRIES}`));
  assert.equal(reads(), 0);
});

test("a vocabulary-sized logit_bias is accepted, and its first bad entry is named alone", () => {
  const full: Record<string, number> = {};
  for (let i = 0; i < 262_144; i++) full[String(i)] = (i % 201) - 100;
  const good = chatCompletionRequest.safeParse({ ...base, logit_bias: full });
  assert.equal(good.success, true, JSON.stringify(good.error?.issues.slice(0, 2)));
  assert.equal(Object.keys(good.data!.logit_bias!).length, 262_144);

  const badValue = chatCompletionRequest.safeParse({ ...base, logit_bias: { ...full, "7": 101, "9": -300 } });
  assert.equal(badValue.success, false);
  assert.equal(badValue.error!.issues.length, 1);
  assert.deepEqual(badValue.error!.issues[0].path, ["logit_bias", "7"]);
  assert.match(badValue.error!.issues[0].message, /-100 to 100/);

  for (const [key, bias] of [["05", 1], ["-1", 1], ["x", 1], ["3", "1"], ["3", null]] as const) {
    const parsed = chatCompletionRequest.safeParse({ ...base, logit_bias: { "1": 0, [key]: bias } });
    assert.equal(parsed.success, false, `${key}: ${String(bias)}`);
    assert.deepEqual(parsed.error!.issues[0].path, ["logit_bias", key]);
  }
  assert.equal(chatCompletionRequest.safeParse({ ...base, logit_bias: [1, 2] }).success, false, "an array is not a map");
  assert.equal(chatCompletionRequest.safeParse({ ...base, logit_bias: null }).success, true);
});

test("tool parameters and schemas are taken as objects without a copy of each key", () => {
  const wide: Record<string, unknown> = { type: "object" };
  for (let i = 0; i < 50_000; i++) wide[`p${i}`] = { type: "string" };
  const { value, reads } = watched(wide);
  const parsed = chatCompletionRequest.safeParse({ ...base, tools: [{ type: "function", function: { name: "f", parameters: value } }] });
  assert.equal(parsed.success, true);
  // The check that parameters describe an object reads a few named keywords (type, enum, anyOf, …),
  // never each property: the schema compiler, which bounds a schema's size, is the one to read those.
  assert.ok(reads() <= 16, `${reads()} reads of a 50,000-key schema`);
  assert.equal(chatCompletionRequest.safeParse({ ...base, tools: [{ type: "function", function: { name: "f", parameters: "{}" } }] }).success, false);
  assert.equal(chatCompletionRequest.safeParse({ ...base, tools: [{ type: "function", function: { name: "f", parameters: [] } }] }).success, false);
});
