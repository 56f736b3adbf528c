// @ts-check
// The operator's models: their state, and loading or unloading them at run time through
// /api/2.0/plinth/models (Plinth's extension beside Databricks' control plane).

import { el } from "./answer.js";
import { listModels } from "./api.js";
import { change, opsStatus } from "./ops-admin.js";
import { syncRows } from "./ops-rows.js";

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** A model's state in words: "unloaded" is a scale-to-zero model asleep until its next request. @param {string} s */
const stateText = (s) => (s === "unloaded" ? "scaled to zero" : s);

/**
 * Lists the models into their table, updating rows in place (a focused Unload button stays focused).
 * @returns {Promise<unknown>} the error when they could not be listed (the table says it), else undefined
 */
export async function refreshModels() {
  const body = /** @type {HTMLElement} */ (document.querySelector("#models-table tbody"));
  try {
    const models = await listModels();
    syncRows(
      body,
      models.map((m) => {
        const state = m.status ?? "ready";
        const unload = el("button", { type: "button", class: "ghost", text: "Unload", "aria-label": `Unload ${m.id}` });
        unload.addEventListener("click", () => void unloadModel(m.id));
        return el("tr", { "data-key": m.id }, [
          el("th", { scope: "row", text: m.id }),
          el("td", {}, [el("span", { class: `state state-${state}`, text: stateText(state) })]),
          el("td", { text: m.max_model_len ? `${m.max_model_len} tokens` : "—" }),
          el("td", { text: m.embedding?.embedding_only ? "embeddings" : m.embedding ? "chat, embeddings" : "chat" }),
          el("td", {}, [unload]),
        ]);
      }),
    );
    return undefined;
  } catch (err) {
    body.replaceChildren(el("tr", {}, [el("td", { colspan: "5", class: "error", text: /** @type {Error} */ (err).message })]));
    return err;
  }
}

/** @param {string} id */
async function unloadModel(id) {
  if (!confirm(`Unload '${id}'? Requests for it fail until it is loaded again.`)) return;
  opsStatus(`Unloading ${id}…`);
  if ((await change(`/api/2.0/plinth/models/${encodeURIComponent(id)}`, { method: "DELETE" })) === undefined) return;
  opsStatus(`Unloaded ${id}.`);
  await refreshModels();
}

export function initOpsModels() {
  $("load-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const form = /** @type {HTMLFormElement} */ (e.currentTarget);
    const data = new FormData(form);
    const source = String(data.get("source") ?? "").trim();
    const name = String(data.get("name") ?? "").trim();
    const button = /** @type {HTMLButtonElement} */ (form.querySelector("button"));
    button.disabled = true;
    opsStatus(`Loading ${name || source}… (the request returns once the model is ready)`);
    /** @type {{ name: string, status: string } | undefined} */
    const loaded = await change("/api/2.0/plinth/models", { body: { source, ...(name ? { name } : {}) } });
    button.disabled = false;
    if (!loaded) return;
    opsStatus(`Loaded ${loaded.name}: ${loaded.status}.`);
    form.reset();
    await refreshModels();
  });
}
