import type { GenerationRequest, ModelDescription, PromptInput, SamplingParams, TokenLogprob } from "./types.ts";

/**
 * The contract between the core and every engine (in-process llama.cpp, remote upstreams). It lives
 * in core so that dependencies point one way: engines implement it, the core drives it, and no
 * dialect sees it. Errors an engine raises name canonical fields (see errors.ts), never wire ones.
 */

/**
 * What an engine hands back after checking a request: enough for the core to schedule it and to
 * count usage. Engines extend it with whatever they need to start decoding.
 */
export interface PreparedGeneration {
  promptTokens: number;
  /**
   * The model's context in tokens, prompt and generation together; undefined when the engine cannot
   * tell (an upstream that checks for itself). The core refuses what cannot fit.
   */
  contextSize?: number;
  /** Stop strings the prompt format itself needs (e.g. a template's next-turn marker). */
  formatStops: string[];
  /**
   * Text the prompt format writes between an answer and its end-of-turn token (Llama 2's " " before
   * `</s>`): cut from an answer that ends at such a token right after it (see `turnEnded`), and
   * ordinary text anywhere else.
   */
  formatEndings?: string[];
  /**
   * Headers for the client's response (e.g. which upstream replica served), shared by reference
   * with the request context, so an engine may still add to them while a JSON answer is collected.
   */
  responseHeaders?: Record<string, string>;
}

/** What the core tells `prepare` about the request beyond its content. */
export interface PrepareOptions {
  /**
   * The prompt's token count must be known when `prepare` returns: the request's key has token
   * limits, whose reservation is the prompt plus the most it may generate. Otherwise an engine for
   * which counting costs a round trip (a remote upstream's /tokenize) may skip the count, or leave
   * it to `open`, where it runs beside the generation.
   */
  countPrompt?: boolean;
  /**
   * The request is only measured (the Responses API's input_tokens): its prompt is counted and
   * nothing generates; `open` is never called. An engine that cannot count it says so (an error),
   * rather than answering 0.
   */
  measureOnly?: boolean;
  /** The client's signal: preparation that waits (a schema compiling) stops when it aborts. */
  signal?: AbortSignal;
}

/** How one choice runs: its sampling (seed already offset per choice), budget and slot. */
export interface ChoiceRun {
  sampling: SamplingParams;
  /** Most tokens to generate, already checked against the context. */
  maxTokens: number;
  /** The scheduler's slot; at most one choice runs in a slot at a time. */
  slot: number;
  /**
   * How long the choice waited for that slot: an engine that can make it wait again (a remote
   * model's replicas all full) counts that wait against the same queue timeout.
   */
  waitedMs?: number;
}

/** What a chat prompt's tokens depend on besides its messages: the tools offered, the thinking switch. */
export type PromptExtras = Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls" | "reasoning">;

/** One step of an engine's output for a single choice. */
export type EngineChunk =
  /**
   * Text of newly generated tokens; `tokens` counts them (0 when unknown, e.g. a remote engine that
   * reports usage at the end); `logprobs` has one entry per token when requested.
   */
  | { kind: "text"; text: string; tokens: number; logprobs?: TokenLogprob[]; channel?: "reasoning" }
  | { kind: "tool-call"; index: number; name: string; /** The id the model wrote into the call (Mistral Nemo's), if any. */ id?: string }
  | { kind: "tool-call-arguments"; index: number; text: string; tokens: number }
  /**
   * Authoritative counts for this choice so far, replacing what the core summed from chunks: an
   * in-process engine reports thinking tokens (invisible in the text); a remote engine, whose stream
   * carries usage only at its end, reports everything here. `promptTokens` (the first choice's)
   * replaces the count `prepare` made, for engines whose upstream counts for itself.
   */
  | { kind: "usage"; completionTokens?: number; reasoningTokens?: number; promptTokens?: number }
  | { kind: "prompt"; text: string; logprobs?: TokenLogprob[] }
  /** Prompt tokens reused from an earlier request instead of evaluated; sent before any text. */
  | { kind: "cached"; tokens: number }
  /**
   * The prompt (what was not cached) is evaluated now: sent once, as soon as it is, before the
   * chunks of the first generated token. Engines that cannot tell (a remote upstream) leave it out;
   * the core then takes the first output as the end of the prompt's evaluation.
   */
  | { kind: "evaluated" }
  /** `content_filter`: a remote engine's upstream withheld output under its policy (a local model never does). */
  | {
      kind: "end";
      reason: "stop" | "length" | "tool_calls" | "content_filter";
      /** The generation ended at an end-of-turn token (not at its budget, nor by a sampler with nothing left to say). */
      turnEnded?: boolean;
    };

