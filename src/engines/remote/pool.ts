import { createHash } from "node:crypto";

/**
 * The replicas behind one remote model and the choice of which serves a request.
 *
 * - Balancing: `prefix` sends requests that share an affinity key (a prompt prefix within one
 *   isolation namespace) to the same replica through consistent hashing with bounded load: a key
 *   walks the ring from its hash to the first replica that is available and not loaded beyond
 *   `loadFactor` times the mean; when none qualifies it falls back to `least` (fewest outstanding
 *   requests). `round-robin` takes available replicas in turn.
 * - Health: `ejectAfter` consecutive failures eject a replica for `ejectMs` (doubling on each
 *   failed re-admission, up to MAX_EJECT_MS, or no less than the replica's own Retry-After); then it
 *   is half-open: one request decides whether it comes back. A passing active check makes an ejected
 *   replica half-open at once, and brings a half-open one back (the engine runs the checks, every
 *   `healthIntervalMs`); neither before the replica's own Retry-After has passed.
 * - Slots: a replica runs at most `slots` requests at once; a request waits here for a free slot
 *   (up to `waitLimitMs`), not in the replica's own queue, where the router's timeouts would count
 *   the wait as the replica's failure and a request could not move to whichever replica frees first.
 *   A replica's count may be learned from the replica after the pool is built (`setSlots`).
 */

export type Balance = "prefix" | "least" | "round-robin";

export interface PoolOptions {
  balance: Balance;
  slots: number;
  ejectAfter: number;
  ejectMs: number;
  loadFactor: number;
  /** How often active checks run (0: none): a passing one takes an ejected replica back before its time. */
  healthMs?: number;
}

/** The longest one ejection lasts, however often the replica failed its trials (unless `ejectMs` is longer). */
export const MAX_EJECT_MS = 60_000;

/** What a replica's failure may say of when to come back: an upstream's Retry-After, in seconds. */
export interface FailureCause {
  retryAfter?: number;
}

type State = "up" | "ejected" | "half-open";

export class Replica {
  outstanding = 0;
  state: State = "up";
  failures = 0;
  /** When an ejected replica may be tried again (ms since epoch). */
  retryAt = 0;
  /** Consecutive ejections, for the back-off of re-admission. */
  ejections = 0;
  /** The failure that ejected it last (for the answer when no replica is left; see NoReplica). */
  ejectedBy?: FailureCause;
  /** Until when the replica itself asked not to be sent requests (its Retry-After; ms since epoch). */
  notBefore = 0;
  /** Counters for metrics and tests. */
  served = 0;
  failed = 0;
  /** A half-open replica lets one trial request through. */
  trial = false;
  /** Whether the replica has told how many requests it runs, or that it does not say (see ReplicaPool.setSlots). */
  slotsAsked = false;
  /** When it may be asked again after it could not answer (ms since epoch). */
  slotsRetryAt = 0;

  constructor(
    readonly url: URL,
    public slots: number,
  ) {}

  get name(): string {
    return this.url.origin + this.url.pathname.replace(/\/$/, "");
  }
}

export interface Lease {
  replica: Replica;
  /** The request succeeded: clears the failure count, re-admits a half-open replica. */
  success(): void;
  /** The replica failed this request (not the client's fault): counts towards ejection. */
  failure(cause?: FailureCause): void;
  /** Gives the slot back (always call, after success or failure). */
  release(): void;
}

const VNODES = 64;

/** A request waiting for a replica slot. */
interface Waiter {
  key: string | undefined;
  exclude: ReadonlySet<Replica>;
  prefer?: Replica;
  atMost?: (r: Replica) => number;
  resolve: (lease: Lease) => void;
  reject: (err: unknown) => void;
}

export class ReplicaPool {
  readonly replicas: Replica[];
  private readonly ring: Array<{ point: number; replica: Replica }> = [];
  private next = 0;
  /** Requests waiting for a replica slot, served in arrival order (see `serve`). */
  private readonly queue: Waiter[] = [];
  /** Looks at the queue again now and then while it is not empty (an ejection's retry time passes without an event). */
  private poll?: NodeJS.Timeout;
  /** Told whenever what the replicas can run at once may have changed (see runningSlots). */
  private readonly listeners: Array<() => void> = [];

  /** Requests waiting in `acquire` for a replica slot. */
  get waitingCount(): number {
    return this.queue.length;
  }

