// @ts-check
// Keys and usage, on the admin API (/admin/keys, /admin/usage). The screen shows only on a server
// that has that API; every call carries the admin key the operator typed in.

import { el } from "./answer.js";
import { adminKey, ApiError, request } from "./api.js";
import { barChart } from "./chart.js";

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * @typedef {{ id: string, name: string, prefix?: string, models?: string[] | null, rpm?: number | null, tpm?: number | null,
 *   max_concurrency?: number | null, budget_tokens?: number | null, used_tokens?: number, expires_at?: number | null,
 *   revoked_at?: number | null, state?: string, created_at?: number }} Key
 */

/**
 * Whether this server has the admin API: a 404, or a 403 with code admin_api_disabled (a server
 * started without --admin-key), means it does not, and the screen stays hidden; any other answer
 * (401, another 403, 200) means it does.
 */
export async function adminApiPresent() {
  // The page says so when the server served it (no request, so no refusal logged in the console).
  const told = document.body.dataset.adminApi;
  if (told) return told === "on";
  try {
    await request("/admin/keys", { admin: true });
    return true;
  } catch (err) {
    // An unreachable server (status 0) has shown nothing either way: no screen for it.
    if (!(err instanceof ApiError)) return false;
    if (err.status === 403 && err.code === "admin_api_disabled") return false;
    return err.status !== 404 && err.status !== 0;
  }
}

/** Key names by id, for the usage grouped by key. @type {Map<string, string>} */
const names = new Map();

/**
 * A key's name set inside a sentence, isolated (FSI … PDI): a name may hold bidi controls such as
 * U+202E, which would otherwise turn the rest of the sentence around it right to left.
 * @param {string} name
 */
const isolate = (name) => `\u2068${name}\u2069`;

/** @param {string} text @param {boolean} [error] */
function status(text, error = false) {
  const p = $("keys-status");
  p.textContent = text;
  p.classList.toggle("error", error);
}

