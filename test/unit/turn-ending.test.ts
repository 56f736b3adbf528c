import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { AnswerFilter } from "../../src/core/answer-filter.ts";
import type { GenerationEvent, TokenLogprob } from "../../src/core/types.ts";

// A template's turn ending (Llama 2's " " before </s>): cut from an answer that ends at the
// end-of-turn token right after it, ordinary text anywhere else, never a stop of its own.

const lp = (token: string): TokenLogprob => ({ token, bytes: [...Buffer.from(token)], logprob: -1, top: [] });

/** Feeds one token's text at a time; returns what was emitted (per event) and the logprob tokens reported. */
function run(pieces: string[], opts: { endings?: string[]; stops?: string[]; turnEnded: boolean }) {
  const events: GenerationEvent[] = [];
  const filter = new AnswerFilter(0, opts.stops ?? [], (ev) => events.push(ev), opts.endings ?? [" "]);
  let stopped = false;
  for (const p of pieces) if (!stopped) stopped = filter.push(p, [lp(p)]);
  filter.finish(opts.turnEnded && !stopped);
  const texts = events.map((e) => (e.type === "text" ? e.text : ""));
  const reported = events.flatMap((e) => (e.type === "text" ? (e.logprobs ?? []).map((l) => l.token) : []));
  return { text: texts.join(""), texts, reported, stopped };
}

test("an answer that ends at the end-of-turn token right after the ending loses it, and the token that wrote it is not listed", () => {
  const r = run([" the", " the", " "], { turnEnded: true });
  assert.equal(r.text, " the the");
  assert.deepEqual(r.reported, [" the", " the"]);
});

test("the ending is ordinary text where the answer goes on, or ends for another reason", () => {
  // Every space of a Llama 2 answer ended it: " " was a stop string.
  assert.equal(run([" the", " ", "cat", " "], { turnEnded: false }).text, " the cat ");
  assert.equal(run([" the", " ", "cat"], { turnEnded: true }).text, " the cat");
  // Cut by max_tokens (no end-of-turn token): the trailing space is the answer's.
  const length = run([" the", " "], { turnEnded: false });
  assert.equal(length.text, " the ");
  assert.deepEqual(length.reported, [" the", " "]);
});

test("while the answer could still end with it, the ending is held back, and only that", () => {
  const r = run(["Hi", " ", "there", " "], { turnEnded: true });
  assert.deepEqual(r.texts.filter((t) => t !== ""), ["Hi", " there"]);
  // A longer ending (Phi 3.5's "<|end|>\n" where <|end|> is text) is held while it may be forming.
  const phi = run(["ok", "<|", "end", "|>", "\n"], { endings: ["<|end|>\n"], turnEnded: true });
  assert.equal(phi.text, "ok");
  assert.deepEqual(phi.texts.filter((t) => t !== ""), ["ok"]);
  assert.equal(run(["ok", "<|", "end", "|>", "\n", "more"], { endings: ["<|end|>\n"], turnEnded: true }).text, "ok<|end|>\nmore");
});

test("a stop string after held text keeps that text: it came before the stop", () => {
  const r = run(["a", " ", "STOP"], { stops: ["STOP"], turnEnded: false });
  assert.equal(r.text, "a ");
  assert.equal(r.stopped, true);
});

test("no endings: text passes straight through", () => {
  const r = run(["a", " "], { endings: [], turnEnded: true });
  assert.deepEqual(r.texts, ["a", " "]);
});