  constructor(
    urls: URL[],
    private readonly opts: PoolOptions,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.replicas = urls.map((u) => new Replica(u, opts.slots));
    for (const r of this.replicas)
      for (let v = 0; v < VNODES; v++) this.ring.push({ point: hash32(`${r.name}#${v}`), replica: r });
    this.ring.sort((a, b) => a.point - b.point);
  }

  /** What the replicas run at once when all are up. */
  get totalSlots(): number {
    return this.replicas.reduce((s, r) => s + r.slots, 0);
  }

  /**
   * What the replicas can run at once now: an up replica its slots, one on (or due for) its trial
   * one, an ejected one none. When no replica can run anything, every replica's slots: requests
   * then meet the pool at once and are answered that no replica is left, rather than queueing for
   * a replica that will not come back soon.
   */
  get runningSlots(): number {
    const now = Date.now();
    let n = 0;
    for (const r of this.replicas) n += r.state === "up" ? r.slots : r.state === "half-open" || now >= r.retryAt ? 1 : 0;
    return n > 0 ? n : this.totalSlots;
  }

  /** Calls `listener` whenever `runningSlots` or `totalSlots` may have changed. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  private changed(): void {
    for (const l of this.listeners) l();
  }

  /** What the replica says it runs at once; waiters look again when it has more room than assumed. */
  setSlots(r: Replica, slots: number): void {
    const more = slots > r.slots;
    const same = slots === r.slots;
    r.slots = slots;
    if (more) this.wake();
    if (!same) this.changed();
  }

  /** A replica may take a request now: up (or half-open with no trial running) and with a free slot. */
  private available(r: Replica, now: number, atMost = r.slots): boolean {
    if (r.outstanding >= atMost) return false;
    if (r.state === "ejected" && now >= r.retryAt) {
      r.state = "half-open";
      r.trial = false;
      this.log(`plinth: upstream ${r.name} is half-open; trying one request`);
    }
    if (r.state === "half-open") return !r.trial;
    return r.state === "up";
  }

  /** Replicas that could ever serve now (not ejected, or due for a trial), slots aside. */
  private serviceable(now: number, exclude: ReadonlySet<Replica>): Replica[] {
    return this.replicas.filter((r) => !exclude.has(r) && (r.state !== "ejected" || now >= r.retryAt));
  }

  /**
   * The replica a request should go to, without taking it: undefined when none is available now.
   * `exclude` holds replicas this request already failed on.
   */
  choose(key: string | undefined, exclude: ReadonlySet<Replica> = new Set(), atMost?: (r: Replica) => number): Replica | undefined {
    const now = Date.now();
    const candidates = this.replicas.filter((r) => !exclude.has(r) && this.available(r, now, atMost?.(r)));
    if (candidates.length === 0) return undefined;
    if (this.opts.balance === "round-robin") {
      for (let i = 0; i < this.replicas.length; i++) {
        const r = this.replicas[(this.next + i) % this.replicas.length];
        if (candidates.includes(r)) {
          this.next = (this.next + i + 1) % this.replicas.length;
          return r;
        }
      }
    }
    if (this.opts.balance === "prefix" && key !== undefined) {
      const total = candidates.reduce((s, r) => s + r.outstanding, 0);
      const bound = Math.ceil((this.opts.loadFactor * (total + 1)) / candidates.length);
      const start = lowerBound(this.ring, hash32(key));
      for (let i = 0; i < this.ring.length; i++) {
        const r = this.ring[(start + i) % this.ring.length].replica;
        if (candidates.includes(r) && r.outstanding < bound) return r;
      }
    }
    return this.least(candidates);
  }

  private least(candidates: Replica[]): Replica {
    // Ties go round the pool, so idle replicas share sequential traffic.
    const offset = this.next++ % candidates.length;
    let best = candidates[offset];
    for (let i = 1; i < candidates.length; i++) {
      const r = candidates[(offset + i) % candidates.length];
      if (r.outstanding < best.outstanding) best = r;
    }
    return best;
  }

