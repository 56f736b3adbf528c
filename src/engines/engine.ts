import type { GenerationRequest, ModelDescription, PromptInput, SamplingParams, TokenLogprob } from "../core/types.ts";

/**
 * What an engine hands back after checking a request: enough for the core to schedule it and to
 * count usage. Engines extend it with whatever they need to start decoding.
 */
export interface PreparedGeneration {
  promptTokens: number;
  /** The resolved generation budget per choice. */
  maxTokens: number;
  /** Stop strings the prompt format itself needs (e.g. a template's next-turn marker). */
  formatStops: string[];
}

/** One step of an engine's output for a single choice. */
export type EngineChunk =
  /** Text of newly generated tokens; `logprobs` has one entry per token when requested. */
  | { kind: "text"; text: string; tokens: number; logprobs?: TokenLogprob[] }
  | { kind: "prompt"; text: string; logprobs?: TokenLogprob[] }
  | { kind: "end"; reason: "stop" | "length" };

export type EngineState = "loading" | "ready" | "failed";

/**
 * A model that can generate. An engine knows no dialect: it receives canonical requests and yields
 * text. Scheduling (which request runs, in which slot) is the core's job; an engine only promises
 * that `slots` generations can run at once, one per slot index.
 */
export interface Engine<P extends PreparedGeneration = PreparedGeneration> {
  readonly id: string;
  readonly slots: number;
  describe(): ModelDescription;
  /** Renders and tokenizes the prompt and checks it against the model's limits. Throws ApiError. */
  prepare(request: GenerationRequest): Promise<P>;
  /** Generates one choice in the given slot. Ending iteration early stops the generation. */
  generate(prepared: P, sampling: SamplingParams, slot: number, signal: AbortSignal): AsyncGenerator<EngineChunk>;
  /** Tokens of a prompt exactly as generation would see them (chat prompts rendered by the template). */
  tokenize(prompt: PromptInput, addSpecial: boolean): number[];
  detokenize(tokens: number[]): string;
  dispose(): Promise<void>;
}
