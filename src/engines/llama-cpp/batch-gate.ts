import type { LlamaContext } from "node-llama-cpp";

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
// It wraps one internal of node-llama-cpp 3.21.1 (pinned exactly): the context's `_decodeTokens`,
// through which every sequence's decode passes. Without it the gate stands aside.

type DecodeTokens = (...args: unknown[]) => Promise<unknown>;

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

export class BatchGate {
  private active = 0;
  private held: Array<{ sequenceId: number; go: () => void; step: boolean }> = [];
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
  /** Smoothed time from letting a step through to its first result coming back. */
  private stepMs = 10;
  private readonly original: DecodeTokens | undefined;

  constructor(private readonly context: LlamaContext) {
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
          // Only a generation step (one token) is waited for while in flight. A prompt may span many
          // batches, and the others must keep decoding a token per batch beside it, not stall.
          const step = Array.isArray(item?.tokens) && item.tokens.length <= 1 ? 1 : 0;
          const arrived = typeof sequenceId === "number" && this.firstDecode.delete(sequenceId);
          this.held.push({
            sequenceId: typeof sequenceId === "number" ? sequenceId : Number.MAX_SAFE_INTEGER,
            step: step === 1,
            go: () => {
              const started = performance.now();
              this.inFlight += step;
              original.apply(context, args).then(
                (value) => {
                  this.inFlight -= step;
                  this.observe(performance.now() - started);
                  resolve(value);
                  // Those held for this one now wait only the usual hold for its next decode.
                  this.check();
                },
                (err: unknown) => {
                  this.inFlight -= step;
                  reject(err);
                  this.check();
                },
              );
            },
          });
          if (arrived) this.joined();
          else this.check();
        }),
    });
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
    this.letThrough();
  }

  private unpark(): void {
    if (this.parked) clearTimeout(this.parked);
    this.parked = undefined;
    this.letThrough();
  }

  private letThrough(): void {
    const held = this.held;
    this.held = [];
    held.sort((a, b) => a.sequenceId - b.sequenceId);
    for (const h of held) h.go();
    // A step of running sequences only is complete now, so its batch goes at once. Left to itself,
    // node-llama-cpp dispatches on the next event-loop turn (setImmediate) unless every sequence of
    // the context has queued: at one stream of eight that turn was 0.11 ms (median) between a
    // token's sampling and the next decode (docs/benchmarks.md); its scheduled dispatch then finds
    // the batch gone and does nothing. A step with a prompt in it keeps that turn: requests that
    // arrived together are read in it and take the context's lock for their cache before the
    // dispatch does, so their prompts join this decode instead of waiting for it (dispatched at once,
    // 32 simultaneous requests' first tokens came 40-90 ms later).
    if (held.length > 0 && held.every((h) => h.step)) this.context.dispatchPendingBatch?.();
  }

  private observe(ms: number): void {
    this.stepMs = this.stepMs * 0.8 + ms * 0.2;
  }
}