/** A date as YYYY-MM-DD in this browser's time zone, as the date inputs show it. @param {Date} d */
const localDay = (d) => `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;

/**
 * Midnight, in this browser's time zone, of the day `days` after a YYYY-MM-DD date.
 * @param {string} date @param {number} days
 */
function dayStart(date, days) {
  const [y, m, d] = date.split("-").map(Number);
  return new Date(y, m - 1, d + days);
}

/** @param {Key} k */
function limits(k) {
  const parts = [];
  if (k.models?.length) parts.push(`models: ${k.models.join(", ")}`);
  if (k.rpm) parts.push(`${k.rpm} req/min`);
  if (k.tpm) parts.push(`${k.tpm} tokens/min`);
  if (k.max_concurrency) parts.push(`${k.max_concurrency} at once`);
  if (k.budget_tokens) parts.push(`budget ${k.used_tokens ?? 0} of ${k.budget_tokens} tokens used`);
  if (k.expires_at) parts.push(`expires ${localDay(new Date(k.expires_at * 1000))}`);
  return parts.join(" · ") || "none";
}

/** Loads keys and usage; a 401 or 403 is explained instead. */
export async function refreshKeys() {
  const body = $("keys-body");
  /** @type {{ data: Key[] }} */
  let list;
  try {
    list = await request("/admin/keys", { admin: true });
  } catch (err) {
    body.hidden = true;
    const e = /** @type {ApiError} */ (err);
    if (e.status === 401) status(adminKey.get() ? "That admin key was refused." : "Enter the server's admin key (--admin-key).", Boolean(adminKey.get()));
    else status(e.message, true);
    return;
  }
  body.hidden = false;
  status("");
  for (const k of list.data) names.set(k.id, k.name);
  const tbody = /** @type {HTMLElement} */ (document.querySelector("#keys-table tbody"));
  tbody.replaceChildren(
    ...list.data.map((k) => {
      const revoked = Boolean(k.revoked_at);
      const state = k.state ?? (revoked ? "revoked" : "active");
      const cell = el("td");
      if (!revoked) {
        const b = el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": `Revoke ${k.name}` });
        b.addEventListener("click", async () => {
          if (!confirm(`Revoke the key '${isolate(k.name)}'? Requests with it are refused from now on.`)) return;
          try {
            await request(`/admin/keys/${encodeURIComponent(k.id)}`, { method: "DELETE", admin: true });
          } catch (err) {
            // Said on the screen: the key is still live, and the operator must know it.
            status(`The key '${isolate(k.name)}' was not revoked: ${/** @type {Error} */ (err).message}`, true);
            return;
          }
          await refreshKeys();
        });
        cell.append(b);
      }
      return el("tr", {}, [
        el("th", { scope: "row", text: k.name }),
        el("td", {}, [el("code", { text: k.prefix ? `${k.prefix}…` : k.id })]),
        el("td", { text: limits(k) }),
        el("td", { text: state }),
        cell,
      ]);
    }),
  );
  await refreshUsage();
}

async function refreshUsage() {
  const form = /** @type {HTMLFormElement} */ ($("usage-form"));
  const data = new FormData(form);
  const params = new URLSearchParams({ group_by: String(data.get("group_by") ?? "model") });
  const from = String(data.get("from") ?? "");
  const to = String(data.get("to") ?? "");
  // The dates are this browser's days: from the first one's midnight here to the end of the last
  // (the next one's midnight), sent as instants. A bare date would be read as a UTC day.
  if (from) params.set("from", dayStart(from, 0).toISOString());
  if (to) params.set("to", dayStart(to, 1).toISOString());
  const chart = $("usage-chart");
  const tbody = /** @type {HTMLElement} */ (document.querySelector("#usage-table tbody"));
  try {
    /** @type {{ group_by: string, data: Record<string, any>[] }} */
    const usage = await request(`/admin/usage?${params}`, { admin: true });
    const label = (/** @type {Record<string, any>} */ r) => {
      const g = r[usage.group_by];
      if (g === null || g === undefined) return usage.group_by === "key" ? "(no key)" : "(none)";
      return usage.group_by === "key" && names.has(g) ? `${names.get(g)}` : String(g);
    };
    // The chart shows tokens; calls that used none (model lists, metrics) are in the table only.
    const used = usage.data.filter((r) => r.total_tokens > 0);
    barChart(chart, used.map((r) => ({ label: label(r), value: r.total_tokens, note: `tokens, ${r.requests} requests` })), `Tokens by ${usage.group_by}`);
    tbody.replaceChildren(
      ...usage.data.map((r) =>
        el("tr", {}, [
          el("th", { scope: "row", text: label(r) }),
          ...[r.requests, r.errors, r.prompt_tokens, r.cached_tokens, r.completion_tokens, r.total_tokens].map((v) => el("td", { text: String(v) })),
        ]),
      ),
    );
    if (used.length === 0) chart.textContent = "No tokens used in this period.";
  } catch (err) {
    chart.textContent = /** @type {Error} */ (err).message;
    // No older period's rows under the error, as if they were this one's.
    tbody.replaceChildren();
  }
}

export function initKeys() {
  const keyInput = /** @type {HTMLInputElement} */ ($("admin-key"));
  keyInput.value = adminKey.get();
  $("admin-login").addEventListener("submit", (e) => {
    e.preventDefault();
    adminKey.set(keyInput.value.trim());
    void refreshKeys();
  });
  $("usage-form").addEventListener("submit", (e) => {
    e.preventDefault();
    void refreshUsage();
  });
  $("key-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const form = /** @type {HTMLFormElement} */ (e.currentTarget);
    const data = new FormData(form);
    /** @type {Record<string, unknown>} */
    const body = { name: String(data.get("name")).trim() };
    const models = String(data.get("models") ?? "").split(",").map((s) => s.trim()).filter(Boolean);
    if (models.length) body.models = models;
    for (const k of ["rpm", "tpm", "max_concurrency", "budget_tokens"]) {
      const v = String(data.get(k) ?? "");
      if (v) body[k] = Number(v);
    }
    const expires = String(data.get("expires_at") ?? "");
    // The day chosen is the last day the key works: it expires at that day's end, here (a bare date
    // would be 00:00 UTC, so choosing today would make a key already expired).
    if (expires) body.expires_at = Math.floor(new Date(`${expires}T23:59:59`).getTime() / 1000);
    const out = $("new-key");
    try {
      /** @type {Key & { key: string }} */
      const created = await request("/admin/keys", { body, admin: true });
      out.hidden = false;
      out.replaceChildren("New key for ", el("strong", {}, [el("bdi", { text: created.name })]), " (shown once, copy it now): ", el("code", { class: "secret", text: created.key }));
      form.reset();
      await refreshKeys();
    } catch (err) {
      out.hidden = false;
      out.textContent = /** @type {Error} */ (err).message;
    }
  });
  // The last seven days, today included, as this browser's calendar has them.
  const now = new Date();
  const usage = /** @type {HTMLFormElement} */ ($("usage-form"));
  /** @type {HTMLInputElement} */ (usage.elements.namedItem("from")).value = localDay(new Date(now.getFullYear(), now.getMonth(), now.getDate() - 6));
  /** @type {HTMLInputElement} */ (usage.elements.namedItem("to")).value = localDay(now);
}
