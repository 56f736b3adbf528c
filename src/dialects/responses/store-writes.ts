// Writing a stored response's run to a store that may refuse for a while (a full disk, an I/O
// error, a lock held by another process): what the run has to store is kept in memory and written
// again, in order, once the store takes writes again, for a bounded time.

import { toApiError } from "../../http/to-api-error.ts";
import type { StoredEvent } from "../../store/store.ts";

/** How a write that the store refused is tried again. */
export interface StoreRetryPolicy {
  /** The wait after the first failure; each later one doubles it, up to `maxDelayMs`. */
  firstDelayMs: number;
  maxDelayMs: number;
  /**
   * How long a finished run keeps trying to store its end before it gives up. Until then it holds
   * its events in memory and keeps its conversation; after it, the store keeps what it had, and
   * the next start marks a response left `in_progress` failed.
   */
  giveUpAfterMs: number;
}

export const STORE_RETRY: StoreRetryPolicy = { firstDelayMs: 250, maxDelayMs: 5_000, giveUpAfterMs: 5 * 60_000 };

/** Whether waiting may cure a store's failure (see toApiError's `store_unavailable`): only those are tried again. */
export function isStoreUnavailable(err: unknown): boolean {
  return toApiError(err).code === "store_unavailable";
}

const message = (err: unknown) => (err as Error)?.message ?? String(err);

/**
 * What one response's writes say to the operator: one warning when they start failing, one when
 * they go through again or are given up. A run writes its events every 100 ms; a full disk made
 * that a stack trace each time (hundreds for one response).
 */
export class StoreTrouble {
  #failing = false;

  constructor(private readonly id: string) {}

  failed(err: unknown): void {
    if (this.#failing) return;
    this.#failing = true;
    process.emitWarning(`storing response ${this.id} failed (${message(err)}); what it has not stored is kept in memory and written again when the store takes writes`);
  }

  written(): void {
    if (!this.#failing) return;
    this.#failing = false;
    process.emitWarning(`response ${this.id} is stored after all`);
  }

  gaveUp(err: unknown): void {
    this.#failing = false;
    process.emitWarning(
      `storing the end of response ${this.id} was given up (${message(err)}); the store keeps what it last took (a response left unfinished there is marked failed at the next start)`,
    );
  }
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });

/**
 * Calls `write` until it succeeds. A failure that waiting may cure is tried again after a wait that
 * doubles each time, until `policy.giveUpAfterMs` has passed; once `stop` is aborted, one more try
 * is made and no other. Any other failure ends it at once. Resolves to undefined once written, or
 * to the last failure.
 */
export async function writeWithRetry(
  write: () => Promise<void>,
  policy: StoreRetryPolicy,
  stop: AbortSignal,
  trouble: StoreTrouble,
): Promise<unknown> {
  const deadline = Date.now() + policy.giveUpAfterMs;
  let delay = policy.firstDelayMs;
  for (;;) {
    const stopped = stop.aborted;
    try {
      await write();
      trouble.written();
      return undefined;
    } catch (err) {
      if (!isStoreUnavailable(err) || stopped || Date.now() + delay > deadline) return err;
      trouble.failed(err);
    }
    await sleep(delay, stop);
    delay = Math.min(delay * 2, policy.maxDelayMs);
  }
}

/**
 * A background run's stream events on their way to the store: written in batches (one transaction
 * each, not one write per token), in order, and never dropped. A batch the store refused goes back
 * in front of the events that came since and is written with them once the wait after the failure
 * has passed, so the stored stream has no gap.
 */
export class EventWriter {
  #pending: StoredEvent[] = [];
  #writing: Promise<void> | undefined;
  #retryAt = 0;
  #delay: number;
  #failure: unknown;

  constructor(
    private readonly append: (events: StoredEvent[]) => Promise<unknown>,
    private readonly policy: StoreRetryPolicy,
    private readonly trouble: StoreTrouble,
  ) {
    this.#delay = policy.firstDelayMs;
  }

  push(event: StoredEvent): void {
    this.#pending.push(event);
  }

  /**
   * Writes what waits, unless a write is under way (then it waits for that one) or the wait after a
   * failed write has not passed. Never rejects: a failure is kept for `drain` and said once.
   */
  flush(): Promise<void> {
    if (this.#writing) return this.#writing;
    if (this.#pending.length === 0 || Date.now() < this.#retryAt) return Promise.resolve();
    const batch = this.#pending;
    this.#pending = [];
    this.#writing = this.append(batch).then(
      () => {
        this.#writing = undefined;
        this.#failure = undefined;
        this.#retryAt = 0;
        this.#delay = this.policy.firstDelayMs;
      },
      (err: unknown) => {
        this.#writing = undefined;
        this.#pending = batch.concat(this.#pending);
        this.#failure = err;
        this.#retryAt = Date.now() + this.#delay;
        this.#delay = Math.min(this.#delay * 2, this.policy.maxDelayMs);
        this.trouble.failed(err);
      },
    );
    return this.#writing;
  }

  /** Writes every event that waits, now; rejects with the store's failure if it refuses (for writeWithRetry). */
  async writeAll(): Promise<void> {
    await this.#writing;
    this.#retryAt = 0;
    await this.flush();
    if (this.#pending.length > 0) throw this.#failure;
  }
}
