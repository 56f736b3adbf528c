/**
 * One error type for every failure a client can cause or observe. Dialects render it into their own
 * envelope; the HTTP layer never has to guess a status code from a message.
 *
 * Errors raised below the dialects (core, engines) cannot know how a dialect spells a field, so they
 * name a canonical field (`field`): a path into the canonical request, such as `maxTokens`,
 * `logitBias`, `tools[2].parameters`, `prompt.messages[0].toolCallId` or `inputs[3][5]`. The
 * dialect that received the request turns it into its wire name (`param`) before rendering, with
 * `withWireParam`. Errors a dialect raises itself carry `param` directly.
 */
export type ErrorType =
  | "invalid_request_error"
  | "rate_limit_error"
  /** A spent quota (an API key's token budget): OpenAI's type, a 429 like a rate limit. */
  | "insufficient_quota"
  | "service_unavailable_error"
  | "server_error";

export interface ApiErrorOptions {
  type?: ErrorType;
  /** The request field at fault, as the dialect spells it on the wire. */
  param?: string | null;
  /** The canonical field at fault, for errors raised below the dialect. */
  field?: string | null;
  code?: string | null;
  /** Extra response headers (Retry-After for 429/503). */
  headers?: Record<string, string>;
  /** Why the request could not run, in words a dialect with its own finish reasons can map (e.g. "overloaded", "shutdown"). */
  reason?: string;
}

export class ApiError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly param: string | null;
  readonly field: string | null;
  readonly code: string | null;
  readonly headers: Record<string, string>;
  readonly reason: string | null;

  constructor(status: number, message: string, opts: ApiErrorOptions = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = opts.type ?? defaultType(status);
    this.param = opts.param ?? null;
    this.field = opts.field ?? null;
    this.code = opts.code ?? null;
    this.headers = opts.headers ?? {};
    this.reason = opts.reason ?? null;
  }

  /** A copy whose wire parameter is set (the message stays as raised). */
  withParam(param: string | null): ApiError {
    return new ApiError(this.status, this.message, {
      type: this.type,
      param,
      field: this.field,
      code: this.code,
      headers: this.headers,
      reason: this.reason ?? undefined,
    });
  }
}

/**
 * A server-side failure's message with the request id in it, so a user who reports it can quote the
 * id that finds the log line; client errors are returned as they are.
 */
export function quoteRequestId(err: ApiError, requestId: string): ApiError {
  if (err.status < 500 || err.message.includes(requestId)) return err;
  return new ApiError(err.status, `${err.message} (request id: ${requestId})`, {
    type: err.type,
    param: err.param,
    field: err.field,
    code: err.code,
    headers: err.headers,
    reason: err.reason ?? undefined,
  });
}

/** OpenAI's types: a 404 (unknown model, response, file) is an invalid_request_error there too. */
function defaultType(status: number): ErrorType {
  if (status === 429) return "rate_limit_error";
  if (status === 503) return "service_unavailable_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

/** A dialect's mapping from canonical field paths to its wire names; null when it has no such field. */
export type FieldNamer = (field: string) => string | null;

/**
 * Resolves a canonical field into the dialect's wire name. Messages raised below the dialect refer
 * to the field by its wire name too: they are written with `{field}` placeholders that this fills.
 */
export function withWireParam(err: unknown, name: FieldNamer): unknown {
  if (!(err instanceof ApiError) || err.field === null || err.param !== null) return err;
  const param = name(err.field);
  const message = err.message.replaceAll(FIELD_MARK, param ?? err.field);
  const out = new ApiError(err.status, message, {
    type: err.type,
    param,
    field: err.field,
    code: err.code,
    headers: err.headers,
    reason: err.reason ?? undefined,
  });
  return out;
}

/** Where a message mentions its own field: filled with the wire name by `withWireParam`. */
export const FIELD_MARK = "{field}";

/** A 400 about a canonical field; `message` may say `{field}` where the field's wire name belongs. */
export const invalidField = (message: string, field: string, code: string | null = null) =>
  new ApiError(400, message, { field, code });

/** A 400 raised by a dialect, naming its own wire parameter. */
export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, { param, code });

/** A request field Plinth recognises but does not honour yet: refused rather than silently dropped. */
export const unsupportedField = (param: string, why = "is not supported by this server yet") =>
  new ApiError(400, `'${param}' ${why}.`, { param, code: "unsupported_parameter" });

export const modelNotFound = (model: string) =>
  new ApiError(404, `The model '${model}' does not exist or is not served here.`, {
    field: "model",
    code: "model_not_found",
  });

/** camelCase canonical path → snake_case wire path, the default spelling of OpenAI-style dialects. */
export function snakeCasePath(field: string): string {
  return field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** The 400 a generation request gets from a model that can only embed. */
export function embeddingOnlyModel(id: string): ApiError {
  return new ApiError(
    400,
    `The model '${id}' is an embedding model; it serves embeddings only and cannot generate text.`,
    { field: "model", code: "model_not_supported" },
  );
}

/**
 * Why a generation stopped when its client went away before the response ended: nobody reads it,
 * but metrics and logs count it under its own code (nginx's 499, "client closed request") rather
 * than as a server error, and a stored response says it was cancelled.
 */
export function clientClosed(): ApiError {
  return new ApiError(499, "The client closed the connection before the response was complete.", { code: "client_closed" });
}

export function isClientClosed(err: unknown): boolean {
  return err instanceof ApiError && err.status === 499 && err.code === "client_closed";
}
