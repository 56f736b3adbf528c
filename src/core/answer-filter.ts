import { StopMatcher } from "./stop-matcher.ts";
import type { GenerationEvent, TokenLogprob } from "./types.ts";

const withLogprobs = (logprobs: TokenLogprob[] | undefined) => (logprobs ? { logprobs } : {});

/** The answer text of one choice on its way out: stop strings cut it, logprobs stay in step with it. */
export class AnswerFilter {
  private readonly matcher: StopMatcher;
  private readonly logprobs = new LogprobAligner();

  constructor(
    private readonly choice: number,
    stops: string[],
    private readonly emit: (ev: GenerationEvent) => void,
  ) {
    this.matcher = new StopMatcher(stops);
  }

  /** Returns true when a stop string was reached: the answer is over. */
  push(text: string, logprobs: TokenLogprob[] | undefined): boolean {
    this.logprobs.add(text.length, logprobs);
    const { emit, stopped } = this.matcher.push(text);
    this.send(emit, this.logprobs.release(emit.length, stopped));
    return stopped;
  }

  /** Whatever was held back as a possible stop string start is real output after all. */
  finish(): void {
    const rest = this.matcher.flush();
    this.send(rest, this.logprobs.release(rest.length, true));
  }

  private send(text: string, logprobs: TokenLogprob[] | undefined): void {
    if (text || logprobs) this.emit({ type: "text", choice: this.choice, text, ...withLogprobs(logprobs) });
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
