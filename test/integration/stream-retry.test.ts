import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import OpenAI from "openai";
import { NO_EOG, startTestServer, type TestServer } from "../helpers/server.ts";

// A stream that waits past the queue timeout is a 503 with Retry-After, not a 200 that ends in an
// error event, so the openai SDK's own retries (on 429 and 5xx) recover it: real server, real
// inference on the fixture model, one sequence, the official SDK with its default retry policy.

let s: TestServer;
before(async () => {
  s = await startTestServer({ parallel: "1", "queue-timeout": "0.4" });
});
after(async () => {
  await s?.close();
});

/** Takes the model's one sequence with a long stream, until `release` is called. */
async function occupy(): Promise<() => void> {
  const stop = new AbortController();
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "go on" }], max_tokens: 4000, logit_bias: NO_EOG, stream: true }),
    signal: stop.signal,
  });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  await reader.read();
  return () => stop.abort();
}

/**
 * The SDK with its default retries, over a fetch that notes each attempt's status and frees the
 * sequence once the first attempt has been refused (so the retry finds it free).
 */
function retryingClient(statuses: number[], release: () => void): OpenAI {
  return new OpenAI({
    baseURL: `${s.url}/v1`,
    apiKey: "unused",
    maxRetries: 2,
    timeout: 60_000,
    fetch: async (url: RequestInfo | URL, init?: RequestInit) => {
      const res = await fetch(url, init);
      statuses.push(res.status);
      if (res.status !== 200) release();
      return res;
    },
  });
}

test("the SDK retries a chat stream refused by the full queue, and the retry streams the answer", async () => {
  const statuses: number[] = [];
  const release = await occupy();
  try {
    const client = retryingClient(statuses, release);
    const stream = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 6, logit_bias: NO_EOG, stream: true });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual(statuses, [503, 200]);
    assert.ok(text.length > 0);
    assert.equal(finish, "length");
  } finally {
    release();
  }
});

test("the same for a Responses stream", async () => {
  const statuses: number[] = [];
  const release = await occupy();
  try {
    const client = retryingClient(statuses, release);
    const stream = await client.responses.create({ model: "tiny", input: "hi", max_output_tokens: 6, store: false, stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    assert.deepEqual(statuses, [503, 200]);
    assert.equal(types[0], "response.created");
    assert.ok(types.includes("response.output_text.delta"), types.join(" "));
    assert.ok(types.at(-1) === "response.incomplete" || types.at(-1) === "response.completed", types.join(" "));
  } finally {
    release();
  }
});
