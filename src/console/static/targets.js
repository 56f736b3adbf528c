// @ts-check
// What a chat is sent to: a model (OpenAI's /v1/chat/completions), a serving endpoint (Databricks'
// /serving-endpoints/{name}/invocations, where the traffic split picks the entity) or one served
// entity of an endpoint (/served-models/{entity}/invocations). The wire differences live here.

import { el } from "./answer.js";
import { ApiError, request, streamChat } from "./api.js";

/**
 * @typedef {{ kind: "model" | "endpoint" | "entity", name: string, endpoint?: string }} Target
 * @typedef {{ name: string, entity_name: string, traffic?: number, model?: string,
 *   state?: { deployment?: string, deployment_state_message?: string, scaled_to_zero?: boolean } } & Record<string, unknown>} Entity
 * @typedef {{ name: string, endpoint_type: string, task?: string | null,
 *   state: { ready: string, config_update: string }, state_message?: string,
 *   config?: { served_entities: Entity[], traffic_config: { routes: { served_model_name: string, traffic_percentage: number }[] }, config_version: number },
 *   pending_config?: { served_entities: Entity[] } }} Endpoint
 */

/** An option's value as a target; a bare name (settings saved by an older console) is a model. @param {string} value @returns {Target} */
export function parseTarget(value) {
  const i = value.indexOf(":");
  const kind = value.slice(0, i);
  const rest = value.slice(i + 1);
  if (kind === "endpoint") return { kind, name: rest };
  if (kind === "entity") {
    const slash = rest.indexOf("/");
    return { kind, endpoint: rest.slice(0, slash), name: rest.slice(slash + 1) };
  }
  return { kind: "model", name: kind === "model" ? rest : value };
}

/** @param {Target} t */
export const targetValue = (t) => (t.kind === "entity" ? `entity:${t.endpoint}/${t.name}` : `${t.kind}:${t.name}`);

/** @param {Target} t */
export const targetLabel = (t) => (t.kind === "entity" ? `${t.endpoint} / ${t.name}` : t.name);

/** Serving endpoints speak Databricks' dialect; models OpenAI's. @param {Target} t */
export const isDatabricks = (t) => t.kind !== "model";

/** @param {Target} t */
export function chatPath(t) {
  const enc = encodeURIComponent;
  if (t.kind === "endpoint") return `/serving-endpoints/${enc(t.name)}/invocations`;
  if (t.kind === "entity") return `/serving-endpoints/${enc(t.endpoint ?? "")}/served-models/${enc(t.name)}/invocations`;
  return "/v1/chat/completions";
}

/**
 * The streamed request body for a target. Databricks' chat schema is strict: the path names the
 * endpoint (no `model`) and usage always comes with the stream (no `stream_options`).
 * @param {Target} t @param {Record<string, unknown>} body
 */
export function streamBody(t, body) {
  if (isDatabricks(t)) {
    const { model: _model, ...rest } = body;
    return { ...rest, stream: true };
  }
  return { ...body, model: t.name, stream: true, stream_options: { include_usage: true } };
}

/**
 * A Databricks chunk in the shape the answer view reads (OpenAI's): reasoning and text arrive as
 * content items, and usage counts reasoning at its top level.
 * @param {any} chunk
 * @returns {import("./api.js").Chunk}
 */
export function fromDatabricks(chunk) {
  for (const choice of chunk.choices ?? []) {
    const d = choice.delta;
    if (!d || !Array.isArray(d.content)) continue;
    let text = "";
    let reasoning = "";
    for (const item of d.content) {
      if (item.type === "text") text += item.text ?? "";
      if (item.type === "reasoning") for (const s of item.summary ?? []) reasoning += s.text ?? "";
    }
    d.content = text || undefined;
    if (reasoning) d.reasoning_content = reasoning;
  }
  const u = chunk.usage;
  if (u && u.reasoning_tokens !== undefined) u.completion_tokens_details = { reasoning_tokens: u.reasoning_tokens };
  return chunk;
}

/**
 * Streams a chat to a target. Resolves (or, stopped, rejects) once the stream ends; `onServed`
 * learns which served entity answered (Databricks' `served-model-name` header), as soon as known.
 * @param {Target} t @param {Record<string, unknown>} body @param {(chunk: import("./api.js").Chunk) => void} onChunk
 * @param {AbortSignal} signal @param {(entity: string) => void} [onServed]
 */
export function streamTo(t, body, onChunk, signal, onServed) {
  const db = isDatabricks(t);
  return streamChat(chatPath(t), streamBody(t, body), db ? (c) => onChunk(fromDatabricks(c)) : onChunk, signal, (headers) => {
    const entity = headers.get("served-model-name");
    if (db && entity) onServed?.(entity);
  });
}

/**
 * Every serving endpoint, or none where the server has no Databricks dialect (404). Any other failure
 * is thrown: an operator must not read a server that is down or refuses the key as "no endpoints".
 * @returns {Promise<Endpoint[]>}
 */
export async function listEndpoints() {
  try {
    return (await request("/api/2.0/serving-endpoints")).endpoints ?? [];
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return [];
    throw err;
  }
}

/** Created endpoints only: a pay-per-token endpoint is a served model under its own name. @param {Endpoint} ep */
export const isProvisioned = (ep) => ep.endpoint_type === "PROVISIONED_THROUGHPUT";

/** @param {Endpoint} ep */
const notReady = (ep) => (ep.state.ready === "READY" ? "" : " (not ready)");

/**
 * Fills a picker with models and endpoints, and with each endpoint's served entities when
 * `entities` is set (side by side compares them), keeping the choice when it is still there.
 * @param {HTMLSelectElement} select @param {import("./api.js").Model[]} models @param {Endpoint[]} endpoints
 * @param {{ entities?: boolean, keep?: string, fallback?: number }} opts
 */
export function fillPicker(select, models, endpoints, opts) {
  /** @type {string[]} */
  const values = [];
  /** @param {Target} t @param {string} [suffix] */
  const option = (t, suffix = "") => {
    values.push(targetValue(t));
    return el("option", { value: targetValue(t), text: targetLabel(t) + suffix });
  };
  const groups = [
    el("optgroup", { label: "Models" }, models.map((m) => option({ kind: "model", name: m.id }, m.status && m.status !== "ready" ? ` (${m.status})` : ""))),
  ];
  for (const ep of endpoints.filter(isProvisioned)) {
    if (ep.task === "llm/v1/embeddings") continue;
    const items = [option({ kind: "endpoint", name: ep.name }, `${notReady(ep)} · traffic split`)];
    if (opts.entities) for (const e of ep.config?.served_entities ?? []) items.push(option({ kind: "entity", endpoint: ep.name, name: e.name }));
    groups.push(el("optgroup", { label: `Serving endpoint ${ep.name}` }, items));
  }
  select.replaceChildren(...groups);
  const keep = opts.keep === undefined ? undefined : targetValue(parseTarget(opts.keep));
  select.value = keep && values.includes(keep) ? keep : (values[Math.min(opts.fallback ?? 0, values.length - 1)] ?? "");
}
