// The log probability reader against node-llama-cpp's own full distribution, on the same logits:
// a model with a 4,096-token vocabulary, so the top-20 probe, the normaliser and the pinned reading
// of tokens far outside the top all matter.
import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { TokenLogprob } from "../../src/core/types.ts";
import { promptLogprobs } from "../../src/engines/llama-cpp/decode-steps.ts";
import { LOGPROB_FLOOR, LogprobReader, logprobReaderSupported, tapLogits } from "../../src/engines/llama-cpp/logprob-reader.ts";
import { buildEvaluateOptions } from "../../src/engines/llama-cpp/sampling.ts";
import { TokenPieces } from "../../src/engines/llama-cpp/token-pieces.ts";
import { openTinySequence, samplingParams, type TinySequence } from "../helpers/tiny-sequence.ts";

let tiny: TinySequence;
let model: LlamaModel;
let sequence: LlamaContextSequence;
let pieces: TokenPieces;

before(async () => {
  tiny = await openTinySequence();
  ({ model, sequence } = tiny);
  pieces = new TokenPieces(model);
});

after(async () => {
  await tiny?.close();
});

const sampling = samplingParams;

const truth = (probs: ReadonlyMap<number, number>, token: number) => {
  const p = probs.get(token);
  return p && p > 0 ? Math.max(LOGPROB_FLOOR, Math.log(p)) : LOGPROB_FLOOR;
};

// Tokens spread over the vocabulary, most of them far outside any top 20.
const SPREAD = [5, 300, 777, 1200, 2048, 3001, 4095];

async function compareOnGreedyRun(shaping: ReturnType<typeof sampling>, steps: number) {
  const generated: Token[] = [];
  const options = buildEvaluateOptions(model, shaping, generated, steps);
  await sequence.clearHistory();
  const reader = new LogprobReader(sequence, { tokenBias: options.tokenBias, repeatPenalty: options.repeatPenalty }, 20, pieces);
  let readings: { chosen: TokenLogprob; spread: TokenLogprob[] } | undefined;
  const untap = tapLogits(sequence, async (row, _position, sampled) => {
    if (sampled === undefined) return;
    readings = { chosen: await reader.read(row, sampled), spread: [] };
    for (const t of SPREAD) readings.spread.push(await reader.read(row, t));
  });
  let compared = 0;
  try {
    const prompt = model.tokenize("Once upon a time the quick brown fox");
    // Greedy, so node-llama-cpp's own probabilities are the untruncated, shaped distribution.
    for await (const step of sequence.evaluateWithMetadata(prompt, { probabilities: true }, { ...options, temperature: 0 })) {
      const probs = step.probabilities!;
      assert.ok(readings, "the tap saw the row");
      const expectedTop = [...probs.keys()].slice(0, 20);
      assert.deepEqual(readings.chosen.top.map((e) => e.token), expectedTop.map((t) => pieces.get(t).text));
      readings.chosen.top.forEach((e, i) => assert.ok(Math.abs(e.logprob - truth(probs, expectedTop[i])) < 1e-4, `top ${i}`));
      assert.ok(Math.abs(readings.chosen.logprob! - truth(probs, step.token)) < 1e-4, "chosen");
      SPREAD.forEach((t, i) => {
        const want = truth(probs, t);
        const got = readings!.spread[i].logprob!;
        assert.ok(Math.abs(got - want) < 1e-3 || (want < -200 && got <= want + 1e-3), `token ${t}: ${got} vs ${want}`);
      });
      compared++;
      generated.push(step.token);
      readings = undefined;
      if (compared >= steps) break;
    }
  } finally {
    untap();
    reader.dispose();
  }
  assert.equal(compared, steps);
}

test("the engine build has what the reader needs", () => {
  assert.equal(logprobReaderSupported(sequence), true);
});

test("top 20 and far-off tokens equal the full distribution, token by token", async () => {
  await compareOnGreedyRun(sampling(), 12);
});

test("logit bias (a boost and a ban) and penalties are part of the reported distribution", async () => {
  await compareOnGreedyRun(sampling({
    logitBias: new Map([[777, 6], [2048, -100], [300, -3]]),
    presencePenalty: 0.8,
    frequencyPenalty: 0.4,
  }), 12);
});

test("prompt log probabilities equal the distribution after each prompt token", async () => {
  const prompt = model.tokenize("Hello the model said yes to the question");
  await sequence.clearHistory();
  const entries = await promptLogprobs(sequence, prompt, 3, pieces);
  assert.equal(entries.length, prompt.length);
  assert.equal(entries[0].logprob, null);

  await sequence.clearHistory();
  const full = await sequence.controlledEvaluate(
    prompt.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true, options: { temperature: 0 } } }] as const),
  );
  for (let i = 1; i < prompt.length; i++) {
    const probs = full[i - 1]!.next.probabilities!;
    assert.ok(Math.abs(entries[i].logprob! - truth(probs, prompt[i])) < 1e-4, `position ${i}`);
    assert.deepEqual(entries[i].top.map((e) => e.token), [...probs.keys()].slice(0, 3).map((t) => pieces.get(t).text));
  }
});

test("the tap is removed afterwards", async () => {
  await sequence.clearHistory();
  let calls = 0;
  const untap = tapLogits(sequence, async () => {
    calls++;
  });
  untap();
  const it = sequence.evaluate(model.tokenize("Hello"), { temperature: 0 });
  await it.next();
  await it.return(undefined);
  assert.equal(calls, 0);
  assert.equal(Object.hasOwn(sequence, "_decodeTokens"), false);
});
