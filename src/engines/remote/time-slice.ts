import { setImmediate as nextTurn } from "node:timers/promises";

/**
 * When the thread last came back from the event loop, as far as the remote streams know: set by
 * `TimeSlice.wokeFromLoop` (a read that had to wait for the socket) and after each yield below. How
 * long the thread has been held is a property of the thread, not of one stream, so it is shared.
 */
let heldSince = performance.now();

/**
 * Hands the thread back to the event loop now and then while reading an upstream's stream. Reading
 * data that is already buffered never goes through the event loop (each read resolves as a
 * microtask), so an upstream that sends faster than the router handles it (millions of tiny events,
 * one event fanning out into 100,000 tool calls) would otherwise hold the thread for seconds: every
 * other request, /health and the local models' streams with it.
 *
 * The slice is counted from the thread's last return from the event loop, not from the stream's
 * start: a stream whose events arrive one socket read at a time (every token of a live stream) gives
 * the thread back while it waits for each, so it never needs an extra turn. Counting from the
 * stream's start made every event after its first 10 ms wait a turn of the loop (three per token
 * through the router's two slices: about a tenth of the router's CPU per token, issue 17).
 */
export class TimeSlice {
  constructor(
    /** The longest stretch, in ms, that the streams keep the thread. */
    private readonly ms = 10,
  ) {}

  /** The thread has just come back from the event loop (a read resolved by a socket event). */
  static wokeFromLoop(): void {
    heldSince = performance.now();
  }

  /** Resolves at once while the slice lasts; after it, on the event loop's next turn. */
  async breathe(): Promise<void> {
    if (performance.now() - heldSince < this.ms) return;
    await nextTurn();
    heldSince = performance.now();
  }
}
