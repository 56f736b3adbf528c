import type { ApiError } from "../../core/errors.ts";

/** OpenAI's error envelope. */
export function openAIErrorBody(err: ApiError) {
  return { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
}
