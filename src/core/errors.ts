/**
 * One error type for every failure a client can cause or observe. Dialects render it into their own
 * envelope; the HTTP layer never has to guess a status code from a message.
 */
export type ErrorType =
  | "invalid_request_error"
  | "not_found_error"
  | "rate_limit_error"
  | "service_unavailable_error"
  | "server_error";

export class ApiError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly param: string | null;
  readonly code: string | null;
  /** Extra response headers (Retry-After for 429/503). */
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    message: string,
    opts: { type?: ErrorType; param?: string | null; code?: string | null; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = opts.type ?? defaultType(status);
    this.param = opts.param ?? null;
    this.code = opts.code ?? null;
    this.headers = opts.headers ?? {};
  }
}

function defaultType(status: number): ErrorType {
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status === 503) return "service_unavailable_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, { param, code });

/** A request field Plinth recognises but does not honour yet: refused rather than silently dropped. */
export const unsupportedField = (param: string, why = "is not supported by this server yet") =>
  new ApiError(400, `'${param}' ${why}.`, { param, code: "unsupported_parameter" });

export const modelNotFound = (model: string) =>
  new ApiError(404, `The model '${model}' does not exist or is not served here.`, {
    param: "model",
    code: "model_not_found",
  });
