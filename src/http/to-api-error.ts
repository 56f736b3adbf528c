import { z } from "zod";
import { ApiError } from "../core/errors.ts";
import { formatPath } from "../core/field-path.ts";
import { uriTooLong } from "./path-segments.ts";

/**
 * Maps anything thrown while handling a request to an ApiError. Client mistakes caught by Fastify
 * (bad JSON, oversized bodies) or zod keep their 4xx meaning; only genuine faults become 500s.
 *
 * `body` is the parsed request body when there is one: a validation message then says what the
 * client actually sent ("expected number, got the string "2"") and calls a field required only when
 * it is really absent.
 */
export function toApiError(err: unknown, body?: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof z.ZodError) return fromZod(err, body);
  const e = err as { code?: string; statusCode?: number; message?: string };
  switch (e.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ApiError(413, "The request body is larger than this server accepts.", { code: "request_too_large" });
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new ApiError(400, "The request body is empty; send a JSON object.", { code: "invalid_json" });
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ApiError(415, "Send the request body as JSON, with 'Content-Type: application/json'.", { code: "unsupported_media_type" });
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new ApiError(400, "The Content-Length header does not match the body.", { code: "invalid_request" });
    case "FST_ERR_CTP_INVALID_JSON_BODY":
      return new ApiError(400, "The request body is not valid JSON.", { code: "invalid_json" });
    case "FST_ERR_BAD_URL":
      return new ApiError(400, "The URL is not valid: it has a malformed percent-encoding (such as '%ZZ').", { code: "invalid_url" });
    case "FST_ERR_MAX_PARAM_LENGTH":
      return uriTooLong();
  }
  if (typeof e.statusCode === "number" && e.statusCode >= 400 && e.statusCode < 500)
    return new ApiError(e.statusCode, e.message ?? "Bad request.");
  const store = storeUnavailable(e.code, e.message);
  if (store) return store;
  return new ApiError(500, "The server failed while handling this request.", { code: "internal_error" });
}

/**
 * What SQLite says when the store cannot be used for a while (a full disk, an I/O error, a file
 * made read-only, a lock another process held past the busy timeout), by the start of its code
 * (better-sqlite3 reports extended codes such as SQLITE_IOERR_WRITE). None of these is the
 * request's fault or a bug; the same request may well succeed once the operator has made room.
 */
const STORE_UNAVAILABLE: Array<[prefix: string, why: string]> = [
  ["SQLITE_FULL", "its disk is full"],
  ["SQLITE_IOERR", "the disk reported an I/O error"],
  ["SQLITE_READONLY", "its database file cannot be written"],
  ["SQLITE_BUSY", "another process holds its database locked"],
  ["SQLITE_LOCKED", "another process holds its database locked"],
  ["SQLITE_CANTOPEN", "a file it needs cannot be opened"],
];

/** How long a client is told to wait before it tries again: an operator has to act first. */
const STORE_RETRY_AFTER_S = "30";

/**
 * A 503 `store_unavailable` for an error of the store that waiting may cure; undefined for any
 * other error. Every route's failure comes through toApiError, so every dialect answers it in its
 * own envelope (and a stream ends with its own error event) without a route knowing about SQLite.
 * SQLite's own words stay in the message: the request log keeps only the message of a 503.
 */
function storeUnavailable(code: string | undefined, message: string | undefined): ApiError | undefined {
  if (typeof code !== "string") return undefined;
  const known = STORE_UNAVAILABLE.find(([prefix]) => code === prefix || code.startsWith(`${prefix}_`));
  if (!known) return undefined;
  return new ApiError(503, `The server cannot use its store now (${known[1]}: ${message ?? code}); try again later.`, {
    code: "store_unavailable",
    headers: { "retry-after": STORE_RETRY_AFTER_S },
  });
}

