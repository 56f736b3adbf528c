import { Channel } from "./channel.ts";
import type { ModelRegistry } from "./registry.ts";
import { StopMatcher } from "./stop-matcher.ts";
import type { FinishReason, GenerationEvent, GenerationRequest } from "./types.ts";

export interface StartedGeneration {
  promptTokens: number;
  events: AsyncIterable<GenerationEvent>;
}

/**
 * The one request path shared by every dialect: check the request with the engine, admit it to the
 * model's scheduler, then run its n choices concurrently and merge their events.
 *
 * Everything that can refuse a request (validation, context length, a full queue) happens before
 * this returns, so a dialect can still answer with a plain error instead of a broken stream.
 */
export async function startGeneration(
  registry: ModelRegistry,
  req: GenerationRequest,
  signal: AbortSignal,
): Promise<StartedGeneration> {
  const { engine, scheduler } = registry.resolve(req.model);
  const prepared = await engine.prepare(req);
  scheduler.admit(req.n);

  const channel = new Channel<GenerationEvent>();
  let completionTokens = 0;
  let running = req.n;
  let failed = false;

  const runChoice = async (choice: number) => {
    const { slot, release } = await scheduler.acquire(signal);
    try {
      const matcher = new StopMatcher([...req.stop, ...prepared.formatStops]);
      const sampling = { ...req.sampling, seed: (req.sampling.seed + choice) >>> 0 };
      let reason: FinishReason = "stop";
      for await (const chunk of engine.generate(prepared, sampling, slot, signal)) {
        if (chunk.kind === "end") {
          reason = chunk.reason;
          break;
        }
        completionTokens += chunk.tokens;
        const { emit, stopped } = matcher.push(chunk.text);
        if (emit) channel.push({ type: "text", choice, text: emit });
        if (stopped) {
          reason = "stop";
          break;
        }
      }
      const rest = matcher.flush();
      if (rest) channel.push({ type: "text", choice, text: rest });
      if (!signal.aborted) channel.push({ type: "finish", choice, reason });
    } finally {
      release();
    }
  };

  for (let choice = 0; choice < req.n; choice++) {
    runChoice(choice).then(
      () => {
        if (--running === 0 && !failed) {
          channel.push({
            type: "usage",
            usage: {
              promptTokens: prepared.promptTokens,
              completionTokens,
              totalTokens: prepared.promptTokens + completionTokens,
              cachedTokens: 0,
            },
          });
          channel.close();
        }
      },
      (error) => {
        failed = true;
        channel.close(error);
      },
    );
  }
  return { promptTokens: prepared.promptTokens, events: channel };
}
