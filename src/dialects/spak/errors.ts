import type { ErrorEnvelope } from "../../http/error-envelope.ts";
import { asWireError } from "../../http/error-envelope.ts";
import { openAIErrorBody } from "../openai/errors.ts";
import { spakFieldNames } from "./field-names.ts";

/**
 * SpAk documents no error body; Plinth answers in OpenAI's envelope `{error: {message, type, param,
 * code}}` (the shape DeepSeek-style clients read), with SpAk's field names.
 */
export const SPAK_ENVELOPE: ErrorEnvelope = { render: openAIErrorBody, fieldNames: spakFieldNames };

/** An error after the stream began: a final data event holding the envelope. */
export function spakErrorEvent(err: unknown) {
  return { data: openAIErrorBody(asWireError(err, spakFieldNames)) };
}
