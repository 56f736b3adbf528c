import { ApiError, invalidField } from "./errors.ts";

/**
 * Hands out a fixed number of slots (one per engine sequence) to jobs. Waiting jobs are served
 * fairly by key (the request's namespace: its end user, later its API key), then by group (the
 * request) within a key: keys take turns, a key's requests take turns, and a request's own jobs keep
 * their arrival order. So one user's burst of fifty requests does not put another user's single
 * request behind all fifty, and one request's sixty choices (n = 60) do not put the next request
 * behind all sixty.
 *
 * Admission is decided for a whole request up front (all of its `n` choices), so a request is either
 * accepted entirely or refused with 429 before anything is sent to the client; an accepted job is
 * never dropped later. Jobs that are waiting leave the queue as soon as their client goes away.
 */
export class Scheduler {
  private readonly free: number[];
  /** Waiting jobs per key, per group within it; `turns` is the order keys are served in. */
  private readonly waiting = new Map<string, KeyQueue>();
  private readonly turns: string[] = [];
  private waitingCount = 0;
  private reserved = 0;
  /**
   * Slots each group (request) holds now. A job whose request already holds one is being served:
   * it waits behind its own siblings (n > 1, a Completions batch) without the queue timeout, which
   * is for requests the server has no room for. With `--parallel 1`, the third of three choices
   * otherwise timed out behind the first two on an idle server, every time it was retried.
   */
  private readonly serving = new Map<string, number>();
  /** Slots handed out now (more than `slots` for a while after the engine's capacity shrank). */
  private inUse = 0;
  /** The number the next slot added by `resize` gets (slot numbers are never reused while held). */
  private nextSlot: number;
  private running: number;
  private nominal: number;

  constructor(
    slots: number,
    readonly maxQueue: number,
    /** Longest a job may wait for a slot before it is refused (503, reason "overloaded"); 0: no limit. */
    readonly queueTimeoutMs = 0,
  ) {
    this.free = Array.from({ length: slots }, (_, i) => i);
    this.nextSlot = slots;
    this.running = slots;
    this.nominal = slots;
  }

  /** Jobs that may run at once now. */
  get slots(): number {
    return this.running;
  }

  /**
   * The engine's capacity changed while it runs (a remote model's replicas told their slot counts,
   * or were ejected or taken back): `running` jobs may run at once from now on, and `nominal` is what
   * it runs when all is well, which caps one request's jobs (see `capacity`), so that a replica out
   * for a while does not turn a request that fits into a 400. New slots go to waiting jobs in their
   * turn at once; jobs running past a smaller count finish, and their slots are not handed out again.
   */
  resize(running: number, nominal = running): void {
    this.running = Math.max(0, Math.floor(running));
    this.nominal = Math.max(0, Math.floor(nominal));
    while (this.free.length > 0 && this.inUse + this.free.length > this.running) this.free.pop();
    while (this.inUse + this.free.length < this.running) this.give(this.nextSlot++);
  }

  /** Whether a slot is handed out right now. */
  isBusy(slot: number): boolean {
    return !this.free.includes(slot);
  }

  get busy(): number {
    return this.inUse;
  }

  get queued(): number {
    return this.waitingCount;
  }

