// The durable store behind the Responses API, Conversations and stored Chat Completions.
//
// This file is the contract only: no database is named here. `sqlite-store.ts` implements it on an
// embedded SQLite file; a networked database can implement the same interface later, when several
// Plinth instances share state. That is why every operation returns a Promise even though the
// SQLite implementation does its work synchronously: a write has been committed by the time its
// promise resolves.
//
// Namespaces. Every stored object belongs to a namespace: the caller's isolation namespace (the
// same one the prompt cache uses; "" for anonymous callers). Every read, update, delete and list
// takes it, and an object that exists in another namespace is reported exactly like one that does
// not exist at all (undefined / false), so nothing leaks across namespaces. Ids are unique within a
// namespace; the same id in two namespaces names two unrelated objects.
//
// Shapes. Bodies, items, messages and metadata are JSON the store keeps verbatim and hands back
// parsed; it reads nothing in them except an item's or message's `id` (assigned when absent).
//
// Times are Unix seconds (what the OpenAI objects carry in `created_at`).

import { ApiError } from "../core/errors.ts";

/** A JSON object as the store keeps it (a response body, a chat.completion, an item, …). */
export type JsonObject = { [key: string]: unknown };

/** An item or message: any JSON object with an `id` (the store assigns one when absent). */
export type StoredItem = JsonObject & { id: string };

/** Metadata as the OpenAI APIs define it: string keys to string values. */
export type Metadata = Record<string, string>;

/** OpenAI-style cursor pagination over a list. */
export interface PageQuery {
  /** Return what comes after the object with this id, in the chosen order. */
  after?: string;
  /** 1–100; defaults to 20. */
  limit?: number;
  /** Defaults depend on the list, as OpenAI's do (documented on each operation). */
  order?: "asc" | "desc";
}

/** One page of a list, in the shape of OpenAI's list objects (without `object: "list"`). */
export interface Page<T> {
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/**
 * Why a store call was refused; `param` names the request field the caller should blame. It is the
 * client's error (400, or 409 for an id that exists), so any route that lets it through answers
 * with it, not with a 500.
 */
export class StoreError extends ApiError {
  declare readonly code: "invalid_cursor" | "invalid_limit" | "invalid_order" | "conflict";

