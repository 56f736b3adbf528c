// @ts-check
// The operator's serving endpoints: their state and served entities, and the traffic split edited
// through the public control plane (PUT /api/2.0/serving-endpoints/{name}/config), as any client would.

import { el } from "./answer.js";
import { change, opsStatus } from "./ops-admin.js";
import { syncRows } from "./ops-rows.js";
import { isProvisioned, listEndpoints } from "./targets.js";

/**
 * @typedef {import("./targets.js").Endpoint} Endpoint
 * @typedef {import("./targets.js").Entity} Entity
 */

/** The fields of a served entity that a config update takes; the rest of GET's answer is state. */
const ENTITY_FIELDS = ["name", "entity_name", "entity_version", "workload_size", "workload_type", "scale_to_zero_enabled", "min_provisioned_throughput", "max_provisioned_throughput"];

/** An entity's deployment in words. @param {Entity} e */
function entityState(e) {
  const s = e.state ?? {};
  if (s.scaled_to_zero) return { text: "scaled to zero", cls: "unloaded" };
  if (s.deployment === "DEPLOYMENT_READY") return { text: "ready", cls: "ready" };
  if (s.deployment === "DEPLOYMENT_FAILED") return { text: `failed: ${s.deployment_state_message ?? ""}`, cls: "failed" };
  return { text: "loading", cls: "loading" };
}

/** The endpoint's state: READY or NOT_READY, and an update under way or failed. @param {Endpoint} ep */
function endpointState(ep) {
  const update = { IN_PROGRESS: " · updating", UPDATE_FAILED: " · update failed" }[ep.state.config_update] ?? "";
  return `${ep.state.ready}${update}`;
}

/** @param {Endpoint} ep */
function trafficOf(ep) {
  const routes = ep.config?.traffic_config.routes ?? [];
  return (/** @type {string} */ name) => routes.find((r) => r.served_model_name === name)?.traffic_percentage ?? 0;
}

/** @type {string | undefined} the endpoint whose traffic editor is open (kept across refreshes) */
let editing;
/**
 * The open editor's row, built once when it opens: a refresh (the poll's) keeps this very element,
 * so the values being typed and the focus in it survive until Save or Cancel.
 * @type {{ name: string, row: HTMLTableRowElement } | undefined}
 */
let editor;

/** Closes the traffic editor. */
function closeEditor() {
  editing = undefined;
  editor = undefined;
}

/**
 * Lists the endpoints into their table, updating rows in place.
 * @returns {Promise<unknown>} the error when they could not be listed (the table says it), else undefined
 */
export async function refreshEndpoints() {
  const body = /** @type {HTMLElement} */ (document.querySelector("#endpoints-table tbody"));
  let endpoints;
  try {
    endpoints = await listEndpoints();
  } catch (err) {
    // The open editor stays: a list that fails for a moment must not lose what is being typed.
    const row = el("tr", {}, [el("td", { colspan: "5", class: "error", text: `Cannot list the serving endpoints: ${/** @type {Error} */ (err).message}` })]);
    syncRows(body, editor ? [row, editor.row] : [row]);
    return err;
  }
  const rows = [];
  for (const ep of endpoints) {
    const traffic = trafficOf(ep);
    const entities = el(
      "ul",
      { class: "entities" },
      (ep.config?.served_entities ?? []).map((e) => {
        const st = entityState(e);
        return el("li", {}, [
          el("strong", { text: e.name }),
          ` → ${e.model ?? e.entity_name} · `,
          el("span", { class: `state state-${st.cls}`, text: st.text }),
          ` · ${traffic(e.name)}%`,
        ]);
      }),
    );
    const actions = el("td");
    if (isProvisioned(ep) && ep.config) {
      const edit = el("button", { type: "button", class: "ghost", text: "Edit traffic", "aria-label": `Edit traffic of ${ep.name}` });
      edit.addEventListener("click", async () => {
        editing = ep.name;
        await refreshEndpoints();
        editor?.row.querySelector("input")?.focus();
      });
      actions.append(edit);
    }
    rows.push(
      el("tr", { "data-endpoint": ep.name, "data-key": `endpoint:${ep.name}` }, [
        el("th", { scope: "row", text: ep.name }),
        el("td", { text: isProvisioned(ep) ? "provisioned" : "pay-per-token" }),
        el("td", {}, [el("span", { class: `state state-${ep.state.ready === "READY" ? "ready" : "loading"}`, text: endpointState(ep) })]),
        el("td", {}, [entities]),
        actions,
      ]),
    );
    if (editing === ep.name && ep.config) {
      if (editor?.name !== ep.name) editor = { name: ep.name, row: el("tr", { class: "traffic-row", "data-key": `traffic:${ep.name}` }, [el("td", { colspan: "5" }, [trafficEditor(ep)])]) };
      rows.push(editor.row);
    }
  }
  // An endpoint deleted meanwhile takes its editor with it.
  if (editing && !endpoints.some((ep) => ep.name === editing && ep.config)) closeEditor();
  if (endpoints.length === 0) rows.push(el("tr", {}, [el("td", { colspan: "5", class: "hint", text: "No serving endpoints (this server may not have the Databricks dialect)." })]));
  syncRows(body, rows);
  return undefined;
}

