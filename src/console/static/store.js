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

/**
 * Saves a conversation. With `base` (the `updatedAt` of the copy the caller read or last wrote), it
 * is saved only if the stored copy is still that one, or gone: false when another tab has saved it
 * since, and nothing is written. Checked and written in one transaction, which IndexedDB runs alone
 * on the store, so two tabs cannot both pass the check.
 * @param {Conversation} conv @param {number} [base]
 * @returns {Promise<boolean>}
 */
export async function saveConversation(conv, base) {
  // Structured cloning keeps plain data only; the answer views hold none.
  const data = JSON.parse(JSON.stringify(conv));
  const store = (await db()).transaction(STORE, "readwrite").objectStore(STORE);
  return new Promise((resolve, reject) => {
    const get = store.get(conv.id);
    get.onerror = () => reject(get.error);
    get.onsuccess = () => {
      /** @type {Conversation | undefined} */
      const stored = get.result;
      if (base !== undefined && stored && stored.updatedAt !== base) return resolve(false);
      const put = store.put(data);
      put.onerror = () => reject(put.error);
      put.onsuccess = () => resolve(true);
    };
  });
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