function fromZod(err: z.ZodError, body: unknown): ApiError {
  const { path, issue } = resolveIssue(err.issues[0], err.issues[0].path, body);
  // A key a strict object does not define is named itself, not the object that holds it, with the
  // code of an unknown top-level field (unknown-fields.ts): a client tells one kind of mistake by one
  // code, however deep the key is (`input[0].content[0].foo`).
  if (issue.code === "unrecognized_keys" && issue.keys.length > 0) {
    // A long key is cut, as at the top level (unknown-fields.ts): a megabyte key was sent back twice.
    const key = issue.keys[0];
    const param = formatPath([...path, key.length > 64 ? `${key.slice(0, 64)}…` : key]);
    return new ApiError(400, `Invalid '${param}': this request does not take that field here.`, { param, code: "unknown_field" });
  }
  // A record's key that breaks its rule: the key's own rule is said (zod's issue says only "Invalid
  // key in record"), and the field is the key's path, or the record's for an empty key (not
  // 'metadata.').
  if (issue.code === "invalid_key") {
    const inner = (issue as { issues?: Issue[] }).issues?.[0];
    const key = String(path.at(-1) ?? "");
    const param = formatPath(key === "" ? path.slice(0, -1) : path);
    const shown = JSON.stringify(key.length > 80 ? `${key.slice(0, 80)}…` : key);
    return new ApiError(400, `Invalid '${param}': the key ${shown} is not allowed: ${inner ? sentence(inner.message) : "keys must be strings."}`, {
      param: param || null,
      code: "invalid_value",
    });
  }
  const param = formatPath(path);
  const found = lookUp(body, path);
  if (!param && found === ABSENT) return new ApiError(400, "The request body is empty; send a JSON object.", { code: "invalid_json" });
  const where = param ? `'${param}'` : "request body";
  return new ApiError(400, `Invalid ${where}: ${describeIssue(issue, found)}`, { param: param || null, code: "invalid_value" });
}

type Issue = z.core.$ZodIssue;

/**
 * The issue to report and its full path. A union's own issue ("Invalid input") says nothing; the
 * branch that got furthest does: one whose value had the right type but failed deeper in (a content
 * part without its text, an array that is too long). When every branch refused the value's type, the
 * union issue is kept and described as a list of the types that would do.
 */
function resolveIssue(issue: Issue, path: readonly PropertyKey[], body: unknown): { path: PropertyKey[]; issue: Issue } {
  if (issue.code === "invalid_union") {
    const branches = (issue as { errors?: Issue[][] }).errors ?? [];
    // Of the branches the value got into, a branch whose shape it has (its complaint is not about a
    // type: too many items, a bad value) names the real mistake; else the one it got furthest in
    // (["a", 5] is a list of strings gone wrong at [1], not a list of numbers gone wrong at [0]).
    const found = lookUp(body, path);
    const candidates = branches.map((b) => b[0]).filter((b) => b !== undefined && !refusesType(b, found));
    // A fraction where an integer belongs has the right type, only not the right value: [1.5] is a
    // list of token ids gone wrong, not a list of strings.
    const shaped = (b: Issue) => b.code !== "invalid_type" || (b.expected === "int" && typeof lookUp(body, [...path, ...b.path]) === "number");
    const better = (b: Issue, best: Issue) => (shaped(b) !== shaped(best) ? shaped(b) : furtherThan(b.path, best.path));
    const deeper = candidates.reduce<Issue | undefined>((best, b) => (best === undefined || better(b, best) ? b : best), undefined);
    if (deeper) return resolveIssue(deeper, [...path, ...deeper.path], body);
  }
  return { path: [...path], issue };
}

/**
 * Whether a branch's issue only says the value has the wrong type for that branch. An enum or literal
 * branch says so as "invalid option" (zod's invalid_value), not as invalid_type: without this, an
 * object sent where a string enum or an object will do (`tool_choice: {type: "function"}` without
 * its `function`) was reported as "expected one of none|auto|required", not as the missing field.
 */
function refusesType(issue: Issue, found: unknown): boolean {
  if (issue.path.length > 0) return false;
  if (issue.code === "invalid_type") return true;
  if (issue.code !== "invalid_value" || found === ABSENT) return false;
  const kind = (v: unknown) => (v === null ? "null" : typeof v);
  return !issue.values.some((v) => kind(v) === kind(found));
}

/** Whether path `a` reaches further into the value than `b` (deeper, or at a later index). */
function furtherThan(a: readonly PropertyKey[], b: readonly PropertyKey[]): boolean {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] === b[i]) continue;
    return typeof a[i] === "number" && typeof b[i] === "number" ? (a[i] as number) > (b[i] as number) : false;
  }
  return a.length > b.length;
}

const ABSENT = Symbol("absent");

/** The value at `path` in the parsed body, or ABSENT when the field is not there (or no body is known). */
function lookUp(body: unknown, path: readonly PropertyKey[]): unknown {
  let at: unknown = body;
  if (at === undefined) return ABSENT;
  for (const key of path) {
    if (at === null || typeof at !== "object") return ABSENT;
    if (!Object.prototype.hasOwnProperty.call(at, key as PropertyKey)) return ABSENT;
    at = (at as Record<PropertyKey, unknown>)[key as PropertyKey];
  }
  return at === undefined ? ABSENT : at;
}

