import type { PreparedGeneration } from "../engines/engine.ts";
import { Channel } from "./channel.ts";
import { newId } from "./ids.ts";
import type { ModelRegistry } from "./registry.ts";
import { StopMatcher } from "./stop-matcher.ts";
import type { FinishReason, GenerationEvent, GenerationRequest, TokenLogprob } from "./types.ts";

export interface StartedGeneration {
  /** Prompt tokens per request of the batch. */
  promptTokens: number[];
  events: AsyncIterable<GenerationEvent>;
}

/**
 * The one request path shared by every dialect: check the request with the engine, admit it to the
 * model's scheduler, then run its n choices concurrently and merge their events.
 *
 * Everything that can refuse a request (validation, context length, a full queue) happens before
 * this returns, so a dialect can still answer with a plain error instead of a broken stream.
 */
export function startGeneration(registry: ModelRegistry, req: GenerationRequest, signal: AbortSignal): Promise<StartedGeneration> {
  return startBatch(registry, [req], signal);
}

/**
 * Several prompts for one model (a Completions batch), admitted all together. Choice indices run
 * over the batch: request r's choice j is r * n + j.
 */
export async function startBatch(registry: ModelRegistry, reqs: GenerationRequest[], signal: AbortSignal): Promise<StartedGeneration> {
  const { engine, scheduler } = registry.resolve(reqs[0].model);
  const prepared: PreparedGeneration[] = [];
  for (const req of reqs) prepared.push(await engine.prepare(req));
  const jobs = reqs.reduce((sum, r) => sum + r.n, 0);
  scheduler.admit(jobs);

  const channel = new Channel<GenerationEvent>();
  let completionTokens = 0;
  let running = jobs;
  let failed = false;

  let cachedTokens = 0;
  let reasoningTokens = 0;
  const runChoice = async (req: GenerationRequest, prep: PreparedGeneration, choice: number, seedOffset: number) => {
    const choose = engine.pickSlot ? (free: readonly number[]) => engine.pickSlot!(prep, free) : undefined;
    const { slot, release } = await scheduler.acquire(signal, choose);
    try {
      const answer = new AnswerFilter(choice, [...req.stop, ...prep.formatStops], (ev) => channel.push(ev));
      const sampling = { ...req.sampling, seed: (req.sampling.seed + seedOffset) >>> 0 };
      let reason: FinishReason = "stop";
      for await (const chunk of engine.generate(prep, sampling, slot, signal)) {
        switch (chunk.kind) {
          case "end":
            reason = chunk.reason;
            break;
          case "cached":
            // The prompt is counted once per request, so is its cached part: the first choice's.
            if (seedOffset === 0) cachedTokens += chunk.tokens;
            continue;
          case "usage-detail":
            reasoningTokens += chunk.reasoningTokens;
            continue;
          case "prompt":
            channel.push({ type: "prompt", choice, text: chunk.text, ...withLogprobs(chunk.logprobs) });
            continue;
          case "tool-call":
            channel.push({ type: "tool-call", choice, index: chunk.index, id: newId("call_"), name: chunk.name });
            continue;
          case "tool-call-arguments":
            completionTokens += chunk.tokens;
            if (chunk.text) channel.push({ type: "tool-call-arguments", choice, index: chunk.index, text: chunk.text });
            continue;
          case "text":
            completionTokens += chunk.tokens;
            if (chunk.channel === "reasoning") {
              // Thinking is reported as it comes: stop strings apply to the answer only.
              if (chunk.text || chunk.logprobs) channel.push({ type: "reasoning", choice, text: chunk.text, ...withLogprobs(chunk.logprobs) });
              continue;
            }
            if (!answer.push(chunk.text, chunk.logprobs)) continue;
            reason = "stop"; // a stop string ended the answer
            break;
        }
        break;
      }
      answer.finish();
      if (!signal.aborted) channel.push({ type: "finish", choice, reason });
    } finally {
      release();
    }
  };

  const finishOne = () => {
    if (--running > 0 || failed) return;
    const promptTokens = prepared.reduce((sum, p) => sum + p.promptTokens, 0);
    channel.push({
      type: "usage",
      usage: { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, cachedTokens, reasoningTokens },
    });
    channel.close();
  };
  reqs.forEach((req, r) => {
    for (let j = 0; j < req.n; j++) {
      runChoice(req, prepared[r], r * req.n + j, j).then(finishOne, (error) => {
        failed = true;
        channel.close(error);
      });
    }
  });
  return { promptTokens: prepared.map((p) => p.promptTokens), events: channel };
}

const withLogprobs = (logprobs: TokenLogprob[] | undefined) => (logprobs ? { logprobs } : {});

/** The answer text of one choice on its way out: stop strings cut it, logprobs stay in step with it. */
class AnswerFilter {
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
 */
class LogprobAligner {
  private pending: Array<{ start: number; end: number; lp: TokenLogprob }> = [];
  private received = 0;
  private emitted = 0;

  add(textLength: number, logprobs: TokenLogprob[] | undefined): void {
    const start = this.received;
    this.received += textLength;
    for (const lp of logprobs ?? []) this.pending.push({ start, end: this.received, lp });
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
    if (final) this.pending = [];
    return out.length > 0 ? out : undefined;
  }
}
