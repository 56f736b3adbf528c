import type Database from "better-sqlite3";
import type { EndpointRecord, EndpointStore, JsonObject } from "./store.ts";

/** Schema of the serving endpoints table (one row per endpoint, its definition as JSON). */
export const ENDPOINTS_SCHEMA = `
  CREATE TABLE serving_endpoints (
    name TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    body TEXT NOT NULL
  );
`;

interface Row {
  name: string;
  created_at: number;
  updated_at: number;
  body: string;
}

const toRecord = (row: Row): EndpointRecord => ({
  name: row.name,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  body: JSON.parse(row.body) as JsonObject,
});

/** The serving endpoints of a SQLite store (see store.ts for the contract). */
export function sqliteEndpointStore(db: Database.Database): EndpointStore {
  const list = db.prepare<[], Row>("SELECT name, created_at, updated_at, body FROM serving_endpoints ORDER BY created_at, name");
  const get = db.prepare<[string], Row>("SELECT name, created_at, updated_at, body FROM serving_endpoints WHERE name = ?");
  const insert = db.prepare<[string, number, number, string]>(
    "INSERT INTO serving_endpoints (name, created_at, updated_at, body) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
  );
  const update = db.prepare<[string, number, string]>("UPDATE serving_endpoints SET body = ?, updated_at = ? WHERE name = ?");
  const remove = db.prepare<[string]>("DELETE FROM serving_endpoints WHERE name = ?");
  return {
    list: async () => list.all().map(toRecord),
    get: async (name) => {
      const row = get.get(name);
      return row ? toRecord(row) : undefined;
    },
    create: async (r) => insert.run(r.name, r.createdAt, r.updatedAt, JSON.stringify(r.body)).changes === 1,
    update: async (name, body, updatedAt) => update.run(JSON.stringify(body), updatedAt, name).changes === 1,
    delete: async (name) => remove.run(name).changes === 1,
  };
}