  constructor(message: string, code: StoreError["code"], param?: string) {
    super(code === "conflict" ? 409 : 400, message, { param, code });
    this.name = "StoreError";
  }
}

// ---------------------------------------------------------------------------------------------
// Responses

export interface NewResponse {
  id: string;
  /** Defaults to now. */
  createdAt?: number;
  status: string;
  model: string;
  /** The whole response object. */
  body: JsonObject;
  /** The input items of the request, in order (ids assigned where absent). */
  inputItems: JsonObject[];
  previousResponseId?: string | null;
  conversationId?: string | null;
  background?: boolean;
}

export interface ResponseRecord {
  id: string;
  namespace: string;
  createdAt: number;
  status: string;
  model: string;
  body: JsonObject;
  previousResponseId: string | null;
  conversationId: string | null;
  background: boolean;
  /** null: kept until deleted (retention 0). */
  expiresAt: number | null;
}

export interface ResponseStore {
  /** Throws StoreError("conflict") when the id already exists in this namespace. */
  create(namespace: string, response: NewResponse): Promise<ResponseRecord>;
  get(namespace: string, id: string): Promise<ResponseRecord | undefined>;
  /** Replaces status and body (a response moving queued → in_progress → completed). False: not found. */
  update(namespace: string, id: string, change: { status: string; body: JsonObject }): Promise<boolean>;
  /** Deletes the response and its stream events. False: not found. */
  delete(namespace: string, id: string): Promise<boolean>;
  /** Every input item, in input order (what a response continuing from this one starts with). Undefined: response not found. */
  inputItems(namespace: string, id: string): Promise<StoredItem[] | undefined>;
  /** Input items, default order "desc" (OpenAI's). Undefined: response not found. */
  listInputItems(namespace: string, id: string, query?: PageQuery): Promise<Page<StoredItem> | undefined>;
  /** An item (input or output) of any response of the namespace, by its id (item references); of several with that id, the one stored last. */
  findItem(namespace: string, itemId: string): Promise<StoredItem | undefined>;
  /** Every response, in any namespace, whose status is one of `statuses` (runs a stopped process left unfinished). */
  withStatus(statuses: string[]): Promise<Array<{ namespace: string; id: string }>>;
}

// ---------------------------------------------------------------------------------------------
// Response stream events (resuming a background stream)

export interface StoredEvent {
  sequenceNumber: number;
  event: JsonObject;
}

export interface ResponseEventStore {
  /** False: the response does not exist in this namespace. Throws StoreError("conflict") on a repeated sequence number. */
  append(namespace: string, responseId: string, sequenceNumber: number, event: JsonObject): Promise<boolean>;
  /** Several events in one transaction (one durable write). */
  appendMany(namespace: string, responseId: string, events: StoredEvent[]): Promise<boolean>;
  /** Events with sequence number > afterSequence (all when omitted), ascending. Undefined: response not found. */
  list(namespace: string, responseId: string, afterSequence?: number): Promise<StoredEvent[] | undefined>;
  /** The event with the highest sequence number; undefined when there is none (or no such response). */
  last(namespace: string, responseId: string): Promise<StoredEvent | undefined>;
}

// ---------------------------------------------------------------------------------------------
// Conversations

export interface NewConversation {
  id: string;
  createdAt?: number;
  metadata?: Metadata;
  /** Initial items (ids assigned where absent). */
  items?: JsonObject[];
}

export interface ConversationRecord {
  id: string;
  namespace: string;
  createdAt: number;
  metadata: Metadata;
  expiresAt: number | null;
}

export interface ConversationStore {
  /** Returns the conversation and its stored initial items. Throws StoreError("conflict") on a duplicate id. */
  create(namespace: string, conversation: NewConversation): Promise<{ conversation: ConversationRecord; items: StoredItem[] }>;
  get(namespace: string, id: string): Promise<ConversationRecord | undefined>;
  /** Replaces the metadata. Undefined: not found. */
  updateMetadata(namespace: string, id: string, metadata: Metadata): Promise<ConversationRecord | undefined>;
  /** Deletes the conversation and its items. */
  delete(namespace: string, id: string): Promise<boolean>;
  /** Appends items in order; returns them as stored (with ids). Undefined: conversation not found. */
  addItems(namespace: string, id: string, items: JsonObject[]): Promise<StoredItem[] | undefined>;
  /** Items by position, default order "desc" (OpenAI's). Undefined: conversation not found. */
  listItems(namespace: string, id: string, query?: PageQuery): Promise<Page<StoredItem> | undefined>;
  getItem(namespace: string, id: string, itemId: string): Promise<StoredItem | undefined>;
  deleteItem(namespace: string, id: string, itemId: string): Promise<boolean>;
}

// ---------------------------------------------------------------------------------------------
// Stored chat completions

export interface NewChatCompletion {
  id: string;
  createdAt?: number;
  model: string;
  metadata?: Metadata;
  /** The chat.completion object. */
  body: JsonObject;
  /** The request's messages (ids assigned where absent: `<id>-<index>`, as OpenAI does). */
  messages: JsonObject[];
}

export interface ChatCompletionRecord {
  id: string;
  namespace: string;
  createdAt: number;
  model: string;
  metadata: Metadata;
  body: JsonObject;
  expiresAt: number | null;
}

export interface ChatCompletionQuery extends PageQuery {
  /** Every pair must match exactly. */
  metadata?: Metadata;
  model?: string;
}

export interface ChatCompletionStore {
  create(namespace: string, completion: NewChatCompletion): Promise<ChatCompletionRecord>;
  get(namespace: string, id: string): Promise<ChatCompletionRecord | undefined>;
  /** Ordered by created_at then id; default order "asc" (OpenAI's). */
  list(namespace: string, query?: ChatCompletionQuery): Promise<Page<ChatCompletionRecord>>;
  /** Replaces the metadata. Undefined: not found. */
  updateMetadata(namespace: string, id: string, metadata: Metadata): Promise<ChatCompletionRecord | undefined>;
  delete(namespace: string, id: string): Promise<boolean>;
  /** The request's messages, default order "asc". Undefined: completion not found. */
  listMessages(namespace: string, id: string, query?: PageQuery): Promise<Page<StoredItem> | undefined>;
}

// ---------------------------------------------------------------------------------------------
// The store

export interface SweepResult {
  responses: number;
  conversations: number;
  chatCompletions: number;
}

// ---------------------------------------------------------------------------------------------
// Serving endpoints (the Databricks dialect's control plane)
// ---------------------------------------------------------------------------------------------

/** A serving endpoint as kept: its name and its definition (config, pending config), verbatim. */
export interface EndpointRecord {
  name: string;
  body: JsonObject;
  createdAt: number;
  updatedAt: number;
}

/**
 * Serving endpoints. They belong to the server, not to an end user, so they have no namespace.
 * Times are Unix milliseconds (Databricks' timestamps).
 */
export interface EndpointStore {
  list(): Promise<EndpointRecord[]>;
  get(name: string): Promise<EndpointRecord | undefined>;
  /** False when an endpoint of that name exists. */
  create(record: EndpointRecord): Promise<boolean>;
  /** False when no endpoint of that name exists. */
  update(name: string, body: JsonObject, updatedAt: number): Promise<boolean>;
  delete(name: string): Promise<boolean>;
}

export interface Store {
  readonly responses: ResponseStore;
  readonly endpoints: EndpointStore;
  readonly responseEvents: ResponseEventStore;
  readonly conversations: ConversationStore;
  readonly chatCompletions: ChatCompletionStore;
  /** Deletes every object whose expires_at ≤ now (Unix seconds; default the current time), with its children. */
  sweepExpired(now?: number): Promise<SweepResult>;
  /** Runs sweepExpired every intervalMs on a timer that does not keep the process alive. */
  startSweeper(intervalMs: number): void;
  /** Stops the sweeper and closes the database. Idempotent. */
  close(): Promise<void>;
  /** Bytes the store takes on disk (database and write-ahead log); 0 once closed. */
  sizeBytes(): number;
}

/** Default and bounds of a page's `limit`. */
export const PAGE_LIMIT_DEFAULT = 20;
export const PAGE_LIMIT_MAX = 100;
/**
 * A page of conversation items stops once its items come to this much JSON (after the first item),
 * with has_more set, as a page shorter than its limit may. Items are as large as a request body, so
 * 100 of them made one answer of 70 MB, read, parsed and written out on the one JavaScript thread
 * (3.4 s during which every other request waited).
 */
export const PAGE_MAX_CHARS = 4 * 1024 * 1024;
