import { ApiError, invalidField } from "./errors.ts";

/**
 * Hands out a fixed number of slots (one per engine sequence) to jobs in arrival order.
 *
 * Admission is decided for a whole request up front (all of its `n` choices), so a request is either
 * accepted entirely or refused with 429 before anything is sent to the client; an accepted job is
 * never dropped later. Jobs that are waiting leave the queue as soon as their client goes away.
 */
export class Scheduler {
  private readonly free: number[];
  private readonly waiting: Array<{ grant: (slot: number) => void }> = [];
  private reserved = 0;

  constructor(
    readonly slots: number,
    readonly maxQueue: number,
  ) {
    this.free = Array.from({ length: slots }, (_, i) => i);
  }

  get busy(): number {
    return this.slots - this.free.length;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /** The most jobs one request can ever have admitted: every slot busy with it and a full queue. */
  get capacity(): number {
    return this.slots + this.maxQueue;
  }

  /**
   * Reserves room for `jobs` jobs that will call acquire() right away. Throws 429 when they would push
   * the wait queue past its bound, and a 400 about `field` (a canonical field: what made the request
   * this large) when they could never be admitted, even with every slot free and the queue empty:
   * retrying such a request is pointless.
   */
  admit(jobs: number, field = "n"): void {
    if (jobs > this.capacity) {
      throw invalidField(
        `{field} asks for ${jobs} generations at once, but this model runs at most ${this.slots} at a time ` +
          `with ${this.maxQueue} more waiting, so the request could never be admitted; ask for at most ${this.capacity}.`,
        field,
        "too_many_choices",
      );
    }
    const wouldWait = Math.max(0, this.waiting.length + this.reserved + jobs - this.free.length);
    if (wouldWait > this.maxQueue) {
      throw new ApiError(429, "The server is at capacity and its queue is full; retry shortly.", {
        code: "rate_limit_exceeded",
        headers: { "retry-after": "1" },
      });
    }
    this.reserved += jobs;
  }

  /**
   * Waits for a slot. `choose` may pick among several free slots (e.g. the one whose cached state
   * suits the request best); a queued job takes the slot that frees up. `release` gives the slot
   * back; calling it twice is harmless.
   */
  async acquire(
    signal: AbortSignal,
    choose?: (free: readonly number[]) => number,
  ): Promise<{ slot: number; release: () => void }> {
    if (this.reserved > 0) this.reserved--;
    signal.throwIfAborted();
    let slot: number;
    if (this.free.length > 0 && this.waiting.length === 0) {
      const picked = choose ? choose(this.free) : this.free[0];
      const at = this.free.indexOf(picked);
      slot = this.free.splice(at === -1 ? 0 : at, 1)[0];
    } else {
      slot = await this.enqueue(signal);
    }
    let released = false;
    return {
      slot,
      release: () => {
        if (released) return;
        released = true;
        this.release(slot);
      },
    };
  }

  private enqueue(signal: AbortSignal): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const entry = {
        grant: (slot: number) => {
          signal.removeEventListener("abort", onAbort);
          resolve(slot);
        },
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(entry);
        if (i !== -1) this.waiting.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  private release(slot: number): void {
    const next = this.waiting.shift();
    if (next) next.grant(slot);
    else this.free.push(slot);
  }
}
