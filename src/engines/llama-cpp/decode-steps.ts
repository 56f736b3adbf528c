import type { LlamaContextSequence, SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { SamplingParams, TokenLogprob } from "../../core/types.ts";
import { JsSampler } from "./js-sampler.ts";
import type { TokenPieces } from "./token-pieces.ts";

export interface Step {
  token: Token;
  logprob?: TokenLogprob;
}

/** OpenAI reports impossible tokens with a large finite negative number, not -Infinity (not JSON). */
const FLOOR = -9999;
const logOf = (p: number | undefined) => (p && p > 0 ? Math.max(FLOOR, Math.log(p)) : FLOOR);

/**
 * A step source yields each sampled token; the consumer may answer `next(tokens)` to put other
 * tokens into the sequence instead of the sampled one (e.g. to force a thinking section closed).
 */
export type Steps = AsyncGenerator<Step, void, Token[] | undefined>;

/** Plain decoding: llama.cpp samples natively; nothing per token but the token itself. */
export async function* plainSteps(sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions): Steps {
  const it = sequence.evaluate(input, options);
  try {
    let step = await it.next();
    while (!step.done) {
      const replacement = yield { token: step.value };
      step = await it.next(replacement);
    }
  } finally {
    await it.return(undefined);
  }
}

/**
 * Decoding with log probabilities. llama.cpp only exposes the distribution after its sampler chain,
 * which truncates and rescales it; so the native chain runs greedy (bias and penalties only, no
 * truncation), the full distribution is reported, and a JS sampler picks the token that follows.
 */
export async function* logprobSteps(
  sequence: LlamaContextSequence,
  input: Token[],
  options: SequenceEvaluateOptions,
  sampling: SamplingParams,
  top: number,
  pieces: TokenPieces,
): Steps {
  const sampler = new JsSampler(sampling);
  const it = sequence.evaluateWithMetadata(input, { probabilities: true }, { ...options, temperature: 0 });
  try {
    let step = await it.next();
    while (!step.done) {
      const probs = step.value.probabilities;
      const token = sampler.pick(probs) as Token;
      const replacement = yield { token, logprob: describe(token, probs, top, pieces) };
      step = await it.next(replacement ?? token);
    }
  } finally {
    await it.return(undefined);
  }
}

/**
 * Log probabilities of the prompt's own tokens in one pass over the prompt: the distribution after
 * token i gives the probability of token i + 1. Evaluates all but the last prompt token into the
 * sequence, so generation continues from the last one.
 */
export async function promptLogprobs(
  sequence: LlamaContextSequence,
  prompt: Token[],
  top: number,
  pieces: TokenPieces,
): Promise<TokenLogprob[]> {
  const first = pieces.get(prompt[0]);
  const entries: TokenLogprob[] = [{ token: first.text, bytes: first.bytes, logprob: null, top: [] }];
  if (prompt.length < 2) return entries;
  const results = await sequence.controlledEvaluate(
    prompt.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true, options: { temperature: 0 } } }] as const),
  );
  for (let i = 1; i < prompt.length; i++) {
    const probs = results[i - 1]?.next.probabilities;
    entries.push(probs ? describe(prompt[i], probs, top, pieces) : { ...pieceOf(prompt[i], pieces), logprob: null, top: [] });
  }
  return entries;
}

function pieceOf(token: number, pieces: TokenPieces) {
  const p = pieces.get(token);
  return { token: p.text, bytes: p.bytes };
}

function describe(token: number, probs: ReadonlyMap<number, number>, top: number, pieces: TokenPieces): TokenLogprob {
  const alternatives: TokenLogprob["top"] = [];
  if (top > 0) {
    for (const [t, p] of probs) {
      alternatives.push({ ...pieceOf(t, pieces), logprob: logOf(p) });
      if (alternatives.length >= top) break;
    }
  }
  return { ...pieceOf(token, pieces), logprob: logOf(probs.get(token)), top: alternatives };
}
