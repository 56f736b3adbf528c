import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { EngineChunk } from "../../src/core/engine.ts";
import { HeaderFilter, type RouterAction, type RouterSetup, TextRouter } from "../../src/engines/llama-cpp/text-router.ts";
import type { ToolCallFormat } from "../../src/engines/llama-cpp/tool-call-parser.ts";

// The router is fed plain strings, one per "token", exactly as the decode loop feeds it the text of
// sampled tokens; no model is involved.

const HERMES: ToolCallFormat = { sectionPrefix: "", prefix: '<tool_call>\n{"name": "', paramsPrefix: '", "arguments": ', suffix: "}\n</tool_call>", betweenCalls: "\n", sectionSuffix: "" };
const HARMONY: ToolCallFormat = { sectionPrefix: "", prefix: "<|channel|>commentary to=functions.", paramsPrefix: " <|constrain|>json<|message|>", suffix: "", betweenCalls: "", sectionSuffix: "" };
const FINAL_HEADER = "<|channel|>final<|message|>";
const THINK = { open: "<think>", close: ["\n</think>", "</think>"], startsInside: true };

function drain(gen: Generator<EngineChunk, RouterAction[]>): { chunks: EngineChunk[]; actions: RouterAction[] } {
  const chunks: EngineChunk[] = [];
  for (;;) {
    const r = gen.next();
    if (r.done) return { chunks, actions: r.value };
    chunks.push(r.value);
  }
}

/** Feeds each piece as one token, then finishes; collects everything the router produced. */
function route(setup: RouterSetup, pieces: string[], reason: "stop" | "length" = "stop") {
  const router = new TextRouter(setup);
  const start = router.start();
  const steps = pieces.map((p) => drain(router.push(p, 1)));
  const end = drain(router.finish(reason));
  const chunks = [...steps.flatMap((s) => s.chunks), ...end.chunks];
  const text = (channel?: "reasoning") =>
    chunks.map((c) => (c.kind === "text" && c.channel === channel ? c.text : "")).join("");
  const counted = chunks.reduce((n, c) => n + ("tokens" in c ? c.tokens : 0), 0);
  return { router, start, steps, end, chunks, reasoning: text("reasoning"), answer: text(), counted };
}

test("thinking and answer are split even when the markers arrive in pieces", () => {
  const r = route({ reasoning: THINK }, ["Let me", " think", "\n</th", "ink>", "\n\nThe", " answer."]);
  assert.deepEqual(r.start, []);
  assert.equal(r.reasoning, "Let me think");
  assert.equal(r.answer, "The answer.");
  // The token that completes the closing marker starts the answer, via the engine's own opening.
  assert.deepEqual(r.steps[2].actions, []);
  assert.deepEqual(r.steps[3].actions, [{ kind: "answer-starts", viaInjection: true, call: false }]);
  // Every token is counted exactly once.
  assert.equal(r.counted, 6);
});

test("reasoning token counts are reported when thinking closes and again at the end", () => {
  const r = route({ reasoning: THINK }, ["a", "b", "c", "</think>", "x", "y"]);
  assert.deepEqual(r.steps[3].chunks, [
    { kind: "text", channel: "reasoning", text: "", tokens: 1 },
    { kind: "usage", reasoningTokens: 4 },
  ]);
  assert.deepEqual(r.end.chunks, [
    { kind: "usage", reasoningTokens: 4 },
    { kind: "end", reason: "stop" },
  ]);
  assert.equal(r.router.reasoningTokens, 4);
});

test("a spent thinking budget asks for the section to be closed; the forced close starts the answer", () => {
  const router = new TextRouter({ reasoning: { ...THINK, budget: 2 } });
  assert.deepEqual(router.start(), []);
  drain(router.push("one", 1));
  assert.equal(router.overBudget, false);
  drain(router.push(" two", 1));
  assert.equal(router.thinking, true);
  assert.equal(router.overBudget, true);
  // The loop drops the sampled token and writes the closing tokens in its place.
  const closed = drain(router.push("</think>", 1));
  assert.deepEqual(closed.actions, [{ kind: "answer-starts", viaInjection: true, call: false }]);
  assert.deepEqual(closed.chunks.at(-1), { kind: "usage", reasoningTokens: 3 });
  assert.equal(router.thinking, false);
  assert.equal(router.overBudget, false);
  // A budget of 0 is spent before the first token.
  assert.equal(new TextRouter({ reasoning: { ...THINK, budget: 0 } }).overBudget, true);
});

test("with thinking turned off the answer starts at once and no tokens count as thinking", () => {
  const r = route({ reasoning: { ...THINK, startsInside: false } }, ["Hi", " there"]);
  assert.deepEqual(r.start, [{ kind: "answer-starts", viaInjection: false, call: false }]);
  assert.equal(r.answer, "Hi there");
  assert.deepEqual(r.end.chunks[0], { kind: "usage", reasoningTokens: 0 });
});

