import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel } from "node-llama-cpp";
import { getRuntime } from "../../src/engines/llama-cpp/runtime.ts";
import type { SamplingParams } from "../../src/core/types.ts";
import type { SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { Steps } from "../../src/engines/llama-cpp/decode-steps.ts";
import { ensureFixtureModel, FIXTURE_TOKENS, TINY_SPEC } from "../fixtures/models.ts";

/** The tiny fixture with a 4,096-token vocabulary, one 512-token context, its sequence (or several). */
export interface TinySequence {
  llama: Llama;
  model: LlamaModel;
  context: LlamaContext;
  sequence: LlamaContextSequence;
  /** Every sequence of the context, `sequence` first. */
  sequences: LlamaContextSequence[];
  close(): Promise<void>;
}

export const TINY_4K_VOCAB = 4096;

/** Loads the model straight through node-llama-cpp (no server), for tests of the engine's own loops. */
export async function openTinySequence(sequences = 1): Promise<TinySequence> {
  const path = await ensureFixtureModel({ ...TINY_SPEC, name: "plinth-tiny-4k", vocabSize: TINY_4K_VOCAB });
  const llama = await getRuntime({ gpu: "off", threads: 1 });
  const model = await llama.loadModel({ modelPath: path });
  const context = await model.createContext({ contextSize: 512, sequences, threads: 1 });
  const all = Array.from({ length: sequences }, () => context.getSequence());
  return {
    llama,
    model,
    context,
    sequence: all[0],
    sequences: all,
    async close() {
      await context.dispose();
      await model.dispose();
    },
  };
}

/** Greedy sampling with every value given (the engine passes them all), changed by `over`. */
export function samplingParams(over: Partial<SamplingParams> = {}): SamplingParams {
  return {
    temperature: 0, topP: 1, topK: 0, minP: 0, seed: 7,
    frequencyPenalty: 0, presencePenalty: 0, repetitionPenalty: 1,
    logitBias: new Map<number, number>(),
    ...over,
  };
}

/** samplingParams with the end tokens banned, so every run is exactly as long as asked. */
export function endlessSampling(over: Partial<SamplingParams> = {}): SamplingParams {
  return samplingParams({ logitBias: new Map([[FIXTURE_TOKENS.endOfSequence, -100], [FIXTURE_TOKENS.imEnd, -100]]), ...over });
}

/** A step source under test: the engine's direct loop, or `sequence.evaluate`'s. */
export type StepSource = (sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions) => Steps;
