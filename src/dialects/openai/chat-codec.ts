import { SYSTEM_FINGERPRINT } from "../../core/ids.ts";
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
}

export const OPENAI_CHAT_CODEC: ChatCodec = {
  dialect: "openai",
  samplingDefaults: OPENAI_SAMPLING_DEFAULTS,
  streamUsage: "on-request",
  systemFingerprint: () => SYSTEM_FINGERPRINT,
};
