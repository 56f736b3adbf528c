// The Store on one embedded SQLite file (better-sqlite3): `<dataDir>/plinth.db`, WAL mode,
// versioned migrations, prepared statements, namespace-scoped keys.
//
// Durability. journal_mode=WAL with synchronous=NORMAL by default. In WAL mode every commit is
// written to the -wal file with write(2) before the call returns, so once a store call has
// returned its data is in the operating system's page cache and survives the server process dying
// in any way, `kill -9` included (tested by test/unit/store-durability.test.ts). What NORMAL gives
// up against FULL is only the fsync at each commit: after a power cut or an OS crash the most
// recent commits may be lost, but the database stays consistent (WAL with NORMAL is never corrupted
// by that, only rolled back to an earlier commit). FULL would fsync once per commit, and a
// streamed background response appends one event per token; at a few milliseconds per fsync on
// ordinary disks that would cost decode speed for protection against a failure the server cannot
// survive anyway. An operator who wants power-loss durability opens the store with
// `synchronous: "full"`.
//
// Keys. Every table's key starts with the namespace: the same id in two namespaces is two objects,
// and a lookup in the wrong namespace simply finds nothing, so no answer (not even a conflict on
// create) reveals another namespace's objects. Children (events, conversation items) carry the
// namespace too and are deleted with their parent by ON DELETE CASCADE.

import Database from "better-sqlite3";
import { chmodSync, closeSync, mkdirSync, openSync, statSync } from "node:fs";
import { join } from "node:path";
import { ENDPOINTS_SCHEMA, sqliteEndpointStore } from "./endpoint-store.ts";
import { TENANCY_MIGRATION } from "./tenancy-store.ts";
import { checkPageQuery, invalidCursor, newItemId, pageFromRows, pageOfItems, withId } from "./page.ts";
import {
  PAGE_MAX_CHARS,
  StoreError,
  type ChatCompletionQuery,
  type ChatCompletionRecord,
  type ChatCompletionStore,
  type ConversationRecord,
  type ConversationStore,
  type EndpointStore,
  type JsonObject,
  type Metadata,
  type NewChatCompletion,
  type NewConversation,
  type NewResponse,
  type Page,
  type PageQuery,
  type ResponseEventStore,
  type ResponseRecord,
  type ResponseStore,
  type Store,
  type StoredEvent,
  type StoredItem,
  type SweepResult,
} from "./store.ts";

export const DB_FILE = "plinth.db";

export interface SqliteStoreOptions {
  /** The data directory; created with mode 0700 when missing. */
  dataDir: string;
  /** Retention: objects expire this many seconds after creation; 0 keeps them until deleted. */
  ttlSeconds: number;
  /** "normal" (default; survives a killed process) or "full" (also survives power loss; fsync per commit). */
  synchronous?: "normal" | "full";
  /** How long a write waits for another connection's lock (ms); default 5000. */
  busyTimeoutMs?: number;
  /** Called when a periodic sweep fails; default: a process warning. */
  onSweepError?: (error: unknown) => void;
}

