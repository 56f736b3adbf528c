/**
 * Cuts generated text at the first stop string, even when the stop string arrives split over several
 * tokens. Text that could still turn out to be the start of a stop string is held back, so a stream
 * never shows a client any part of a stop string.
 */
export class StopMatcher {
  private readonly stops: string[];
  private readonly longest: number;
  private pending = "";
  private stopped = false;

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
    this.longest = this.stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  get hasStopped(): boolean {
    return this.stopped;
  }

  /** Characters held back because they might start a stop string. */
  get heldLength(): number {
    return this.pending.length;
  }

  /** Feed new text; returns what is safe to emit and whether a stop string was hit. */
  push(text: string): { emit: string; stopped: boolean } {
    if (this.stopped) return { emit: "", stopped: true };
    if (this.stops.length === 0) return { emit: text, stopped: false };
    this.pending += text;

    let cut = -1;
    for (const stop of this.stops) {
      const at = this.pending.indexOf(stop);
      if (at !== -1 && (cut === -1 || at < cut)) cut = at;
    }
    if (cut !== -1) {
      this.stopped = true;
      const emit = this.pending.slice(0, cut);
      this.pending = "";
      return { emit, stopped: true };
    }

    const hold = this.partialSuffixLength();
    const emit = this.pending.slice(0, this.pending.length - hold);
    this.pending = this.pending.slice(this.pending.length - hold);
    return { emit, stopped: false };
  }

  /** Generation ended without a stop string: whatever was held back is real output. */
  flush(): string {
    const rest = this.stopped ? "" : this.pending;
    this.pending = "";
    return rest;
  }

  /** Length of the longest suffix of pending text that is a proper prefix of some stop string. */
  private partialSuffixLength(): number {
    const max = Math.min(this.longest - 1, this.pending.length);
    for (let len = max; len > 0; len--) {
      const tail = this.pending.slice(this.pending.length - len);
      if (this.stops.some((s) => s.startsWith(tail))) return len;
    }
    return 0;
  }
}
