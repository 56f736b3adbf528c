/**
 * What the Responses dialect needs from the store, in its own terms. `src/store/` implements the
 * general store; `store-adapter.ts` maps it onto this, so the dialect never sees SQL and a
 * networked store can stand in later.
 */

export interface StoredResponse {
  id: string;
  status: string;
  model: string;
  /** The response object as last written. */
  body: Record<string, unknown>;
  /** The whole input the model saw (earlier turns included), each item with an `id`. */
  inputItems: Array<Record<string, unknown>>;
  background: boolean;
}

export interface Page<T> {
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

export interface PageQuery {
  after?: string;
  limit?: number;
  order?: "asc" | "desc";
}

export interface ResponsesStorage {
  createResponse(ns: string, r: StoredResponse & { previousResponseId?: string; conversationId?: string }): void;
  updateResponse(ns: string, id: string, status: string, body: Record<string, unknown>): void;
  getResponse(ns: string, id: string): StoredResponse | undefined;
  deleteResponse(ns: string, id: string): boolean;
  listInputItems(ns: string, id: string, q: PageQuery): Page<Record<string, unknown>> | undefined;
  appendEvents(responseId: string, events: Array<{ sequence: number; event: unknown }>): void;
  events(responseId: string, afterSequence: number): Array<Record<string, unknown>>;

  createConversation(ns: string, id: string, metadata: Record<string, string>, items: Array<Record<string, unknown>>): Record<string, unknown>;
  getConversation(ns: string, id: string): Record<string, unknown> | undefined;
  updateConversation(ns: string, id: string, metadata: Record<string, string>): Record<string, unknown> | undefined;
  deleteConversation(ns: string, id: string): boolean;
  addConversationItems(ns: string, id: string, items: Array<Record<string, unknown>>): Array<Record<string, unknown>> | undefined;
  listConversationItems(ns: string, id: string, q: PageQuery): Page<Record<string, unknown>> | undefined;
  /** Every item of a conversation, oldest first (the prompt of a response that continues it). */
  allConversationItems(ns: string, id: string): Array<Record<string, unknown>> | undefined;
  getConversationItem(ns: string, id: string, itemId: string): Record<string, unknown> | undefined;
  deleteConversationItem(ns: string, id: string, itemId: string): boolean;
  /** An item stored with any response or conversation of this namespace (item_reference). */
  findItem(ns: string, itemId: string): Record<string, unknown> | undefined;
}

/** Seals and opens reasoning text for `reasoning.encrypted_content`. */
export interface Sealer {
  seal(text: string): string;
  /** Throws when the text was not sealed by this server or was altered. */
  open(sealed: string): string;
}