/** One schema step. Applied in order, each in its own transaction, recorded in PRAGMA user_version. */
export interface Migration {
  version: number;
  description: string;
  up: (db: Database.Database) => void;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: "responses, response events, conversations and items, stored chat completions",
    up: (db) =>
      db.exec(`
        CREATE TABLE responses (
          namespace TEXT NOT NULL,
          id TEXT NOT NULL,
          created_at INTEGER NOT NULL,
          status TEXT NOT NULL,
          model TEXT NOT NULL,
          body TEXT NOT NULL,
          input_items TEXT NOT NULL,
          previous_response_id TEXT,
          conversation_id TEXT,
          background INTEGER NOT NULL DEFAULT 0,
          expires_at INTEGER,
          PRIMARY KEY (namespace, id)
        );
        CREATE INDEX responses_expiry ON responses (expires_at) WHERE expires_at IS NOT NULL;

        CREATE TABLE response_events (
          namespace TEXT NOT NULL,
          response_id TEXT NOT NULL,
          sequence_number INTEGER NOT NULL,
          event TEXT NOT NULL,
          PRIMARY KEY (namespace, response_id, sequence_number),
          FOREIGN KEY (namespace, response_id) REFERENCES responses (namespace, id) ON DELETE CASCADE
        );

        CREATE TABLE conversations (
          namespace TEXT NOT NULL,
          id TEXT NOT NULL,
          created_at INTEGER NOT NULL,
          metadata TEXT NOT NULL,
          expires_at INTEGER,
          PRIMARY KEY (namespace, id)
        );
        CREATE INDEX conversations_expiry ON conversations (expires_at) WHERE expires_at IS NOT NULL;

        CREATE TABLE conversation_items (
          namespace TEXT NOT NULL,
          conversation_id TEXT NOT NULL,
          id TEXT NOT NULL,
          position INTEGER NOT NULL,
          item TEXT NOT NULL,
          created_at INTEGER NOT NULL,
          PRIMARY KEY (namespace, conversation_id, id),
          UNIQUE (namespace, conversation_id, position),
          FOREIGN KEY (namespace, conversation_id) REFERENCES conversations (namespace, id) ON DELETE CASCADE
        );

        CREATE TABLE chat_completions (
          namespace TEXT NOT NULL,
          id TEXT NOT NULL,
          created_at INTEGER NOT NULL,
          model TEXT NOT NULL,
          metadata TEXT NOT NULL,
          body TEXT NOT NULL,
          messages TEXT NOT NULL,
          expires_at INTEGER,
          PRIMARY KEY (namespace, id)
        );
        CREATE INDEX chat_completions_order ON chat_completions (namespace, created_at, id);
        CREATE INDEX chat_completions_expiry ON chat_completions (expires_at) WHERE expires_at IS NOT NULL;
      `),
  },
  {
    version: 2,
    description: "response items by id, for item references",
    up: (db) =>
      db.exec(`
        CREATE TABLE response_items (
          namespace TEXT NOT NULL,
          response_id TEXT NOT NULL,
          item_id TEXT NOT NULL,
          item TEXT NOT NULL,
          PRIMARY KEY (namespace, response_id, item_id),
          FOREIGN KEY (namespace, response_id) REFERENCES responses (namespace, id) ON DELETE CASCADE
        );
        CREATE INDEX response_items_by_id ON response_items (namespace, item_id);
      `),
  },
  {
    version: 3,
    description: "serving endpoints (Databricks control plane)",
    up: (db) => db.exec(ENDPOINTS_SCHEMA),
  },
  TENANCY_MIGRATION,
  {
    version: 5,
    description: "stored objects belong to the API key, not to the end user a request named",
    up: (db) => {
      // Objects were kept per end user (`user`/`safety_identifier`) within each key; they now belong
      // to the key alone (the server's own, "", on an open server), where OpenAI's clients look for
      // them. Children move with their parents in the same transaction (checked at commit).
      db.pragma("defer_foreign_keys = ON");
      // A key's namespace is `["key", id, inner]`; an open server's end user's is `[user, salt]`, so
      // an end user named "key" (`["key",null]`) is not a key's (migration 7 recovers stores where
      // this step took it for one).
      const keyOnly = `CASE WHEN namespace LIKE '["key",%' AND json_valid(namespace) THEN (CASE WHEN json_array_length(namespace) = 3 AND json_type(namespace, '$[1]') = 'text' THEN json_array('key', json_extract(namespace, '$[1]'), '') ELSE '' END) ELSE '' END`;
      for (const table of STORED_TABLES) db.exec(`UPDATE OR IGNORE ${table} SET namespace = ${keyOnly} WHERE namespace <> ${keyOnly}`);
    },
  },
  {
    version: 6,
    description: "a response's input items are stored once, as rows of the item index, not again in the response's row",
    // SQLite rewrites a whole row on UPDATE: with the input list in the response's row, each status
    // change of a response with a 14 MB input wrote the 14 MB again (~65 ms of the event loop), after
    // the create had written it twice (list and index). Input rows carry their place in the input;
    // output rows have none. Responses stored before keep their list (input_items not ''), and their
    // input rows stay index entries only.
    up: (db) =>
      db.exec(`
        CREATE TABLE response_items_v6 (
          namespace TEXT NOT NULL,
          response_id TEXT NOT NULL,
          item_id TEXT NOT NULL,
          item TEXT NOT NULL,
          input_position INTEGER,
          FOREIGN KEY (namespace, response_id) REFERENCES responses (namespace, id) ON DELETE CASCADE
        );
        INSERT INTO response_items_v6 (rowid, namespace, response_id, item_id, item)
          SELECT rowid, namespace, response_id, item_id, item FROM response_items;
        DROP TABLE response_items;
        ALTER TABLE response_items_v6 RENAME TO response_items;
        CREATE INDEX response_items_by_id ON response_items (namespace, item_id);
        CREATE UNIQUE INDEX response_items_output ON response_items (namespace, response_id, item_id) WHERE input_position IS NULL;
        CREATE UNIQUE INDEX response_items_input ON response_items (namespace, response_id, input_position) WHERE input_position IS NOT NULL;
      `),
  },
  {
    version: 7,
    description: "objects of an end user named \"key\" on an open server, which migration 5 filed under a key that does not exist, are the server's again",
    // Migration 5 read the open server's namespace of end user "key" (`["key",null]`) as a key's and
    // moved its objects to `["key",null,""]`: a key with no id, which no request can name. Every
    // other object of an open server is in "" since then; these go there too.
    up: (db) => {
      db.pragma("defer_foreign_keys = ON");
      for (const table of STORED_TABLES) db.exec(`UPDATE OR IGNORE ${table} SET namespace = '' WHERE namespace = '["key",null,""]'`);
    },
  },
];

