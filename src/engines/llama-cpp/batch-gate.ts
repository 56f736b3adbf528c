import type { LlamaContext } from "node-llama-cpp";
import { isSplittable, type DecodeItem } from "./decode-item.ts";
import { decodeShare } from "./decode-share.ts";

// Keeps a context's generating sequences in one decode per step.
//
// node-llama-cpp batches whatever sequences have queued a decode when its dispatch runs, and after a
// batch it immediately decodes whatever was queued meanwhile. Sequences reach the queue at
// different moments (each is sampled on its own worker thread, then passes through our decode loop
// and the HTTP side), so the first ones of a step often go without the last ones, which then get a
// decode of their own: measured with 8 streams on one context, 6.9 sequences per decode instead of
// 8, and with two contexts of 4, 3.0 instead of 4. On the CPU a decode of 1 token costs most of what
// a decode of 4 does (the weights are read either way), so each straggler costs nearly a whole step.
//
// The gate holds each sequence's decode request until every sequence of the context that is
// generating has made one, then lets them all through at once; a new request's prompt joins the
// same step. A sequence that is late (its client reads slowly, a grammar makes its sampling slow)
// only holds the others for a fraction of a step, after which they go without it.
//
// A long prompt is cut into pieces, one per step (see `promptBudget`), so that sequences already
// generating keep getting a token every step while it is read, instead of standing still for the
// whole prompt (measured on the bench model: a 2,000-token prompt held four running streams for
// 1.4-2.5 s; bench/prefill-stall.ts).
//
// It wraps one internal of node-llama-cpp 3.21.1 (pinned exactly): the context's `_decodeTokens`,
// through which every sequence's decode passes. Without it the gate stands aside.

type DecodeTokens = (...args: unknown[]) => Promise<unknown>;

interface Held {
  sequenceId: number;
  /** Tokens it has left to decode. */
  tokens: number;
  /** Lets `count` of its tokens through (a decode that cannot be cut: all of them). */
  go: (count: number) => void;
  /** Comes back after one batch, so others wait for it while it is in flight. */
  step: boolean;
  /** A step of only such decodes is dispatched at once (see letThrough). */
  eager: boolean;
  prompt: boolean;
  /** A sequence's first decode (it has just entered), not a running sequence's next step. */
  first: boolean;
}

/** A sequence's id as its decodes carry it (an internal of node-llama-cpp 3.21.1); undefined without it. */
export function sequenceIdOf(sequence: object): number | undefined {
  const id = (sequence as { _sequenceId?: unknown })._sequenceId;
  return typeof id === "number" ? id : undefined;
}

interface ContextInternals {
  _decodeTokens?: DecodeTokens;
}

/** Longest hold, as a share of the context's recent step time, and its bounds in ms. */
const HOLD_SHARE = 0.25;
const HOLD_MIN_MS = 1;
const HOLD_MAX_MS = 20;
/** Longest a step waits for a newcomer's cache preparation (a saved state being read from disk). */
const PARK_MAX_MS = 100;
/**
 * A step from idle, when the last one was followed by other newcomers (a burst: clients starting
 * together), waits for the rest of the burst: until no newcomer has come for GATHER_STALL_MS, and
 * GATHER_MAX_MS in all (see gathering). Eight streams started together reached the engine ~1.3 ms
 * apart on 2 cores (each request is parsed and rendered before the next is read), ~9 ms in all.
 */
const GATHER_STALL_MS = 3;
const GATHER_MAX_MS = 15;

/** How many of a held decode's tokens go in this step: a long prompt its share, anything else all. */
function tokensLetThrough(h: Held, share: number): number {
  return h.prompt && h.tokens > PIECE_MIN ? Math.min(h.tokens, share) : h.tokens;
}

/**
 * While sequences generate, a step with prompt tokens in it aims to last at most this long, or
 * PROMPT_STEP_SHARE generation steps if that is longer: the running streams' gap between two tokens
 * while a long prompt is read. A fast machine (a GPU) reads a whole batch of prompt in that time,
 * and nothing is cut.
 */