test("a section the prompt closed is over: an opening marker the model writes anyway is answer text", () => {
  const closed = { ...THINK, startsInside: false, closedInPrompt: true };
  const r = route({ reasoning: closed }, ["<think>", "Hi", " there"]);
  assert.deepEqual(r.start, [{ kind: "answer-starts", viaInjection: false, call: false }]);
  assert.equal(r.reasoning, "");
  assert.equal(r.answer, "<think>Hi there");
  assert.deepEqual(r.end.chunks.at(-2), { kind: "usage", reasoningTokens: 0 });
  // A section node-llama-cpp finds opened on the response's start has no opening marker to wait for
  // (GLM 4.6's, Kimi K3's): turned off, none of the answer may be taken for thinking.
  const unmarked = route({ reasoning: { ...closed, open: "" } }, ["Hi", " there"]);
  assert.equal(unmarked.reasoning, "");
  assert.equal(unmarked.answer, "Hi there");
});

test("a call in free text: the text before it is answer, then the call's name and arguments", () => {
  const tools = { format: HERMES, trigger: "<tool_call>", forced: false };
  const router = new TextRouter({ tools });
  assert.deepEqual(router.start(), [{ kind: "answer-starts", viaInjection: false, call: false }]);
  const a = drain(router.push("Checking. <tool", 1));
  // The partial marker is held back.
  assert.deepEqual(a.chunks, [{ kind: "text", text: "Checking. ", tokens: 1 }]);
  assert.deepEqual(a.actions, []);
  const b = drain(router.push("_call>", 1));
  assert.deepEqual(b.chunks, [{ kind: "text", text: "", tokens: 1 }]);
  // "<tool" is in the sequence already; the sampled token is replaced by the rest of the opening.
  assert.deepEqual(b.actions, [{ kind: "call-starts", opening: { kind: "replace", before: "", inSequence: 5, text: '_call>\n{"name": "' } }]);
  assert.equal(router.inCall, true);
  // Tokens the engine writes are counted with the call.
  assert.deepEqual(router.written(6), { kind: "tool-call-arguments", index: 0, text: "", tokens: 6 });
  const c = drain(router.push('get_weather", "arguments": {"city": ', 1));
  assert.deepEqual(c.chunks, [
    { kind: "tool-call", index: 0, name: "get_weather" },
    { kind: "tool-call-arguments", index: 0, text: '{"city": ', tokens: 1 },
  ]);
  const d = drain(router.push('"Paris"}', 1));
  assert.deepEqual(d.chunks, [{ kind: "tool-call-arguments", index: 0, text: '"Paris"}', tokens: 1 }]);
  const e = drain(router.push("}\n</tool_call>", 1));
  assert.deepEqual(e.chunks, [{ kind: "tool-call-arguments", index: 0, text: "", tokens: 1 }]);
  assert.equal(router.called, true);
  assert.deepEqual(drain(router.finish("stop")).chunks, [
    { kind: "usage", reasoningTokens: 0 },
    { kind: "end", reason: "tool_calls" },
  ]);
});

test("a trigger inside one token: the token is rewritten as its text before the call plus the opening", () => {
  const router = new TextRouter({ tools: { format: HERMES, trigger: "<tool_call>", forced: false } });
  router.start();
  const r = drain(router.push("Sure <tool_call>\n", 1));
  assert.deepEqual(r.chunks, [{ kind: "text", text: "Sure ", tokens: 1 }]);
  assert.deepEqual(r.actions, [
    { kind: "call-starts", opening: { kind: "replace", before: "Sure ", inSequence: 0, text: 'Sure <tool_call>\n{"name": "' } },
  ]);
  // A token that is exactly the marker is replaced by the whole opening, so the marker is not written twice.
  const other = new TextRouter({ tools: { format: HERMES, trigger: "<tool_call>", forced: false } });
  other.start();
  assert.deepEqual(drain(other.push("<tool_call>", 1)).actions, [
    { kind: "call-starts", opening: { kind: "replace", before: "", inSequence: 0, text: '<tool_call>\n{"name": "' } },
  ]);
});

test("a length cut inside a call still ends as length", () => {
  const router = new TextRouter({ tools: { format: HERMES, trigger: "<tool_call>", forced: false } });
  router.start();
  drain(router.push("<tool_call>x", 1));
  drain(router.push('f", "arguments": {', 1));
  assert.deepEqual(drain(router.finish("length")).chunks.at(-1), { kind: "end", reason: "length" });
});