/** The tables of stored objects, each with its `namespace` column. */
const STORED_TABLES = ["responses", "response_events", "response_items", "conversations", "conversation_items", "chat_completions"] as const;

/**
 * Brings the schema up to the newest migration. Runs under BEGIN IMMEDIATE, re-reading the
 * version inside, so two processes opening the same fresh file apply each step once. Returns how
 * many steps it applied.
 */
export function migrate(db: Database.Database, migrations: readonly Migration[] = MIGRATIONS): number {
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1].version;
  const version = () => db.pragma("user_version", { simple: true }) as number;
  if (version() > latest) {
    throw new Error(`the store at ${db.name} has schema version ${version()}, newer than this Plinth knows (${latest}); upgrade Plinth`);
  }
  let applied = 0;
  for (const migration of migrations) {
    const step = db.transaction(() => {
      if (version() >= migration.version) return false;
      migration.up(db);
      db.pragma(`user_version = ${migration.version}`);
      return true;
    });
    if (step.immediate()) applied++;
  }
  return applied;
}

const now = () => Math.floor(Date.now() / 1000);
const json = (value: unknown) => JSON.stringify(value);
const parse = <T>(text: string) => JSON.parse(text) as T;

/** A unique or primary key violation, as better-sqlite3 reports it. */
function isConflict(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE";
}

function conflicts<T>(what: string, run: () => T): T {
  try {
    return run();
  } catch (error) {
    if (isConflict(error)) throw new StoreError(`${what} already exists`, "conflict", "id");
    throw error;
  }
}

interface ResponseRow {
  namespace: string;
  id: string;
  created_at: number;
  status: string;
  model: string;
  body: string;
  input_items: string;
  previous_response_id: string | null;
  conversation_id: string | null;
  background: number;
  expires_at: number | null;
}

interface ConversationRow {
  namespace: string;
  id: string;
  created_at: number;
  metadata: string;
  expires_at: number | null;
}

interface ChatCompletionRow {
  namespace: string;
  id: string;
  created_at: number;
  model: string;
  metadata: string;
  body: string;
  expires_at: number | null;
}

const responseRecord = (row: ResponseRow): ResponseRecord => ({
  id: row.id,
  namespace: row.namespace,
  createdAt: row.created_at,
  status: row.status,
  model: row.model,
  body: parse(row.body),
  previousResponseId: row.previous_response_id,
  conversationId: row.conversation_id,
  background: row.background !== 0,
  expiresAt: row.expires_at,
});

const conversationRecord = (row: ConversationRow): ConversationRecord => ({
  id: row.id,
  namespace: row.namespace,
  createdAt: row.created_at,
  metadata: parse(row.metadata),
  expiresAt: row.expires_at,
});

const chatCompletionRecord = (row: ChatCompletionRow): ChatCompletionRecord => ({
  id: row.id,
  namespace: row.namespace,
  createdAt: row.created_at,
  model: row.model,
  metadata: parse(row.metadata),
  body: parse(row.body),
  expiresAt: row.expires_at,
});

const CHAT_COLUMNS = "namespace, id, created_at, model, metadata, body, expires_at";

/** Opens (creating when needed) the store in `options.dataDir`. */
export function openSqliteStore(options: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(options);
}

export class SqliteStore implements Store {
  readonly path: string;
  /** How many migrations this open applied (0 when the file was already current). */
  readonly migrationsApplied: number;
  readonly responses: ResponseStore;
  readonly responseEvents: ResponseEventStore;
  readonly conversations: ConversationStore;
  readonly chatCompletions: ChatCompletionStore;
  readonly endpoints: EndpointStore;

  readonly #db: Database.Database;
  readonly #ttl: number;
  readonly #onSweepError: (error: unknown) => void;
  #sweeper: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #sweep: (at: number) => SweepResult;

