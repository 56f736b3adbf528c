import type { GenerationEvent, Timings } from "../../core/types.ts";

/**
 * llama-server's `timings` object (its slot statistics), from a choice's canonical timings: the
 * cached and evaluated prompt tokens and the time the evaluation took, the tokens generated and the
 * time since. As llama-server counts, the first generated token comes with the prompt's evaluation
 * (from its last batch's logits), so the per-token generation rates divide by one token less; a
 * rate whose divisor is still 0 is 0.
 */
export function timingsToWire(t: Timings) {
  const steps = Math.max(0, t.generatedTokens - 1);
  // Whole microseconds, as llama-server measures them.
  const promptMs = microseconds(t.promptMs);
  const generationMs = microseconds(t.generationMs);
  return {
    cache_n: t.cachedTokens,
    prompt_n: t.promptTokens,
    prompt_ms: promptMs,
    prompt_per_token_ms: t.promptTokens > 0 ? promptMs / t.promptTokens : 0,
    prompt_per_second: promptMs > 0 ? (1e3 / promptMs) * t.promptTokens : 0,
    predicted_n: t.generatedTokens,
    predicted_ms: generationMs,
    predicted_per_token_ms: steps > 0 ? generationMs / steps : 0,
    predicted_per_second: generationMs > 0 ? (1e3 / generationMs) * steps : 0,
  };
}

const microseconds = (ms: number) => Math.round(ms * 1000) / 1000;

/** A chunk's `timings` when its event carries them (llama-server's `timings_per_token`), else nothing. */
export function chunkTimings(ev: { timings?: Timings }): { timings?: ReturnType<typeof timingsToWire> } {
  return ev.timings ? { timings: timingsToWire(ev.timings) } : {};
}

/** llama-server's `prompt_progress` of a progress event: whole milliseconds, as it reports them. */
export function progressToWire(ev: Extract<GenerationEvent, { type: "progress" }>) {
  return { total: ev.total, cache: ev.cached, processed: ev.processed, time_ms: Math.floor(ev.ms) };
}
