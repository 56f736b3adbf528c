import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { ApiError } from "../core/errors.ts";
import type { KeyRecord, TenancyStore } from "../store/tenancy-store.ts";

/** What a managed key looks like: `pk-` and 32 random bytes in base64url (43 characters). */
const KEY_PREFIX = "pk-";

/** A new random key: 256 bits, so a plain SHA-256 of it is a safe thing to store. */
export function generateKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

export function newKeyId(): string {
  return `key_${randomBytes(8).toString("hex")}`;
}

export function hashKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** Compares two hex digests of equal length in constant time. */
function sameDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The limits a key runs under; null: no limit of that kind. */
export interface KeyLimits {
  rpm: number | null;
  tpm: number | null;
  maxConcurrency: number | null;
  budgetTokens: number | null;
}

export const NO_LIMITS: KeyLimits = { rpm: null, tpm: null, maxConcurrency: null, budgetTokens: null };

/** Who a request is, once its key has been checked. */
export interface Principal {
  /** The key's id (a managed key's `key_…`, or `static-…` for a key given with --api-key). */
  id: string;
  name: string;
  /** Models the key may use; null: every model. */
  models: string[] | null;
  limits: KeyLimits;
  /** Tokens charged to the key before this process started counting (managed keys). */
  usedTokens: number;
}

/** Why a key stopped being valid while requests of it ran. */
export type KeyEnd = "revoked" | "expired";

export type KeyCheck = { ok: true; principal: Principal } | { ok: false; reason: "missing" | "scheme" | "unknown" | KeyEnd };

/**
 * Every key the server accepts: the ones given on the command line (kept as hashes in memory, with
 * no limits) and the managed ones in the store, read on every request so that a key created or
 * revoked with `plinth keys` from another process takes effect at once (an indexed lookup).
 */
export class KeyRing {
  private readonly statics: Array<{ hash: string; id: string }>;

  constructor(
    staticKeys: readonly string[],
    private readonly store: TenancyStore | undefined,
    private readonly now: () => number = Date.now,
    /** The server's secret key: static keys' ids are keyed hashes of them (see staticKeyId). */
    secret?: Buffer,
  ) {
    this.statics = staticKeys.map((k) => ({ hash: hashKey(k), id: staticKeyId(k, secret) }));
  }

  /** Whether requests need a key: true once any key is configured or has been created. */
  get required(): boolean {
    return this.statics.length > 0 || (this.store?.hasKeys() ?? false);
  }

  check(presented: string | undefined): KeyCheck {
    if (presented === undefined || presented === "") return { ok: false, reason: "missing" };
    const hash = hashKey(presented);
    // Compare against every static key, so the time taken does not depend on which one matched.
    let staticMatch: { hash: string; id: string } | undefined;
    for (const s of this.statics) if (sameDigest(s.hash, hash) && !staticMatch) staticMatch = s;
    if (staticMatch) return { ok: true, principal: { id: staticMatch.id, name: "--api-key", models: null, limits: NO_LIMITS, usedTokens: 0 } };
    const record = this.store?.keyByHash(hash);
    if (!record) return { ok: false, reason: "unknown" };
    const ended = this.endOf(record);
    return ended ? { ok: false, reason: ended } : { ok: true, principal: principalOf(record) };
  }

  /**
   * Whether a key that was valid when its requests began has stopped being so: "revoked" or
   * "expired", read from the store (the CLI may have revoked it from another process). Undefined
   * while it is valid, and for a key given on the command line, valid while the server runs.
   */
  standing(id: string): KeyEnd | undefined {
    if (this.statics.some((s) => s.id === id)) return undefined;
    const record = this.store?.keyById(id);
    return record && this.endOf(record);
  }

  private endOf(record: KeyRecord): KeyEnd | undefined {
    if (record.revokedAt !== null) return "revoked";
    if (record.expiresAt !== null && record.expiresAt <= this.now()) return "expired";
    return undefined;
  }
}

export function principalOf(record: KeyRecord): Principal {
  return {
    id: record.id,
    name: record.name,
    models: record.models,
    limits: { rpm: record.rpm, tpm: record.tpm, maxConcurrency: record.maxConcurrency, budgetTokens: record.budgetTokens },
    usedTokens: record.usedTokens,
  };
}

/** Where a request's credential is read from (a Fastify request is one): its headers, and the raw list that keeps duplicates. */
export interface CredentialSource {
  headers: Record<string, string | string[] | undefined>;
  /** `rawHeaders`: name, value, name, value…, as received; absent: duplicates are not checked. */
  raw?: { rawHeaders: readonly string[] };
}

/**
 * The key a request presents (`Authorization: Bearer KEY`, else `x-api-key: KEY`), or why there is
 * none: no credential at all, or an Authorization header of another scheme (`Basic …`, `Token KEY`,
 * a bare key), which is told apart so that its sender learns to write `Bearer`.
 */
export type Presented = { key: string } | { key: undefined; why: "missing" | "scheme" };

/** Header names that carry a key. */
const CREDENTIAL_HEADERS = ["authorization", "x-api-key"] as const;