/**
 * A model that can generate. An engine knows no dialect: it receives canonical requests and yields
 * text. Scheduling (which request runs, in which slot) is the core's job; an engine only promises
 * that `slots` generations can run at once, one per slot index.
 */
export interface Engine<P extends PreparedGeneration = PreparedGeneration> {
  readonly id: string;
  readonly slots: number;
  /**
   * For an engine whose capacity changes while it runs (a remote model learns its replicas' slot
   * counts, ejects replicas and takes them back): `listener` is told the generations it can run at
   * once now, and how many when all of it is up (what one request's `n` is held to). The core's
   * scheduler follows, so requests queue there, served fairly, rather than inside the engine.
   */
  onSlots?(listener: (running: number, nominal: number) => void): void;
  describe(): ModelDescription;
  /**
   * Renders and tokenizes the prompt and checks it against the model's limits. Throws ApiError.
   * Does no generation work: a request may still be refused at admission (key limits, a full
   * queue) after it, and such a request must have cost the model nothing (see `open`).
   */
  prepare(request: GenerationRequest, options?: PrepareOptions): Promise<P>;
  /**
   * Starts the generation of a request the core has admitted (key limits, queue bound), before the
   * client's response starts: a remote engine sends the first choice upstream and reads it up to
   * its first output, so the upstream's refusals are still plain errors and the response head can
   * name the replica that serves. It may finish what `prepare` left for later (a prompt count run
   * beside the opening), updating `promptTokens` and `contextSize`: the core checks the context
   * again after it. `signal` is the client's: when it aborts, the work ends at once, and that is
   * neither the engine's failure nor a reason to try elsewhere. Engines that start nothing ahead of
   * `generate` (in-process ones) leave it out. Throws ApiError; what it opened is closed by
   * `discard` when the request does not run after all. `queued`: the request's first choice has no
   * slot yet and will wait for one in the core's queue; the engine then only finishes what must be
   * known before the response (the prompt count) and leaves the generation to `generate`, in its
   * turn, so that a request waiting in the queue takes nothing a running one needs.
   */
  open?(prepared: P, signal: AbortSignal, queued?: boolean): Promise<void>;
  /**
   * A prepared request that will not run (refused at admission, a sibling in its batch refused, its
   * context check failed after `open`, or only measured): frees what `prepare` or `open` may hold,
   * such as an upstream request already sent.
   */
  discard?(prepared: P): void;
  /**
   * The prepared request must queue for a slot: frees what `open` holds that a running request
   * may need (a remote replica's slot, with the upstream request opened on it), which `generate`
   * takes again when the request's turn comes. Holding it while queued could leave every running
   * request waiting for what the queued ones hold.
   */
  waiting?(prepared: P): void;
  /** Of the free slots, the one this request should run in (e.g. where its prompt is cached). */
  pickSlot?(prepared: P, free: readonly number[]): number;
  /**
   * The core stops reading the choice running in `slot` for a while: its client is too far behind
   * (see Channel). A generation left unread must not hold up other requests; an engine that steps
   * its sequences together (a llama.cpp context decodes all of them in one batch, and its batch
   * gate waits for each) stops waiting for this one. Returns the call that says it is read again;
   * the core makes it before it reads on or ends the generation. Engines for which an unread
   * generation costs nothing beyond its own (a remote upstream, simply not read) leave it out.
   */
  idle?(slot: number): () => void;
  /** Generates one choice. Ending iteration early stops the generation. */
  generate(prepared: P, run: ChoiceRun, signal: AbortSignal): AsyncGenerator<EngineChunk>;
  /**
   * Tokens of a prompt exactly as generation would see them (chat prompts rendered by the template,
   * with `extras`: the tools it offers and the thinking switch, which the template renders too).
   */
  tokenize(prompt: PromptInput, addSpecial: boolean, extras?: PromptExtras, responseHeaders?: Record<string, string>): Promise<number[]>;
  /**
   * Each token as the vocabulary writes it (`▁Hello`, `Ġworld`, `<0xE4>`, `<|im_end|>`): vLLM's
   * `token_strs`. Absent where the vocabulary is not known here.
   */
  vocabularyPieces?(tokens: number[]): string[];
  /**
   * Text of token ids; an id outside the vocabulary is an ApiError naming `tokens[i]`. For both,
   * `responseHeaders`: headers the engine wants on the response (which replica answered).
   */
  detokenize(tokens: number[], responseHeaders?: Record<string, string>): Promise<string>;
  /** The upstream replicas behind a remote model, for metrics and health reporting. */
  replicas?(): ReplicaStatus[];
  /**
   * Requests the core counts as running that in fact wait inside the engine (a remote model whose
   * replicas are all full queues them itself): metrics report them as waiting.
   */
  waitingInside?(): number;
  /**
   * Admitted requests that wait inside the engine before the core counts them as running (a remote
   * model opening a request while its replicas are all full): metrics report them as waiting.
   */
  waitingToOpen?(): number;
  /** Present when the model can embed (see Embedder); an embedding-only model has `slots` 0. */
  readonly embeddings?: Embedder;
  /** What the engine holds right now, for metrics (read at scrape time; must be cheap). */
  stats?(): EngineStats;
  dispose(): Promise<void>;
}

