// API keys and the usage ledger, in the same SQLite file as the rest of the store (plinth.db), on a
// connection of their own. The schema is one migration of the store's (TENANCY_MIGRATION); the
// statements live here so the SQLite store itself only lists the step.
//
// Keys are kept as the SHA-256 of the key (a key is 32 random bytes, so a fast hash is enough: there
// is nothing to guess), with a short prefix for people to recognise them by. The key itself is
// never written anywhere.
//
// Ledger rows are written in batches (one transaction per batch) by the tenancy layer. With WAL a
// committed batch is in the -wal file once `insertUsage` returns, so it survives the process being
// killed; the writer flushes often enough that a finished request's row is committed within a second.

import Database from "better-sqlite3";
import { join } from "node:path";
import type { Migration } from "./sqlite-store.ts";

export const TENANCY_MIGRATION: Migration = {
  version: 4,
  description: "API keys and the usage ledger",
  up: (db) =>
    db.exec(`
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        revoked_at INTEGER,
        models TEXT,
        rpm INTEGER,
        tpm INTEGER,
        max_concurrency INTEGER,
        budget_tokens INTEGER,
        used_tokens INTEGER NOT NULL DEFAULT 0
      );

      CREATE TABLE usage_ledger (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        key_id TEXT,
        namespace TEXT,
        dialect TEXT NOT NULL,
        method TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        model TEXT,
        prompt_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        status INTEGER NOT NULL,
        ttft_ms INTEGER,
        duration_ms INTEGER NOT NULL
      );
      CREATE INDEX usage_ledger_at ON usage_ledger (at);
      CREATE INDEX usage_ledger_key_at ON usage_ledger (key_id, at);
    `),
};

/** A managed key as stored (no secret: the hash stays in the database). */
export interface KeyRecord {
  id: string;
  name: string;
  /** The first characters of the key, to tell keys apart in a list. */
  prefix: string;
  /** Unix milliseconds. */
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
  /** Models the key may use; null: every model. */
  models: string[] | null;
  rpm: number | null;
  tpm: number | null;
  maxConcurrency: number | null;
  budgetTokens: number | null;
  /** Tokens charged to the key so far (ledger rows written). */
  usedTokens: number;
}

export interface NewKey {
  id: string;
  name: string;
  keyHash: string;
  prefix: string;
  createdAt: number;
  expiresAt: number | null;
  models: string[] | null;
  rpm: number | null;
  tpm: number | null;
  maxConcurrency: number | null;
  budgetTokens: number | null;
}

/** One ledger row: a request, who made it, what it used and how it ended. */
export interface UsageRow {
  /** Unix milliseconds when the request ended. */
  at: number;
  requestId: string;
  keyId: string | null;
  /** A hash of the namespace (never the raw end-user id). */
  namespace: string | null;
  dialect: string;
  method: string;
  endpoint: string;
  model: string | null;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  status: number;
  ttftMs: number | null;
  durationMs: number;
}

export type UsageGroup = "key" | "model" | "day";

export interface UsageTotals {
  /** The key id, model or day (YYYY-MM-DD, UTC); null for rows without one (no key, no model). */
  group: string | null;
  requests: number;
  errors: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  totalTokens: number;
}

interface KeyRow {
  id: string;
  name: string;
  key_hash: string;
  prefix: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  models: string | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrency: number | null;
  budget_tokens: number | null;
  used_tokens: number;
}

const keyRecord = (r: KeyRow): KeyRecord => ({
  id: r.id,
  name: r.name,
  prefix: r.prefix,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  revokedAt: r.revoked_at,
  models: r.models === null ? null : (JSON.parse(r.models) as string[]),
  rpm: r.rpm,
  tpm: r.tpm,
  maxConcurrency: r.max_concurrency,
  budgetTokens: r.budget_tokens,
  usedTokens: r.used_tokens,
});

const GROUP_SQL: Record<UsageGroup, string> = {
  key: "key_id",
  model: "model",
  day: "strftime('%Y-%m-%d', at / 1000, 'unixepoch')",
};

/**
 * Keys and ledger on their own connection to `<dataDir>/plinth.db`. Open it after the SQLite store
 * (whose migrations create the tables).
 */
export class TenancyStore {
  readonly #db: Database.Database;
  readonly #byHash: Database.Statement<[string], KeyRow>;
  readonly #byId: Database.Statement<[string], KeyRow>;
  readonly #all: Database.Statement<[], KeyRow>;
  readonly #any: Database.Statement<[], { one: number }>;
  readonly #insertKey: Database.Statement;
  readonly #revoke: Database.Statement<[number, string]>;
  readonly #insertRows: (rows: UsageRow[]) => void;
  readonly #chargeRows: (rows: UsageRow[]) => void;
  readonly #prune: Database.Statement<[number]>;
  #closed = false;
  #anyKey = false;

