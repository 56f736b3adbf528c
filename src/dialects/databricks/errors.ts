import { type ApiError, type FieldNamer, snakeCasePath } from "../../core/errors.ts";
import { asWireError, type ErrorEnvelope, isNoRoute } from "../../http/error-envelope.ts";

/**
 * Databricks' REST error envelope: `{"error_code": "...", "message": "..."}`. The code follows the
 * HTTP status; an ApiError raised with a Databricks-style code (upper snake case) keeps its own.
 */
const BY_STATUS: Record<number, string> = {
  400: "INVALID_PARAMETER_VALUE",
  401: "UNAUTHENTICATED",
  403: "PERMISSION_DENIED",
  404: "RESOURCE_DOES_NOT_EXIST",
  405: "BAD_REQUEST",
  409: "RESOURCE_ALREADY_EXISTS",
  // A request the server cannot take as sent (too large, wrong media type, wrong method): no
  // parameter is at fault, so Databricks' generic 400-class code, not INVALID_PARAMETER_VALUE.
  413: "BAD_REQUEST",
  414: "BAD_REQUEST",
  415: "BAD_REQUEST",
  429: "REQUEST_LIMIT_EXCEEDED",
  503: "TEMPORARILY_UNAVAILABLE",
  504: "DEADLINE_EXCEEDED",
  507: "RESOURCE_EXHAUSTED",
};

export function databricksErrorCode(err: ApiError): string {
  if (err.code && /^[A-Z][A-Z_]+$/.test(err.code)) return err.code;
  // A path no API has: Databricks' own code for it, so that a mistyped route is not read as a
  // serving endpoint or model that does not exist (RESOURCE_DOES_NOT_EXIST).
  if (isNoRoute(err)) return "ENDPOINT_NOT_FOUND";
  return BY_STATUS[err.status] ?? (err.status >= 500 ? "INTERNAL_ERROR" : "BAD_REQUEST");
}

/** The envelope body. The parameter at fault, when known, is named in the message. */
export function databricksErrorBody(err: ApiError) {
  const message = err.param && !err.message.includes(err.param) ? `${err.message} (parameter: ${err.param})` : err.message;
  return { error_code: databricksErrorCode(err), message };
}

export const DATABRICKS_ENVELOPE: ErrorEnvelope = { render: databricksErrorBody, fieldNames: snakeCasePath };

/**
 * The data plane's envelope (/serving-endpoints, where OpenAI clients are pointed): Databricks' two
 * fields, and the same again as an `error` object. The OpenAI SDKs read only `error`: without it an
 * HTTP error reached their users as "400 status code (no body)", and a failure inside a stream was
 * handed on as a chunk with no `choices`, the stream looking finished. The control plane keeps the
 * plain envelope.
 */
export function databricksDataPlaneErrorBody(err: ApiError) {
  const body = databricksErrorBody(err);
  return { ...body, error: { code: body.error_code, message: body.message } };
}

export const DATABRICKS_DATA_PLANE_ENVELOPE: ErrorEnvelope = { render: databricksDataPlaneErrorBody, fieldNames: snakeCasePath };

/** An error after a stream began: its last data event holds the data plane's envelope. */
export function databricksStreamErrorBody(err: unknown, names: FieldNamer = snakeCasePath) {
  return databricksDataPlaneErrorBody(asWireError(err, names));
}

export function databricksErrorEvent(err: unknown, names: FieldNamer = snakeCasePath) {
  return { data: databricksStreamErrorBody(err, names) };
}
