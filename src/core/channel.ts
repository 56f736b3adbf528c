/**
 * A minimal multi-producer, single-consumer async queue: several choices generate concurrently and
 * one renderer reads their events in arrival order.
 *
 * Producers that can outrun the consumer (a remote upstream streams far faster than a slow client
 * reads) wait for `room` once `full`, so what is buffered stays bounded instead of growing with
 * everything the upstream sent.
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

  constructor(
    /** Items buffered at which producers should wait for `room`. */
    private readonly limit = 1024,
  ) {}

  /** Items pushed and not yet taken. */
  get size(): number {
    return this.items.length - this.head;
  }

  /** Whether a producer should wait for `room` before pushing more. */
  get full(): boolean {
    return this.size >= this.limit && !this.closed && !this.detached;
  }

  push(item: T): void {
    if (this.closed || this.detached) return;
    this.items.push(item);
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
   * Resolves once the consumer has taken enough that the buffer is below half its limit, the
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
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    if (this.roomWaiters.length > 0 && this.size < this.limit / 2) this.wakeProducers();
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
      this.wakeProducers();
    }
  }
}
