import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// max_tokens bounds every token of the answer, including those Plinth writes into the sequence
// itself: a forced call's opening after a thinking section it closed, the section's closing marker.
// Those went in after the budget check, so a forced call on a thinking model could run past
// max_tokens (23 asked, 28 counted), on the fixture thinking model as on DeepSeek R1's template.

let s: TestServer;
before(async () => {
  s = await startTestServer({}, { think: true });
});
after(async () => {
  await s?.close();
});

const tools = [{ type: "function" as const, function: { name: "weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"] } } }];

test("a forced call on a thinking model never counts more completion tokens than max_tokens", async () => {
  const finishes = new Set<string>();
  for (let max = 18; max <= 32; max++) {
    const r = await s.http.chat({ model: "think", messages: [{ role: "user", content: "weather?" }], tools, tool_choice: "required", max_tokens: max, reasoning_effort: "low", seed: max });
    const c = r.choices[0];
    finishes.add(c.finish_reason);
    assert.ok(r.usage!.completion_tokens <= max, `max_tokens ${max}: ${r.usage!.completion_tokens} counted (${c.finish_reason})`);
  }
  // Both ends were reached: calls that fit, and budgets that ran out.
  assert.ok(finishes.has("length"), [...finishes].join());
});