  constructor(dataDir: string, opts: { busyTimeoutMs?: number } = {}) {
    const db = new Database(join(dataDir, "plinth.db"), { timeout: opts.busyTimeoutMs ?? 5000, fileMustExist: true });
    this.#db = db;
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = NORMAL");
    const version = db.pragma("user_version", { simple: true }) as number;
    if (version < TENANCY_MIGRATION.version) {
      db.close();
      throw new Error(`the store at ${db.name} has no key tables (schema version ${version}); open the SQLite store first`);
    }
    this.#byHash = db.prepare("SELECT * FROM api_keys WHERE key_hash = ?");
    this.#byId = db.prepare("SELECT * FROM api_keys WHERE id = ?");
    this.#all = db.prepare("SELECT * FROM api_keys ORDER BY created_at, id");
    this.#any = db.prepare("SELECT 1 AS one FROM api_keys LIMIT 1");
    this.#insertKey = db.prepare(
      `INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, models, rpm, tpm, max_concurrency, budget_tokens)
       VALUES (@id, @name, @keyHash, @prefix, @createdAt, @expiresAt, @models, @rpm, @tpm, @maxConcurrency, @budgetTokens)`,
    );
    this.#revoke = db.prepare("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
    const insertRow = db.prepare(
      `INSERT INTO usage_ledger (at, request_id, key_id, namespace, dialect, method, endpoint, model, prompt_tokens, cached_tokens,
         completion_tokens, reasoning_tokens, status, ttft_ms, duration_ms)
       VALUES (@at, @requestId, @keyId, @namespace, @dialect, @method, @endpoint, @model, @promptTokens, @cachedTokens,
         @completionTokens, @reasoningTokens, @status, @ttftMs, @durationMs)`,
    );
    const charge = db.prepare<[number, string]>("UPDATE api_keys SET used_tokens = used_tokens + ? WHERE id = ?");
    const chargeRows = (rows: UsageRow[]) => {
      const perKey = new Map<string, number>();
      for (const row of rows) {
        if (row.keyId !== null) {
          const total = row.promptTokens + row.completionTokens;
          if (total > 0) perKey.set(row.keyId, (perKey.get(row.keyId) ?? 0) + total);
        }
      }
      for (const [id, tokens] of perKey) charge.run(tokens, id);
    };
    this.#insertRows = db.transaction((rows: UsageRow[]) => {
      for (const row of rows) insertRow.run(row);
      chargeRows(rows);
    });
    this.#chargeRows = db.transaction(chargeRows);
    this.#prune = db.prepare("DELETE FROM usage_ledger WHERE at < ?");
  }

  /** The key whose hash this is, whatever its state (revoked and expired keys included). */
  keyByHash(hash: string): KeyRecord | undefined {
    const row = this.#byHash.get(hash);
    return row && keyRecord(row);
  }

  keyById(id: string): KeyRecord | undefined {
    const row = this.#byId.get(id);
    return row && keyRecord(row);
  }

  listKeys(): KeyRecord[] {
    return this.#all.all().map(keyRecord);
  }

  /**
   * True once any managed key has been created (revoked ones included). Keys are never deleted, so
   * once true it stays true and is not asked again; while false, every call asks, since the CLI may
   * create the first key in another process at any moment.
   */
  hasKeys(): boolean {
    if (!this.#anyKey) this.#anyKey = this.#any.get() !== undefined;
    return this.#anyKey;
  }

  createKey(key: NewKey): KeyRecord {
    this.#insertKey.run({ ...key, models: key.models === null ? null : JSON.stringify(key.models) });
    return this.keyById(key.id)!;
  }

  /** Marks a key revoked; false when no such key exists (a key revoked twice keeps its first time). */
  revokeKey(id: string, at: number): boolean {
    this.#revoke.run(at, id);
    return this.#byId.get(id) !== undefined;
  }

  /** Writes ledger rows in one transaction and charges their tokens to their keys. */
  insertUsage(rows: UsageRow[]): void {
    if (rows.length > 0) this.#insertRows(rows);
  }

  /** Charges the rows' tokens to their keys without writing the rows (the ledger is off). */
  chargeKeys(rows: UsageRow[]): void {
    if (rows.length > 0) this.#chargeRows(rows);
  }

  /** Totals per key, model or day over [from, to) (Unix milliseconds). */
  usage(groupBy: UsageGroup, from: number, to: number): UsageTotals[] {
    const group = GROUP_SQL[groupBy];
    const rows = this.#db
      .prepare<[number, number], Record<string, number | string | null>>(
        `SELECT ${group} AS grp, COUNT(*) AS requests, SUM(status >= 400) AS errors,
           SUM(prompt_tokens) AS prompt, SUM(cached_tokens) AS cached, SUM(completion_tokens) AS completion,
           SUM(reasoning_tokens) AS reasoning
         FROM usage_ledger WHERE at >= ? AND at < ? GROUP BY grp ORDER BY grp`,
      )
      .all(from, to);
    return rows.map((r) => ({
      group: r.grp === null ? null : String(r.grp),
      requests: Number(r.requests),
      errors: Number(r.errors),
      promptTokens: Number(r.prompt),
      cachedTokens: Number(r.cached),
      completionTokens: Number(r.completion),
      reasoningTokens: Number(r.reasoning),
      totalTokens: Number(r.prompt) + Number(r.completion),
    }));
  }

  /** Deletes ledger rows older than `before` (Unix milliseconds); returns how many. */
  pruneUsage(before: number): number {
    return this.#prune.run(before).changes;
  }

  /** Books an API key id's ledger rows under another id (the key's id changed); returns how many. */
  renameLedgerKey(fromKeyId: string, toKeyId: string): number {
    return this.#db.prepare("UPDATE usage_ledger SET key_id = ? WHERE key_id = ?").run(toKeyId, fromKeyId).changes;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#db.close();
  }
}
