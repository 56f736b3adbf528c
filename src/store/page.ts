// Pagination and item ids shared by store implementations (no database here).

import { randomBytes } from "node:crypto";
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, StoreError, type JsonObject, type Page, type PageQuery, type StoredItem } from "./store.ts";

/** A checked page query: limit within 1–100, order asc|desc. Throws StoreError naming the field. */
export function checkPageQuery(query: PageQuery | undefined, defaultOrder: "asc" | "desc"): { after?: string; limit: number; order: "asc" | "desc" } {
  const limit = query?.limit ?? PAGE_LIMIT_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > PAGE_LIMIT_MAX) {
    throw new StoreError(`limit must be an integer from 1 to ${PAGE_LIMIT_MAX}, got ${String(limit)}`, "invalid_limit", "limit");
  }
  const order = query?.order ?? defaultOrder;
  if (order !== "asc" && order !== "desc") {
    throw new StoreError(`order must be "asc" or "desc", got ${JSON.stringify(order)}`, "invalid_order", "order");
  }
  return { after: query?.after, limit, order };
}

export function invalidCursor(after: string): StoreError {
  return new StoreError(`no object with id ${JSON.stringify(after)} to list after`, "invalid_cursor", "after");
}

/** A page from rows already fetched with one row beyond the limit (has_more when that row is there). */
export function pageFromRows<T>(rows: T[], limit: number, idOf: (row: T) => string): Page<T> {
  const data = rows.slice(0, limit);
  return {
    data,
    first_id: data.length > 0 ? idOf(data[0]) : null,
    last_id: data.length > 0 ? idOf(data[data.length - 1]) : null,
    has_more: rows.length > limit,
  };
}

/** A page over a list held in full (kept in its natural ascending order). */
export function pageOfItems<T extends { id: string }>(items: readonly T[], query: PageQuery | undefined, defaultOrder: "asc" | "desc"): Page<T> {
  const { after, limit, order } = checkPageQuery(query, defaultOrder);
  const ordered = order === "asc" ? items.slice() : items.slice().reverse();
  let start = 0;
  if (after !== undefined) {
    const at = ordered.findIndex((item) => item.id === after);
    if (at < 0) throw invalidCursor(after);
    start = at + 1;
  }
  return pageFromRows(ordered.slice(start, start + limit + 1), limit, (item) => item.id);
}

const ID_PREFIX: Record<string, string> = {
  message: "msg",
  function_call: "fc",
  function_call_output: "fco",
  custom_tool_call: "ctc",
  custom_tool_call_output: "ctco",
  reasoning: "rs",
  item_reference: "ref",
};

/** A fresh item id, prefixed after the item's type where it has a known one (`msg_…` otherwise). */
export function newItemId(item: JsonObject): string {
  const prefix = (typeof item.type === "string" && ID_PREFIX[item.type]) || "msg";
  return `${prefix}_${randomBytes(16).toString("hex")}`;
}

/** The item with an id: its own when it has a non-empty string one, else `makeId()`. */
export function withId(item: JsonObject, makeId: () => string): StoredItem {
  if (typeof item.id === "string" && item.id !== "") return item as StoredItem;
  const { id: _absent, ...rest } = item;
  return { id: makeId(), ...rest } as StoredItem;
}
