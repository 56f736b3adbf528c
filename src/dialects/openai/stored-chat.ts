import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { ApiError, badRequest } from "../../core/errors.ts";
import type { GenerationService } from "../../core/generation-service.ts";
import { storeNamespace } from "../../core/context.ts";
import { requestKey } from "../../http/access.ts";
import { type RouteResult, routeEnv, sendResult } from "../../http/respond.ts";
import { type ChatCompletionRecord, type JsonObject, type Metadata, type Store } from "../../store/store.ts";
import { metadataSchema } from "./metadata.ts";
import { once, queryInt } from "../query-once.ts";
import { refuseUnknownFields } from "../unknown-fields.ts";
import { readsNothing } from "../reads-nothing.ts";

/**
 * OpenAI's stored Chat Completions: a completion created with `store: true` (or, in a vendor dialect
 * such as Konan, with metadata) is kept with its request messages and metadata, and can be listed
 * (filtered by metadata and model), retrieved, have its metadata replaced, and be deleted.
 *
 * Every stored object belongs to the API key that stored it (the server's own on an open server),
 * whatever end user the request named (see storeNamespace).
 */

/** What `chatCompletion` needs to keep a completion once it has finished. */
export interface ChatStorage {
  store: Store;
}

/** Writes a finished completion (the object as the client received it) with its request's messages. */
export async function storeChatCompletion(
  storage: ChatStorage,
  namespace: string,
  completion: JsonObject & { id: string; model: string; created: number },
  messages: JsonObject[],
  metadata: Metadata | null | undefined,
): Promise<void> {
  await storage.store.chatCompletions.create(namespace, {
    id: completion.id,
    createdAt: completion.created,
    model: completion.model,
    metadata: metadata ?? {},
    body: completion,
    messages,
  });
}

const notFound = (id: string) => new ApiError(404, `No stored chat completion with id '${id}' exists here.`, { code: "not_found" });

/** The object as retrieved: the stored completion with its current metadata. */
function toWire(record: ChatCompletionRecord) {
  return { ...record.body, metadata: record.metadata };
}

export const listChatCompletionsQuery = z.object({
  model: once(z.string().min(1)).optional(),
  after: once(z.string().min(1)).optional(),
  limit: once(queryInt(1, 100)).optional(),
  order: once(z.enum(["asc", "desc"])).optional(),
});

// Strict: another key (a misspelt `metadata`) is named rather than dropped.
export const updateChatCompletionRequest = z.strictObject({ metadata: metadataSchema.nullable() });

/** `metadata[key]=value` pairs of a query string (Fastify leaves the brackets in the key). */
function metadataFilter(query: Record<string, unknown>): Metadata | undefined {
  // No prototype, so `metadata[__proto__]=x` is a pair like any other (no stored metadata holds that
  // key) rather than an assignment to the prototype that left the filter empty and listed everything.
  const out: Metadata = Object.create(null) as Metadata;
  let any = false;
  for (const [key, value] of Object.entries(query)) {
    const m = /^metadata\[(.+)\]$/.exec(key);
    if (!m) {
      // `metadata=…` or `metadata[]=…` names no key: ignored, it listed everything instead of the
      // completions the client meant.
      if (key === "metadata" || key.startsWith("metadata[")) throw badRequest(`Filter by metadata as metadata[key]=value; '${key}' names no key.`, key);
      continue;
    }
    if (typeof value !== "string") throw badRequest(`${key} may be given once.`, key);
    out[m[1]] = value;
    any = true;
  }
  return any ? out : undefined;
}

/** Query keys the list reads besides `metadata[k]`; `user` is taken and changes nothing (see queryNamespace). */
const LIST_KEYS = new Set(["model", "after", "limit", "order", "user"]);
const MESSAGE_LIST_KEYS = new Set(["after", "limit", "order", "user"]);

/** A query key the read does not know is a 400 naming it, not dropped (`limt=5` listed 20). */
function refuseUnknownQueryKeys(query: Record<string, unknown>, known: ReadonlySet<string>, withMetadata: boolean): void {
  // metadata filters (`metadata[k]=v`, and malformed ones) are metadataFilter's to read or refuse.
  refuseUnknownFields(Object.fromEntries(Object.entries(query).filter(([k]) => !(withMetadata && (k === "metadata" || k.startsWith("metadata["))))), known);
}