  constructor(options: SqliteStoreOptions) {
    if (!Number.isFinite(options.ttlSeconds) || options.ttlSeconds < 0) {
      throw new RangeError(`ttlSeconds must be a number ≥ 0 (0 = keep forever), got ${options.ttlSeconds}`);
    }
    this.#ttl = Math.floor(options.ttlSeconds);
    this.#onSweepError = options.onSweepError ?? ((error) => process.emitWarning(`store sweep failed: ${String(error)}`));

    // The directory is private to the server; a new one gets 0700 whatever the umask.
    const created = mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
    if (created !== undefined) chmodSync(options.dataDir, 0o700);
    this.path = join(options.dataDir, DB_FILE);
    // Create the file 0600 before SQLite does (it would use 0644 under the usual umask);
    // SQLite gives the -wal and -shm files the database file's permissions.
    closeSync(openSync(this.path, "a", 0o600));

    const db = new Database(this.path, { timeout: options.busyTimeoutMs ?? 5000 });
    this.#db = db;
    try {
      db.pragma("journal_mode = WAL");
      db.pragma(`synchronous = ${options.synchronous === "full" ? "FULL" : "NORMAL"}`);
      db.pragma("foreign_keys = ON");
      // Keep a WAL that grew during a burst from staying large on disk after its checkpoint.
      db.pragma("journal_size_limit = 67108864");
      this.migrationsApplied = migrate(db);
    } catch (error) {
      db.close();
      throw error;
    }

    this.responses = this.#responseStore();
    this.responseEvents = this.#eventStore();
    this.conversations = this.#conversationStore();
    this.chatCompletions = this.#chatCompletionStore();
    this.endpoints = sqliteEndpointStore(db);

    const sweepResponses = db.prepare<[number]>("DELETE FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?");
    const sweepConversations = db.prepare<[number]>("DELETE FROM conversations WHERE expires_at IS NOT NULL AND expires_at <= ?");
    const sweepChat = db.prepare<[number]>("DELETE FROM chat_completions WHERE expires_at IS NOT NULL AND expires_at <= ?");
    this.#sweep = db.transaction((at: number) => ({
      responses: sweepResponses.run(at).changes,
      conversations: sweepConversations.run(at).changes,
      chatCompletions: sweepChat.run(at).changes,
    }));
  }

  #expiry(createdAt: number): number | null {
    return this.#ttl > 0 ? createdAt + this.#ttl : null;
  }

  async sweepExpired(at: number = now()): Promise<SweepResult> {
    return this.#sweep(at);
  }

  startSweeper(intervalMs: number): void {
    if (this.#closed) throw new Error("the store is closed");
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = setInterval(() => {
      if (this.#closed) return;
      try {
        this.#sweep(now());
      } catch (error) {
        this.#onSweepError(error);
      }
    }, intervalMs);
    this.#sweeper.unref();
  }

  sizeBytes(): number {
    if (this.#closed) return 0;
    let total = 0;
    for (const file of [this.path, `${this.path}-wal`]) {
      try {
        total += statSync(file).size;
      } catch {
        // no write-ahead log at the moment
      }
    }
    return total;
  }

  /**
   * Files every object of one API key id under another (a key's id changed: see staticKeyIdBefore).
   * Objects already under the new id stay; one of the old id's whose id is taken there stays where
   * it is. Returns how many objects (responses, conversations, stored chat completions) moved.
   */
  moveKeyObjects(fromKeyId: string, toKeyId: string): number {
    const from = JSON.stringify(["key", fromKeyId, ""]);
    const to = JSON.stringify(["key", toKeyId, ""]);
    return this.#db.transaction(() => {
      this.#db.pragma("defer_foreign_keys = ON");
      let moved = 0;
      for (const table of STORED_TABLES) {
        const changes = this.#db.prepare(`UPDATE OR IGNORE ${table} SET namespace = ? WHERE namespace = ?`).run(to, from).changes;
        if (table === "responses" || table === "conversations" || table === "chat_completions") moved += changes;
      }
      return moved;
    })();
  }

  /**
   * Caps the database at its present size plus `pages` more pages (SQLite's max_page_count on this
   * connection), or lifts the cap (undefined). A write that needs more fails with SQLITE_FULL, as
   * on a full disk: what the server does when its disk fills up is tested with it, without a file
   * system of its own.
   */
  limitGrowth(pages: number | undefined): void {
    const now = this.#db.pragma("page_count", { simple: true }) as number;
    // 1073741823 is SQLite's own default maximum.
    this.#db.pragma(`max_page_count = ${pages === undefined ? 1073741823 : now + Math.max(0, Math.floor(pages))}`);
  }

  /**
   * Closes the database, best effort: `optimize` (statistics for the query planner) is an extra
   * that a full disk or a damaged file makes fail, and such a failure must not keep the connection
   * open, nor stop a shutdown from going on to release the data directory. Only a failure of the
   * close itself is passed on.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
    try {
      this.#db.pragma("optimize");
    } catch {
      // Statistics only; the next open's queries work without them.
    }
    // The last connection to close checkpoints the WAL into the database file and removes it (a
    // checkpoint that fails for want of space leaves the WAL, which the next open replays).
    this.#db.close();
  }

  // -------------------------------------------------------------------------------------------

  #responseStore(): ResponseStore {
    const db = this.#db;
    const insert = db.prepare(
      `INSERT INTO responses (namespace, id, created_at, status, model, body, input_items, previous_response_id, conversation_id, background, expires_at)
       VALUES (@namespace, @id, @created_at, @status, @model, @body, @input_items, @previous_response_id, @conversation_id, @background, @expires_at)`,
    );
    const select = db.prepare<[string, string], ResponseRow>("SELECT * FROM responses WHERE namespace = ? AND id = ?");
    // A response stored before migration 6 has its input list here; '' means its input is in rows.
    const selectList = db.prepare<[string, string], string>("SELECT input_items FROM responses WHERE namespace = ? AND id = ?").pluck();
    const update = db.prepare<[string, string, string, string]>("UPDATE responses SET status = ?, body = ? WHERE namespace = ? AND id = ?");
    const remove = db.prepare<[string, string]>("DELETE FROM responses WHERE namespace = ? AND id = ?");
    // Every item a response holds, input and output, indexed by id so a later request can refer to it.
    const insertInput = db.prepare<[string, string, string, string, number]>(
      "INSERT INTO response_items (namespace, response_id, item_id, item, input_position) VALUES (?, ?, ?, ?, ?)",
    );
    // An output item is written again as the response is updated: its row is replaced.
    const insertOutput = db.prepare<[string, string, string, string]>(
      "INSERT OR REPLACE INTO response_items (namespace, response_id, item_id, item) VALUES (?, ?, ?, ?)",
    );
    const inputTexts = db
      .prepare<[string, string], string>(
        "SELECT item FROM response_items WHERE namespace = ? AND response_id = ? AND input_position IS NOT NULL ORDER BY input_position",
      )
      .pluck();
    const inputIds = db.prepare<[string, string], { input_position: number; item_id: string }>(
      "SELECT input_position, item_id FROM response_items WHERE namespace = ? AND response_id = ? AND input_position IS NOT NULL ORDER BY input_position",
    );
    const inputAt = db
      .prepare<[string, string, number], string>("SELECT item FROM response_items WHERE namespace = ? AND response_id = ? AND input_position = ?")
      .pluck();
    // Item ids a client chose can recur across responses (two unrelated turns that each sent
    // `msg_1`): a reference means the latest of them, the one it sent last, as an id reused in a
    // conversation would. Rows are numbered as they are written, so the highest rowid is the latest.
    const selectItem = db.prepare<[string, string], { item: string }>(
      "SELECT item FROM response_items WHERE namespace = ? AND item_id = ? ORDER BY rowid DESC LIMIT 1",
    );
    const indexOutput = (namespace: string, responseId: string, items: unknown) => {
      if (!Array.isArray(items)) return;
      for (const item of items as JsonObject[]) if (typeof item?.id === "string" && item.id) insertOutput.run(namespace, responseId, item.id, json(item));
    };
    // Each input item is written once, from the text made for it (parsing a list back and writing
    // each item again took a 14 MB input ~70 ms more of the event loop).
    const createWithItems = db.transaction((row: ResponseRow, inputItems: Array<{ id: string; text: string }>, output: unknown) => {
      insert.run(row);
      inputItems.forEach(({ id, text }, position) => insertInput.run(row.namespace, row.id, id, text, position));
      indexOutput(row.namespace, row.id, output);
    });
    const updateWithItems = db.transaction((namespace: string, id: string, status: string, body: JsonObject) => {
      if (update.run(status, json(body), namespace, id).changes === 0) return false;
      indexOutput(namespace, id, body.output);
      return true;
    });

    return {
      create: async (namespace, response: NewResponse) => {
        const createdAt = response.createdAt ?? now();
        const inputItems = response.inputItems.map((item) => {
          const stored = withId(item, () => newItemId(item));
          return { id: stored.id, text: json(stored) };
        });
        const row: ResponseRow = {
          namespace,
          id: response.id,
          created_at: createdAt,
          status: response.status,
          model: response.model,
          body: json(response.body),
          input_items: "",
          previous_response_id: response.previousResponseId ?? null,
          conversation_id: response.conversationId ?? null,
          background: response.background ? 1 : 0,
          expires_at: this.#expiry(createdAt),
        };
        conflicts(`response ${response.id}`, () => createWithItems(row, inputItems, response.body.output));
        return responseRecord(row);
      },
      get: async (namespace, id) => {
        const row = select.get(namespace, id);
        return row && responseRecord(row);
      },
      update: async (namespace, id, change) => updateWithItems(namespace, id, change.status, change.body),
      delete: async (namespace, id) => remove.run(namespace, id).changes > 0,
      findItem: async (namespace, itemId) => {
        const row = selectItem.get(namespace, itemId);
        return row && parse<StoredItem>(row.item);
      },
      inputItems: async (namespace, id) => {
        const list = selectList.get(namespace, id);
        if (list === undefined) return undefined;
        return parse<StoredItem[]>(list !== "" ? list : `[${inputTexts.all(namespace, id).join(",")}]`);
      },
      listInputItems: async (namespace, id, query?: PageQuery) => {
        const list = selectList.get(namespace, id);
        if (list === undefined) return undefined;
        if (list !== "") return pageOfItems(parse<StoredItem[]>(list), query, "desc");
        // The page is chosen from the items' ids alone; only its own items are read and parsed.
        const refs = inputIds.all(namespace, id).map((r) => ({ id: r.item_id, position: r.input_position }));
        const page = pageOfItems(refs, query, "desc");
        return { ...page, data: page.data.map((ref) => parse<StoredItem>(inputAt.get(namespace, id, ref.position)!)) };
      },
      withStatus: async (statuses) => {
        if (statuses.length === 0) return [];
        const rows = db
          .prepare<string[], { namespace: string; id: string }>(`SELECT namespace, id FROM responses WHERE status IN (${statuses.map(() => "?").join(", ")})`)
          .all(...statuses);
        return rows.map((r) => ({ namespace: r.namespace, id: r.id }));
      },
    };
  }

  #eventStore(): ResponseEventStore {
    const db = this.#db;
    // One statement: the event goes in only when its response exists in this namespace.
    const insert = db.prepare<[string, string, number, string, string, string]>(
      `INSERT INTO response_events (namespace, response_id, sequence_number, event)
       SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM responses WHERE namespace = ? AND id = ?)`,
    );
    const exists = db.prepare<[string, string], 1>("SELECT 1 FROM responses WHERE namespace = ? AND id = ?").pluck();
    const select = db.prepare<[string, string, number], { sequence_number: number; event: string }>(
      `SELECT sequence_number, event FROM response_events
       WHERE namespace = ? AND response_id = ? AND sequence_number > ? ORDER BY sequence_number`,
    );
    const selectLast = db.prepare<[string, string], { sequence_number: number; event: string }>(
      `SELECT sequence_number, event FROM response_events
       WHERE namespace = ? AND response_id = ? ORDER BY sequence_number DESC LIMIT 1`,
    );
    const appendMany = db.transaction((namespace: string, responseId: string, events: StoredEvent[]) => {
      if (!exists.get(namespace, responseId)) return false;
      for (const e of events) insert.run(namespace, responseId, e.sequenceNumber, json(e.event), namespace, responseId);
      return true;
    });
    const what = (responseId: string) => `an event with this sequence number for response ${responseId}`;

    return {
      append: async (namespace, responseId, sequenceNumber, event) =>
        conflicts(what(responseId), () => insert.run(namespace, responseId, sequenceNumber, json(event), namespace, responseId).changes > 0),
      appendMany: async (namespace, responseId, events) => conflicts(what(responseId), () => appendMany(namespace, responseId, events)),
      list: async (namespace, responseId, afterSequence = -Infinity) => {
        if (!exists.get(namespace, responseId)) return undefined;
        return select.all(namespace, responseId, afterSequence).map((row) => ({ sequenceNumber: row.sequence_number, event: parse<JsonObject>(row.event) }));
      },
      last: async (namespace, responseId) => {
        const row = selectLast.get(namespace, responseId);
        return row && { sequenceNumber: row.sequence_number, event: parse<JsonObject>(row.event) };
      },
    };
  }

  #conversationStore(): ConversationStore {
    const db = this.#db;
    const insert = db.prepare<[string, string, number, string, number | null]>(
      "INSERT INTO conversations (namespace, id, created_at, metadata, expires_at) VALUES (?, ?, ?, ?, ?)",
    );
    const select = db.prepare<[string, string], ConversationRow>("SELECT * FROM conversations WHERE namespace = ? AND id = ?");
    const setMetadata = db.prepare<[string, string, string]>("UPDATE conversations SET metadata = ? WHERE namespace = ? AND id = ?");
    const remove = db.prepare<[string, string]>("DELETE FROM conversations WHERE namespace = ? AND id = ?");
    const nextPosition = db
      .prepare<[string, string], number>("SELECT coalesce(max(position) + 1, 0) FROM conversation_items WHERE namespace = ? AND conversation_id = ?")
      .pluck();
    const insertItem = db.prepare<[string, string, string, number, string, number]>(
      "INSERT INTO conversation_items (namespace, conversation_id, id, position, item, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    const selectItem = db
      .prepare<[string, string, string], string>("SELECT item FROM conversation_items WHERE namespace = ? AND conversation_id = ? AND id = ?")
      .pluck();
    const itemPosition = db
      .prepare<[string, string, string], number>("SELECT position FROM conversation_items WHERE namespace = ? AND conversation_id = ? AND id = ?")
      .pluck();
    const removeItem = db.prepare<[string, string, string]>("DELETE FROM conversation_items WHERE namespace = ? AND conversation_id = ? AND id = ?");
    type ItemRow = { id: string; item: string };
    const pageStatements = {
      asc: db.prepare<[string, string, number, number], ItemRow>(
        "SELECT id, item FROM conversation_items WHERE namespace = ? AND conversation_id = ? AND position > ? ORDER BY position ASC LIMIT ?",
      ),
      desc: db.prepare<[string, string, number, number], ItemRow>(
        "SELECT id, item FROM conversation_items WHERE namespace = ? AND conversation_id = ? AND position < ? ORDER BY position DESC LIMIT ?",
      ),
    };

    const append = (namespace: string, conversationId: string, items: JsonObject[], createdAt: number): StoredItem[] => {
      let position = nextPosition.get(namespace, conversationId) ?? 0;
      return items.map((item) => {
        const stored = withId(item, () => newItemId(item));
        conflicts(`item ${stored.id} in conversation ${conversationId}`, () =>
          insertItem.run(namespace, conversationId, stored.id, position++, json(stored), createdAt),
        );
        return stored;
      });
    };
    const create = db.transaction((namespace: string, c: NewConversation) => {
      const createdAt = c.createdAt ?? now();
      const row: ConversationRow = { namespace, id: c.id, created_at: createdAt, metadata: json(c.metadata ?? {}), expires_at: this.#expiry(createdAt) };
      conflicts(`conversation ${c.id}`, () => insert.run(namespace, c.id, createdAt, row.metadata, row.expires_at));
      return { conversation: conversationRecord(row), items: append(namespace, c.id, c.items ?? [], createdAt) };
    });
    const addItems = db.transaction((namespace: string, id: string, items: JsonObject[]) => {
      if (!select.get(namespace, id)) return undefined;
      return append(namespace, id, items, now());
    });
    const updateMetadata = db.transaction((namespace: string, id: string, metadata: Metadata) => {
      if (setMetadata.run(json(metadata), namespace, id).changes === 0) return undefined;
      const row = select.get(namespace, id);
      return row && conversationRecord(row);
    });

    return {
      create: async (namespace, conversation) => create(namespace, conversation),
      get: async (namespace, id) => {
        const row = select.get(namespace, id);
        return row && conversationRecord(row);
      },
      updateMetadata: async (namespace, id, metadata) => updateMetadata(namespace, id, metadata),
      delete: async (namespace, id) => remove.run(namespace, id).changes > 0,
      addItems: async (namespace, id, items) => addItems(namespace, id, items),
      listItems: async (namespace, id, query?: PageQuery) => {
        const { after, limit, order } = checkPageQuery(query, "desc");
        if (!select.get(namespace, id)) return undefined;
        let from = order === "asc" ? -Infinity : Infinity;
        if (after !== undefined) {
          const position = itemPosition.get(namespace, id, after);
          if (position === undefined) throw invalidCursor(after);
          from = position;
        }
        // Rows are read one at a time so that a page of large items stops at PAGE_MAX_CHARS, the
        // rest unread: the row beyond the limit, or one that would pass the size, means has_more.
        const rows: ItemRow[] = [];
        let chars = 0;
        let more = false;
        for (const row of pageStatements[order].iterate(namespace, id, from, limit + 1)) {
          if (rows.length === limit || (rows.length > 0 && chars + row.item.length > PAGE_MAX_CHARS)) {
            more = true;
            break;
          }
          rows.push(row);
          chars += row.item.length;
        }
        const page = { ...pageFromRows(rows, limit, (row) => row.id), has_more: more };
        return { ...page, data: page.data.map((row) => parse<StoredItem>(row.item)) };
      },
      getItem: async (namespace, id, itemId) => {
        const item = selectItem.get(namespace, id, itemId);
        return item === undefined ? undefined : parse<StoredItem>(item);
      },
      deleteItem: async (namespace, id, itemId) => removeItem.run(namespace, id, itemId).changes > 0,
    };
  }

  #chatCompletionStore(): ChatCompletionStore {
    const db = this.#db;
    const insert = db.prepare(
      `INSERT INTO chat_completions (namespace, id, created_at, model, metadata, body, messages, expires_at)
       VALUES (@namespace, @id, @created_at, @model, @metadata, @body, @messages, @expires_at)`,
    );
    const select = db.prepare<[string, string], ChatCompletionRow>(`SELECT ${CHAT_COLUMNS} FROM chat_completions WHERE namespace = ? AND id = ?`);
    const selectMessages = db.prepare<[string, string], string>("SELECT messages FROM chat_completions WHERE namespace = ? AND id = ?").pluck();
    const setMetadata = db.prepare<[string, string, string]>("UPDATE chat_completions SET metadata = ? WHERE namespace = ? AND id = ?");
    const remove = db.prepare<[string, string]>("DELETE FROM chat_completions WHERE namespace = ? AND id = ?");
    const selectRowid = db.prepare<[string, string], { created_at: number; rowid: number }>(
      "SELECT created_at, rowid FROM chat_completions WHERE namespace = ? AND id = ?",
    );
    const updateMetadata = db.transaction((namespace: string, id: string, metadata: Metadata) => {
      if (setMetadata.run(json(metadata), namespace, id).changes === 0) return undefined;
      const row = select.get(namespace, id);
      return row && chatCompletionRecord(row);
    });

    // A list statement per shape of filter (order, model or not, how many metadata pairs, cursor
    // or not), prepared once and kept: the values are always bound, never spliced into SQL.
    const listStatements = new Map<string, Database.Statement<unknown[], ChatCompletionRow>>();
    const listStatement = (order: "asc" | "desc", model: boolean, pairs: number, cursor: boolean) => {
      const key = `${order}:${model}:${pairs}:${cursor}`;
      let statement = listStatements.get(key);
      if (!statement) {
        const where = ["namespace = ?"];
        if (model) where.push("model = ?");
        for (let i = 0; i < pairs; i++) {
          where.push("EXISTS (SELECT 1 FROM json_each(chat_completions.metadata) AS m WHERE m.key = ? AND m.type = 'text' AND m.value = ?)");
        }
        const cmp = order === "asc" ? ">" : "<";
        // Within one second, completions keep the order they were stored in (rowid), not their ids'.
        if (cursor) where.push(`(created_at ${cmp} ? OR (created_at = ? AND rowid ${cmp} ?))`);
        const dir = order === "asc" ? "ASC" : "DESC";
        statement = db.prepare<unknown[], ChatCompletionRow>(
          `SELECT ${CHAT_COLUMNS} FROM chat_completions WHERE ${where.join(" AND ")} ORDER BY created_at ${dir}, rowid ${dir} LIMIT ?`,
        );
        listStatements.set(key, statement);
      }
      return statement;
    };

    return {
      create: async (namespace, c: NewChatCompletion) => {
        const createdAt = c.createdAt ?? now();
        const messages = c.messages.map((message, index) => withId(message, () => `${c.id}-${index}`));
        const row = {
          namespace,
          id: c.id,
          created_at: createdAt,
          model: c.model,
          metadata: json(c.metadata ?? {}),
          body: json(c.body),
          messages: json(messages),
          expires_at: this.#expiry(createdAt),
        };
        conflicts(`chat completion ${c.id}`, () => insert.run(row));
        return chatCompletionRecord(row);
      },
      get: async (namespace, id) => {
        const row = select.get(namespace, id);
        return row && chatCompletionRecord(row);
      },
      list: async (namespace, query?: ChatCompletionQuery) => {
        const { after, limit, order } = checkPageQuery(query, "asc");
        const pairs = Object.entries(query?.metadata ?? {});
        const params: unknown[] = [namespace];
        if (query?.model !== undefined) params.push(query.model);
        for (const [key, value] of pairs) params.push(key, value);
        if (after !== undefined) {
          const cursor = selectRowid.get(namespace, after);
          if (!cursor) throw invalidCursor(after);
          params.push(cursor.created_at, cursor.created_at, cursor.rowid);
        }
        params.push(limit + 1);
        const rows = listStatement(order, query?.model !== undefined, pairs.length, after !== undefined).all(...params);
        const page = pageFromRows(rows, limit, (row) => row.id);
        return { ...page, data: page.data.map(chatCompletionRecord) } satisfies Page<ChatCompletionRecord>;
      },
      updateMetadata: async (namespace, id, metadata) => updateMetadata(namespace, id, metadata),
      delete: async (namespace, id) => remove.run(namespace, id).changes > 0,
      listMessages: async (namespace, id, query?: PageQuery) => {
        const messages = selectMessages.get(namespace, id);
        if (messages === undefined) return undefined;
        return pageOfItems(parse<StoredItem[]>(messages), query, "asc");
      },
    };
  }
}
