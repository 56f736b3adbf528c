/**
 * Canonical, dialect-free shapes. Every dialect converts its wire request into a GenerationRequest and
 * renders GenerationEvents back; engines see only these types.
 */

export type Role = "system" | "user" | "assistant" | "tool";

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text exactly as the model (or the client, in history) wrote it. */
  arguments: string;
}

/**
 * An image a message shows the model, by reference: an https: or data: URL, and how closely the
 * model should look ("low" | "high" | "auto"; undefined leaves it to the engine).
 */
export interface ImagePart {
  type: "image";
  url: string;
  detail?: "low" | "high" | "auto";
}

export type ContentPart = { type: "text"; text: string } | ImagePart;

export interface Message {
  role: Role;
  /** The message's text (text parts joined by newlines): what text-only code paths read. */
  content: string;
  /**
   * The message part by part, in the client's order, when it holds more than text (images).
   * Absent for text-only messages. An engine that cannot read a part must refuse it, naming
   * `prompt.messages[i].parts[j]`, never drop it.
   */
  parts?: ContentPart[];
  name?: string;
  /** Assistant turns in history that called tools. */
  toolCalls?: ToolCall[];
  /** Tool results point back at the call they answer. */
  toolCallId?: string;
}

/** A function the model may call. */
export interface ToolDefinition {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object. */
  parameters: unknown;
  /** Arguments must follow the schema exactly; a schema that cannot be enforced is refused. */
  strict: boolean;
  /**
   * A tool whose input is free text rather than JSON arguments (the Responses API's custom tools),
   * optionally held to a grammar. The model writes it as the single string argument `input`, so
   * the call's arguments are `{"input": "…"}`; `parameters` is ignored.
   */
  input?: FreeTextInput;
}

/** The grammar a free-text tool input follows: any text, a Lark grammar, or a regular expression. */
export type FreeTextInput = { syntax: "text" } | { syntax: "lark" | "regex"; definition: string };

/**
 * Which tools the model may call: none, its choice, at least one, exactly the named one, or its
 * choice (or, `required`, at least one) among a subset.
 */
export type ToolChoice = "none" | "auto" | "required" | { name: string } | { allowed: string[]; required: boolean };

export type PromptInput =
  | { kind: "chat"; messages: Message[] }
  | { kind: "text"; text: string }
  | { kind: "tokens"; tokens: number[] }
  /** Fill-in-the-middle: generate what goes between prefix and suffix. */
  | { kind: "infill"; prefix: string; suffix: string };

export interface SamplingParams {
  temperature: number;
  topP: number;
  /** 0 means the whole vocabulary. */
  topK: number;
  minP: number;
  /** Base seed; choice i samples with seed + i so n choices differ yet stay reproducible. */
  seed: number;
  /** The client gave no seed: `seed` was drawn here (an upstream may as well draw its own). */
  seedDrawn?: boolean;
  frequencyPenalty: number;
  presencePenalty: number;
  /** Multiplicative penalty (1 = off), as vLLM and llama.cpp define it. */
  repetitionPenalty: number;
  /** Token id → additive logit bias. May include end-of-generation tokens. */
  logitBias: Map<number, number>;
}

