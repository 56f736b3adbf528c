import { setImmediate as nextTurn } from "node:timers/promises";

/**
 * Hands the thread back to the event loop now and then while reading an upstream's stream. Reading
 * data that is already buffered never goes through the event loop (each read resolves as a
 * microtask), so an upstream that sends faster than the router handles it (millions of tiny events,
 * one event fanning out into 100,000 tool calls) would otherwise hold the thread for seconds: every
 * other request, /health and the local models' streams with it.
 */
export class TimeSlice {
  private since = performance.now();

  constructor(
    /** The longest stretch, in ms, that one stream keeps the thread. */
    private readonly ms = 10,
  ) {}

  /** Resolves at once while the slice lasts; after it, on the event loop's next turn. */
  async breathe(): Promise<void> {
    const now = performance.now();
    if (now - this.since < this.ms) return;
    await nextTurn();
    this.since = performance.now();
  }
}