export async function listStoredChatCompletions(query: Record<string, unknown>, ns: string, storage: ChatStorage): Promise<RouteResult> {
  refuseUnknownQueryKeys(query, LIST_KEYS, true);
  const q = listChatCompletionsQuery.parse(query);
  const page = await storage.store.chatCompletions.list(ns, { model: q.model, after: q.after, limit: q.limit, order: q.order, metadata: metadataFilter(query) });
  return { kind: "json", body: { object: "list", ...page, data: page.data.map(toWire) } };
}

export async function getStoredChatCompletion(id: string, ns: string, storage: ChatStorage): Promise<RouteResult> {
  const record = await storage.store.chatCompletions.get(ns, id);
  if (!record) throw notFound(id);
  return { kind: "json", body: toWire(record) };
}

export async function updateStoredChatCompletion(id: string, raw: unknown, ns: string, storage: ChatStorage): Promise<RouteResult> {
  const body = updateChatCompletionRequest.parse(raw ?? {});
  const record = await storage.store.chatCompletions.updateMetadata(ns, id, body.metadata ?? {});
  if (!record) throw notFound(id);
  return { kind: "json", body: toWire(record) };
}

export async function deleteStoredChatCompletion(id: string, ns: string, storage: ChatStorage): Promise<RouteResult> {
  if (!(await storage.store.chatCompletions.delete(ns, id))) throw notFound(id);
  return { kind: "json", body: { object: "chat.completion.deleted", id, deleted: true } };
}

export async function listStoredChatMessages(id: string, query: Record<string, unknown>, ns: string, storage: ChatStorage): Promise<RouteResult> {
  refuseUnknownQueryKeys(query, MESSAGE_LIST_KEYS, false);
  const q = listChatCompletionsQuery.pick({ after: true, limit: true, order: true }).parse(query);
  const page = await storage.store.chatCompletions.listMessages(ns, id, q);
  if (!page) throw notFound(id);
  return { kind: "json", body: { object: "list", ...page, data: page.data.map(messageToWire) } };
}

/**
 * A kept request message in OpenAI's stored-message shape: `content` is always a string or null
 * (text parts joined by newlines, as the prompt rendered them), a parts array moves to
 * `content_parts` (null when the content was a string), and `name` is null when absent. The message
 * is kept as sent; only its listing is reshaped, so completions stored earlier list the same way.
 */
function messageToWire(message: JsonObject): JsonObject {
  const { content, ...rest } = message;
  const parts = Array.isArray(content) ? (content as JsonObject[]) : null;
  const text = parts
    ? parts
        .filter((p) => p.type === "text")
        .map((p) => p.text)
        .join("\n")
    : (content ?? null);
  return { ...rest, content: text, name: rest.name ?? null, content_parts: parts, ...(rest.role === "assistant" ? { refusal: rest.refusal ?? null } : {}) };
}

/** Where a body-less request finds stored completions: its API key's (`?user=` changes nothing). */
function queryNamespace(request: FastifyRequest): string {
  return storeNamespace(requestKey(request));
}

/** Registers the stored Chat Completions routes in a scope (the OpenAI plugin's, under /v1). */
export function registerStoredChatRoutes(scope: FastifyInstance, service: GenerationService, storage: ChatStorage): void {
  const send = (reply: FastifyReply, request: FastifyRequest, result: RouteResult) =>
    sendResult(reply, routeEnv(request, reply, service, "openai").signal, result);
  type Id = { Params: { id: string } };
  const query = (request: FastifyRequest) => (request.query ?? {}) as Record<string, unknown>;
  scope.get("/chat/completions", async (request, reply) =>
    send(reply, request, await listStoredChatCompletions(query(request), queryNamespace(request), storage)),
  );
  scope.get<Id>("/chat/completions/:id", async (request, reply) => {
    readsNothing(request, { body: false });
    return send(reply, request, await getStoredChatCompletion(request.params.id, queryNamespace(request), storage));
  });
  scope.post<Id>("/chat/completions/:id", async (request, reply) => {
    readsNothing(request, { body: false });
    return send(reply, request, await updateStoredChatCompletion(request.params.id, request.body, queryNamespace(request), storage));
  });
  scope.delete<Id>("/chat/completions/:id", async (request, reply) => {
    readsNothing(request, { body: true });
    return send(reply, request, await deleteStoredChatCompletion(request.params.id, queryNamespace(request), storage));
  });
  scope.get<Id>("/chat/completions/:id/messages", async (request, reply) =>
    send(reply, request, await listStoredChatMessages(request.params.id, query(request), queryNamespace(request), storage)),
  );
}