  /**
   * The most jobs one request may have admitted: every slot, and half the queue. One request with
   * `n` (or a batch) as large as slots and the whole queue locked every other client out with 429s
   * for as long as it ran; half leaves the rest of the queue to them.
   */
  get capacity(): number {
    return this.nominal + Math.floor(this.maxQueue / 2);
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
        `{field} asks for ${jobs} generations at once, but one request may have at most ${this.capacity} on this model ` +
          `(the ${this.nominal} it runs at a time and half of its queue of ${this.maxQueue}); ask for at most ${this.capacity}.`,
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

  /** Gives back room `admit` reserved for jobs that will not call acquire() after all. */
  withdraw(jobs: number): void {
    this.reserved = Math.max(0, this.reserved - jobs);
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
    /** The job's group within its key (its request): groups of a key take turns. */
    group = "",
  ): Promise<{ slot: number; release: () => void }> {
    if (this.reserved > 0) this.reserved--;
    signal.throwIfAborted();
    let slot: number;
    if (this.free.length > 0 && this.waitingCount === 0) {
      const picked = choose ? choose(this.free) : this.free[0];
      const at = this.free.indexOf(picked);
      slot = this.free.splice(at === -1 ? 0 : at, 1)[0];
      this.inUse++;
      this.startServing(key, group);
    } else {
      onWait?.();
      slot = await this.enqueue(signal, key, group);
    }
    return this.held(slot, group);
  }

  /**
   * A slot for one of the jobs `admit` reserved, only if it is free now and nobody waits for one
   * (as `acquire` would hand it out at once); undefined otherwise, and the job still calls `acquire`.
   * For work that should start only once its slot is certain (a remote request opened upstream).
   */
  tryAcquire(key = "", group = ""): { slot: number; release: () => void } | undefined {
    if (this.free.length === 0 || this.waitingCount > 0) return undefined;
    if (this.reserved > 0) this.reserved--;
    const slot = this.free.shift()!;
    this.inUse++;
    this.startServing(key, group);
    return this.held(slot, group);
  }

  private held(slot: number, group: string): { slot: number; release: () => void } {
    let released = false;
    return {
      slot,
      release: () => {
        if (released) return;
        released = true;
        this.stopServing(group);
        this.release(slot);
      },
    };
  }

  /** Notes a slot taken by `group`, and lets its waiting siblings wait without the queue timeout. */
  private startServing(key: string, group: string): void {
    if (group === "") return;
    this.serving.set(group, (this.serving.get(group) ?? 0) + 1);
    for (const entry of this.waiting.get(key)?.groups.get(group) ?? []) entry.served();
  }

  private stopServing(group: string): void {
    if (group === "") return;
    const n = (this.serving.get(group) ?? 1) - 1;
    if (n > 0) this.serving.set(group, n);
    else this.serving.delete(group);
  }

  private enqueue(signal: AbortSignal, key: string, group: string): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const entry: Entry = {
        grant: (slot: number) => {
          signal.removeEventListener("abort", onAbort);
          clearTimeout(timer);
          this.startServing(key, group);
          resolve(slot);
        },
        served: () => clearTimeout(timer),
      };
      const leave = () => {
        const kq = this.waiting.get(key);
        const queue = kq?.groups.get(group);
        const i = queue ? queue.indexOf(entry) : -1;
        if (i === -1) return;
        queue!.splice(i, 1);
        this.waitingCount--;
        if (queue!.length === 0) {
          kq!.groups.delete(group);
          kq!.order.splice(kq!.order.indexOf(group), 1);
        }
        if (kq!.order.length === 0) this.dropKey(key);
      };
      const onAbort = () => {
        clearTimeout(timer);
        leave();
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      if (this.queueTimeoutMs > 0 && !this.serving.has(group)) {
        timer = setTimeout(() => {
          signal.removeEventListener("abort", onAbort);
          leave();
          reject(queueTimeout(this.queueTimeoutMs));
        }, this.queueTimeoutMs);
        timer.unref();
      }
      let kq = this.waiting.get(key);
      if (!kq) {
        kq = { groups: new Map(), order: [] };
        this.waiting.set(key, kq);
        this.turns.push(key);
      }
      let queue = kq.groups.get(group);
      if (!queue) {
        queue = [];
        kq.groups.set(group, queue);
        kq.order.push(group);
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

  /** A job is done with its slot: it is handed on (see `give`) unless the capacity shrank below it. */
  private release(slot: number): void {
    this.inUse--;
    // Past a capacity that shrank while it ran: the slot goes.
    if (this.inUse + this.free.length >= this.running) return;
    this.give(slot);
  }

  /**
   * A free slot goes to the next key in turn, to the next group in that key's turn, to that group's
   * oldest job; the key and the group move to the back of their turns. No one waiting: back to the pool.
   */
  private give(slot: number): void {
    const key = this.turns.shift();
    if (key === undefined) {
      this.free.push(slot);
      return;
    }
    const kq = this.waiting.get(key)!;
    const group = kq.order.shift()!;
    const queue = kq.groups.get(group)!;
    const next = queue.shift()!;
    this.waitingCount--;
    if (queue.length > 0) kq.order.push(group);
    else kq.groups.delete(group);
    if (kq.order.length > 0) this.turns.push(key);
    else this.waiting.delete(key);
    this.inUse++;
    next.grant(slot);
  }
}

interface Entry {
  grant: (slot: number) => void;
  /** Its request got a slot for another job: it waits on without the queue timeout. */
  served: () => void;
}

/** One key's waiting jobs: a queue per group, and the order the groups are served in. */
interface KeyQueue {
  groups: Map<string, Entry[]>;
  order: string[];
}

/**
 * A job that waited past the queue limit: the server lacks the capacity to serve it in time. Dialects
 * with a finish reason for this (SpAk's insufficient_system_resource) map `reason`; others answer 503.
 */
export function queueTimeout(ms: number): ApiError {
  return new ApiError(503, `The request waited ${ms / 1000} s for a free sequence, longer than this server allows; retry later.`, {
    code: "queue_timeout",
    reason: "overloaded",
    headers: { "retry-after": "1" },
  });
}
