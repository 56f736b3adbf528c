import type { LlamaContextSequence, LlamaGrammarEvaluationState, SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { TokenLogprob } from "../../core/types.ts";
import type { Piece, SpellState, TokenPieces } from "./token-pieces.ts";

// node-llama-cpp returns next-token probabilities only as a sorted, vocabulary-sized array that it
// turns into a Map (≈ 8 ms a token at a 32k vocabulary). This module reads the few numbers
// OpenAI-style logprobs need straight off a decoded batch's logits instead, with extra native
// samplers that run on the same logits row as the request's own sampler:
//
//  - "top":  top-k(k) over the shaped logits (logit bias, penalties, grammar; no temperature)
//            returns the k best tokens, softmaxed among themselves: exact *relative* log
//            probabilities after one partial selection, k numbers across the boundary.
//  - "norm": greedy with confidence returns p(best) over the whole vocabulary, which anchors the k
//            relative values to the true normaliser.
//  - "pin":  when the sampled token is outside the top k, a known bias lifts it next to the best
//            token; their ratio gives its logit relative to the best one, hence its log probability.
//
// The values are the model's distribution after logit_bias, penalties and the grammar (when one
// constrains the output, the distribution over what it allows, so at temperature 0 the chosen token
// is the top one), and before temperature and truncation. The sampled token itself still comes from
// the request's native sampler, so a seed gives the same text with logprobs on or off.
//
// It touches four internals of node-llama-cpp 3.21.1 (pinned exactly): a sequence's _decodeTokens
// and _resolveSamplerConfig, the context's native sampleToken, and the AddonSampler binding.
// `logprobReaderSupported` checks they exist, so a changed library refuses logprobs with a 400
// instead of failing mid-generation.

type SampleResult = [token: number, probabilities?: number[], confidence?: number];

interface NativeSampler {
  applyConfig(config: object): void;
  dispose(): void;
}

interface SequenceInternals {
  readonly contextTokens: Token[];
  _decodeTokens: (...args: unknown[]) => Promise<unknown>;
  _resolveSamplerConfig(options: object): Record<string, unknown>;
  context: { _ctx: { sampleToken(index: number, sampler: NativeSampler, probabilities: boolean, confidence: boolean): Promise<SampleResult> } };
  model: { _model: unknown; _llama: { _bindings: { AddonSampler: new (model: unknown) => NativeSampler } } };
}

type LogitsMapper = (batchLogitIndex: number, tokenIndex: number) => unknown;

/**
 * The tokens before the row a `tapLogits` callback is handling (the sequence's tokens, then the
 * batch's up to and including the row's own), so that a LogprobReader spells the chosen token and
 * its alternatives where they land in the text. Set right before the callback runs; `read` takes it
 * synchronously on entry.
 */
interface RowContext {
  before: readonly Token[];
  batch: readonly Token[];
  end: number;
}
const rowContexts = new WeakMap<object, RowContext>();

/** OpenAI reports impossible tokens with a large finite negative number, not -Infinity (not JSON). */
export const LOGPROB_FLOOR = -9999;

const TOP_SAMPLED = 20;

/** How far past the k-th token the first pin lifts the sampled one, then how much more per retry. */
const PIN_MARGIN = 20;
const PIN_STEP = 60; // float32 softmax keeps ratios down to e^-87; stay well inside that
const PIN_TRIES = 4;

function internals(sequence: LlamaContextSequence): SequenceInternals {
  return sequence as unknown as SequenceInternals;
}

export function logprobReaderSupported(sequence: LlamaContextSequence): boolean {
  const s = internals(sequence) as Partial<SequenceInternals>;
  return (
    typeof s._decodeTokens === "function" &&
    typeof s._resolveSamplerConfig === "function" &&
    typeof s.context?._ctx?.sampleToken === "function" &&
    typeof s.model?._llama?._bindings?.AddonSampler === "function"
  );
}

/**
 * Calls `onLogits` for every logits row this sequence decodes, after the row's own sampler ran and
 * before the next batch can overwrite the logits. Returns the function that removes the tap.
 */
export function tapLogits<T>(
  sequence: LlamaContextSequence,
  onLogits: (batchLogitIndex: number, tokenIndex: number, sampled: number | undefined, before: T | undefined) => Promise<void>,
  beforeSampling?: () => T,
): () => void {
  const s = internals(sequence);
  const own = Object.hasOwn(s, "_decodeTokens");
  const original = s._decodeTokens;
  s._decodeTokens = function (this: unknown, ...args: unknown[]) {
    const batch = (Array.isArray(args[0]) ? args[0] : []) as Token[];
    const before = s.contextTokens;
    const mapper = args[5] as LogitsMapper;
    args[5] = async (batchLogitIndex: number, tokenIndex: number) => {
      // Taken before the row's own sampler runs, which advances the grammar by the token it picks.
      const grammar = beforeSampling?.();
      const value = await mapper(batchLogitIndex, tokenIndex);
      const sampled = Array.isArray(value) ? value[0] : typeof value === "number" ? value : undefined;
      rowContexts.set(s, { before, batch, end: tokenIndex + 1 });
      await onLogits(batchLogitIndex, tokenIndex, typeof sampled === "number" && sampled >= 0 ? sampled : undefined, grammar);
      return value;
    };
    return original.apply(this, args);
  };
  return () => {
    if (own) s._decodeTokens = original;
    else delete (s as Partial<SequenceInternals>)._decodeTokens;
  };
}

/** Reads log probabilities for one generation; call `read` only from inside a `tapLogits` callback. */
export class LogprobReader {
  private readonly top: NativeSampler;
  private readonly norm: NativeSampler;
  private readonly pin: NativeSampler;
  private readonly s: SequenceInternals;

  /**
   * @param shaping the request's logit bias, penalties and grammar, which the reported distribution includes
   * @param count how many alternatives to report per token (top_logprobs)
   */
  constructor(
    sequence: LlamaContextSequence,
    private readonly shaping: Pick<SequenceEvaluateOptions, "tokenBias" | "repeatPenalty" | "grammarEvaluationState">,
    private readonly count: number,
    private readonly pieces: TokenPieces,
  ) {
    this.s = internals(sequence);
    const { AddonSampler } = this.s.model._llama._bindings;
    this.top = new AddonSampler(this.s.model._model);
    this.norm = new AddonSampler(this.s.model._model);
    this.pin = new AddonSampler(this.s.model._model);
  }

  dispose(): void {
    this.top.dispose();
    this.norm.dispose();
    this.pin.dispose();
  }

  /** The grammar as the row's own sampler will see it; pass it to `read` (see tapLogits). */
  grammarBefore(): LlamaGrammarEvaluationState | undefined {
    const g = this.shaping.grammarEvaluationState;
    return (typeof g === "function" ? g() : g)?.clone();
  }

  async read(batchLogitIndex: number, chosen: number, grammar?: LlamaGrammarEvaluationState): Promise<TokenLogprob> {
    const at = this.spellingState();
    const piece = (token: number) => {
      const p: Piece = at ? this.pieces.after(at, token) : this.pieces.get(token);
      const special = p.bytes.length === 0 ? this.pieces.special(token) : undefined;
      return { token: p.text, bytes: p.bytes, ...(special !== undefined ? { special } : {}) };
    };
    // The normaliser needs a pass over the whole vocabulary; the relative values do not. The two run
    // side by side (node-llama-cpp itself samples several rows of one batch concurrently).
    const [best, relative] = await Promise.all([
      this.sample(batchLogitIndex, this.norm, { temperature: 0 }, false, grammar).then(([, , confidence]) => confidence),
      this.relative(batchLogitIndex, chosen, grammar),
    ]);
    if (best === undefined || relative === undefined) return { ...piece(chosen), logprob: LOGPROB_FLOOR, top: [] };
    // Relative values are log(p / p(best)); p(best) over the vocabulary makes them absolute.
    const offset = Math.log(best);
    const clamp = (v: number) => Math.max(LOGPROB_FLOOR, v + offset);
    return {
      ...piece(chosen),
      logprob: relative.chosen === undefined ? LOGPROB_FLOOR : clamp(relative.chosen),
      ...(relative.outside && relative.ranked.length >= TOP_SAMPLED ? { outsideTop20: true as const } : {}),
      top: relative.ranked.slice(0, this.count).map(([t, v]) => ({ ...piece(t), logprob: clamp(v) })),
    };
  }

  /** The top tokens and the chosen one, as log(p / p(best)). */
  private async relative(batchLogitIndex: number, chosen: number, grammar: LlamaGrammarEvaluationState | undefined) {
    // Always the same k, so a token's value does not depend on how many alternatives were asked
    // for (float rounding differs with k); 20 is also the most anyone may ask for.
    const k = Math.max(this.count, TOP_SAMPLED);
    const [, flat = []] = await this.sample(batchLogitIndex, this.top, { temperature: 1, topK: k, topP: 1, minP: 0, seed: 0 }, true, grammar);
    if (flat.length < 2) return undefined;
    // (token, p') pairs, best first, p' softmaxed over these k tokens only.
    const ranked: Array<[number, number]> = [];
    // A token at probability 0 is one the grammar rules out: not an alternative at all.
    for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i + 1] > 0) ranked.push([flat[i], Math.log(flat[i + 1]) - Math.log(flat[1])]);
    const found = ranked.find(([t]) => t === chosen);
    // Outside the top k only counts when k tokens were on offer (a grammar may allow fewer).
    const outside = !found && ranked.slice(0, TOP_SAMPLED).every(([t]) => t !== chosen);
    return { ranked, outside, chosen: found ? found[1] : await this.pinned(batchLogitIndex, chosen, ranked, grammar) };
  }

  /** log(p / p(best)) of a token outside the top k, measured against the best token. */
  private async pinned(
    batchLogitIndex: number,
    token: number,
    ranked: Array<[number, number]>,
    grammar: LlamaGrammarEvaluationState | undefined,
  ): Promise<number | undefined> {
    const bestToken = ranked[0][0];
    let lift = -ranked[ranked.length - 1][1] + PIN_MARGIN;
    for (let attempt = 0; attempt < PIN_TRIES; attempt++, lift += PIN_STEP) {
      const chain = { temperature: 1, topK: 2, topP: 1, minP: 0, seed: 0 };
      const [, flat = []] = await this.sample(batchLogitIndex, this.pin, chain, true, grammar, [token, lift]);
      const p = probabilityIn(flat, token);
      const pBest = probabilityIn(flat, bestToken);
      // Both come back only once the lift put the token among the best two; otherwise lift more.
      if (p !== undefined && pBest !== undefined && p > 0 && pBest > 0) return Math.log(p) - Math.log(pBest) - lift;
    }
    return undefined;
  }

  private async sample(
    batchLogitIndex: number,
    sampler: NativeSampler,
    chain: object,
    probabilities: boolean,
    grammar: LlamaGrammarEvaluationState | undefined,
    lift?: [token: number, by: number],
  ): Promise<SampleResult> {
    // Each sampler gets its own copy: sampling advances the grammar by the token it picks.
    const config = this.s._resolveSamplerConfig({ ...chain, ...this.shaping, grammarEvaluationState: grammar?.clone() });
    if (lift) Object.assign(config, withLift(config, lift[0], lift[1]));
    sampler.applyConfig(config);
    return await this.s.context._ctx.sampleToken(batchLogitIndex, sampler, probabilities, !probabilities);
  }

  /** Where the row being read continues the text (see RowContext); undefined outside a tap. */
  private spellingState(): SpellState | undefined {
    const row = rowContexts.get(this.s);
    if (!row) return undefined;
    const { before, batch, end } = row;
    return this.pieces.stateAfter(before.length + end, (i) => (i < before.length ? before[i] : batch[i - before.length]));
  }
}

/** The probability of `token` in a flat (token, probability, …) list. */
function probabilityIn(flat: number[], token: number): number | undefined {
  for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i] === token) return flat[i + 1];
  return undefined;
}

/** The sampler config's bias arrays with `by` added to `token`'s bias. */
function withLift(config: Record<string, unknown>, token: number, by: number) {
  const keys = Array.from((config.tokenBiasKeys as Uint32Array | undefined) ?? []);
  const values = Array.from((config.tokenBiasValues as Float32Array | undefined) ?? []);
  const at = keys.indexOf(token);
  if (at >= 0) values[at] += by;
  else {
    keys.push(token);
    values.push(by);
  }
  return { tokenBiasKeys: Uint32Array.from(keys), tokenBiasValues: Float32Array.from(values) };
}
