import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { StopMatcher } from "../../src/core/stop-matcher.ts";

function run(stops: string[], pieces: string[]) {
  const m = new StopMatcher(stops);
  const emitted: string[] = [];
  let stopped = false;
  for (const p of pieces) {
    const r = m.push(p);
    emitted.push(r.emit);
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) emitted.push(m.flush());
  return { emitted, text: emitted.join(""), stopped };
}

test("cuts at a stop string inside one piece", () => {
  const r = run(["END"], ["hello END world"]);
  assert.equal(r.text, "hello ");
  assert.equal(r.stopped, true);
});

test("a stop string split across pieces never shows any of its characters", () => {
  const r = run(["STOP"], ["abc S", "T", "O", "P tail"]);
  assert.equal(r.text, "abc ");
  for (const piece of r.emitted) assert.ok(!/[STOP]/.test(piece), `leaked: ${piece}`);
});

test("held text that turns out not to be a stop is released", () => {
  const r = run(["STOP"], ["ST", "AR", "T"]);
  assert.equal(r.text, "START");
  assert.equal(r.stopped, false);
});

test("earliest of several stops wins", () => {
  assert.equal(run(["b", "a"], ["xxab"]).text, "xx");
});

test("held tail is flushed when generation ends without a stop", () => {
  const r = run(["</s>"], ["text </"]);
  assert.equal(r.text, "text </");
});

test("no stops: text passes straight through", () => {
  const m = new StopMatcher([]);
  assert.deepEqual(m.push("abc"), { emit: "abc", stopped: false });
});

test("empty stop strings are ignored rather than stopping at once", () => {
  assert.equal(run([""], ["abc"]).text, "abc");
});
