import { ApiError, invalidField } from "./errors.ts";

/**
 * Hands out a fixed number of slots (one per engine sequence) to jobs. Waiting jobs are served
 * fairly by key (the request's namespace: its end user, later its API key): keys take turns, and
 * within a key jobs keep their arrival order, so one user's burst of fifty requests does not put
 * another user's single request behind all fifty.
 *
 * Admission is decided for a whole request up front (all of its `n` choices), so a request is either
 * accepted entirely or refused with 429 before anything is sent to the client; an accepted job is
 * never dropped later. Jobs that are waiting leave the queue as soon as their client goes away.
 */
export class Scheduler {
  private readonly free: number[];
  /** Waiting jobs per key, each queue in arrival order; `turns` is the order keys are served in. */
  private readonly waiting = new Map<string, Array<{ grant: (slot: number) => void }>>();
  private readonly turns: string[] = [];
  private waitingCount = 0;
  private reserved = 0;

  constructor(
    readonly slots: number,
    readonly maxQueue: number,
    /** Longest a job may wait for a slot before it is refused (503, reason "overloaded"); 0: no limit. */
    readonly queueTimeoutMs = 0,
  ) {
    this.free = Array.from({ length: slots }, (_, i) => i);
  }

  /** Whether a slot is handed out right now. */
  isBusy(slot: number): boolean {
    return !this.free.includes(slot);
  }

  get busy(): number {
    return this.slots - this.free.length;
  }

  get queued(): number {
    return this.waitingCount;
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
    const wouldWait = Math.max(0, this.waitingCount + this.reserved + jobs - this.free.length);
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
    key = "",
    /** Called when the job has to queue, before it waits. */
    onWait?: () => void,
  ): Promise<{ slot: number; release: () => void }> {
    if (this.reserved > 0) this.reserved--;
    signal.throwIfAborted();
    let slot: number;
    if (this.free.length > 0 && this.waitingCount === 0) {
      const picked = choose ? choose(this.free) : this.free[0];
      const at = this.free.indexOf(picked);
      slot = this.free.splice(at === -1 ? 0 : at, 1)[0];
    } else {
      onWait?.();
      slot = await this.enqueue(signal, key);
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

  private enqueue(signal: AbortSignal, key: string): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const entry = {
        grant: (slot: number) => {
          signal.removeEventListener("abort", onAbort);
          clearTimeout(timer);
          resolve(slot);
        },
      };
      const leave = () => {
        const queue = this.waiting.get(key);
        const i = queue ? queue.indexOf(entry) : -1;
        if (i !== -1) {
          queue!.splice(i, 1);
          this.waitingCount--;
          if (queue!.length === 0) this.dropKey(key);
        }
      };
      const onAbort = () => {
        clearTimeout(timer);
        leave();
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      if (this.queueTimeoutMs > 0) {
        timer = setTimeout(() => {
          signal.removeEventListener("abort", onAbort);
          leave();
          reject(queueTimeout(this.queueTimeoutMs));
        }, this.queueTimeoutMs);
        timer.unref();
      }
      let queue = this.waiting.get(key);
      if (!queue) {
        queue = [];
        this.waiting.set(key, queue);
        this.turns.push(key);
      }
      queue.push(entry);
      this.waitingCount++;
    });
  }

  private dropKey(key: string): void {
    this.waiting.delete(key);
    const at = this.turns.indexOf(key);
    if (at !== -1) this.turns.splice(at, 1);
  }

  /** A freed slot goes to the next key in turn (which then moves to the back), else back to the pool. */
  private release(slot: number): void {
    const key = this.turns.shift();
    if (key === undefined) {
      this.free.push(slot);
      return;
    }
    const queue = this.waiting.get(key)!;
    const next = queue.shift()!;
    this.waitingCount--;
    if (queue.length > 0) this.turns.push(key);
    else this.waiting.delete(key);
    next.grant(slot);
  }
}

/**
 * A job that waited past the queue limit: the server lacks the capacity to serve it in time. Dialects
 * with a finish reason for this (SpAk's insufficient_system_resource) map `reason`; others answer 503.
 */
function queueTimeout(ms: number): ApiError {
  return new ApiError(503, `The request waited ${ms / 1000} s for a free sequence, longer than this server allows; retry later.`, {
    code: "queue_timeout",
    reason: "overloaded",
    headers: { "retry-after": "1" },
  });
}
