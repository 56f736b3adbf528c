/**
 * A minimal multi-producer, single-consumer async queue: several choices generate concurrently and
 * one renderer reads their events in arrival order.
 *
 * Producers that can outrun the consumer (an engine generates faster than a slow client reads, or
 * a client stops reading altogether) wait for `room` once `full`, so what is buffered stays bounded
 * instead of growing with everything generated. The bound is on items and, with `weigh`, on their
 * estimated size too: one event with 20 top logprobs weighs as much as dozens of plain text deltas.
 */
export class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  /** The next item to hand out: taken by index, since `shift()` on a long array copies all of it. */
  private head = 0;
  private waiter: (() => void) | null = null;
  private roomWaiters: Array<() => void> = [];
  private closed = false;
  /** The consumer stopped reading (it returned early): nobody will take what is pushed. */
  private detached = false;
  private failure: unknown = undefined;
  /** Estimated size of the items pushed and not yet taken (0 without `weigh`). */
  private weight = 0;

  constructor(
    /** Items buffered at which producers should wait for `room`. */
    private readonly limit = 1024,
    /** Buffered weight (see `weigh`) at which producers should wait for `room`. */
    private readonly weightLimit = Number.POSITIVE_INFINITY,
    /** An item's estimated size; must give the same answer for an item each time it is asked. */
    private readonly weigh?: (item: T) => number,
  ) {}

  /** Items pushed and not yet taken. */
  get size(): number {
    return this.items.length - this.head;
  }

  /** Estimated size of the items pushed and not yet taken. */
  get bytes(): number {
    return this.weight;
  }

  /** Nothing more will come out: the consumer left, or it took everything of a closed channel. */
  get finished(): boolean {
    return this.detached || (this.closed && this.size === 0);
  }

  /** Whether a producer should wait for `room` before pushing more. */
  get full(): boolean {
    return (this.size >= this.limit || this.weight >= this.weightLimit) && !this.closed && !this.detached;
  }

  push(item: T): void {
    if (this.closed || this.detached) return;
    this.items.push(item);
    if (this.weigh) this.weight += this.weigh(item);
    this.wake();
  }

  close(error?: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.failure = error;
    this.wake();
    this.wakeProducers();
  }

  /**
   * Resolves once the consumer has taken enough that the buffer is below half its limits, the
   * channel is closed or its consumer gone, or `signal` aborts (the producer checks it itself).
   */
  room(signal: AbortSignal): Promise<void> {
    if (!this.full || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        const i = this.roomWaiters.indexOf(done);
        if (i >= 0) this.roomWaiters.splice(i, 1);
        resolve();
      };
      this.roomWaiters.push(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  private wakeProducers(): void {
    for (const w of this.roomWaiters.splice(0)) w();
  }

  private take(): T {
    const item = this.items[this.head];
    this.items[this.head++] = undefined as T;
    if (this.weigh) this.weight -= this.weigh(item);
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
      this.weight = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    if (this.roomWaiters.length > 0 && this.size < this.limit / 2 && this.weight < this.weightLimit / 2) this.wakeProducers();
    return item;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      while (true) {
        if (this.size > 0) {
          yield this.take();
          continue;
        }
        if (this.closed) {
          if (this.failure !== undefined) throw this.failure;
          return;
        }
        await new Promise<void>((resolve) => (this.waiter = resolve));
      }
    } finally {
      // However the consumer left (done, an error, or it stopped reading), producers must not wait
      // on it again, and what they still push is dropped rather than kept for nobody.
      this.detached = true;
      this.items = [];
      this.head = 0;
      this.weight = 0;
      this.wakeProducers();
    }
  }
}
