// The engine's own per-token loop (direct-steps.ts) against node-llama-cpp's `sequence.evaluate`, on
// a real model: for the same prompt and options both must put the same tokens out, whatever the
// sampling, penalties, grammar swaps and token replacements, and leave the sequence holding the same
// tokens (the prompt cache reads them). With the engine `npm ci` builds, the direct loop's tokens are
// sampled on the decode thread right after their decode (scripts/engine/plinth-presample.h); it is
// run with and without that, and both must match evaluate.
import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { type LlamaContextSequence, type LlamaGrammar, LlamaGrammarEvaluationState, type LlamaModel, type Token } from "node-llama-cpp";
import { directSteps, directStepsAvailable, presampleAvailable } from "../../src/engines/llama-cpp/direct-steps.ts";
import { currentMarker } from "../../src/engines/llama-cpp/engine-marker.mjs";
import { engineBuild } from "../../src/engines/llama-cpp/runtime.ts";
// @ts-expect-error: a plain ES module of the build script, without types
import { editsFingerprint } from "../../scripts/engine/addon-edits.mjs";
import { evaluateSteps } from "../../src/engines/llama-cpp/decode-steps.ts";
import { buildEvaluateOptions } from "../../src/engines/llama-cpp/sampling.ts";
import { endlessSampling, openTinySequence, type StepSource, type TinySequence } from "../helpers/tiny-sequence.ts";

let tiny: TinySequence;
let model: LlamaModel;
let sequence: LlamaContextSequence;
let grammar: LlamaGrammar;

before(async () => {
  tiny = await openTinySequence();
  ({ model, sequence } = tiny);
  grammar = await tiny.llama.createGrammar({ grammar: "root ::= [a-e ]+" });
});

after(async () => {
  await tiny?.close();
});

const sampling = endlessSampling;
type Source = StepSource;

interface Plan {
  /** Tokens to put in instead of the sampled one, by step. */
  replace?: ReadonlyMap<number, Token[]>;
  /** The step from which a grammar constrains sampling (a fresh state, as the decode loop swaps it in). */
  grammarFrom?: number;
}

/** Runs `steps` tokens from a cleared sequence; returns what came out and what the sequence then holds. */
async function run(source: Source, shaping: ReturnType<typeof sampling>, steps: number, plan: Plan = {}) {
  await sequence.clearHistory();
  const generated: Token[] = [];
  const slot: { state?: LlamaGrammarEvaluationState } = {};
  const options = { ...buildEvaluateOptions(model, shaping, generated, steps), grammarEvaluationState: () => slot.state };
  const it = source(sequence, model.tokenize("Once upon a time, by the river"), options);
  const out: Token[] = [];
  try {
    let step = await it.next(undefined);
    while (!step.done) {
      out.push(step.value.token);
      const replacement = plan.replace?.get(out.length);
      generated.push(...(replacement ?? [step.value.token]));
      if (out.length >= steps) break;
      if (plan.grammarFrom === out.length) slot.state = new LlamaGrammarEvaluationState({ model, grammar });
      step = await it.next(replacement);
    }
  } finally {
    await it.return(undefined);
  }
  return { out, held: sequence.contextTokens.slice(), next: sequence.nextTokenIndex };
}

/** The direct loop with sampling on the decode thread turned off (PLINTH_PRESAMPLE=0, read per generation). */
const directStock: Source = (sequence, input, options) => {
  process.env.PLINTH_PRESAMPLE = "0";
  try {
    return directSteps(sequence, input, options);
  } finally {
    delete process.env.PLINTH_PRESAMPLE;
  }
};

async function same(shaping: ReturnType<typeof sampling>, steps: number, plan?: Plan) {
  const viaEvaluate = await run(evaluateSteps, shaping, steps, plan);
  const runs = [];
  for (const source of presampleAvailable(sequence) ? [directSteps, directStock] : [directSteps]) {
    const direct = await run(source, shaping, steps, plan);
    assert.equal(direct.out.length, steps);
    assert.deepEqual(direct.out, viaEvaluate.out);
    assert.deepEqual(direct.held, viaEvaluate.held);
    assert.equal(direct.next, viaEvaluate.next);
    runs.push(direct);
  }
  return runs[0];
}

test("node-llama-cpp still has what the direct loop drives (an upgrade that moves it fails here)", () => {
  assert.equal(directStepsAvailable(sequence), true);
});

test("with the engine npm ci builds (these edits), tokens are sampled on the decode thread; with the prebuilt one, by the stock call", () => {
  const built = engineBuild(tiny.llama).local && currentMarker()?.edits === editsFingerprint();
  assert.equal(presampleAvailable(sequence), built);
});

test("greedy: the same tokens as sequence.evaluate, and the sequence holds the prompt and all but the last", async () => {
  const r = await same(sampling(), 40);
  const prompt = model.tokenize("Once upon a time, by the river");
  assert.deepEqual(r.held, [...prompt, ...r.out.slice(0, -1)]);
});

test("seeded sampling: the same draws, step after step (the sampler is configured once, its random state carries on)", async () => {
  const r = await same(sampling({ temperature: 1.3, topP: 0.95, seed: 1234 }), 48);
  // Sampled at a high temperature, the run is not one token repeated.
  assert.ok(new Set(r.out).size > 4, `only ${new Set(r.out).size} distinct tokens`);
});

test("penalties read the tokens generated so far at every step, as evaluate's do, put-in tokens included", async () => {
  const penalised = sampling({ temperature: 0, frequencyPenalty: 1.5, presencePenalty: 0.8, repetitionPenalty: 1.2 });
  const plain = await run(directSteps, sampling(), 40);
  const r = await same(penalised, 40);
  assert.notDeepEqual(r.out, plain.out, "the penalties changed nothing, so this test would prove nothing");
  // The sampler itself only remembers the tokens it drew; tokens put in instead count only if the
  // configuration is given the generated tokens again.
  const injected = model.tokenize(" a a a a a a", false) as Token[];
  await same(penalised, 40, { replace: new Map([[3, injected], [12, injected]]) });
});

test("a grammar swapped in mid-way takes hold at the next token", async () => {
  const r = await same(sampling({ temperature: 0.9, seed: 99 }), 30, { grammarFrom: 10 });
  const after = model.detokenize(r.out.slice(10));
  assert.match(after, /^[a-e ]+$/);
});

test("tokens put in instead of the sampled one enter the sequence in its place", async () => {
  const injected = model.tokenize(" and then", false) as Token[];
  const r = await same(sampling(), 20, { replace: new Map([[5, injected]]) });
  const prompt = model.tokenize("Once upon a time, by the river");
  assert.deepEqual(r.held, [...prompt, ...r.out.slice(0, 4), ...injected, ...r.out.slice(5, -1)]);
});
