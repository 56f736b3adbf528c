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
  | { kind: "text"; text: string; tokens: number; logprobs?: TokenLogprob[]; channel?: "reasoning" }
  | { kind: "tool-call"; index: number; name: string }
  | { kind: "tool-call-arguments"; index: number; text: string; tokens: number }
  /** Counts the core cannot see in the text: how many generated tokens were thinking. */
  | { kind: "usage-detail"; reasoningTokens: number }
  | { kind: "prompt"; text: string; logprobs?: TokenLogprob[] }
  /** Prompt tokens reused from an earlier request instead of evaluated; sent before any text. */
  | { kind: "cached"; tokens: number }
  | { kind: "end"; reason: "stop" | "length" | "tool_calls" };

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
  /** Of the free slots, the one this request should run in (e.g. where its prompt is cached). */
  pickSlot?(prepared: P, free: readonly number[]): number;
  /** Generates one choice in the given slot. Ending iteration early stops the generation. */
  generate(prepared: P, sampling: SamplingParams, slot: number, signal: AbortSignal): AsyncGenerator<EngineChunk>;
  /** Tokens of a prompt exactly as generation would see them (chat prompts rendered by the template). */
  tokenize(prompt: PromptInput, addSpecial: boolean): number[];
  detokenize(tokens: number[]): string;
  /** Present when the model can embed (see Embedder); an embedding-only model has `slots` 0. */
  readonly embeddings?: Embedder;
  dispose(): Promise<void>;
}

/** One input of an embeddings request: text to tokenize, or token ids taken as they are. */
export type EmbedInput = { kind: "text"; text: string } | { kind: "tokens"; tokens: number[] };

/**
 * How a model reduces a sequence to one vector. "last" is also what a model that declares no
 * pooling gets (the last token's hidden state); `poolingDeclared` tells the two apart.
 */
export type EmbeddingPooling = "mean" | "cls" | "last";

export interface EmbeddingInfo {
  /** Length of the vectors the model produces. */
  dimensions: number;
  pooling: EmbeddingPooling;
  /** False when the model file declares no pooling and the last token stands in for the sequence. */
  poolingDeclared: boolean;
  /** Longest input in tokens, counting the tokens the model adds itself (BOS/CLS, SEP). */
  maxInputTokens: number;
  /** Token ids are valid below this. */
  vocabularySize: number;
  /** Inputs that can be embedded at once, one per slot index (the core schedules the slots). */
  slots: number;
  /** True for models that only embed (encoders); they refuse generation requests. */
  embeddingOnly: boolean;
}

/**
 * A model's embedding capability. Like generation, scheduling is the core's job: `embed` runs one
 * input in the given slot, and the core spreads a request's inputs over the slots.
 */
export interface Embedder {
  readonly info: EmbeddingInfo;
  /**
   * The tokens that will be embedded for an input, including the tokens the model adds (BOS/CLS,
   * SEP). Token ids must already have been checked against `info.vocabularySize`.
   */
  tokenize(input: EmbedInput): number[];
  /** The model's raw (unnormalised) vector for tokenized input, computed in the given slot. */
  embed(tokens: number[], slot: number, signal: AbortSignal): Promise<Float32Array>;
}