/** A form with one percentage per served entity and their running total. @param {Endpoint} ep */
function trafficEditor(ep) {
  const config = /** @type {NonNullable<Endpoint["config"]>} */ (ep.config);
  const traffic = trafficOf(ep);
  const total = el("output", { class: "traffic-total" });
  const inputs = config.served_entities.map((e) => {
    const input = el("input", { type: "number", min: "0", max: "100", step: "1", name: e.name, value: String(traffic(e.name)) });
    return { entity: e, input, label: el("label", {}, [`Traffic to ${e.name} (%) `, input]) };
  });
  const sum = () => inputs.reduce((a, i) => a + (Number(i.input.value) || 0), 0);
  const showTotal = () => (total.textContent = `Total ${sum()}% (must be 100%)`);
  const save = el("button", { type: "submit", text: "Save traffic" });
  const cancel = el("button", { type: "button", class: "ghost", text: "Cancel" });
  const form = el("form", { class: "traffic-form inline", "aria-label": `Traffic split of ${ep.name}` }, [...inputs.map((i) => i.label), total, save, cancel]);
  form.addEventListener("input", showTotal);
  showTotal();
  cancel.addEventListener("click", () => {
    closeEditor();
    void refreshEndpoints();
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = {
      served_entities: config.served_entities.map((entity) => Object.fromEntries(ENTITY_FIELDS.filter((k) => entity[k] != null).map((k) => [k, entity[k]]))),
      traffic_config: { routes: inputs.map((i) => ({ served_model_name: i.entity.name, traffic_percentage: Number(i.input.value) })) },
    };
    save.disabled = true;
    const updated = await change(`/api/2.0/serving-endpoints/${encodeURIComponent(ep.name)}/config`, { method: "PUT", body });
    save.disabled = false;
    if (!updated) return;
    closeEditor();
    opsStatus(`Updating ${ep.name}…`);
    await untilSettled(ep.name);
  });
  return form;
}

/** Follows an update until the endpoint serves the new config (or 30 s pass). @param {string} name */
async function untilSettled(name) {
  for (let i = 0; i < 60; i++) {
    await refreshEndpoints();
    // A list that fails for a moment (the table says why) is asked again, not read as "no endpoint".
    const ep = await listEndpoints().then((all) => all.find((x) => x.name === name), () => null);
    if (ep === null) {
      await new Promise((r) => setTimeout(r, 500));
      continue;
    }
    if (!ep || ep.state.config_update !== "IN_PROGRESS") {
      const split = ep?.config?.traffic_config.routes.map((r) => `${r.served_model_name} ${r.traffic_percentage}%`).join(", ");
      opsStatus(ep?.state.config_update === "UPDATE_FAILED" ? `${name}: the update failed (${ep.state_message ?? "see the endpoint"}).` : `${name} now routes ${split}.`, ep?.state.config_update === "UPDATE_FAILED");
      await refreshEndpoints();
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}