export interface GenerationRequest {
  model: string;
  prompt: PromptInput;
  sampling: SamplingParams;
  /** Undefined: as many tokens as the context leaves room for. */
  maxTokens?: number;
  /** maxTokens is the dialect's default, not a number the client sent (errors say so). */
  maxTokensDefaulted?: boolean;
  stop: string[];
  n: number;
  /**
   * Namespace for any state shared between requests (prompt cache); never crossed. Set by the
   * generation service from the request context, not by dialects.
   */
  isolationKey?: string;
  /**
   * The client gets the answer only once it is complete (not streamed). An engine may then hold
   * output back and redo a choice that broke midway (a remote replica that died) where the client
   * cannot see it. Undefined: streamed, every chunk is final once yielded.
   */
  wholeAnswer?: boolean;
  /**
   * End-of-turn tokens do not end the answer (vLLM's and llama-server's `ignore_eos`): it runs to
   * its token budget or a stop string. Not with tools or a response format, whose grammars end there.
   */
  ignoreEos?: boolean;
  /** Reuse cached prompt state (default true); false evaluates the whole prompt afresh. */
  cachePrompt?: boolean;
  /** A routing hint: prefer the sequence last used with the same key. Not an isolation boundary. */
  cacheKey?: string;
  /**
   * Log probabilities of the sampled tokens, with this many alternatives each (0 = the sampled token
   * only). Undefined: none.
   */
  logprobs?: number;
  /**
   * Thinking control for models that think: `enabled` false closes the section before generation;
   * `budgetTokens` closes it by force after that many tokens. Undefined: the model's default.
   * `fromEffort`: `enabled` and `budgetTokens` are only this server's reading of `effort` (the
   * client sent an effort level, no switch or budget), so an engine that can pass the effort on
   * as such (a remote upstream) sends that alone. `budgetFromEffort`: only the budget is.
   */
  reasoning?: {
    enabled?: boolean;
    budgetTokens?: number;
    /** OpenAI's levels; `xhigh` and `max` think without a budget here, as `high` does. */
    effort?: "minimal" | "low" | "medium" | "high" | "xhigh" | "max";
    fromEffort?: boolean;
    budgetFromEffort?: boolean;
  };
  /** Constrains the answer: any JSON object, JSON valid against a schema, or text a regex matches in full. */
  responseFormat?: { type: "json_object" } | { type: "json_schema"; schema: unknown; strict: boolean } | { type: "regex"; pattern: string };
  tools?: ToolDefinition[];
  toolChoice?: ToolChoice;
  /** False: at most one call per answer. */
  parallelToolCalls?: boolean;
  /**
   * Report the prompt back before the generated text (Completions' echo); with `logprobs`, also the
   * prompt tokens' log probabilities (the first token has none).
   */
  echo?: boolean;
  /**
   * Every event of a choice's answer carries `running`: the choice's token counts when it was sent
   * (vLLM's `stream_options.continuous_usage_stats`). Off, events carry nothing more.
   */
  runningUsage?: boolean;
  /**
   * Every event of a choice's answer carries `timings`: how long its prompt and generation have
   * taken so far (llama-server's `timings_per_token`); the final `usage` event carries the first
   * choice's. Off, no event carries them.
   */
  timings?: boolean;
  /**
   * Each choice reports its prompt's evaluation with `progress` events before its first output
   * (llama-server's `return_progress`), where the engine tells when its prompt is evaluated.
   */
  promptProgress?: boolean;
}

/**
 * A choice's times so far (see `GenerationRequest.timings`). The prompt's evaluation runs from when
 * the choice's cached prefix is known (or it got its slot) to when the engine says the prompt is
 * evaluated (or, where it cannot say, its first output); the generation from then on. Both are 0
 * until they have begun.
 */
export interface Timings {
  /** Prompt tokens reused from the cache, not evaluated (0 where the engine tells it only at the end). */
  cachedTokens: number;
  /** Prompt tokens evaluated (the prompt less its cached part). */
  promptTokens: number;
  promptMs: number;
  /** Tokens generated so far, and the milliseconds since the prompt was evaluated. */
  generatedTokens: number;
  generationMs: number;
}

/**
 * A choice's counts when one of its events was sent (see `GenerationRequest.runningUsage`): its
 * request's prompt and the tokens the choice has generated so far, the event's own included.
 */
export interface RunningUsage {
  promptTokens: number;
  completionTokens: number;
}