const PROMPT_STEP_MIN_MS = 100;
const PROMPT_STEP_SHARE = 4;
/**
 * The fewest prompt tokens a step carries while sequences generate. On a CPU a prompt token costs
 * far more in a small batch than in a large one (bench model, 2 cores, ms per token at 1,000 tokens
 * of context: 7.5 with 4 in the batch, 4.0 with 16, 2.0 with 64, 1.6-1.7 from 96 to 512), so
 * pieces cut to a time target there would read a prompt at half speed. With 256, a 2,000-token
 * prompt beside four streams was read 7 % slower than llama-server reads it, and the streams'
 * longest wait for a token was 0.5 s instead of llama-server's 2.9 s (128: 32 % slower, 0.3 s).
 */
const PIECE_MIN = 256;

export class BatchGate {
  private active = 0;
  private held: Held[] = [];
  private timer: NodeJS.Timeout | undefined;
  /**
   * Sequences getting ready to join (their cache being trimmed or loaded, which needs the context's
   * lock), and sequences that entered but whose first decode has not reached the gate yet.
   */
  private joining = 0;
  /** Sequences that entered and have not sent a decode yet. */
  private readonly firstDecode = new Set<number>();
  /** A step held back while someone joins, and the timer that lets it go if the join drags on. */
  private parked: NodeJS.Timeout | undefined;
  /** Generation steps (one-token decodes) let through whose results have not come back yet. */
  private inFlight = 0;
  /** Of those, the one-token decodes (generating sequences). */
  private tokensInFlight = 0;
  /** Smoothed time from letting a step through to its first result coming back. */
  private stepMs = 10;
  /** The same for steps with no prompt tokens in them. */
  private generationStepMs = 10;
  /** Smoothed cost of one prompt token in a step, ms; unknown until a piece has been timed. */
  private promptTokenMs: number | undefined;
  private readonly batchSize: number;
  private readonly original: DecodeTokens | undefined;
  /** A step from idle being held for newcomers: since when, the last newcomer, and how to stop its wait. */
  private gather: { since: number; last: number; burst: boolean; cancel: (() => void) | undefined } | undefined;
  /**
   * The last step from idle: when it was first looked at, and whether newcomers followed it within
   * a step (joining it, or arriving while it decoded), which makes the next one wait for a burst.
   */
  private cold = { at: -Infinity, followed: false };

  constructor(
    private readonly context: LlamaContext,
    /** How long a step from idle waits for a burst (see gathering); tests widen them. */
    private readonly burst = { stallMs: GATHER_STALL_MS, maxMs: GATHER_MAX_MS },
  ) {
    const size = (context as { batchSize?: unknown }).batchSize;
    this.batchSize = typeof size === "number" && size > 0 ? size : 512;
    const internals = context as unknown as ContextInternals;
    if (typeof internals._decodeTokens !== "function") return;
    const original = internals._decodeTokens;
    this.original = original;
    Object.defineProperty(context, "_decodeTokens", {
      configurable: true,
      writable: true,
      value: (...args: unknown[]) =>
        new Promise((resolve, reject) => {
          const item = args[0] as { sequenceId?: unknown; tokens?: unknown } | undefined;
          const sequenceId = item?.sequenceId;
          const arrived = typeof sequenceId === "number" && this.firstDecode.delete(sequenceId);
          if (arrived) this.newcomer();
          if (Array.isArray(item?.tokens) && item.tokens.length > 1 && isSplittable(item)) this.holdPrompt(original, item, args.slice(1), resolve, reject, arrived);
          else this.holdWhole(original, args, resolve, reject, arrived);
          if (arrived) this.joined();
          else this.check();
        }),
    });
  }

  /**
   * A decode passed on as it is. Only a generation step (one token) is waited for while in flight:
   * a prompt that could not be cut may span many batches, and the others must keep decoding a
   * token per batch beside it, not stall.
   */
  private holdWhole(original: DecodeTokens, args: unknown[], resolve: (v: unknown) => void, reject: (e: unknown) => void, first: boolean): void {
    const item = args[0] as { sequenceId?: unknown; tokens?: unknown } | undefined;
    const step = Array.isArray(item?.tokens) && item.tokens.length <= 1;
    this.held.push({
      sequenceId: typeof item?.sequenceId === "number" ? item.sequenceId : Number.MAX_SAFE_INTEGER,
      tokens: Array.isArray(item?.tokens) ? item.tokens.length : 1,
      step,
      eager: step,
      prompt: !step,
      first,
      go: () => {
        const started = performance.now();
        const mixed = this.stepHasPrompt;
        if (step) {
          this.inFlight++;
          this.tokensInFlight++;
        }
        const settle = () => {
          decodeShare.generationEnded();
          if (!step) return;
          this.inFlight--;
          this.tokensInFlight--;
        };
        decodeShare.generationStarted();
        original.apply(this.context, args).then(
          (value) => {
            settle();
            this.observe(performance.now() - started, mixed);
            resolve(value);
            // Those held for this one now wait only the usual hold for its next decode.
            this.check();
          },
          (err: unknown) => {
            settle();
            reject(err);
            this.check();
          },
        );
      },
    });
  }

