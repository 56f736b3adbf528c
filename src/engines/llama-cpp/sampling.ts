import { type LlamaModel, type SequenceEvaluateOptions, type Token, TokenBias } from "node-llama-cpp";
import type { SamplingParams } from "../../core/types.ts";

/**
 * Canonical sampling → node-llama-cpp evaluate options. Every value is passed explicitly: the
 * library's defaults (greedy, top-k 40, top-p 0.95, a seed of the current second) are not OpenAI's.
 */
export function buildEvaluateOptions(
  model: LlamaModel,
  s: SamplingParams,
  generated: readonly Token[],
  maxTokens: number,
): SequenceEvaluateOptions {
  const penalised = s.frequencyPenalty !== 0 || s.presencePenalty !== 0 || s.repetitionPenalty !== 1;
  return {
    temperature: s.temperature,
    // No top-k must be null, not 0 or undefined: undefined gets node-llama-cpp's default of 40, and 0
    // puts a top-k over the whole vocabulary into the native chain, which sorts it every token
    // (measured: 1.0 → 2.0 ms a token at a 32k vocabulary). null leaves top-k out of the chain.
    topK: s.topK > 0 ? s.topK : (null as unknown as undefined),
    topP: inclusiveTopP(s.topP),
    minP: s.minP,
    seed: s.seed,
    // OpenAI penalises by counts over the whole completion, so the window is the whole completion.
    repeatPenalty: penalised
      ? {
          punishTokens: () => generated as Token[],
          maxPunishTokens: maxTokens,
          penalty: s.repetitionPenalty,
          frequencyPenalty: s.frequencyPenalty,
          presencePenalty: s.presencePenalty,
        }
      : undefined,
    tokenBias: s.logitBias.size > 0 ? logitBias(model, s.logitBias) : undefined,
    // End-of-generation tokens come back to us so they can be counted, and so a template's own
    // end-of-turn token is treated the same way.
    yieldEogToken: true,
    contextShift: {
      strategy: () => {
        throw new Error("context shift reached: the prompt and generation budget were not checked");
      },
    },
  };
}

/**
 * The nucleus keeps the token whose probability makes the running sum reach top_p (A=0.3, B=0.2,
 * C=0.1 with top_p 0.5 keeps A and B). llama.cpp compares a float32 running sum with top_p, and
 * 0.3 + 0.2 computed from a softmax lands a rounding error below 0.5, which lets C in: measured on
 * a fixture with exactly those probabilities, C came out 345 times in 2,000 draws. Lowering the
 * threshold by far less than any probability that matters makes the cutoff inclusive again.
 */
export function inclusiveTopP(topP: number): number {
  return topP >= 1 ? 1 : Math.max(0, topP - TOP_P_TOLERANCE);
}

const TOP_P_TOLERANCE = 1e-6;

const BANNED = -1e4;

/**
 * TokenBias.set() skips end-of-generation tokens, but OpenAI clients bias (or ban) EOS through
 * logit_bias too. The bias map itself is what the sampler reads, so it is filled directly.
 */
function logitBias(model: LlamaModel, bias: Map<number, number>): TokenBias {
  const tb = new TokenBias(model.tokenizer);
  const map = (tb as unknown as { _biases: Map<Token, number> })._biases;
  if (!(map instanceof Map)) throw new Error("node-llama-cpp TokenBias internals changed; logit_bias needs updating");
  // -100 bans a token, but as a very large finite penalty rather than -Infinity: when a grammar
  // leaves only banned tokens (an end-of-turn token once the JSON is complete), llama.cpp must still
  // have a candidate, or the sampler fails inside the engine.
  for (const [token, value] of bias) map.set(token as Token, value <= -100 ? BANNED : value);
  return tb;
}
