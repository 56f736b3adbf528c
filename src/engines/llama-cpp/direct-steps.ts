import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { LlamaContextSequence, LlamaModel, SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { Steps } from "./decode-steps.ts";

// Plain decoding without `sequence.evaluate`'s per-token machinery (issue 14).
//
// For every token, node-llama-cpp's evaluate takes the sequence's lock, passes the token through
// three nested async generators, rebuilds the whole sampler configuration (copying the logit bias
// into fresh typed arrays) and hands it to the native sampler, which parses it again. Dropping that
// saved 0.06–0.26 ms of the JavaScript thread's 0.8–1.4 ms per token on the 2-core VM
// (docs/benchmarks.md), where every millisecond the JavaScript thread spends is taken from a decode
// that uses both cores.
//
// This source keeps what matters of that path and drops the rest: each token still goes through the
// sequence's own `_decodeTokens` (its queue, so the step is batched with the other sequences of the
// context and passes the batch gate; its token bookkeeping, which the prompt cache reads; its
// context-shift check), and is sampled by one native sampler per request. The sampler is configured
// again only when something in its configuration can have changed: the grammar state was swapped,
// or repetition penalties read the tokens generated so far.
//
// It uses internals of node-llama-cpp 3.21.1 (pinned exactly). `directStepsAvailable` checks them;
// without them the engine keeps `sequence.evaluate` (test/integration/direct-steps.test.ts fails by name
// on an upgrade that moves them).

/** Prompt tokens per slice (see directSteps): a batch of the default size. */
const PROMPT_SLICE = 512;

interface NativeSampler {
  _sampler: unknown;
  applyConfig(config: object): void;
  dispose(): void;
}

interface SequenceInternals {
  _decodeTokens(
    tokens: Token[],
    logits: boolean[],
    priority: number,
    tokenMeter: unknown,
    contextShift: { size: unknown; strategy: unknown },
    mapper: (batchLogitIndex: number) => Promise<number> | number,
    afterBatch?: unknown,
  ): Promise<unknown[]>;
  _resolveSamplerConfig(options: object): object;
  _ensureNotDisposed(): void;
  _tokenMeter: unknown;
  _contextShift: { size: unknown; strategy: unknown };
  _takeIntervalCheckpointIfNeededAfterBatch?: unknown;
  _context: { _ctx: NativeContext };
  _sequenceId?: number;
  /** Set when the sequence drafts tokens ahead (speculative decoding), which only `evaluate` drives. */
  _tokenPredictor?: unknown;
}

interface NativeContext {
  sampleToken(batchLogitIndex: number, sampler: unknown): Promise<number>;
  /** The addon's class: with the engine `npm ci` builds, it can sample on the decode thread (below). */
  constructor: Partial<PresampleHooks>;
}

/**
 * What the engine `npm ci` builds adds to the addon's context class (scripts/engine/plinth-presample.h):
 * an armed sequence's next token is sampled on the decode thread right after its decode, so
 * `sampleToken` answers at once instead of a round trip through a worker thread per token.
 */
interface PresampleHooks {
  plinthArmSampler(context: NativeContext, sequenceId: number, sampler: unknown): void;
  plinthDisarmSampler(context: NativeContext, sequenceId: number): void;
}

type SamplerClass = new (model: LlamaModel) => NativeSampler;

/** node-llama-cpp's sampler class: not exported, it sits next to the context in the package's dist folder. */
let samplerClass: SamplerClass | undefined;
try {
  const dist = path.dirname(fileURLToPath(import.meta.resolve("node-llama-cpp")));
  const module = (await import(pathToFileURL(path.join(dist, "evaluator/LlamaContext/LlamaSampler.js")).href)) as { LlamaSampler?: SamplerClass };
  samplerClass = typeof module.LlamaSampler === "function" ? module.LlamaSampler : undefined;
} catch {
  samplerClass = undefined;
}

/** node-llama-cpp's default evaluation priority (what `evaluate` uses when none is given). */
const DEFAULT_PRIORITY = 5;

/**
 * Whether this sequence exposes what `directSteps` drives and drafts no tokens ahead; when not, use
 * `sequence.evaluate`.
 */
export function directStepsAvailable(sequence: LlamaContextSequence): boolean {
  const s = sequence as unknown as Partial<SequenceInternals>;
  return (
    samplerClass !== undefined &&
    typeof s._decodeTokens === "function" &&
    typeof s._resolveSamplerConfig === "function" &&
    typeof s._ensureNotDisposed === "function" &&
    typeof s._contextShift === "object" &&
    typeof s._context?._ctx?.sampleToken === "function" &&
    s._tokenPredictor == null
  );
}

/**
 * Plain decoding (no log probabilities): yields each sampled token, end-of-generation tokens
 * included; `next(tokens)` puts those tokens into the sequence instead of the sampled one.
 * Same contract as `sequence.evaluate` with `yieldEogToken`, at a fraction of its cost per token.
 */
export async function* directSteps(sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions, signal?: AbortSignal): Steps {
  const seq = sequence as unknown as SequenceInternals;
  const sampler = new samplerClass!(sequence.model);
  const native = seq._context._ctx;
  // What evaluate resolves: the request's own context-shift settings, else the sequence's.
  const contextShift = {
    size: options.contextShift?.size ?? seq._contextShift.size,
    strategy: options.contextShift?.strategy ?? seq._contextShift.strategy,
  };
  const priority = options.evaluationPriority ?? DEFAULT_PRIORITY;
  const grammarOf = () => (typeof options.grammarEvaluationState === "function" ? options.grammarEvaluationState() : options.grammarEvaluationState);
  // Penalties read the tokens generated so far, which change every step.
  const reconfigureEachStep = options.repeatPenalty != null;
  let configured = false;
  let configuredGrammar: unknown;
  const configure = () => {
    const grammar = grammarOf();
    if (!configured || reconfigureEachStep || grammar !== configuredGrammar) {
      sampler.applyConfig(seq._resolveSamplerConfig(options));
      configured = true;
      configuredGrammar = grammar;
    }
  };
  // With the built engine the sampler is configured before each decode is queued and armed once, so
  // the decode thread samples right after the decode; sampleToken then hands that token over.
  // Nothing the configuration reads changes between queueing a step and sampling it: the decode
  // loop waits for the step.
  const presample = presampleHooks(native, seq._sequenceId);
  let armed = false;
  const sample = (batchLogitIndex: number) => {
    if (!presample) configure();
    return native.sampleToken(batchLogitIndex, sampler._sampler);
  };
  try {
    const fed = signal ? await feedPrompt(sequence, input, options, signal) : input;
    if (fed === undefined) return;
    let tokens: Token[] = fed;
    while (tokens.length > 0) {
      seq._ensureNotDisposed();
      if (presample) {
        configure();
        if (!armed) presample.arm(sampler._sampler);
        armed = true;
      }
      const logits: boolean[] = [];
      logits[tokens.length - 1] = true;
      const results = await seq._decodeTokens(tokens, logits, priority, seq._tokenMeter, contextShift, sample, seq._takeIntervalCheckpointIfNeededAfterBatch);
      const token = results[tokens.length - 1];
      if (token === -1) throw new Error("Failed to sample next token");
      if (typeof token !== "number") return;
      const replacement = yield { token: token as Token };
      tokens = replacement ? replacement.slice() : [token as Token];
    }
  } finally {
    // No sampling is in flight here: the generator only stops at a yield, after its step's sampling.
    // Disarmed first: the decode thread must not sample with a disposed sampler.
    if (armed) presample?.disarm();
    sampler.dispose();
  }
}

/**
 * Feeds a long prompt into the sequence a slice at a time, so that a request cancelled while it is
 * read stops at the end of the slice rather than after the whole prompt (on a CPU, ~2 s per 2,000
 * tokens that no one would read). Returns the tokens still to evaluate (the last slice, whose end the
 * caller asks logits for), or undefined when the signal stopped it. Each slice updates the
 * sequence's own bookkeeping, so what a stopped prompt left in the cache is known and reused or
 * trimmed like any other. No logits are asked for (the holes of a sparse array), so a logits tap
 * sees none of these rows. Without node-llama-cpp's internals the prompt is left whole.
 */
export async function feedPrompt(sequence: LlamaContextSequence, input: Token[], options: SequenceEvaluateOptions, signal: AbortSignal): Promise<Token[] | undefined> {
  if (signal.aborted) return undefined;
  if (input.length <= PROMPT_SLICE || !directStepsAvailable(sequence)) return input;
  const seq = sequence as unknown as SequenceInternals;
  const contextShift = {
    size: options.contextShift?.size ?? seq._contextShift.size,
    strategy: options.contextShift?.strategy ?? seq._contextShift.strategy,
  };
  const priority = options.evaluationPriority ?? DEFAULT_PRIORITY;
  // Never called: no row of a slice asks for logits.
  const noSample = () => -1;
  let tokens = input;
  while (tokens.length > PROMPT_SLICE) {
    if (signal.aborted) return undefined;
    seq._ensureNotDisposed();
    const slice = tokens.slice(0, PROMPT_SLICE);
    await seq._decodeTokens(slice, new Array<boolean>(slice.length), priority, seq._tokenMeter, contextShift, noSample, seq._takeIntervalCheckpointIfNeededAfterBatch);
    tokens = tokens.slice(PROMPT_SLICE);
  }
  return signal.aborted ? undefined : tokens;
}

/** Arms and disarms this sequence's sampler on the decode thread, when the addon can (see PresampleHooks). */
function presampleHooks(native: NativeContext, sequenceId: number | undefined) {
  const hooks = native.constructor;
  if (typeof sequenceId !== "number" || typeof hooks?.plinthArmSampler !== "function" || typeof hooks.plinthDisarmSampler !== "function") return undefined;
  if (process.env.PLINTH_PRESAMPLE === "0") return undefined;
  return {
    arm: (sampler: unknown) => hooks.plinthArmSampler!(native, sequenceId, sampler),
    disarm: () => hooks.plinthDisarmSampler!(native, sequenceId),
  };
}

/** Whether this sequence's tokens are sampled on the decode thread, right after their decode (the built engine). */
export function presampleAvailable(sequence: LlamaContextSequence): boolean {
  const s = sequence as unknown as Partial<SequenceInternals>;
  return s._context?._ctx !== undefined && presampleHooks(s._context._ctx, s._sequenceId) !== undefined;
}
