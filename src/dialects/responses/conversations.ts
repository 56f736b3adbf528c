import { z } from "zod";
import { ApiError, badRequest } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import { ITEM_ID_PREFIX } from "./responses.ts";
import type { RouteResult } from "../../http/respond.ts";
import { type IncludeQuery, inputItem, type ListQuery } from "./protocol.ts";
import type { ConversationRecord } from "../../store/store.ts";
import type { ResponsesDeps } from "./responses.ts";
import { itemToWire, readInclude } from "./items.ts";
import { checkItemContent } from "./to-canonical.ts";
import { metadataSchema } from "../openai/metadata.ts";
import { listOf } from "../list-of.ts";

/** OpenAI's Conversations API: a durable list of items that responses can continue and append to. */

// OpenAI's metadata rule, the same for every object that carries it.
const metadata = metadataSchema;

// The request bodies are strict: a key they do not read (`item` for `items`) is a 400 naming it, not
// a conversation created without what was sent.
export const createConversationRequest = z.strictObject({
  items: listOf(inputItem, { max: 20, maxMessage: "a conversation is created with at most 20 items" }).nullish(),
  metadata: metadata.nullish(),
});

// Required, as in the reference; null clears it (as on stored chat completions).
export const updateConversationRequest = z.strictObject({ metadata: metadata.nullable() });

export const addItemsRequest = z.strictObject({ items: listOf(inputItem, { min: 1, max: 20 }) });

const notFound = (what: string, id: string) => new ApiError(404, `No ${what} with id '${id}' exists here.`, { code: "not_found" });

type Item = Record<string, unknown>;

/**
 * Items as stored: with ids, messages with their type spelled out, and each item reference replaced
 * by the stored item it names, as a response's input resolves them. A conversation's items are what
 * its next turns are built from: a reference kept as it was sent is no ConversationItem when listed,
 * and a later turn could not use it; one that names nothing is refused now, by its field.
 */
async function normalise(items: Item[], ns: string, deps: ResponsesDeps, conversationId?: string): Promise<Item[]> {
  const out: Item[] = [];
  // A conversation holds each id once: a second one is a conflict (409), as the store's unique key
  // answers it, but named by the item that repeats it (the store names 'id', no field of this request).
  const ids = new Set<string>();
  const once = async (stored: Item, i: number) => {
    const id = stored.id as string;
    // Stored already, or to be stored by a turn still running (see ConversationClaims).
    const taken =
      ids.has(id) ||
      (conversationId !== undefined && (deps.claims.holds(ns, conversationId, id) || (await deps.store.conversations.getItem(ns, conversationId, id)) !== undefined));
    if (taken)
      throw new ApiError(409, `An item with id '${id}' is already in this conversation${ids.has(id) ? " (given twice)" : ""}; each item needs its own id.`, {
        param: `items[${i}].id`,
        code: "conflict",
      });
    ids.add(id);
    out.push(stored);
  };
  for (const [i, item] of items.entries()) {
    if (item.type === "item_reference") {
      const found = await deps.store.responses.findItem(ns, item.id as string);
      if (!found) throw badRequest(`items[${i}] references the item '${item.id}', which is not stored here.`, `items[${i}].id`, "not_found");
      await once(found, i);
      continue;
    }
    // A part the next turn would refuse (a file, audio, an image outside a user message) is
    // refused now: stored, it would fail every later turn of the conversation.
    checkItemContent(item, `items[${i}]`);
    const type = (item.type as string | undefined) ?? "message";
    const id = typeof item.id === "string" && item.id ? item.id : newId(ITEM_ID_PREFIX[type] ?? `${type.split("_").map((w) => w[0]).join("")}_`);
    const stored: Item = { ...item, type, id };
    if (type === "message" && typeof stored.content === "string") stored.content = [{ type: stored.role === "assistant" ? "output_text" : "input_text", text: stored.content }];
    await once(stored, i);
  }
  return out;
}

/** The conversation object as OpenAI shapes it. */
function toWire(c: ConversationRecord) {
  return { id: c.id, object: "conversation", created_at: c.createdAt, metadata: c.metadata };
}

export async function createConversation(body: z.infer<typeof createConversationRequest>, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const { conversation } = await deps.store.conversations.create(ns, { id: newId("conv_"), metadata: body.metadata ?? {}, items: await normalise((body.items ?? []) as Item[], ns, deps) });
  return { kind: "json", body: toWire(conversation) };
}

export async function getConversation(id: string, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const c = await deps.store.conversations.get(ns, id);
  if (!c) throw notFound("conversation", id);
  return { kind: "json", body: toWire(c) };
}

export async function updateConversation(id: string, body: z.infer<typeof updateConversationRequest>, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const c = await deps.store.conversations.updateMetadata(ns, id, body.metadata ?? {});
  if (!c) throw notFound("conversation", id);
  return { kind: "json", body: toWire(c) };
}

export async function deleteConversation(id: string, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  if (!(await deps.store.conversations.delete(ns, id))) throw notFound("conversation", id);
  return { kind: "json", body: { id, object: "conversation.deleted", deleted: true } };
}

export async function addItems(id: string, body: z.infer<typeof addItemsRequest>, q: IncludeQuery, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const include = readInclude(q, deps.sealer);
  // The conversation first: a reference in a request to no conversation is not what is wrong with it.
  if (!(await deps.store.conversations.get(ns, id))) throw notFound("conversation", id);
  // Items added while a turn runs would sit before its answer, which never saw them; a turn that
  // starts while these are being added is refused in the same way.
  const unlock = deps.claims.lock(ns, id, null);
  let added: Awaited<ReturnType<typeof deps.store.conversations.addItems>>;
  try {
    added = await deps.store.conversations.addItems(ns, id, await normalise(body.items as Item[], ns, deps, id));
  } finally {
    unlock();
  }
  if (!added) throw notFound("conversation", id);
  return {
    kind: "json",
    body: { object: "list", data: added.map((item) => itemToWire(item, include)), first_id: added[0]?.id ?? null, last_id: added.at(-1)?.id ?? null, has_more: false },
  };
}

export async function listItems(id: string, q: ListQuery, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const include = readInclude(q, deps.sealer);
  const page = await deps.store.conversations.listItems(ns, id, { after: q.after, limit: q.limit ?? 20, order: q.order ?? "desc" });
  if (!page) throw notFound("conversation", id);
  return { kind: "json", body: { object: "list", ...page, data: page.data.map((item) => itemToWire(item, include)) } };
}

export async function getItem(id: string, itemId: string, q: IncludeQuery, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const include = readInclude(q, deps.sealer);
  if (!(await deps.store.conversations.get(ns, id))) throw notFound("conversation", id);
  const item = await deps.store.conversations.getItem(ns, id, itemId);
  if (!item) throw notFound("item", itemId);
  return { kind: "json", body: itemToWire(item, include) };
}

export async function deleteItem(id: string, itemId: string, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const c = await deps.store.conversations.get(ns, id);
  if (!c) throw notFound("conversation", id);
  if (!(await deps.store.conversations.deleteItem(ns, id, itemId))) throw notFound("item", itemId);
  return { kind: "json", body: toWire(c) };
}
