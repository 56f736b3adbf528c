// Sampling on the decode thread (scripts/engine/plinth-presample.h) with several sequences in one
// batch: each armed sequence's row must be sampled with its own sampler, an unarmed sequence
// (log-probability decoding goes through `sequence.evaluate`) must be left to the stock call, and
// running side by side in one batch must give each generation exactly what it gives alone.
import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { SamplingParams } from "../../src/core/types.ts";
import { directSteps, presampleAvailable } from "../../src/engines/llama-cpp/direct-steps.ts";
import { evaluateSteps } from "../../src/engines/llama-cpp/decode-steps.ts";
import { buildEvaluateOptions } from "../../src/engines/llama-cpp/sampling.ts";
import { endlessSampling, openTinySequence, type StepSource, type TinySequence } from "../helpers/tiny-sequence.ts";

let tiny: TinySequence;
let model: LlamaModel;

before(async () => {
  tiny = await openTinySequence(2);
  model = tiny.model;
});

after(async () => {
  await tiny?.close();
});

const sampling = endlessSampling;
type Source = StepSource;

interface Job {
  source: Source;
  shaping: SamplingParams;
  prompt: string;
}

/** Runs `steps` tokens of `job` on `sequence` from a cleared state. */
async function run(sequence: LlamaContextSequence, job: Job, steps: number): Promise<Token[]> {
  await sequence.clearHistory();
  const generated: Token[] = [];
  const it = job.source(sequence, model.tokenize(job.prompt), buildEvaluateOptions(model, job.shaping, generated, steps));
  const out: Token[] = [];
  try {
    let step = await it.next(undefined);
    while (!step.done) {
      out.push(step.value.token);
      generated.push(step.value.token);
      if (out.length >= steps) break;
      step = await it.next(undefined);
    }
  } finally {
    await it.return(undefined);
  }
  return out;
}

/** Each job alone, then both at once on the context's two sequences (their steps share decodes). */
async function sideBySide(a: Job, b: Job, steps: number) {
  const [s0, s1] = tiny.sequences;
  const aloneA = await run(s0, a, steps);
  const aloneB = await run(s1, b, steps);
  const [togetherA, togetherB] = await Promise.all([run(s0, a, steps), run(s1, b, steps)]);
  assert.deepEqual(togetherA, aloneA);
  assert.deepEqual(togetherB, aloneB);
  // Different prompts and sampling, so a mix-up of rows or samplers would show.
  assert.notDeepEqual(aloneA, aloneB);
}

test("both sequences of the context sample on the decode thread when the engine is the build with these edits", () => {
  assert.equal(presampleAvailable(tiny.sequences[1]), presampleAvailable(tiny.sequences[0]));
});

test("two direct generations in one batch: each row is sampled with its own sampler", async () => {
  await sideBySide(
    { source: directSteps, shaping: sampling(), prompt: "Once upon a time, by the river" },
    { source: directSteps, shaping: sampling({ temperature: 1.2, seed: 4242, frequencyPenalty: 0.7 }), prompt: "The city at night" },
    40,
  );
});

test("a direct generation beside one through sequence.evaluate: the unarmed sequence keeps the stock sampling", async () => {
  await sideBySide(
    { source: directSteps, shaping: sampling({ temperature: 0.9, seed: 7 }), prompt: "Once upon a time, by the river" },
    { source: evaluateSteps, shaping: sampling({ temperature: 1.1, seed: 99 }), prompt: "The city at night" },
    40,
  );
});

test("a sequence's next generation through sequence.evaluate is not sampled ahead with the last one's sampler", async () => {
  const [s0] = tiny.sequences;
  const job: Job = { source: evaluateSteps, shaping: sampling({ temperature: 1.1, seed: 5 }), prompt: "The city at night" };
  const before = await run(s0, job, 24);
  await run(s0, { source: directSteps, shaping: sampling(), prompt: "Once upon a time" }, 24);
  assert.deepEqual(await run(s0, job, 24), before);
});
