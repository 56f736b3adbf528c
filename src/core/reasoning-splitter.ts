/**
 * Separates a thinking section from the answer in generated text, incrementally. Markers are the
 * template's (e.g. "<think>" and "</think>"); text that might be the start of a marker is held back
 * so neither stream ever shows part of one.
 */
export class ReasoningSplitter {
  private inside: boolean;
  private done = false;
  private pending = "";
  /** Newlines right after the closing marker are template layout, not answer. */
  private trimNewlines = false;
  /** So are newlines right after an opening marker the model wrote (Gemma 4's `<|channel>thought\n`). */
  private trimOpening = false;

  private readonly closers: string[];

  constructor(
    private readonly open: string,
    /** Closing markers; a template's own layout ("\n</think>") first, so its newline is not reasoning. */
    close: string | string[],
    /** The prompt already opened the section (templates that prefill "<think>"). */
    startsInside = false,
  ) {
    this.inside = startsInside;
    this.closers = (Array.isArray(close) ? close : [close]).filter((c) => c !== "");
  }

  get thinking(): boolean {
    return this.inside;
  }

  /** No marker counts any more: the section closed, or the answer began without one. */
  get settled(): boolean {
    return this.done;
  }

  push(text: string): { reasoning: string; content: string } {
    this.pending += text;
    let reasoning = "";
    let content = "";
    for (;;) {
      if (this.done) {
        if (this.trimNewlines) {
          this.pending = this.pending.replace(/^\n+/, "");
          if (this.pending) this.trimNewlines = false;
        }
        content += this.pending;
        this.pending = "";
        break;
      }
      if (this.inside && this.trimOpening) {
        this.pending = this.pending.replace(/^\n+/, "");
        if (this.pending) this.trimOpening = false;
      }
      const markers = this.inside ? this.closers : [this.open];
      const { at, marker } = earliest(this.pending, markers);
      if (at !== -1) {
        const before = this.pending.slice(0, at);
        if (this.inside) reasoning += before;
        else content += before;
        this.pending = this.pending.slice(at + marker.length);
        if (this.inside) {
          this.inside = false;
          // One thinking section per answer; a later "<think>" is just text.
          this.done = true;
          this.trimNewlines = true;
        } else {
          // The open marker only counts at the very start of the answer.
          if (before.trim() !== "" || content.trim() !== "") {
            content += marker;
            this.done = true;
          } else {
            content = "";
            this.inside = true;
            this.trimOpening = true;
          }
        }
        continue;
      }
      const hold = Math.max(...markers.map((m) => partialSuffix(this.pending, m)));
      const ready = this.pending.slice(0, this.pending.length - hold);
      this.pending = this.pending.slice(this.pending.length - hold);
      if (this.inside) reasoning += ready;
      else content += ready;
      if (!this.inside && ready.trim() !== "") this.done = true;
      break;
    }
    return { reasoning, content };
  }

  flush(): { reasoning: string; content: string } {
    const rest = this.pending;
    this.pending = "";
    return this.inside ? { reasoning: rest, content: "" } : { reasoning: "", content: rest };
  }
}

function partialSuffix(text: string, marker: string): number {
  for (let len = Math.min(marker.length - 1, text.length); len > 0; len--) {
    if (marker.startsWith(text.slice(text.length - len))) return len;
  }
  return 0;
}

/** The first place any of the markers occurs (the longer one when two start there). */
function earliest(text: string, markers: string[]): { at: number; marker: string } {
  let best = { at: -1, marker: "" };
  for (const m of markers) {
    const at = text.indexOf(m);
    if (at !== -1 && (best.at === -1 || at < best.at || (at === best.at && m.length > best.marker.length))) best = { at, marker: m };
  }
  return best;
}
