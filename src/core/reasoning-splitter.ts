/** A stretch of the input (offsets count characters pushed since the start) and the part it went to. */
export interface SplitSpan {
  part: "reasoning" | "content";
  start: number;
  end: number;
}

export interface SplitResult {
  reasoning: string;
  content: string;
  /**
   * Where the text released by this call came from in the input, in order. Input in no span is
   * markers and their layout: it is in neither part (so the tokens that wrote it belong to neither).
   */
  spans: SplitSpan[];
}

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
  /** Offset in the input of `pending`'s first character: everything before it is resolved. */
  private base = 0;

  constructor(
    private readonly open: string,
    /** Closing markers; a template's own layout ("\n</think>") first, so its newline is not reasoning. */
    close: string | string[],
    /** The prompt already opened the section (templates that prefill "<think>"). */
    startsInside = false,
    /**
     * Marker texts that are never answer text while a section may still open (Gemma 4's
     * `<|channel>` and `<channel|>`, which llama.cpp's parser reads content up to): an empty channel
     * or a lone closing marker before the answer is dropped, in no span, and the section may still open.
     */
    private readonly stray: readonly string[] = [],
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

  /** How much of the input is settled (released to a part, or dropped as a marker); the rest is held. */
  get resolved(): number {
    return this.base;
  }

  push(text: string): SplitResult {
    this.pending += text;
    let reasoning = "";
    let content = "";
    let spans: SplitSpan[] = [];
    const take = (part: SplitSpan["part"], length: number) => {
      if (length > 0) spans.push({ part, start: this.base, end: this.base + length });
      this.base += length;
    };
    /** Answer text before the section was settled: its stray markers dropped (in no span); the rest, kept. */
    const answer = (text: string): string => {
      if (!this.stray.length) {
        take("content", text.length);
        return text;
      }
      let kept = "";
      let rest = text;
      while (rest) {
        const { at, marker } = earliest(rest, [...this.stray]);
        const piece = at === -1 ? rest : rest.slice(0, at);
        take("content", piece.length);
        kept += piece;
        if (at === -1) break;
        this.base += marker.length;
        rest = rest.slice(at + marker.length);
      }
      return kept;
    };
    const dropNewlines = () => {
      const newlines = /^\n*/.exec(this.pending)![0].length;
      this.pending = this.pending.slice(newlines);
      this.base += newlines;
    };
    for (;;) {
      if (this.done) {
        if (this.trimNewlines) {
          dropNewlines();
          if (this.pending) this.trimNewlines = false;
        }
        content += this.pending;
        take("content", this.pending.length);
        this.pending = "";
        break;
      }
      if (this.inside && this.trimOpening) {
        dropNewlines();
        if (this.pending) this.trimOpening = false;
      }
      const markers = this.inside ? this.closers : [this.open];
      const { at, marker } = earliest(this.pending, markers);
      if (at !== -1) {
        let before = this.pending.slice(0, at);
        if (this.inside) {
          reasoning += before;
          take("reasoning", at);
        } else {
          before = answer(before);
          content += before;
        }
        this.pending = this.pending.slice(at + marker.length);
        this.base += marker.length;
        if (this.inside) {
          this.inside = false;
          // One thinking section per answer; a later "<think>" is just text.
          this.done = true;
          this.trimNewlines = true;
        } else {
          // The open marker only counts at the very start of the answer.
          if (before.trim() !== "" || content.trim() !== "") {
            content += marker;
            spans.push({ part: "content", start: this.base - marker.length, end: this.base });
            this.done = true;
          } else {
            // The blank space before the opening marker is dropped with it.
            content = "";
            spans = spans.filter((s) => s.part !== "content");
            this.inside = true;
            this.trimOpening = true;
          }
        }
        continue;
      }
      const hold = Math.max(...markers.map((m) => partialSuffix(this.pending, m)));
      let ready = this.pending.slice(0, this.pending.length - hold);
      this.pending = this.pending.slice(this.pending.length - hold);
      if (this.inside) {
        reasoning += ready;
        take("reasoning", ready.length);
      } else {
        ready = answer(ready);
        content += ready;
      }
      if (!this.inside && ready.trim() !== "") this.done = true;
      break;
    }
    return { reasoning, content, spans };
  }

  flush(): SplitResult {
    const rest = this.pending;
    const part = this.inside ? "reasoning" : "content";
    // Held text that could still have opened the section: its stray markers are dropped as in push.
    if (!this.inside && !this.done && this.stray.length && rest) {
      const spans: SplitSpan[] = [];
      let kept = "";
      let left = rest;
      while (left) {
        const { at, marker } = earliest(left, [...this.stray]);
        const piece = at === -1 ? left : left.slice(0, at);
        if (piece) spans.push({ part, start: this.base, end: this.base + piece.length });
        this.base += piece.length;
        kept += piece;
        if (at === -1) break;
        this.base += marker.length;
        left = left.slice(at + marker.length);
      }
      this.pending = "";
      return { reasoning: "", content: kept, spans };
    }
    const spans: SplitSpan[] = rest ? [{ part, start: this.base, end: this.base + rest.length }] : [];
    this.base += rest.length;
    this.pending = "";
    return { reasoning: this.inside ? rest : "", content: this.inside ? "" : rest, spans };
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
