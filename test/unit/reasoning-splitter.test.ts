import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { ReasoningSplitter } from "../../src/core/reasoning-splitter.ts";

function split(pieces: string[], startsInside = false) {
  const s = new ReasoningSplitter("<think>", "</think>", startsInside);
  let reasoning = "";
  let content = "";
  const seen: Array<{ reasoning: string; content: string }> = [];
  for (const p of [...pieces.map((x) => s.push(x)), s.flush()]) {
    reasoning += p.reasoning;
    content += p.content;
    seen.push(p);
  }
  return { reasoning, content, seen };
}

test("a leading thinking section goes to reasoning, the rest to content", () => {
  const r = split(["<think>plan it</think>\n\nThe answer."]);
  assert.equal(r.reasoning, "plan it");
  assert.equal(r.content, "The answer.");
});

test("markers split across pieces never leak into either stream", () => {
  const r = split(["<th", "ink>a", "b</th", "ink>", "\n", "ok"]);
  assert.equal(r.reasoning, "ab");
  assert.equal(r.content, "ok");
  for (const p of r.seen) assert.ok(!p.content.includes("<") && !p.reasoning.includes("<"), JSON.stringify(p));
});

test("a prompt that opened the section: everything up to the close marker is reasoning", () => {
  const r = split(["thinking...", "</think>", "answer"], true);
  assert.equal(r.reasoning, "thinking...");
  assert.equal(r.content, "answer");
});

test("no thinking section: all content, including a later literal <think>", () => {
  const r = split(["Hello ", "<think> is a tag"]);
  assert.equal(r.reasoning, "");
  assert.equal(r.content, "Hello <think> is a tag");
});

test("an unclosed section at the end stays reasoning", () => {
  const r = split(["<think>still going"]);
  assert.equal(r.reasoning, "still going");
  assert.equal(r.content, "");
});

test("the template's newline before the closing marker is layout, not reasoning", () => {
  const s = new ReasoningSplitter("<think>", ["\n</think>", "</think>"], true);
  const parts = [s.push("plan\n"), s.push("</think>"), s.push("\n\nanswer"), s.flush()];
  assert.equal(parts.map((p) => p.reasoning).join(""), "plan");
  assert.equal(parts.map((p) => p.content).join(""), "answer");
  // A newline that is not followed by the marker is released as reasoning.
  const t = new ReasoningSplitter("<think>", ["\n</think>", "</think>"], true);
  const q = [t.push("a\n"), t.push("b"), t.push("</think>"), t.flush()];
  assert.equal(q.map((p) => p.reasoning).join(""), "a\nb");
});

test("Gemma 4's section: the channel's name line is layout, the thought is reasoning, the answer follows the close", () => {
  const s = new ReasoningSplitter("<|channel>thought", ["<channel|>"]);
  const parts = [s.push("<|channel>"), s.push("thought"), s.push("\n"), s.push("plan\nit"), s.push("<channel|>"), s.push("Answer"), s.flush()];
  assert.equal(parts.map((p) => p.reasoning).join(""), "plan\nit");
  assert.equal(parts.map((p) => p.content).join(""), "Answer");
  assert.equal(s.settled, true);
  // Before the answer starts, a section may still open.
  const t = new ReasoningSplitter("<|channel>thought", ["<channel|>"]);
  t.push("<|chan");
  assert.equal(t.settled, false);
});

test("Gemma 4's stray markers: an empty channel or a lone closing marker before the answer is nothing, and a section may still follow", () => {
  const run = (pieces: string[]) => {
    const s = new ReasoningSplitter("<|channel>thought", ["<channel|>"], false, ["<|channel>", "<channel|>"]);
    const parts = [...pieces.map((p) => s.push(p)), s.flush()];
    const spans = parts.flatMap((p) => p.spans);
    return { reasoning: parts.map((p) => p.reasoning).join(""), content: parts.map((p) => p.content).join(""), spans };
  };
  assert.deepEqual(run(["<|channel>", "<|channel>", "<|channel>"]), { reasoning: "", content: "", spans: [] });
  assert.equal(run(["<channel|>", "Hi"]).content, "Hi");
  // The kept text's span is where it is in the input, past the dropped marker.
  assert.deepEqual(run(["<channel|>", "Hi"]).spans, [{ part: "content", start: 10, end: 12 }]);
  const late = run(["<|channel>", "<|channel>", "thought", "\n", "plan", "<channel|>", "Answer"]);
  assert.deepEqual([late.reasoning, late.content], ["plan", "Answer"]);
  // Without stray markers they are answer text, as before.
  const plain = new ReasoningSplitter("<|channel>thought", ["<channel|>"]);
  assert.equal([plain.push("<channel|>"), plain.push("Hi"), plain.flush()].map((p) => p.content).join(""), "<channel|>Hi");
});