function describeIssue(issue: Issue, found: unknown): string {
  const absent = found === ABSENT;
  switch (issue.code) {
    case "invalid_union": {
      const expected = unionTypes(issue);
      // Nothing there at all (a message without its role, a completion without its prompt): it is
      // missing, whatever it should be. zod 4 says so on each branch, not on the union's own issue.
      if (absent && (issue.message.endsWith("received undefined") || everyBranchGotUndefined(issue) || expected === "a different value" || discriminatorOptions(issue)))
        return "this field is required.";
      return absent ? `expected ${expected}.` : `expected ${expected}, got ${describeValue(found)}.`;
    }
    case "invalid_type": {
      // Without the body, zod's own message still tells an absent field ("received undefined").
      if (absent && (issue.message.endsWith("received undefined") || issue.message.endsWith("received"))) return "this field is required.";
      const expected = typeName(issue.expected);
      if (absent) return sentence(issue.message);
      if (typeof found === "number" && !Number.isFinite(found)) return `expected ${expected}, got a number too large to represent.`;
      return `expected ${expected}, got ${describeValue(found)}.`;
    }
    case "too_big":
    case "too_small": {
      const limit = boundText(Number(issue.code === "too_big" ? issue.maximum : issue.minimum));
      const bound = issue.code === "too_big" ? (issue.inclusive === false ? "less than" : "at most") : issue.inclusive === false ? "more than" : "at least";
      if (Array.isArray(found)) return `has ${found.length} items; it must have ${bound} ${limit}.`;
      if (typeof found === "string") return `is ${[...found].length} characters long; it must be ${bound} ${limit} characters.`;
      if (typeof found === "number") return `is ${found}; it must be ${bound} ${limit}.`;
      if (found && typeof found === "object") return `has ${Object.keys(found).length} entries; it must have ${bound} ${limit}.`;
      return sentence(issue.message);
    }
    case "invalid_value":
      return absent ? sentence(issue.message) : `${sentence(issue.message).slice(0, -1)}; got ${describeValue(found)}.`;
    case "custom":
      // A custom type check ("expected an object": a schema, logit_bias, metadata) says what came
      // instead, as a zod type check does.
      if (issue.message.startsWith("expected "))
        return absent ? "this field is required." : `${issue.message}, got ${describeValue(found)}.`;
      return sentence(issue.message);
    default:
      return sentence(issue.message);
  }
}

/**
 * A bound as the client reads it. int64's bounds are checked as the doubles ±2^63 (see seedSchema),
 * which print as 9223372036854776000: written as int64's own.
 */
function boundText(limit: number): string {
  if (limit === 2 ** 63) return "9223372036854775807";
  if (limit === -(2 ** 63)) return "-9223372036854775808";
  return String(limit);
}

/** Whether every branch of a union refused the value as undefined: the field was not sent. */
function everyBranchGotUndefined(issue: Issue): boolean {
  const branches = (issue as { errors?: Issue[][] }).errors ?? [];
  return branches.length > 0 && branches.every((b) => b[0]?.code === "invalid_type" && b[0].message.endsWith("received undefined"));
}

/**
 * The values a discriminated union's key takes, when none matched: zod lists them on the issue, and
 * the message names them ("expected "system" or "user" …") rather than "a different value".
 */
function discriminatorOptions(issue: Issue): unknown[] | undefined {
  const options = (issue as { options?: unknown }).options;
  return Array.isArray(options) && options.length > 0 ? options : undefined;
}

function unionTypes(issue: Issue): string {
  const options = discriminatorOptions(issue);
  if (options) return options.map((v) => JSON.stringify(v)).join(" or ");
  const branches = (issue as { errors?: Issue[][] }).errors ?? [];
  const names = new Set<string>();
  for (const b of branches) {
    const first = b[0];
    if (first?.code === "invalid_type") names.add(typeName(first.expected));
    else if (first?.code === "invalid_value") names.add(first.values.map((v) => JSON.stringify(v)).join(" or "));
  }
  return names.size > 0 ? [...names].join(" or ") : "a different value";
}

const TYPE_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  boolean: "a boolean",
  array: "an array",
  object: "an object",
  record: "an object",
  null: "null",
  bigint: "an integer",
};

function typeName(expected: string): string {
  return TYPE_NAMES[expected] ?? expected;
}

/** A short, safe description of a value the client sent. */
export function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return `an array of ${v.length} items`;
  switch (typeof v) {
    case "string": {
      const shown = v.length > 40 ? `${JSON.stringify(v.slice(0, 40)).slice(0, -1)}…"` : JSON.stringify(v);
      return `the string ${shown}`;
    }
    case "number":
      return Number.isInteger(v) ? `the integer ${v}` : `the number ${v}`;
    case "boolean":
      return `the boolean ${v}`;
    case "object":
      return "an object";
    default:
      return typeof v;
  }
}

function sentence(message: string): string {
  return message.endsWith(".") ? message : `${message}.`;
}