/** An engine's memory at a glance. */
export interface EngineStats {
  /** Tokens held in each slot's KV cache (index = slot). */
  kvTokens: number[];
  /** Tokens the KV cache of one slot can hold. */
  kvTokensPerSlot: number;
  /** Saved prompt states kept outside the sequences (the prompt cache): bytes, entries, evictions so far. */
  promptCache?: { bytes: number; entries: number; evictions: number };
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
  tokenize(input: EmbedInput): Promise<number[]>;
  /**
   * `tokenize` for every input of a request at once, when the engine does better that way (one
   * upstream request). `responseHeaders`: headers the engine wants on the response (which replica served).
   */
  tokenizeMany?(inputs: EmbedInput[], responseHeaders?: Record<string, string>, signal?: AbortSignal): Promise<number[][]>;
  /**
   * The fewest tokens an input can take, found without tokenizing it (tokenizing runs on the event
   * loop), so an input that can never fit is refused first; 0 when unknown.
   */
  minimumTokens?(input: EmbedInput): number;
  /** The model's raw (unnormalised) vector for tokenized input, computed in the given slot. */
  embed(tokens: number[], slot: number, signal: AbortSignal): Promise<Float32Array>;
}

/** One upstream replica of a remote model, as metrics report it. */
export interface ReplicaStatus {
  /** The replica's base URL. */
  name: string;
  /** up; ejected after failures; half-open while a trial request decides. */
  state: "up" | "ejected" | "half-open";
  /** Requests it is running now. */
  outstanding: number;
  /** Requests it runs at once (configured, or as the replica reports it). */
  slots: number;
  /** Requests it completed, and attempts it failed, since the server started. */
  served: number;
  failed: number;
}
