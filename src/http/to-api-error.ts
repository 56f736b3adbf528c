import { z } from "zod";
import { ApiError } from "../core/errors.ts";
import { formatPath } from "../core/field-path.ts";

/**
 * Maps anything thrown while handling a request to an ApiError. Client mistakes caught by Fastify
 * (bad JSON, oversized bodies) or zod keep their 4xx meaning; only genuine faults become 500s.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof z.ZodError) return fromZod(err);
  const e = err as { code?: string; statusCode?: number; message?: string };
  switch (e.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ApiError(413, "The request body is larger than this server accepts.", { code: "request_too_large" });
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new ApiError(400, "The request body is empty; send a JSON object.", { code: "invalid_json" });
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ApiError(415, "Send the request body as application/json.", { code: "unsupported_media_type" });
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new ApiError(400, "The Content-Length header does not match the body.", { code: "invalid_request" });
  }
  if (err instanceof SyntaxError || e.code === "FST_ERR_CTP_INVALID_JSON_BODY")
    return new ApiError(400, `The request body is not valid JSON: ${e.message}`, { code: "invalid_json" });
  if (typeof e.statusCode === "number" && e.statusCode >= 400 && e.statusCode < 500)
    return new ApiError(e.statusCode, e.message ?? "Bad request.");
  return new ApiError(500, "The server failed while handling this request.", { code: "internal_error" });
}

function fromZod(err: z.ZodError): ApiError {
  const issue = err.issues[0];
  const param = formatPath(issue.path);
  const where = param ? `'${param}'` : "the request body";
  return new ApiError(400, `Invalid ${where}: ${describeIssue(issue)}`, { param: param || null, code: "invalid_value" });
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === "invalid_union" && "note" in issue === false) {
    const first = (issue as { errors?: z.core.$ZodIssue[][] }).errors?.[0]?.[0];
    if (first) return describeIssue(first);
  }
  if (issue.code === "invalid_type" && issue.input === undefined) return "this field is required.";
  return issue.message.endsWith(".") ? issue.message : `${issue.message}.`;
}
