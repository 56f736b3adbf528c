import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { isolationKey } from "../../src/dialects/openai/sampling-fields.ts";
import { NO_EOG, useTestServer, waitFor } from "../helpers/server.ts";

// Fair scheduling over HTTP on the real engine: with one sequence, a user's burst waits its turn
// with other users' requests instead of all of it going first.

const s = useTestServer({ parallel: "1", "max-queue": "32" });

test("one user's burst of 8 does not delay another user's single request behind all of it", async () => {
  const finished: string[] = [];
  // Counted by the server's hooks: the burst's requests that took their place in the queue, the
  // requests that got the sequence, and how many had got it when bob's request took its place.
  const bobNamespace = isolationKey("bob", undefined);
  let burstQueued = 0;
  let started = 0;
  let startedWhenBobCame: number | undefined;
  s.service.addHooks({
    admitted: (ctx) => {
      if (ctx.namespace === bobNamespace) startedWhenBobCame = started;
      else burstQueued++;
    },
    started: () => void started++,
  });
  const ask = (user: string, tag: string) =>
    s.http.chat({ model: "tiny", user, messages: [{ role: "user", content: "go" }], max_tokens: 160, temperature: 0, logit_bias: NO_EOG }).then(() => {
      finished.push(tag);
    });
  const burst = Array.from({ length: 8 }, (_, i) => ask("alice", `alice${i}`));
  await waitFor(() => burstQueued === 8); // the burst is queued first
  const single = ask("bob", "bob");
  await Promise.all([...burst, single]);
  const bobAt = finished.indexOf("bob");
  // Bob waits for the request holding the sequence when he comes and one more of the burst (whose
  // turn comes before a newcomer's), not for the rest of it. How many had started by then depends on
  // the machine's speed, so it is counted when his request is queued: on a busy machine the burst's
  // own admissions hold the event loop for a while after he sends it, and requests end meanwhile
  // (counted when he sent it, CI-like load often showed him one place "late").
  assert.ok(startedWhenBobCame !== undefined, "bob's request was admitted");
  assert.ok(startedWhenBobCame <= 5, `the burst was mostly done before bob came (${startedWhenBobCame} of 8 started): the test shows nothing`);
  assert.ok(bobAt <= startedWhenBobCame + 1, `bob finished in place ${bobAt + 1} of 9 (${startedWhenBobCame} started when he came): ${finished.join(", ")}`);
});
