import { StopMatcher } from "./stop-matcher.ts";
import type { GenerationEvent, TokenLogprob } from "./types.ts";

const withLogprobs = (logprobs: TokenLogprob[] | undefined) => (logprobs ? { logprobs } : {});

/**
 * The answer text of one choice on its way out: stop strings cut it, so does the text its format
 * writes before the end-of-turn token it ended at (`endings`), and logprobs stay in step with it.
 */
export class AnswerFilter {
  private readonly matcher: StopMatcher;
  private readonly ending: TurnEnding;
  private readonly logprobs = new LogprobAligner();

  constructor(
    private readonly choice: number,
    stops: string[],
    private readonly emit: (ev: GenerationEvent) => void,
    endings: readonly string[] = [],
  ) {
    this.matcher = new StopMatcher(stops);
    this.ending = new TurnEnding(endings);
  }

  /** Returns true when a stop string was reached: the answer is over. */
  push(text: string, logprobs: TokenLogprob[] | undefined): boolean {
    this.logprobs.add(text.length, logprobs);
    const { emit, stopped } = this.matcher.push(text);
    // Text held back as a possible turn ending came before the stop string: it is the answer's.
    const out = stopped ? this.ending.finish(emit, false) : this.ending.push(emit);
    this.send(out, this.logprobs.release(out.length, stopped));
    return stopped;
  }

  /**
   * Whatever was held back as a possible stop string start is real output after all; as a possible
   * turn ending too, unless the generation ended at an end-of-turn token (`turnEnded`) right after it.
   */
  finish(turnEnded = false): void {
    const rest = this.ending.finish(this.matcher.flush(), turnEnded);
    this.send(rest, this.logprobs.release(rest.length, true));
  }

  private send(text: string, logprobs: TokenLogprob[] | undefined): void {
    if (text || logprobs) this.emit({ type: "text", choice: this.choice, text, ...withLogprobs(logprobs) });
  }
}

/**
 * Text a chat template writes between an answer and its end-of-turn token (Llama 2's " " before
 * `</s>`, Apriel's "\n" before `<|end|>`): when the answer ends at that token right after such
 * text, the text is the template's turn ending, not the answer's. Anywhere else it is ordinary
 * text, so it ends nothing: it is only held back while the answer could still end with it.
 */
export class TurnEnding {
  private readonly endings: string[];
  private held = "";

  constructor(endings: readonly string[]) {
    // Longest first: the cut takes the whole ending the template wrote.
    this.endings = endings.filter((e) => e.length > 0).sort((a, b) => b.length - a.length);
  }

  /** Feed text; returns what is safe to emit. */
  push(text: string): string {
    if (this.endings.length === 0) return text;
    const all = this.held + text;
    const hold = this.heldLength(all);
    this.held = all.slice(all.length - hold);
    return all.slice(0, all.length - hold);
  }

  /** The answer is over: the held text and `text` after it, less an ending where the turn ended right after one. */
  finish(text: string, turnEnded: boolean): string {
    const all = this.held + text;
    this.held = "";
    const ending = turnEnded ? this.endings.find((e) => all.endsWith(e)) : undefined;
    return ending === undefined ? all : all.slice(0, all.length - ending.length);
  }

  /** Length of the longest suffix of `text` that is a prefix of an ending (or a whole one). */
  private heldLength(text: string): number {
    const max = Math.min(this.endings[0].length, text.length);
    for (let len = max; len > 0; len--) {
      const tail = text.slice(text.length - len);
      if (this.endings.some((e) => e.startsWith(tail))) return len;
    }
    return 0;
  }
}

/**
 * Keeps per-token log probabilities in step with the text the stop matcher lets through: a token is
 * reported once its text has been emitted, and tokens after a stop string's start never are.
 *
 * A token holding the first bytes of a character split over several tokens adds no text (its
 * character comes with the token that completes it), so it has no width to place it before or after
 * a cut. Such tokens wait for the token that completes their character and take its span: they are
 * reported with it, and dropped with it when a stop string starts there (their bytes are the stop's).
 * Still waiting when the answer ends without a stop, they are the bytes of an unfinished last
 * character and are reported.
 */
class LogprobAligner {
  private pending: Array<{ start: number; end: number; lp: TokenLogprob }> = [];
  /** Tokens of a character not yet complete (see above), in order. */
  private partial: TokenLogprob[] = [];
  private received = 0;
  private emitted = 0;

  add(textLength: number, logprobs: TokenLogprob[] | undefined): void {
    const start = this.received;
    this.received += textLength;
    if (textLength === 0) {
      // A control token (no bytes) sits where it is, unless a character is open before it.
      for (const lp of logprobs ?? []) {
        if (lp.bytes.length > 0 || this.partial.length > 0) this.partial.push(lp);
        else this.pending.push({ start, end: start, lp });
      }
      return;
    }
    for (const lp of [...this.partial, ...(logprobs ?? [])]) this.pending.push({ start, end: this.received, lp });
    this.partial = [];
  }

  /** `final`: nothing more will be emitted, so any token whose text started before the cut counts. */
  release(emittedLength: number, final: boolean): TokenLogprob[] | undefined {
    this.emitted += emittedLength;
    const out: TokenLogprob[] = [];
    while (this.pending.length > 0) {
      const next = this.pending[0];
      const ready = next.end <= this.emitted || (final && next.start < this.emitted);
      if (!ready) break;
      out.push(next.lp);
      this.pending.shift();
    }
    if (final) {
      // Nothing was cut (no stop string): an unfinished last character's tokens are the answer's.
      if (this.emitted >= this.received) out.push(...this.partial);
      this.pending = [];
      this.partial = [];
    }
    return out.length > 0 ? out : undefined;
  }
}
