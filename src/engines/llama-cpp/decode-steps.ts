import type { LlamaContextSequence, SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { TokenLogprob } from "../../core/types.ts";
import { directSteps, directStepsAvailable, feedPrompt } from "./direct-steps.ts";
import { LogprobReader, tapLogits } from "./logprob-reader.ts";
import type { TokenPieces } from "./token-pieces.ts";

export interface Step {
  token: Token;
  logprob?: TokenLogprob;
}

/**
 * A step source yields each sampled token; the consumer may answer `next(tokens)` to put other
 * tokens into the sequence instead of the sampled one (e.g. to force a thinking section closed).
 */
export type Steps = AsyncGenerator<Step, void, Token[] | undefined>;

/**
 * Plain decoding: llama.cpp samples natively; nothing per token but the token itself. Driven
 * directly through the sequence's decode queue where node-llama-cpp's internals allow it
 * (direct-steps.ts), else through `sequence.evaluate`.
 */
export function plainSteps(sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions, signal?: AbortSignal): Steps {
  return directStepsAvailable(sequence) ? directSteps(sequence, input, options, signal) : evaluateSteps(sequence, input, options);
}

/** Plain decoding through node-llama-cpp's own per-token loop. */
export async function* evaluateSteps(sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions): Steps {
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
 * Decoding with log probabilities: the request's own native sampler picks each token, and a
 * LogprobReader reads the distribution off the same logits row (see logprob-reader.ts).
 */
export async function* logprobSteps(
  sequence: LlamaContextSequence,
  input: Token[],
  options: SequenceEvaluateOptions,
  top: number,
  pieces: TokenPieces,
  signal?: AbortSignal,
): Steps {
  // A long prompt is read in slices first, as plain decoding does, so a cancel stops it early; the
  // last slice goes through evaluate with the rest, where its last row is read.
  const rest = signal ? await feedPrompt(sequence, input, options, signal) : input;
  if (rest === undefined) return;
  const { tokenBias, repeatPenalty, grammarEvaluationState } = options;
  const reader = new LogprobReader(sequence, { tokenBias, repeatPenalty, grammarEvaluationState }, top, pieces);
  let latest: TokenLogprob | undefined;
  const untap = tapLogits(
    sequence,
    async (row, _position, sampled, grammar) => {
      if (sampled !== undefined) latest = await reader.read(row, sampled, grammar);
    },
    () => reader.grammarBefore(),
  );
  try {
    const it = sequence.evaluate(rest, options);
    try {
      let step = await it.next();
      while (!step.done) {
        const replacement = yield { token: step.value, logprob: latest };
        latest = undefined;
        step = await it.next(replacement);
      }
    } finally {
      await it.return(undefined);
    }
  } finally {
    untap();
    reader.dispose();
  }
}

/** Prompt tokens per slice when their log probabilities are read (each row is read, so slices are short work). */
const PROMPT_LOGPROB_SLICE = 512;

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
  signal?: AbortSignal,
  /** Nothing follows the prompt: the last token also carries an unfinished character, as U+FFFD. */
  ends = false,
): Promise<TokenLogprob[]> {
  const entries = await readPromptLogprobs(sequence, prompt, top, pieces, signal);
  const last = entries[entries.length - 1];
  // The echoed text then ends in U+FFFD (see TokenPieces.textOf); the tokens keep spelling it.
  const rest = ends && pieces.exact ? pieces.textOf(prompt, true).slice(pieces.textOf(prompt, false).length) : "";
  if (rest) entries[entries.length - 1] = { ...last, token: last.token + rest };
  return entries;
}

async function readPromptLogprobs(
  sequence: LlamaContextSequence,
  prompt: Token[],
  top: number,
  pieces: TokenPieces,
  signal?: AbortSignal,
): Promise<TokenLogprob[]> {
  const first = pieces.get(prompt[0]);
  const entries: TokenLogprob[] = [{ token: first.text, bytes: first.bytes, logprob: null, top: [] }];
  if (prompt.length < 2) return entries;
  const reader = new LogprobReader(sequence, {}, top, pieces);
  // Where the slice being evaluated starts in the prompt: a row's position is counted within its slice.
  let offset = 0;
  const untap = tapLogits(sequence, async (row, position) => {
    const at = offset + position;
    if (at + 1 < prompt.length) entries[at + 1] = await reader.read(row, prompt[at + 1]);
  });
  try {
    // Each position needs its logits row; asking for a greedy next token is the cheapest way to get
    // one. A slice at a time, so that a cancelled request stops reading its prompt at a slice's end.
    const items = prompt.slice(0, -1).map((t): [Token, { generateNext: { token: true; options: { temperature: number } } }] => [t, { generateNext: { token: true, options: { temperature: 0 } } }]);
    for (offset = 0; offset < items.length && !signal?.aborted; offset += PROMPT_LOGPROB_SLICE) {
      await sequence.controlledEvaluate(items.slice(offset, offset + PROMPT_LOGPROB_SLICE));
    }
  } finally {
    untap();
    reader.dispose();
  }
  for (let i = 1; i < prompt.length; i++) {
    if (entries[i] === undefined) {
      const p = pieces.get(prompt[i]);
      entries[i] = { token: p.text, bytes: p.bytes, logprob: null, top: [] };
    }
  }
  return entries;
}
