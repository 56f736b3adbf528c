import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { ensureFixtureModel, FIXTURE_TOKENS } from "../fixtures/models.ts";
import { childServerUrl } from "../helpers/child-server.ts";
import { postJson, startTestServer } from "../helpers/server.ts";
import { sseEvents } from "../helpers/scripted-app.ts";

// A background response running when its server is killed (SIGKILL: no shutdown runs), and the
// server started again on the same data directory. Real processes: the first server is a child
// process so it can be killed; the second runs in this one.

const NO_END = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

test("a background response its killed server left running is failed at the next start: polling, a resumed stream and cancel all see it end", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "plinth-restart-"));
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "src/cli/main.ts", "serve", "--model", `tiny=${await ensureFixtureModel()}`, "--port", "0", "--threads", "1", "--data-dir", dataDir, "--log-level", "silent"],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let second: Awaited<ReturnType<typeof startTestServer>> | undefined;
  try {
    const url = await childServerUrl(child);
    // Created streaming, so that a client reads the events as they happen: it sees events the
    // killed server had not stored yet (they are written every 100 ms).
    const created = await fetch(`${url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", input: "Tell a very long story.", background: true, stream: true, max_output_tokens: 3000, temperature: 0, logit_bias: NO_END }),
    });
    assert.equal(created.status, 200);
    let id = "";
    let lastSeen = -1;
    let text = "";
    const reading = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of created.body!) {
        text += decoder.decode(chunk, { stream: true });
        for (const m of text.matchAll(/"sequence_number":(\d+)/g)) lastSeen = Math.max(lastSeen, Number(m[1]));
        id ||= /"id":"(resp_[^"]+)"/.exec(text)?.[1] ?? "";
      }
    })().catch(() => {});
    for (let i = 0; i < 100 && id === ""; i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(id, text);
    // Running, with events stored (they are written every 100 ms).
    for (let i = 0; i < 100; i++) {
      const now = await fetch(`${url}/v1/responses/${id}`).then((r) => r.json() as Promise<{ status: string }>);
      if (now.status === "in_progress") break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 400));
    // Continuing from it now would leave its output out of the prompt: refused, naming the field.
    const early = await postJson(`${url}/v1/responses`, { model: "tiny", previous_response_id: id, input: "next", max_output_tokens: 2 });
    assert.equal(early.status, 400, early.text);
    assert.equal(early.json.error.param, "previous_response_id");
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    await reading;
    assert.ok(lastSeen > 2, `the client saw events up to ${lastSeen}`);

    second = await startTestServer({ "data-dir": dataDir });
    const after = await second.client.responses.retrieve(id);
    assert.equal(after.status, "failed");
    assert.equal(after.error?.code, "server_error");
    // A resumed stream ends, with the failure as its last event and no gap in the numbering.
    const resumed = await fetch(`${second.url}/v1/responses/${id}?stream=true`);
    const events = sseEvents(await resumed.text()).map((e) => e.data as { type: string; sequence_number: number; delta?: string; response?: typeof after });
    assert.ok(events.length > 2, `${events.length} events`);
    assert.equal(events.at(-1)!.type, "response.failed");
    assert.equal(events.at(-2)!.type, "error");
    events.forEach((e, i) => assert.equal(e.sequence_number, events[0].sequence_number + i));
    // The failed response keeps the output its stored events show (not the empty one of its start):
    // the message with the text streamed so far, incomplete as a cut item is; the same in the
    // replayed response.failed.
    const streamed = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    assert.ok(streamed.length > 0, "text deltas were stored");
    assert.equal(after.output.length, 1, JSON.stringify(after.output));
    const message = after.output[0] as { type: string; status: string; content: Array<{ type: string; text: string }> };
    assert.equal(message.type, "message");
    assert.equal(message.status, "incomplete");
    assert.equal(message.content[0].type, "output_text");
    assert.equal(message.content[0].text, streamed);
    assert.deepEqual(events.at(-1)!.response!.output, after.output);
    // Resumed from the last event the live client received (which the killed server may never
    // have stored), or from past anything stored: the stream still ends with the failure, numbered
    // after where it was resumed from.
    for (const after of [lastSeen, events.at(-1)!.sequence_number + 5]) {
      const body: string = await (await fetch(`${second.url}/v1/responses/${id}?stream=true&starting_after=${after}`)).text();
      const tail = sseEvents(body).map((e) => e.data as { type: string; sequence_number: number });
      assert.deepEqual(tail.slice(-2).map((e) => e.type), ["error", "response.failed"], `resumed after ${after}`);
      tail.forEach((e, i) => assert.equal(e.sequence_number, after + 1 + i));
    }
    assert.equal((await second.client.responses.cancel(id)).status, "failed");
    // Over, so a new turn may continue from it.
    const next = await postJson(`${second.url}/v1/responses`, { model: "tiny", previous_response_id: id, input: "next", max_output_tokens: 2 });
    assert.equal(next.status, 200, next.text);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await second?.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
