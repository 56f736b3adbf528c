// @ts-check
// What the operator's changes share: the admin key field and one status line. Reads go out with the
// API key like any client's; changes (load, unload, traffic) with the admin key, which the server
// asks for once it checks API keys (an API key may use models, not decide which ones run).

import { adminKey, ApiError, request } from "./api.js";

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @param {string} text @param {boolean} [error] */
export function opsStatus(text, error = false) {
  const p = $("ops-status");
  p.textContent = text;
  p.classList.toggle("error", error);
}

/**
 * A change through the public control plane, with the admin key; a refusal is explained on the
 * status line and resolves to undefined.
 * @param {string} path @param {{ method?: string, body?: unknown }} opts
 */
export async function change(path, opts) {
  try {
    return await request(path, { ...opts, admin: true });
  } catch (err) {
    const e = /** @type {Error} */ (err);
    const needKey = e instanceof ApiError && (e.status === 401 || e.status === 403);
    opsStatus(needKey ? `${e.message} Enter it under "Admin key for changes".` : e.message, true);
    return undefined;
  }
}

export function initOpsAdmin() {
  const input = /** @type {HTMLInputElement} */ ($("ops-admin-key"));
  input.value = adminKey.get();
  $("ops-admin").addEventListener("submit", (e) => {
    e.preventDefault();
    adminKey.set(input.value.trim());
    opsStatus(input.value.trim() ? "Admin key set for this tab." : "Admin key cleared.");
  });
}
