// @ts-check
// Conversations saved on the server, through the public Conversations API (/v1/conversations): the
// transcript as Responses items, so a saved chat can be opened again here by its id, or continued
// from code with the Responses API (`conversation: "conv_…"`). Nothing is generated again.

import { ApiError, request } from "./api.js";
import { failedEmpty } from "./settings.js";

/**
 * @typedef {import("./answer.js").Turn} Turn
 * @typedef {import("./store.js").Conversation} Conversation
 * @typedef {Record<string, any>} Item
 */

/** The API takes at most 20 items per call. */
const BATCH = 20;

/**
 * The conversation as Responses items: messages, reasoning, function calls and their outputs.
 * @param {Turn[]} turns @param {string} system
 * @returns {Item[]}
 */
export function toItems(turns, system) {
  /** @type {Item[]} */
  const items = system ? [{ type: "message", role: "system", content: system }] : [];
  for (const t of turns) {
    if (failedEmpty(t)) continue;
    if (t.role === "user") items.push({ type: "message", role: "user", content: t.content });
    else if (t.role === "tool") items.push({ type: "function_call_output", call_id: t.toolCallId ?? "", output: t.content });
    else {
      if (t.reasoning) items.push({ type: "reasoning", summary: [{ type: "summary_text", text: t.reasoning }] });
      if (t.content || !t.toolCalls?.length) items.push({ type: "message", role: "assistant", content: t.content });
      for (const c of t.toolCalls ?? []) items.push({ type: "function_call", call_id: c.id, name: c.name, arguments: c.arguments });
    }
  }
  return items;
}

/** @param {unknown} content a message's content: a string or text parts */
const textOf = (content) =>
  typeof content === "string" ? content : Array.isArray(content) ? content.map((p) => (typeof p?.text === "string" ? p.text : "")).join("") : "";

/**
 * Turns from stored items: reasoning and function calls join the assistant turn they belong to.
 * @param {Item[]} items
 * @returns {{ turns: Turn[], system: string }}
 */
export function fromItems(items) {
  /** @type {Turn[]} */
  const turns = [];
  let system = "";
  /** @type {Turn | undefined} an assistant turn still open to more of its parts */
  let open;
  const assistant = () => {
    if (!open) turns.push((open = { role: "assistant", content: "" }));
    return open;
  };
  for (const item of items) {
    const type = item.type ?? "message";
    if (type === "message" && (item.role === "system" || item.role === "developer")) system = textOf(item.content);
    else if (type === "message" && item.role === "user") {
      turns.push({ role: "user", content: textOf(item.content) });
      open = undefined;
    } else if (type === "message" && item.role === "assistant") {
      // After this turn's text or calls, another answer begins a turn of its own.
      if (open && (open.content || open.toolCalls)) open = undefined;
      assistant().content = textOf(item.content);
    } else if (type === "reasoning") {
      const text = (item.summary ?? []).map((/** @type {Item} */ s) => s.text ?? "").join("");
      if (open && (open.content || open.toolCalls)) open = undefined;
      assistant().reasoning = text;
    } else if (type === "function_call") {
      const t = assistant();
      (t.toolCalls ??= []).push({ id: item.call_id, name: item.name, arguments: item.arguments });
    } else if (type === "function_call_output") {
      turns.push({ role: "tool", toolCallId: item.call_id, content: textOf(item.output) });
      open = undefined;
    }
  }
  return { turns, system };
}

/** A short fingerprint of items, to tell whether the saved part of a chat is still as it was. @param {Item[]} items */
function fingerprint(items) {
  const s = JSON.stringify(items);
  let h = 5381;
  for (let i = 0; i < s.length; i++) h = ((h * 33) ^ s.charCodeAt(i)) >>> 0;
  return `${s.length}:${h.toString(36)}`;
}

/** @param {string} id @param {Item[]} items */
async function addItems(id, items) {
  for (let i = 0; i < items.length; i += BATCH)
    await request(`/v1/conversations/${encodeURIComponent(id)}/items`, { body: { items: items.slice(i, i + BATCH) } });
}

/**
 * Saves the chat on the server. Saved before and unchanged up to what was saved: only the new turns
 * are added to the same conversation; otherwise (edited, regenerated) it is saved as a new one.
 * Returns the server's conversation id and records it on `conv`.
 * @param {Conversation} conv @param {string} system
 */
export async function saveToServer(conv, system) {
  const items = toItems(conv.messages, system);
  if (items.length === 0) throw new Error("Nothing to save yet: send a message first.");
  const prev = conv.server;
  if (prev && prev.count <= items.length && fingerprint(items.slice(0, prev.count)) === prev.hash) {
    try {
      await addItems(prev.id, items.slice(prev.count));
      conv.server = { id: prev.id, count: items.length, hash: fingerprint(items) };
      return prev.id;
    } catch (err) {
      // Only a conversation deleted on the server meanwhile is saved anew below; any other failure (a
      // rate limit, a server down) is the user's to see, not a reason to fork a second conversation.
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    }
  }
  const metadata = { title: conv.title.slice(0, 512), saved_by: "plinth-console" };
  /** @type {{ id: string }} */
  const created = await request("/v1/conversations", { body: { items: items.slice(0, BATCH), metadata } });
  await addItems(created.id, items.slice(BATCH));
  conv.server = { id: created.id, count: items.length, hash: fingerprint(items) };
  return created.id;
}

/**
 * Reads a saved conversation back, all its items in order.
 * @param {string} id
 * @returns {Promise<{ conv: Conversation, system: string }>}
 */
export async function openFromServer(id) {
  const enc = encodeURIComponent(id);
  /** @type {{ id: string, created_at: number, metadata?: Record<string, string> }} */
  const head = await request(`/v1/conversations/${enc}`);
  /** @type {Item[]} */
  const items = [];
  let after = "";
  for (;;) {
    const page = await request(`/v1/conversations/${enc}/items?order=asc&limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`);
    items.push(...page.data);
    if (!page.has_more || !page.last_id) break;
    after = page.last_id;
  }
  const { turns, system } = fromItems(items);
  const now = Date.now();
  const mine = toItems(turns, system);
  return {
    system,
    conv: {
      // One local copy per saved conversation: opening it twice reuses it.
      id: `server-${head.id}`,
      title: head.metadata?.title || head.id,
      createdAt: head.created_at * 1000,
      updatedAt: now,
      messages: turns,
      server: { id: head.id, count: mine.length, hash: fingerprint(mine) },
    },
  };
}
