import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { NO_EOG, useTestServer } from "../helpers/server.ts";

// Fair scheduling over HTTP on the real engine: with one sequence, a user's burst waits its turn
// with other users' requests instead of all of it going first.

const s = useTestServer({ parallel: "1", "max-queue": "32" });

test("one user's burst of 8 does not delay another user's single request behind all of it", async () => {
  const finished: string[] = [];
  const ask = (user: string, tag: string) =>
    s.http.chat({ model: "tiny", user, messages: [{ role: "user", content: "go" }], max_tokens: 160, temperature: 0, logit_bias: NO_EOG }).then(() => {
      finished.push(tag);
    });
  const burst = Array.from({ length: 8 }, (_, i) => ask("alice", `alice${i}`));
  await new Promise((r) => setTimeout(r, 30)); // the burst is queued first
  // Bob waits for the request holding the sequence when he comes (and at most one more, admitted
  // while his request was on its way), not for the rest of the burst. How many are done by then
  // depends on the machine's speed, so it is counted rather than assumed.
  const doneBefore = finished.length;
  const single = ask("bob", "bob");
  await Promise.all([...burst, single]);
  const bobAt = finished.indexOf("bob");
  assert.ok(doneBefore <= 4, `the burst was mostly done before bob came (${doneBefore} of 8): the test shows nothing`);
  assert.ok(bobAt <= doneBefore + 2, `bob finished in place ${bobAt + 1} of 9 (${doneBefore} done when he came): ${finished.join(", ")}`);
});