/**
 * Reads the request's key. Throws a 400 when it carries more than one: two Authorization headers
 * (Node keeps only the first, while a proxy in front may have checked the other), two x-api-key
 * headers, or a Bearer key and an x-api-key that differ. Which one counts would be a guess, as it
 * is for a duplicated Host header, which is refused for the same reason.
 */
export function presentedKey(request: CredentialSource): Presented {
  const { headers } = request;
  const rawHeaders = request.raw?.rawHeaders ?? [];
  for (const name of CREDENTIAL_HEADERS) {
    if (headerCount(rawHeaders, name) > 1) throw severalCredentials(`two ${name === "authorization" ? "Authorization" : "x-api-key"} headers`);
  }
  const auth = typeof headers.authorization === "string" ? headers.authorization : undefined;
  // Everything after the scheme is the key: "Bearer KEY extra" is a wrong key (401 "not valid"),
  // not a missing one.
  const bearer = auth === undefined ? undefined : /^Bearer\s+(\S.*?)\s*$/i.exec(auth)?.[1];
  const x = typeof headers["x-api-key"] === "string" && headers["x-api-key"].trim() !== "" ? headers["x-api-key"].trim() : undefined;
  if (bearer !== undefined && x !== undefined && bearer !== x) throw severalCredentials("a Bearer key and an x-api-key that differ");
  const key = bearer ?? x;
  if (key !== undefined) return { key };
  // An Authorization header of another scheme, or a bare key: not Bearer ("Bearer" alone is missing its key).
  return { key: undefined, why: auth !== undefined && auth.trim() !== "" && !/^Bearer\s*$/i.test(auth) ? "scheme" : "missing" };
}

/** How many times a header was received (names compared case-insensitively). */
function headerCount(raw: readonly string[], name: string): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === name.length && raw[i].toLowerCase() === name) n++;
  return n;
}

function severalCredentials(what: string): ApiError {
  return new ApiError(400, `The request carries more than one credential (${what}); send one key, as 'Authorization: Bearer KEY' or in 'x-api-key'.`, {
    code: "invalid_request",
  });
}

/** What a key's owner may set when creating one. */
export interface KeySettings {
  name: string;
  models?: string[] | null;
  rpm?: number | null;
  tpm?: number | null;
  maxConcurrency?: number | null;
  budgetTokens?: number | null;
  /** Unix milliseconds. */
  expiresAt?: number | null;
}

/** Creates a managed key; the returned `key` is the only time it exists in clear. */
export function createManagedKey(store: TenancyStore, settings: KeySettings, now = Date.now()): { key: string; record: KeyRecord } {
  const key = generateKey();
  const record = store.createKey({
    id: newKeyId(),
    name: settings.name,
    keyHash: hashKey(key),
    prefix: key.slice(0, KEY_PREFIX.length + 6),
    createdAt: now,
    expiresAt: settings.expiresAt ?? null,
    models: settings.models ?? null,
    rpm: settings.rpm ?? null,
    tpm: settings.tpm ?? null,
    maxConcurrency: settings.maxConcurrency ?? null,
    budgetTokens: settings.budgetTokens ?? null,
  });
  return { key, record };
}

/** A key as the admin API and `plinth keys list` show it. */
export function keyToJson(r: KeyRecord, now = Date.now()) {
  const state = r.revokedAt !== null ? "revoked" : r.expiresAt !== null && r.expiresAt <= now ? "expired" : "active";
  return {
    id: r.id,
    object: "api_key",
    name: r.name,
    prefix: r.prefix,
    state,
    created_at: Math.floor(r.createdAt / 1000),
    expires_at: r.expiresAt === null ? null : Math.floor(r.expiresAt / 1000),
    revoked_at: r.revokedAt === null ? null : Math.floor(r.revokedAt / 1000),
    models: r.models,
    rpm: r.rpm,
    tpm: r.tpm,
    max_concurrency: r.maxConcurrency,
    budget_tokens: r.budgetTokens,
    used_tokens: r.usedTokens,
  };
}

/**
 * The id a key given with --api-key goes by in logs, the ledger and usage reports. Operators choose
 * these keys and may choose weak ones, so the id is a hash keyed with the server's secret (the data
 * directory's key file): a plain hash's prefix in a log line let anyone holding the log test guesses
 * of the key offline. Stable for as long as the data directory keeps its key.
 */
export function staticKeyId(key: string, secret: Buffer | undefined): string {
  if (secret === undefined) return staticKeyIdBefore(key);
  const idKey = createHmac("sha256", secret).update("plinth static key id").digest();
  return `static-${createHmac("sha256", idKey).update(key, "utf8").digest("hex").slice(0, 12)}`;
}

/**
 * The id Plinth gave an --api-key key before ids were keyed with the server's secret (2026-12-02):
 * its plain SHA-256's first 12 hex digits. Objects a key stored then are filed under it; the server
 * moves them to the key's id of now at start (see serve).
 */
export function staticKeyIdBefore(key: string): string {
  return `static-${hashKey(key).slice(0, 12)}`;
}
