import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { ApiError } from "../core/errors.ts";
import { type ErrorEnvelope, installErrorEnvelope } from "../http/error-envelope.ts";
import { PROTO_HOLDERS } from "../http/proto-keys.ts";
import type { TenancyStore, UsageGroup } from "../store/tenancy-store.ts";
import { createManagedKey, keyToJson, presentedKey } from "./keys.ts";

export interface AdminOptions {
  store: TenancyStore;
  /** The admin key; none: the admin API answers 403 to everything. */
  adminKey: string | undefined;
  envelope: ErrorEnvelope;
  /** Told of each key revoked here, once it is stored: the key's requests still running are ended. */
  revoked?: (id: string) => void;
}

const limit = z.int().min(1).nullable().optional();

/** Models one key may be limited to, at most: the list is read on every request the key makes. */
const MAX_KEY_MODELS = 1000;

/** C0 and C1 control characters and Unicode's line and paragraph separators: each can break a log line. */
const LINE_BREAKING = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/**
 * Unicode's bidirectional controls (embeddings, overrides, isolates and marks): invisible, and they
 * reorder the text shown after them, so a name holding one can display as another name.
 */
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/**
 * Characters that show nothing, or nothing of their own: format characters (zero-width spaces and
 * joiners, the soft hyphen, tags), the code points Unicode says renderers ignore (variation
 * selectors, Hangul fillers), private-use and unassigned code points, and lone surrogates. Any of
 * them lets two names that differ display alike ("ali\u200bce" reads as "alice").
 */
const INVISIBLE = /[\p{Cf}\p{Default_Ignorable_Code_Point}\p{Co}\p{Cn}\p{Cs}]/u;

