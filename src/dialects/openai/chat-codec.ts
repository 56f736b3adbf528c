import { SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import type { FieldNamer } from "../../core/errors.ts";
import type { GenerationEvent, Usage } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import type { ChatCompletionRequest } from "./chat-protocol.ts";
import type { CompletionMeta } from "./chat-to-wire.ts";
import { OPENAI_SAMPLING_DEFAULTS, type SamplingDefaults } from "./sampling-fields.ts";

/**
 * What a vendor whose API is OpenAI's Chat Completions with other defaults and a few other fields
 * changes: it passes its own codec to `chatCompletion` instead of copying the route.
 */
export interface ChatCodec {
  /** Named in the request context (logs, metrics). */
  dialect: string;
  /** Values a request that leaves a sampling field out gets. */
  samplingDefaults: SamplingDefaults;
  /**
   * When a stream reports usage: only when `stream_options.include_usage` asks (OpenAI), or always,
   * on a chunk of its own after the last choice finishes.
   */
  streamUsage: "on-request" | "always";
  systemFingerprint: () => string;
  /** Prefix of completion ids; default `chatcmpl-`. */
  idPrefix?: string;
  /** Usage rides on the chunk that carries the last finish_reason (every earlier chunk has `usage: null`). */
  usageOnFinishChunk?: boolean;
  /** Reshapes the chat.completion object (a vendor's field set); what is stored keeps OpenAI's shape. */
  completionToWire?: (completion: Record<string, unknown>) => Record<string, unknown>;
  /** Reshapes each chat.completion.chunk before it is sent. */
  chunkToWire?: (chunk: Record<string, unknown>) => Record<string, unknown>;
  /**
   * A failure after the stream began, as data events the vendor sends instead of OpenAI's error event;
   * `[DONE]` follows them. `spent`: what the generation had used when it failed, as the ledger books
   * it (its prompt only once a choice had started).
   */
  streamError?: (err: unknown, meta: CompletionMeta, names: FieldNamer, spent: Usage) => unknown[];
  /**
   * Every failure once the request was admitted is said inside the stream (with `streamError`), even
   * one before the first token: for a dialect whose streams document no other error form. Otherwise
   * the stream's head waits for the first event, and a failure before it has its own status.
   */
  inBandStreamErrors?: boolean;
  /**
   * Answers in another format (Konan's `output_parser`), or undefined for the chat completion. Called
   * once the generation has started; the events are the generation's (stored as a chat completion
   * when they run to the end and the request asked for storage).
   */
  respond?: (answer: ChatAnswer) => Promise<RouteResult | undefined> | RouteResult | undefined;
  /** The `service_tier` every answer names (OpenAI always sends one); absent: only when the request names one. */
  serviceTier?: string;
}

/** A started chat completion, as `ChatCodec.respond` gets it. */
export interface ChatAnswer {
  body: ChatCompletionRequest;
  env: RouteEnv;
  meta: CompletionMeta;
  events: AsyncIterable<GenerationEvent>;
  names: FieldNamer;
  /** What the generation has used so far (a failed answer reports it). */
  spent: () => Usage;
}

export const OPENAI_CHAT_CODEC: ChatCodec = {
  dialect: "openai",
  samplingDefaults: OPENAI_SAMPLING_DEFAULTS,
  streamUsage: "on-request",
  systemFingerprint: () => SYSTEM_FINGERPRINT,
  serviceTier: "default",
};