  /**
   * A prompt, let through a piece per step: each piece is queued with the step's other decodes and
   * comes back after one batch, and the next piece waits in the gate for the next step like any
   * generating sequence. The pieces' results (the logits asked for, by token index) are put together
   * as node-llama-cpp does for a prompt it cuts into batches itself.
   */
  private holdPrompt(original: DecodeTokens, item: DecodeItem, rest: unknown[], resolve: (v: unknown) => void, reject: (e: unknown) => void, firstDecode: boolean): void {
    const results: unknown[] = [];
    let offset = 0;
    const hold = (first: boolean) =>
      this.held.push({
        sequenceId: item.sequenceId,
        tokens: item.tokens.length - offset,
        step: true,
        // The first piece keeps node-llama-cpp's dispatch turn, so requests arriving together join it.
        eager: !first,
        prompt: true,
        first: first && firstDecode,
        go: (count) => {
          const remaining = item.tokens.length - offset;
          const n = Math.min(remaining, Math.max(1, count));
          const piece =
            offset === 0 && n === remaining
              ? item
              : {
                  ...item,
                  tokens: item.tokens.slice(offset, offset + n),
                  logits: item.logits.slice(offset, offset + n),
                  firstTokenSequenceIndex: item.firstTokenSequenceIndex + offset,
                };
          const started = performance.now();
          const generating = this.stepGenerating;
          const promptTokens = this.stepPromptTokens;
          this.inFlight++;
          decodeShare.generationStarted();
          original.apply(this.context, [piece, ...rest]).then(
            (value) => {
              this.inFlight--;
              decodeShare.generationEnded();
              this.observePrompt(performance.now() - started, generating, promptTokens);
              if (Array.isArray(value)) for (const v of value) results.push(v);
              offset += n;
              if (offset >= item.tokens.length) resolve(results);
              else hold(false);
              this.check();
            },
            (err: unknown) => {
              this.inFlight--;
              decodeShare.generationEnded();
              reject(err);
              this.check();
            },
          );
        },
      });
    hold(true);
  }

  /** Whether decodes pass through the gate (node-llama-cpp has the internal it wraps). */
  get engaged(): boolean {
    return this.original !== undefined;
  }

  /**
   * A sequence of this context starts generating: its decodes are waited for from now on. With its
   * id, it also counts as joining until its first decode reaches the gate, so a step held back for
   * newcomers (see join) takes that decode along instead of leaving just before it arrives.
   */
  enter(sequenceId?: number): void {
    this.active++;
    if (sequenceId === undefined) return;
    this.firstDecode.add(sequenceId);
    this.joining++;
  }

