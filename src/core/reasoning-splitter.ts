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

  constructor(
    private readonly open: string,
    private readonly close: string,
    /** The prompt already opened the section (templates that prefill "<think>"). */
    startsInside = false,
  ) {
    this.inside = startsInside;
  }

  get thinking(): boolean {
    return this.inside;
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
      const marker = this.inside ? this.close : this.open;
      const at = this.pending.indexOf(marker);
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
          }
        }
        continue;
      }
      const hold = partialSuffix(this.pending, marker);
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
