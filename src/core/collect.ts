import type { FinishReason, GenerationEvent, Timings, TokenLogprob, Usage } from "./types.ts";

export interface CollectedToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** One choice's whole answer, as the events built it. */
export interface CollectedChoice {
  /** The echoed prompt (Completions' echo), when asked for. */
  prompt?: { text: string; logprobs: TokenLogprob[] };
  text: string;
  logprobs: TokenLogprob[];
  /** Undefined when the model did not think (or cannot). */
  reasoning?: string;
  reasoningLogprobs: TokenLogprob[];
  toolCalls: CollectedToolCall[];
  finishReason: FinishReason;
}

export interface CollectedGeneration {
  choices: CollectedChoice[];
  usage?: Usage;
  /** The first choice's timings, when the request asked for them (see GenerationRequest.timings). */
  timings?: Timings;
}

/**
 * Drains a generation's events into complete answers. Every non-streaming renderer is this plus a
 * change of field names, so JSON and SSE answers cannot drift apart.
 */
export async function collectGeneration(events: AsyncIterable<GenerationEvent>, choices: number): Promise<CollectedGeneration> {
  const out: CollectedChoice[] = Array.from({ length: choices }, () => ({
    text: "",
    logprobs: [],
    reasoningLogprobs: [],
    toolCalls: [],
    finishReason: "stop",
  }));
  let usage: Usage | undefined;
  let timings: Timings | undefined;
  for await (const ev of events) {
    if (ev.type === "usage") {
      usage = ev.usage;
      timings = ev.timings;
      continue;
    }
    const c = out[ev.choice];
    switch (ev.type) {
      case "prompt":
        c.prompt ??= { text: "", logprobs: [] };
        c.prompt.text += ev.text;
        if (ev.logprobs) append(c.prompt.logprobs, ev.logprobs);
        break;
      case "text":
        c.text += ev.text;
        if (ev.logprobs) append(c.logprobs, ev.logprobs);
        break;
      case "reasoning":
        c.reasoning = (c.reasoning ?? "") + ev.text;
        if (ev.logprobs) append(c.reasoningLogprobs, ev.logprobs);
        break;
      case "tool-call":
        c.toolCalls[ev.index] = { id: ev.id, name: ev.name, arguments: "" };
        break;
      case "tool-call-arguments":
        c.toolCalls[ev.index].arguments += ev.text;
        break;
      case "finish":
        c.finishReason = ev.reason;
        break;
    }
  }
  return { choices: out, usage, ...(timings ? { timings } : {}) };
}

/**
 * Appends one by one: `push(...items)` passes every item as an argument, and one event's logprobs
 * can be a whole answer's (an upstream that answered whole, 100,000 tokens and more), which is past
 * what a call's arguments can hold ("Maximum call stack size exceeded").
 */
export function append<T>(target: T[], items: readonly T[]): void {
  for (const item of items) target.push(item);
}