  /**
   * A sequence is about to prepare its cache (trim, clear or load state), which waits for the
   * context's lock. node-llama-cpp's dispatch holds that lock for as long as decodes keep arriving,
   * and with the gate the next step's decodes arrive before the dispatch looks again; so without a
   * pause a newcomer waited for every sequence of its context to finish (measured: a time to first
   * token of 4.6 s instead of 0.09 s for one request in eight, each round). While someone is
   * joining, the next step is held back (so the dispatch finds nothing queued and lets go of the
   * lock) until the preparation is over, or for PARK_MAX_MS at most. Returns the call that says the
   * preparation is over.
   */
  join(): () => void {
    // Beside another sequence, within a step of the last step from idle: that step was followed
    // (see gathering). A client sending requests one after another never gets here beside another:
    // each comes after the one before has left.
    if (this.active > 0 && performance.now() - this.cold.at <= this.burst.maxMs + this.stepMs) this.cold.followed = true;
    this.joining++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.joined();
    };
  }

  /** A sequence stops generating (finished, failed or cancelled): the others stop waiting for it. */
  leave(sequenceId?: number): void {
    this.active = Math.max(0, this.active - 1);
    if (sequenceId !== undefined && this.firstDecode.delete(sequenceId)) this.joined();
    else this.check();
  }

  /** One joining sequence is ready: once none is left, a step held back for them goes. */
  private joined(): void {
    this.joining--;
    if (this.joining === 0 && this.parked) this.unpark();
    else this.check();
  }

  dispose(): void {
    if (this.parked) clearTimeout(this.parked);
    this.parked = undefined;
    this.gather?.cancel?.();
    this.gather = undefined;
    this.letThrough();
    if (this.original) delete (this.context as unknown as ContextInternals)._decodeTokens;
  }

  private check(): void {
    if (this.held.length === 0) return;
    if (this.held.length >= this.active) {
      this.release();
      return;
    }
    // The missing ones are still being decoded: they come back right after that decode, and
    // letting these go now would only queue them behind it as a batch of their own. Once a step has
    // split that way it stays split (each half arrives while the other half decodes), which measured
    // as one context making two decodes of 2 sequences per step instead of one of 4.
    if (this.held.length + this.inFlight >= this.active) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      return;
    }
    if (!this.timer) {
      const hold = Math.min(HOLD_MAX_MS, Math.max(HOLD_MIN_MS, this.stepMs * HOLD_SHARE));
      this.timer = setTimeout(() => this.release(), hold);
    }
  }

  /**
   * Lets every held decode through in one go, so they land in the same batch, in ascending sequence
   * order. node-llama-cpp fills the batch in the order decodes were queued, and llama.cpp (its KV
   * cache keeps one stream per sequence) cuts a batch into micro-batches wherever the next token's
   * sequence is not the previous one's plus one. Queued in arrival order, eight sequences' tokens
   * became micro-batches of one to three tokens, and a step cost about three times what one
   * eight-token decode costs (measured in docs/benchmarks.md).
   */
  private release(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.joining > 0) {
      this.parked ??= setTimeout(() => this.unpark(), PARK_MAX_MS);
      return;
    }
    if (this.parked) return;
    if (this.gathering()) return;
    this.letThrough();
  }

  /**
   * Whether a step from idle waits for more newcomers. Only a step of newcomers' first decodes
   * waits, with nothing in flight and no sequence of the context generating, so a running stream is
   * never held by it.
   *
   * Requests that arrive together each go from their socket to here in one run of callbacks and
   * promise reactions, so when the first one's decode is here the server has not read the others'
   * heads yet. One turn of the event loop reads those already received (a lone request costs only
   * that turn). When the last step from idle was followed by other newcomers, this one is taken for
   * a burst as well and waits until no newcomer has come for GATHER_STALL_MS (GATHER_MAX_MS at
   * most): measured with eight streams started together on 2 cores, the first one's first token
   * came at ~30 ms and the seven others', decoded in the next step, at ~75 ms; all eight in one
   * step had theirs at ~50-60 ms.
   */
  private gathering(): boolean {
    let newcomers = this.firstDecode.size;
    for (const h of this.held) {
      if (!h.first) return this.stopGathering();
      newcomers++;
    }
    if (this.inFlight > 0 || newcomers < this.active) return this.stopGathering();
    const now = performance.now();
    let g = this.gather;
    if (!g) {
      g = this.gather = { since: now, last: now, burst: this.cold.followed, cancel: undefined };
      this.cold = { at: now, followed: false };
      const turn = setImmediate(() => this.regather());
      g.cancel = () => clearImmediate(turn);
      return true;
    }
    // Waiting already (for the turn or the next look).
    if (g.cancel) return true;
    const quiet = this.burst.stallMs - (now - g.last);
    const left = this.burst.maxMs - (now - g.since);
    if (!g.burst || quiet <= 0 || left <= 0) return this.stopGathering();
    const timer = setTimeout(() => this.regather(), Math.min(quiet, left));
    g.cancel = () => clearTimeout(timer);
    return true;
  }

  private regather(): void {
    if (this.gather) this.gather.cancel = undefined;
    this.release();
  }

  /** A sequence's first decode has come: a gathering waits GATHER_STALL_MS from now for the next. */
  private newcomer(): void {
    if (this.gather) this.gather.last = performance.now();
  }

  /** Ends a gathering (if any); always false, for `gathering`. */
  private stopGathering(): false {
    this.gather?.cancel?.();
    this.gather = undefined;
    return false;
  }

  private unpark(): void {
    if (this.parked) clearTimeout(this.parked);
    this.parked = undefined;
    // A burst's step held for one newcomer's preparation still waits for the rest of the burst.
    if (this.gathering()) return;
    this.letThrough();
  }

  private letThrough(): void {
    const held = this.held;
    this.held = [];
    held.sort((a, b) => a.sequenceId - b.sequenceId);
    // Counted in one pass: this runs once per step, which at one stream is once per token.
    let prompts = 0;
    let long = 0;
    for (const h of held) {
      if (!h.prompt) continue;
      prompts++;
      if (h.tokens > PIECE_MIN) long++;
    }
    // Sequences generating in this step: those let through now and those whose token is still
    // being decoded (they come back for the next step).
    const generating = held.length - prompts + this.tokensInFlight;
    // A prompt of up to PIECE_MIN tokens goes whole (requests arriving together start together, as
    // before); longer ones share the step's budget.
    const share = long > 0 ? Math.max(1, Math.floor(this.promptBudget(generating) / long)) : 0;
    this.stepGenerating = generating;
    this.stepHasPrompt = prompts > 0;
    this.stepPromptTokens = 0;
    if (prompts > 0) for (const h of held) if (h.prompt) this.stepPromptTokens += tokensLetThrough(h, share);
    for (const h of held) h.go(tokensLetThrough(h, share));
    // A step of running sequences only is complete now, so its batch goes at once. Left to itself,
    // node-llama-cpp dispatches on the next event-loop turn (setImmediate) unless every sequence of
    // the context has queued: at one stream of eight that turn was 0.11 ms (median) between a
    // token's sampling and the next decode (docs/benchmarks.md); its scheduled dispatch then finds
    // the batch gone and does nothing. A step with a prompt in it keeps that turn: requests that
    // arrived together are read in it and take the context's lock for their cache before the
    // dispatch does, so their prompts join this decode instead of waiting for it (dispatched at once,
    // 32 simultaneous requests' first tokens came 40-90 ms later).
    if (held.length > 0 && held.every((h) => h.eager)) this.context.dispatchPendingBatch?.();
  }

  /** What the step being let through holds, read by its decodes as they go (for the timings). */
  private stepGenerating = 0;
  private stepPromptTokens = 0;
  private stepHasPrompt = false;

  /**
   * Prompt tokens for one step. With nothing generating, a whole batch: a prompt is read as fast
   * as the context can. With sequences generating, as many as keep the step within
   * PROMPT_STEP_MIN_MS (or PROMPT_STEP_SHARE generation steps), from the measured cost of a prompt
   * token; each running stream then waits that long for a token instead of the whole prompt.
   */
  private promptBudget(generating: number): number {
    const room = Math.max(1, this.batchSize - generating);
    if (generating === 0) return room;
    if (this.promptTokenMs === undefined) return Math.min(room, PIECE_MIN);
    const target = Math.max(PROMPT_STEP_MIN_MS, PROMPT_STEP_SHARE * this.generationStepMs);
    const fits = Math.floor((target - this.generationStepMs) / this.promptTokenMs);
    return Math.min(room, Math.max(PIECE_MIN, fits));
  }

  private observe(ms: number, mixed: boolean): void {
    this.stepMs = this.stepMs * 0.8 + ms * 0.2;
    if (!mixed) this.generationStepMs = this.generationStepMs * 0.8 + ms * 0.2;
  }

  /** A prompt piece's step took `ms`: what its prompt tokens cost, beyond the generation step. */
  private observePrompt(ms: number, generating: number, promptTokens: number): void {
    this.stepMs = this.stepMs * 0.8 + ms * 0.2;
    if (promptTokens <= 0) return;
    const perToken = Math.max(0.001, (ms - (generating > 0 ? this.generationStepMs : 0)) / promptTokens);
    this.promptTokenMs = this.promptTokenMs === undefined ? perToken : this.promptTokenMs * 0.7 + perToken * 0.3;
  }
}
