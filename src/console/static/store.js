// @ts-check
// Conversations live in this browser's IndexedDB; saved.js puts one on the server when asked.

/**
 * @typedef {import("./answer.js").Turn} Turn
 * @typedef {{ id: string, title: string, createdAt: number, updatedAt: number, model?: string, messages: Turn[],
 *   server?: { id: string, count: number, hash: string } }} Conversation
 *   `server`: where it was saved on the server (saved.js), how many items went there, and their fingerprint
 */

const DB = "plinth-console";
const STORE = "conversations";

/** @type {Promise<IDBDatabase> | undefined} */
let opening;

/** @returns {Promise<IDBDatabase>} */
function db() {
  opening ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" }).createIndex("updatedAt", "updatedAt");
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  return opening;
}

/**
 * @template T
 * @param {IDBTransactionMode} mode
 * @param {(store: IDBObjectStore) => IDBRequest<T>} op
 * @returns {Promise<T>}
 */
async function run(mode, op) {
  const store = (await db()).transaction(STORE, mode).objectStore(STORE);
  return new Promise((resolve, reject) => {
    const req = op(store);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** Every conversation, newest first. @returns {Promise<Conversation[]>} */
export async function listConversations() {
  /** @type {Conversation[]} */
  const all = await run("readonly", (s) => s.getAll());
  return all.sort((a, b) => b.updatedAt - a.updatedAt);
}

/** @param {Conversation} conv */
export async function saveConversation(conv) {
  // Structured cloning keeps plain data only; the answer views hold none.
  await run("readwrite", (s) => s.put(JSON.parse(JSON.stringify(conv))));
}

/** @param {string} id */
export async function deleteConversation(id) {
  await run("readwrite", (s) => s.delete(id));
}

/** @returns {Conversation} */
export function newConversation() {
  const now = Date.now();
  return { id: `${now.toString(36)}-${Math.random().toString(36).slice(2, 10)}`, title: "New chat", createdAt: now, updatedAt: now, messages: [] };
}
