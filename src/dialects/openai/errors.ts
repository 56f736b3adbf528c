import { type ApiError, type FieldNamer, snakeCasePath } from "../../core/errors.ts";
import type { ErrorEnvelope } from "../../http/error-envelope.ts";
import { asWireError } from "../../http/error-envelope.ts";

/** OpenAI's error envelope. */
export function openAIErrorBody(err: ApiError) {
  return { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
}

/** Canonical fields that reach the handler unnamed get snake_case names, OpenAI's spelling. */
export const OPENAI_ENVELOPE: ErrorEnvelope = { render: openAIErrorBody, fieldNames: snakeCasePath };

/** An error after a stream began: a final data event holding the envelope. */
export function openAIErrorEvent(err: unknown, names: FieldNamer = snakeCasePath) {
  return { data: openAIErrorBody(asWireError(err, names)) };
}