test("a forced call opens the answer: from the prompt, or written after thinking closes", () => {
  const tools = { format: HERMES, trigger: "<tool_call>", forced: true };
  const plain = new TextRouter({ tools });
  assert.deepEqual(plain.start(), [
    { kind: "answer-starts", viaInjection: false, call: true },
    { kind: "call-starts", opening: { kind: "in-prompt" } },
  ]);
  assert.equal(plain.inCall, true);
  const named = drain(plain.push('lookup", "arguments": {"q": 1}', 1));
  assert.deepEqual(named.chunks, [
    { kind: "tool-call", index: 0, name: "lookup" },
    { kind: "tool-call-arguments", index: 0, text: '{"q": 1}', tokens: 1 },
  ]);

  const thinking = new TextRouter({ tools, reasoning: THINK });
  assert.deepEqual(thinking.start(), []);
  assert.equal(thinking.inCall, false);
  drain(thinking.push("hmm", 1));
  const closed = drain(thinking.push("</think>", 1));
  assert.deepEqual(closed.actions, [
    { kind: "answer-starts", viaInjection: true, call: true },
    { kind: "call-starts", opening: { kind: "append" } },
  ]);
  assert.equal(thinking.inCall, true);
  // Text after the closing marker in the same token comes before the call's opening in the
  // sequence: it is answer text, not the start of the call's name; the call is what follows the
  // opening once written. The blank line Plinth writes after a forced "</think>" is nothing.
  const router = new TextRouter({ tools, reasoning: THINK });
  router.start();
  const before = [drain(router.push("hmm</think>f", 1)), drain(router.push("\n\n", 1))];
  assert.deepEqual(before.map((b) => b.chunks.filter((c) => c.kind === "text" && !c.channel).map((c) => (c as { text: string }).text)), [["f"], [""]]);
  router.written(3);
  const call = drain(router.push('lookup", "arguments": {}', 1));
  assert.deepEqual(
    call.chunks.filter((c) => c.kind === "tool-call"),
    [{ kind: "tool-call", index: 0, name: "lookup" }],
  );
  assert.deepEqual(drain(router.finish("stop")).chunks.at(-1), { kind: "end", reason: "tool_calls" });
});

test("gpt-oss's final-channel header is dropped from the answer, even in pieces", () => {
  const tools = { format: HARMONY, trigger: HARMONY.prefix, forced: false };
  const r = route({ tools, answerHeader: FINAL_HEADER }, ["<|channel|>", "final", "<|message|>", "Hello", " there"]);
  assert.equal(r.answer, "Hello there");
  assert.equal(r.counted, 5);
  assert.equal(r.router.inCall, false);
  // The commentary header, on the other hand, starts a call.
  const call = route({ tools, answerHeader: FINAL_HEADER }, ["<|channel|>", "commentary", " to", "=functions.", "get", " <|constrain|>json<|message|>", "{}"]);
  assert.equal(call.answer, "");
  assert.deepEqual(
    call.chunks.filter((c) => c.kind === "tool-call"),
    [{ kind: "tool-call", index: 0, name: "get" }],
  );
});

test("flush releases what was held back as a possible marker", () => {
  // A partial call trigger at the end of the answer is text after all.
  const trig = route({ tools: { format: HERMES, trigger: "<tool_call>", forced: false } }, ["See", " <tool"]);
  assert.equal(trig.answer, "See <tool");
  assert.deepEqual(trig.end.chunks[0], { kind: "text", text: "<tool", tokens: 0 });
  // A partial closing marker while thinking is thinking.
  const think = route({ reasoning: THINK }, ["idea", "\n</th"], "length");
  assert.equal(think.reasoning, "idea\n</th");
  assert.deepEqual(think.end.chunks[0], { kind: "text", channel: "reasoning", text: "\n</th", tokens: 0 });
  assert.deepEqual(think.end.chunks.at(-1), { kind: "end", reason: "length" });
  // A header that never completes is answer text (held by the trigger, then released).
  const header = route({ tools: { format: HARMONY, trigger: HARMONY.prefix, forced: false }, answerHeader: FINAL_HEADER }, ["<|channel|>"]);
  assert.equal(header.answer, "<|channel|>");
});

test("logprobs ride along with the text of their token", () => {
  const router = new TextRouter({ reasoning: THINK });
  const lp = { token: "a", bytes: [97], logprob: -0.5, top: [] };
  assert.deepEqual(drain(router.push("a", 1, lp)).chunks, [{ kind: "text", channel: "reasoning", text: "a", tokens: 1, logprobs: [lp] }]);
  // Answer text that arrives with the closing marker carries no token of its own (the token is
  // counted as thinking), but the token's entry is listed with the answer, where its only text is.
  assert.deepEqual(drain(router.push("</think>b", 1, lp)).chunks, [
    { kind: "text", channel: "reasoning", text: "", tokens: 1 },
    { kind: "usage", reasoningTokens: 2 },
    { kind: "text", text: "b", tokens: 0, logprobs: [lp] },
  ]);
});