/** The first invisible character of a value, as "U+200B", for a message that says which. */
function invisibleIn(value: string): string | undefined {
  const found = INVISIBLE.exec(value)?.[0];
  return found === undefined ? undefined : `U+${found.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/**
 * What every name of a key's record must be: shown in logs, tables and the console, one line in
 * which what is seen is what is stored. `what` begins the messages ("It", "A model name").
 */
function printable(schema: z.ZodString, what: string) {
  return schema
    .refine((v) => !LINE_BREAKING.test(v), `${what} must not contain control characters or line breaks (such as a newline or U+2028).`)
    .refine((v) => !BIDI_CONTROLS.test(v), `${what} must not contain bidirectional control characters (such as U+202E), which make a name display as another.`)
    .check((ctx) => {
      const found = invisibleIn(ctx.value);
      if (found === undefined) return;
      ctx.issues.push({
        code: "custom",
        input: ctx.value,
        message: `${what} must not contain invisible or format characters (found ${found}), which let two different names display alike.`,
      });
    });
}

/** A key's name: shown in logs (`key_name`), `plinth keys list` and the console, so one printable line. */
export const keyName = printable(
  z
    .string()
    // Before the trim, so that a name of spaces is told so (after it, the length message counted them).
    .refine((v) => v.trim() !== "", { message: "It must not be empty or only whitespace.", abort: true })
    .trim()
    .max(200),
  "It",
);

/**
 * One model a key may use. Compared exactly with the names requests give, so whitespace at either
 * end (invisible in a list) would make an entry that never matches.
 */
const keyModel = printable(
  z
    .string()
    .min(1)
    .max(200)
    .refine((v) => v.trim() === v, "A model name must not begin or end with whitespace."),
  "A model name",
);

/** The models a key may use. Shared with `plinth keys create`, which writes to the same store. */
export const keyModels = z
  .array(keyModel)
  .min(1)
  .max(MAX_KEY_MODELS)
  .refine((v) => new Set(v).size === v.length, "A model is named twice.");

/** POST /admin/keys: every field Plinth knows; anything else is refused (strict). */
export const createKeyRequest = z.strictObject({
  name: keyName,
  models: keyModels.nullable().optional(),
  rpm: limit,
  tpm: limit,
  max_concurrency: limit,
  budget_tokens: limit,
  /** Unix seconds, or an ISO 8601 date or time. */
  expires_at: z.union([z.int().min(0), z.string().min(1)]).nullable().optional(),
});

/**
 * The query of every admin route but GET /admin/usage: none (every key fits one answer, a create's
 * settings are its body). A parameter there is a 400 naming it, never dropped: `POST
 * /admin/keys?models=tiny` made a key for every model, `DELETE /admin/keys/ID?dry_run=true` revoked.
 */
export const noQuery = z.strictObject({});

export const usageQuery = z.strictObject({
  from: z.string().min(1).optional(),
  to: z.string().min(1).optional(),
  group_by: z.enum(["key", "model", "day"]).optional(),
});

/** A date, or a date and time with an optional zone, as ISO 8601 writes them. */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

/** Whether the date part names a real day: Date.parse rolls 2027-02-30 over to 2 March. */
function isCalendarDate(value: string): boolean {
  const [y, m, d] = value.slice(0, 10).split("-").map(Number);
  const day = new Date(Date.UTC(y, m - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d;
}

/**
 * An ISO 8601 time with no offset, read as UTC. JavaScript reads a bare date as UTC but a date and
 * time as the server's local time, so "2026-12-01" and "2026-12-01T00:00" would differ by the host's
 * zone; every time the admin API answers is UTC (Unix seconds), so UTC is what a bare time means.
 */
function asUtc(value: string): string {
  const iso = value.replace(" ", "T");
  return iso.length > 10 && !/(?:Z|[+-]\d{2}:?\d{2})$/i.test(iso) ? `${iso}Z` : iso;
}

/** The latest time a JavaScript Date holds (the year 275760), in Unix ms. */
const MAX_TIME_MS = 8.64e15;

/**
 * A time as the admin API and the CLI take it: Unix seconds, or an ISO 8601 date/time. Unix ms out.
 * A time past what a Date holds is refused: it would be stored as a float and shown as `1e+23`.
 */
export function parseTime(value: string | number, param: string): number {
  // Date.parse alone also takes "Dec 25 1995" or "2024 13": anything but ISO 8601 is refused here.
  const ms = typeof value === "number" || /^\d+$/.test(value) ? Number(value) * 1000 : ISO_8601.test(value) && isCalendarDate(value) ? Date.parse(asUtc(value)) : NaN;
  if (!Number.isFinite(ms) || ms > MAX_TIME_MS) {
    throw new ApiError(
      400,
      `Invalid '${param}': expected Unix seconds or an ISO 8601 date no later than the year 275760, got ${JSON.stringify(value)}.`,
      { param, code: "invalid_value" },
    );
  }
  return ms;
}

/** Usage totals between two times, grouped, in the admin API's JSON shape. */
export function usageReport(store: TenancyStore, q: z.infer<typeof usageQuery>) {
  const from = q.from === undefined ? 0 : parseTime(q.from, "from");
  const to = q.to === undefined ? Date.now() + 1 : parseTime(q.to, "to");
  // Both given and backwards is a slip worth naming; a future `from` alone is just an empty range.
  if (q.from !== undefined && q.to !== undefined && from > to)
    throw new ApiError(400, `Invalid 'from': it is later than 'to' (${q.to}), so the range [from, to) is empty.`, { param: "from", code: "invalid_value" });
  const groupBy: UsageGroup = q.group_by ?? "key";
  const data = store.usage(groupBy, from, to).map((r) => ({
    [groupBy]: r.group,
    requests: r.requests,
    errors: r.errors,
    prompt_tokens: r.promptTokens,
    cached_tokens: r.cachedTokens,
    completion_tokens: r.completionTokens,
    reasoning_tokens: r.reasoningTokens,
    total_tokens: r.totalTokens,
  }));
  return { object: "list", group_by: groupBy, from: Math.floor(from / 1000), to: Math.floor(to / 1000), data };
}

/**
 * Routes that read only their path and query take no body: a field there is a 400 naming it, as an
 * unknown field of a create is, not ignored (a client sending one expects it to be read). An empty
 * object is no field, so clients that always send `{}` still work.
 */
function takesNoBody(request: FastifyRequest): void {
  const body = request.body;
  // A GET's body is never parsed (nor read), so it cannot be looked into: any is refused.
  if (body === undefined && hasContent(request.headers)) throw new ApiError(400, `A ${request.method} request takes no body; send none.`, { code: "invalid_request" });
  if (body === undefined || body === null) return;
  if (typeof body !== "object" || Array.isArray(body))
    throw new ApiError(400, "This request takes no body; send none (or an empty JSON object).", { code: "invalid_request" });
  // The body parser drops a "__proto__" key and notes where (it is still a field that was sent).
  const keys = PROTO_HOLDERS.has(body) ? ["__proto__", ...Object.keys(body)] : Object.keys(body);
  if (keys.length === 0) return;
  const param = keys[0].length > 64 ? `${keys[0].slice(0, 64)}…` : keys[0];
  throw new ApiError(400, `Invalid '${param}': this request takes no body.`, { param, code: "unknown_field" });
}

/** Whether a request's headers announce a body (a Content-Length of 0 announces none). */
function hasContent(headers: FastifyRequest["headers"]): boolean {
  const length = headers["content-length"];
  return headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

/** The query and body checks of a route that reads neither: GET and DELETE of a key, and the list. */
function readsOnlyPath(request: FastifyRequest): void {
  noQuery.parse(request.query ?? {});
  takesNoBody(request);
}

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/**
 * The admin API, under /admin, in OpenAI's error envelope: keys (create, list, get, revoke) and
 * usage. Every call needs the admin key (`--admin-key`), as a Bearer token or in `x-api-key`; it
 * is a separate secret from the API keys, which cannot call it.
 */
export async function adminPlugin(scope: FastifyInstance, { store, adminKey, envelope, revoked }: AdminOptions): Promise<void> {
  installErrorEnvelope(scope, envelope, { notFound: true });
  // A created key is in its answer (once), and the lists name every key and its use: no browser or
  // proxy cache may keep them (the console shows them; RFC 9111 no-store). Errors included.
  scope.addHook("onSend", async (_request, reply, payload) => {
    reply.header("cache-control", "no-store");
    return payload;
  });
  const expected = adminKey === undefined ? undefined : digest(adminKey);
  scope.addHook("onRequest", async (request) => {
    if (expected === undefined) {
      throw new ApiError(403, "The admin API is off; start the server with --admin-key to use it.", { code: "admin_api_disabled" });
    }
    const given = presentedKey(request).key;
    if (given === undefined || !timingSafeEqual(digest(given), expected)) {
      throw new ApiError(401, "The admin API needs the admin key (--admin-key) as 'Authorization: Bearer KEY' or 'x-api-key'.", {
        code: "invalid_api_key",
        headers: { "www-authenticate": 'Bearer realm="plinth-admin"' },
      });
    }
  });

  // Unknown fields are a 400 here, "__proto__" included (the body parser drops that key), and so are
  // query parameters no route reads and bodies on routes that read none.

  scope.post("/keys", async (request, reply) => {
    noQuery.parse(request.query ?? {});
    const body = createKeyRequest.parse(request.body);
    const expiresAt = body.expires_at == null ? null : parseTime(body.expires_at, "expires_at");
    // A key born expired is refused from its first request: a mistake (a bare date is that day's
    // 00:00 UTC, so "today" is already past), not something to create and hand out.
    if (expiresAt !== null && expiresAt <= Date.now()) {
      throw new ApiError(400, `Invalid 'expires_at': ${JSON.stringify(body.expires_at)} is already past; a key must expire in the future.`, {
        param: "expires_at",
        code: "invalid_value",
      });
    }
    const { key, record } = createManagedKey(store, {
      name: body.name,
      models: body.models ?? null,
      rpm: body.rpm ?? null,
      tpm: body.tpm ?? null,
      maxConcurrency: body.max_concurrency ?? null,
      budgetTokens: body.budget_tokens ?? null,
      expiresAt,
    });
    return reply.status(201).send({ ...keyToJson(record), key });
  });
  scope.get("/keys", async (request) => {
    readsOnlyPath(request);
    return { object: "list", data: store.listKeys().map((r) => keyToJson(r)) };
  });
  scope.get<{ Params: { id: string } }>("/keys/:id", async (request) => {
    readsOnlyPath(request);
    const record = store.keyById(request.params.id);
    if (!record) throw noKey(request.params.id);
    return keyToJson(record);
  });
  scope.delete<{ Params: { id: string } }>("/keys/:id", async (request) => {
    readsOnlyPath(request);
    if (!store.revokeKey(request.params.id, Date.now())) throw noKey(request.params.id);
    // Revoked means unusable now, for what the key already started too (README: effective at once).
    revoked?.(request.params.id);
    return keyToJson(store.keyById(request.params.id)!);
  });
  scope.get("/usage", async (request) => {
    const query = usageQuery.parse(request.query ?? {});
    takesNoBody(request);
    return usageReport(store, query);
  });
}

const noKey = (id: string) => new ApiError(404, `No API key with id '${id}' exists.`, { code: "not_found" });