/** One token's log probability, and the most likely alternatives at its position. */
export interface TokenLogprob {
  /** The token's text (may be part of a character for byte tokens). */
  token: string;
  /** The token's raw bytes, which are exact even where `token` is not. */
  bytes: number[];
  /** Natural log; null only for the first prompt token, which nothing predicts. */
  logprob: number | null;
  /** Set when the token is known to lie outside the 20 most likely (dialects that floor those, e.g. −9999). */
  outsideTop20?: true;
  /**
   * A control token's name in the vocabulary (`<|im_end|>`): such a token has neither text nor bytes,
   * so this is all that tells two of them apart. Absent for every other token, and where unknown.
   */
  special?: string;
  top: Array<{ token: string; bytes: number[]; logprob: number; special?: string }>;
}

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter";

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  cachedTokens: number;
  /** Completion tokens spent thinking (they are part of completionTokens). */
  reasoningTokens: number;
}

/** The kinds of part an answer is made of; each opens, receives deltas and closes. */
export type PartKind = "reasoning" | "text" | "tool-call";

/**
 * What a generation produces, per choice, in order. Each part of an answer (its thinking, its text,
 * each tool call) is bracketed: `part-start` before its first delta and `part-end` once nothing
 * more will be added to it, so a renderer that announces items (the Responses stream) needs no
 * look-ahead. A tool call's start is its `tool-call` event, which carries its id and name.
 */
export type GenerationEvent =
  | { type: "part-start"; choice: number; part: "reasoning" | "text" }
  | {
      type: "part-end";
      choice: number;
      part: PartKind;
      /** The call's index, for tool calls. */
      index?: number;
      /** The token budget ran out inside this part (a call cut short has unusable arguments). */
      incomplete?: boolean;
    }
  | { type: "text"; choice: number; text: string; logprobs?: TokenLogprob[]; running?: RunningUsage; timings?: Timings }
  /** A tool call begins: its position among this choice's calls, a fresh id and the function name. */
  | { type: "tool-call"; choice: number; index: number; id: string; name: string; running?: RunningUsage; timings?: Timings }
  /** More of a tool call's arguments (JSON text; the pieces concatenate to the whole object). */
  | { type: "tool-call-arguments"; choice: number; index: number; text: string; running?: RunningUsage; timings?: Timings }
  /** Thinking, kept apart from the answer. */
  | { type: "reasoning"; choice: number; text: string; logprobs?: TokenLogprob[]; running?: RunningUsage; timings?: Timings }
  /** The prompt itself, for echo; sent before the choice's first text. */
  | { type: "prompt"; choice: number; text: string; logprobs?: TokenLogprob[]; running?: RunningUsage; timings?: Timings }
  | { type: "finish"; choice: number; reason: FinishReason; running?: RunningUsage; timings?: Timings }
  /**
   * The choice's prompt evaluation (see `GenerationRequest.promptProgress`): of its `total` tokens,
   * `cached` came from the cache and `processed` are in its sequence now, `ms` after it began.
   */
  | { type: "progress"; choice: number; total: number; cached: number; processed: number; ms: number; timings?: Timings }
  /** `timings`: the first choice's, when the request asked for them. */
  | { type: "usage"; usage: Usage; timings?: Timings };

export interface ModelDescription {
  id: string;
  created: number;
  ownedBy: string;
  contextSize: number;
  /** Size the model was trained with, from its metadata. */
  trainedContextSize?: number;
  parallel: number;
  /**
   * The chat template has a thinking section that requests can switch off and bound. Undefined:
   * not known here (a remote upstream's model); dialects then let thinking controls through and
   * leave refusing them to the upstream.
   */
  reasoning?: boolean;
  /**
   * An opaque identity of the weights and the engine build serving them (e.g. a hash of the model
   * file's size and mtime with the inference library's version): equal across restarts of the same
   * setup, different when either changes. Dialects that report a system fingerprint derive it here.
   */
  fingerprint?: string;
  /**
   * The chat template's text that renders this model's chat prompts (the model file's Jinja
   * template), where the engine renders with it; undefined otherwise (a built-in prompt format, an
   * upstream's model).
   */
  chatTemplate?: string;
}