/** Routes each piece as one token with a logprob entry spelling it; returns each part's text and the text its entries' bytes spell. */
function routeWithLogprobs(setup: RouterSetup, pieces: string[]) {
  const router = new TextRouter(setup);
  router.start();
  const entry = (piece: string) => ({ token: piece, bytes: [...Buffer.from(piece)], logprob: -1, top: [] });
  const chunks = [...pieces.flatMap((p) => drain(router.push(p, 1, entry(p))).chunks), ...drain(router.finish("stop")).chunks];
  const part = (channel?: "reasoning") => {
    const texts = chunks.filter((c) => c.kind === "text" && c.channel === channel) as Array<Extract<EngineChunk, { kind: "text" }>>;
    const logprobs = texts.flatMap((c) => c.logprobs ?? []);
    return { text: texts.map((c) => c.text).join(""), bytes: Buffer.from(logprobs.flatMap((l) => l.bytes)).toString(), tokens: logprobs.map((l) => l.token) };
  };
  return { reasoning: part("reasoning"), answer: part(), chunks };
}

test("thinking markers the model writes are listed in neither part's logprobs, so each part's bytes spell its text", () => {
  // The model opens the section itself (Qwen 3, GLM 4.6, Kimi K2 Thinking), closes it, then writes a
  // later "<think>", which is answer text.
  const opened = routeWithLogprobs({ reasoning: { ...THINK, startsInside: false } }, ["<think>", "all", "</think>", "<think>", " people"]);
  assert.deepEqual(opened.reasoning, { text: "all", bytes: "all", tokens: ["all"] });
  assert.deepEqual(opened.answer, { text: "<think> people", bytes: "<think> people", tokens: ["<think>", " people"] });

  // An opening marker alone: no answer text, so no answer entries, and no empty answer part either.
  const alone = routeWithLogprobs({ reasoning: { ...THINK, startsInside: false } }, ["<think>"]);
  assert.deepEqual(alone.answer, { text: "", bytes: "", tokens: [] });
  assert.deepEqual(alone.reasoning, { text: "", bytes: "", tokens: [] });
  assert.ok(alone.chunks.every((c) => !("logprobs" in c)));

  // A closing marker alone (gpt-oss's <|end|> right away): no thinking text, no thinking entries.
  const closed = routeWithLogprobs({ reasoning: { open: "<|channel|>analysis<|message|>", close: ["<|end|>"], startsInside: true } }, ["<|end|>", "x"]);
  assert.deepEqual(closed.reasoning, { text: "", bytes: "", tokens: [] });
  assert.deepEqual(closed.answer, { text: "x", bytes: "x", tokens: ["x"] });
});

test("the layout around a marker is in neither part's logprobs; held text that is not a marker keeps its entries", () => {
  // "\n" is held as the possible start of "\n</think>", which it turns out to be; the blank line after
  // the marker is layout too.
  const layout = routeWithLogprobs({ reasoning: THINK }, ["a", "\n", "</think>", "\n\n", "b"]);
  assert.deepEqual(layout.reasoning, { text: "a", bytes: "a", tokens: ["a"] });
  assert.deepEqual(layout.answer, { text: "b", bytes: "b", tokens: ["b"] });
  // Held the same way, but no marker follows: the newline is thinking, listed in order.
  const held = routeWithLogprobs({ reasoning: THINK }, ["a", "\n", "</th", "e", "</think>", "b"]);
  assert.deepEqual(held.reasoning, { text: "a\n</the", bytes: "a\n</the", tokens: ["a", "\n", "</th", "e"] });
  assert.deepEqual(held.answer, { text: "b", bytes: "b", tokens: ["b"] });
  // Still held when the generation ends: released as thinking, entries and all.
  const cut = routeWithLogprobs({ reasoning: THINK }, ["a", "\n</th"]);
  assert.deepEqual(cut.reasoning, { text: "a\n</th", bytes: "a\n</th", tokens: ["a", "\n</th"] });
  // Blank space before a model-written opening marker, in the marker's token, goes with the marker.
  const spaced = routeWithLogprobs({ reasoning: { ...THINK, startsInside: false } }, ["\n<think>", "x", "</think>", "y"]);
  assert.deepEqual(spaced.reasoning, { text: "x", bytes: "x", tokens: ["x"] });
  assert.deepEqual(spaced.answer, { text: "y", bytes: "y", tokens: ["y"] });
});

test("header filter: drops the header, passes other text, and releases a partial header on flush", () => {
  const f = new HeaderFilter("<H>");
  assert.equal(f.push("<"), "");
  assert.equal(f.push("H>x"), "x");
  assert.equal(f.push("<H>"), "<H>");
  const g = new HeaderFilter("<H>");
  assert.equal(g.push("<"), "");
  assert.equal(g.flush(), "<");
  assert.equal(new HeaderFilter("<H>").push("no"), "no");
});