  /**
   * Takes a slot on the best replica, waiting while every serviceable replica is full. Rejects with
   * `NoReplica` when none can serve (all ejected, or all already tried by this request).
   */
  async acquire(
    key: string | undefined,
    exclude: ReadonlySet<Replica>,
    signal: AbortSignal,
    prefer?: Replica,
    waitLimitMs = 0,
    /** A replica's own limit for this request, when it is not the replica's slot count. */
    atMost?: (r: Replica) => number,
  ): Promise<Lease> {
    signal.throwIfAborted();
    const w: Waiter = { key, exclude, prefer, atMost, resolve: () => {}, reject: () => {} };
    // Nobody waiting: a free slot is taken at once. Else this request waits its turn behind them.
    if (this.queue.length === 0) {
      const r = this.pick(w, Date.now());
      if (r) return this.lease(r);
    }
    if (this.serviceable(Date.now(), exclude).length === 0) throw this.noReplica();
    return new Promise<Lease>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const leave = () => {
        const i = this.queue.indexOf(w);
        if (i >= 0) this.queue.splice(i, 1);
        signal.removeEventListener("abort", onAbort);
        clearTimeout(timer);
      };
      const onAbort = () => {
        leave();
        reject(signal.reason);
      };
      w.resolve = (lease) => {
        leave();
        resolve(lease);
      };
      w.reject = (err) => {
        leave();
        reject(err);
      };
      if (waitLimitMs > 0) timer = setTimeout(() => w.reject(new ReplicaWaitTimeout(waitLimitMs)), waitLimitMs);
      signal.addEventListener("abort", onAbort, { once: true });
      this.queue.push(w);
      if (!this.poll) {
        this.poll = setInterval(() => this.serve(), 250);
        this.poll.unref();
      }
      // Those ahead could not take what is free now; this one may (another replica, or one they
      // have already failed on).
      this.serve();
    });
  }

  /** The replica a waiter may take now: its preferred one if free, else the balancer's choice. */
  private pick(w: Waiter, now: number): Replica | undefined {
    const p = w.prefer;
    if (p && !w.exclude.has(p) && this.available(p, now, w.atMost?.(p))) return p;
    return this.choose(w.key, w.exclude, w.atMost);
  }

  /**
   * Hands free slots to waiters in arrival order: each in turn takes a replica that is free for it
   * (one it has not failed on), so a later request gets a slot before an earlier one only when no
   * replica free now can serve the earlier. A waiter whose every replica is gone gives up.
   */
  private serve(): void {
    const now = Date.now();
    for (const w of [...this.queue]) {
      const r = this.pick(w, now);
      if (r) w.resolve(this.lease(r));
      else if (this.serviceable(now, w.exclude).length === 0) w.reject(this.noReplica());
    }
    if (this.queue.length === 0 && this.poll) {
      clearInterval(this.poll);
      this.poll = undefined;
    }
  }

  /**
   * A replica for a small auxiliary call (a token count, a template render), without a slot: such a
   * call is part of a request that may already hold the only slot there is (a half-open replica's
   * one trial), so waiting for a slot of its own could wait on itself for ever. `prefer` if it can
   * serve at all, else the least loaded replica that is up (or due for its trial).
   */
  peek(exclude: ReadonlySet<Replica>, prefer?: Replica): Lease | undefined {
    const now = Date.now();
    const serviceable = this.serviceable(now, exclude);
    const r = prefer && serviceable.includes(prefer) ? prefer : serviceable.length > 0 ? this.least(serviceable) : undefined;
    if (!r) return undefined;
    return { replica: r, success: () => {}, failure: (cause) => this.recordFailure(r, cause), release: () => {} };
  }

  /** A slot on the best replica if one is free now; never waits. */
  tryAcquire(key: string | undefined, exclude: ReadonlySet<Replica>, prefer?: Replica): Lease | undefined {
    // Requests already waiting go first.
    if (this.queue.length > 0) return undefined;
    const r = this.pick({ key, exclude, prefer, resolve: () => {}, reject: () => {} }, Date.now());
    return r ? this.lease(r) : undefined;
  }

  private lease(r: Replica): Lease {
    r.outstanding++;
    // Only the half-open replica's one trial decides whether it comes back. A request that was
    // already running when the replica was ejected says nothing about it now: its success re-admitted
    // the replica at once, and its release let a second trial in beside the first.
    const trial = r.state === "half-open";
    if (trial) r.trial = true;
    let released = false;
    return {
      replica: r,
      success: () => {
        r.served++;
        if (r.state === "up") r.failures = 0;
        else if (trial && r.state === "half-open") {
          this.log(`plinth: upstream ${r.name} is back`);
          this.readmit(r);
        }
      },
      failure: (cause) => this.recordFailure(r, cause),
      release: () => {
        if (released) return;
        released = true;
        r.outstanding--;
        if (trial && r.state === "half-open") r.trial = false;
        this.wake();
      },
    };
  }

  recordFailure(r: Replica, cause?: FailureCause): void {
    const now = Date.now();
    r.failed++;
    r.failures++;
    // The replica said when to come back (a 429's or 503's Retry-After): not before then.
    if (cause?.retryAfter !== undefined) r.notBefore = Math.max(r.notBefore, now + cause.retryAfter * 1000);
    if (r.state === "half-open" || (r.state === "up" && r.failures >= this.opts.ejectAfter)) {
      r.ejections = Math.min(r.ejections + 1, 16);
      r.state = "ejected";
      r.ejectedBy = cause;
      // Doubling on each failed trial, but never past MAX_EJECT_MS (2^15 × 5 s was 45 hours).
      const backoff = Math.min(this.opts.ejectMs * 2 ** (r.ejections - 1), Math.max(this.opts.ejectMs, MAX_EJECT_MS));
      r.retryAt = Math.max(now + backoff, r.notBefore);
      this.log(`plinth: upstream ${r.name} ejected after ${r.failures} failures; retried in ${r.retryAt - now} ms`);
      // Waiters that hoped for this replica must look again (or give up).
      this.wake();
      this.changed();
      setTimeout(() => {
        this.wake();
        this.changed();
      }, r.retryAt - now + 1).unref();
    }
  }

  /**
   * An active check passed: an up replica's failure count resets; an ejected one is half-open at
   * once (its next request is the trial), whatever its back-off; a half-open one (or one whose
   * ejection time is over) is back. Not before the replica's own Retry-After has passed: a replica
   * that answered 429 is usually healthy by its /health all along.
   */
  recordHealthy(r: Replica): void {
    const now = Date.now();
    if (r.state === "up") r.failures = 0;
    else if (now < r.notBefore) return;
    else if (r.state === "ejected" && now < r.retryAt) {
      this.log(`plinth: upstream ${r.name} passed its health check; trying one request`);
      r.state = "half-open";
      r.trial = false;
      this.wake();
      this.changed();
    } else {
      this.log(`plinth: upstream ${r.name} passed its health check and is back`);
      this.readmit(r);
    }
  }

  private readmit(r: Replica): void {
    r.state = "up";
    r.failures = 0;
    r.trial = false;
    r.ejections = 0;
    r.ejectedBy = undefined;
    this.wake();
    this.changed();
  }

  /**
   * No replica can take the request: with when one may again, as near as the pool knows (the
   * soonest an ejected replica is due, or may pass an active check that takes it back), and what
   * ejected that one.
   */
  noReplica(): NoReplica {
    const now = Date.now();
    let soonest: Replica | undefined;
    let at = Infinity;
    for (const r of this.replicas) {
      if (r.state !== "ejected") continue;
      const healthMs = this.opts.healthMs ?? 0;
      const due = healthMs > 0 ? Math.min(r.retryAt, Math.max(r.notBefore, now + healthMs)) : r.retryAt;
      if (due < at) {
        at = due;
        soonest = r;
      }
    }
    return new NoReplica(soonest ? Math.max(0, at - now) : undefined, soonest?.ejectedBy);
  }

  private wake(): void {
    if (this.queue.length > 0) this.serve();
  }
}

/** A request waited longer than the queue timeout for a free replica slot. */
export class ReplicaWaitTimeout extends Error {
  constructor(readonly waitedMs: number) {
    super(`waited ${waitedMs} ms for a replica slot`);
  }
}

/** Every replica of the model is ejected (or was already tried by this request). */
export class NoReplica extends Error {
  constructor(
    /** When an ejected replica may take requests again, in ms from now (none ejected: undefined). */
    readonly retryInMs?: number,
    /** The failure that ejected that replica. */
    readonly ejectedBy?: FailureCause,
  ) {
    super("no replica of this model is available");
  }
}

export function hash32(text: string): number {
  return createHash("sha1").update(text).digest().readUInt32BE(0);
}

function lowerBound(ring: Array<{ point: number }>, point: number): number {
  let lo = 0;
  let hi = ring.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ring[mid].point < point) lo = mid + 1;
    else hi = mid;
  }
  return lo % ring.length;
}
