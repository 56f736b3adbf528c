// @ts-check
// The playground's request settings (model, system prompt, sampling, tools, format, extra fields),
// turned into the body of a Chat Completions request. Side by side uses the same settings.

import { isDatabricks, parseTarget } from "./targets.js";

/**
 * @typedef {import("./answer.js").Turn} Turn
 * @typedef {import("./targets.js").Target} Target
 */

/** @param {string} id */
const field = (id) => /** @type {HTMLInputElement & HTMLSelectElement & HTMLTextAreaElement} */ (document.getElementById(id));

const form = () => /** @type {HTMLFormElement} */ (document.getElementById("settings"));

/** @param {string} name */
const input = (name) => /** @type {HTMLInputElement} */ (form().elements.namedItem(name));

/** An error in a settings field, worded for the user. */
export class SettingsError extends Error {}

/** @param {string} name @param {string} text */
function parseJson(name, text) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new SettingsError(`${name} is not valid JSON: ${/** @type {Error} */ (err).message}`);
  }
}

/**
 * An answer that failed before it said anything (a 400, a server down): shown in the thread with
 * its error, but not a turn of the conversation, neither sent again nor saved.
 * @param {Turn} t
 */
export const failedEmpty = (t) => t.role === "assistant" && Boolean(t.error) && !t.content && !t.toolCalls?.length;

/** The messages as the API takes them: the system prompt first, reasoning left out. @param {Turn[]} turns */
export function wireMessages(turns) {
  /** @type {Record<string, unknown>[]} */
  const out = [];
  const system = field("system").value.trim();
  if (system) out.push({ role: "system", content: system });
  for (const t of turns) {
    if (failedEmpty(t)) continue;
    if (t.role === "tool") out.push({ role: "tool", tool_call_id: t.toolCallId, content: t.content });
    else if (t.role === "assistant" && t.toolCalls?.length)
      out.push({
        role: "assistant",
        content: t.content || null,
        tool_calls: t.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })),
      });
    else out.push({ role: t.role, content: t.content });
  }
  return out;
}

/** Is the answer asked for as JSON? */
export const jsonMode = () => field("format").value !== "text";

/** What the playground talks to: the model or serving endpoint picked. */
export const selectedTarget = () => parseTarget(field("model").value);

/** Sampling fields OpenAI's chat takes and Databricks' does not (its schema is strict). */
const NOT_IN_DATABRICKS = ["min_p", "seed"];

/**
 * Greys out the fields a serving endpoint would refuse, and says why, while one is picked.
 * @param {Target} target
 */
export function showTargetFields(target) {
  const db = isDatabricks(target);
  for (const name of NOT_IN_DATABRICKS) {
    const e = input(name);
    e.disabled = db;
    e.title = db ? "Not part of Databricks' chat API: not sent to serving endpoints" : "";
  }
  const hint = document.getElementById("target-hint");
  if (hint) hint.hidden = !db;
}

/**
 * The request body for the current settings (without `stream`, which the caller adds). `model`
 * names the target; serving endpoints get Databricks' fields only.
 * @param {Turn[]} turns
 * @param {Target} [target] another target than the one selected (side by side)
 * @returns {Record<string, unknown>}
 */
export function requestBody(turns, target = selectedTarget()) {
  // An empty picker (the model list could not be had, or lists none) would send `"model": ""`.
  if (!target.name) throw new SettingsError("No model to send to: the model list is empty or could not be loaded (see the note at the top of the page).");
  /** @type {Record<string, unknown>} */
  const body = { model: target.kind === "entity" ? target.endpoint : target.name, messages: wireMessages(turns) };
  const skip = isDatabricks(target) ? NOT_IN_DATABRICKS : [];
  for (const name of ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"]) {
    const v = input(name).value.trim();
    if (v !== "" && !skip.includes(name)) body[name] = Number(v);
  }
  if (input("logprobs").checked) {
    body.logprobs = true;
    body.top_logprobs = 5;
  }
  const tools = field("tools").value.trim();
  if (tools) {
    body.tools = parseJson("Tool definitions", tools);
    body.tool_choice = field("tool_choice").value;
  }
  const format = field("format").value;
  if (format === "json_object") body.response_format = { type: "json_object" };
  if (format === "json_schema") {
    const schema = field("schema").value.trim();
    if (!schema) throw new SettingsError("JSON schema mode needs a schema.");
    body.response_format = { type: "json_schema", json_schema: { name: "answer", schema: parseJson("The JSON schema", schema), strict: true } };
  }
  const extra = field("extra").value.trim();
  if (extra) {
    const fields = parseJson("More request fields", extra);
    if (typeof fields !== "object" || fields === null || Array.isArray(fields)) throw new SettingsError("More request fields must be a JSON object.");
    Object.assign(body, fields);
  }
  return body;
}

const SAVED = "plinth.settings";

/** Settings survive a reload (in local storage); the model list decides whether the model still exists. */
export function persistSettings() {
  const f = form();
  /** @type {Record<string, string | boolean>} */
  const saved = JSON.parse(localStorage.getItem(SAVED) ?? "{}");
  for (const e of /** @type {HTMLInputElement[]} */ ([...f.elements])) {
    if (!e.name) continue;
    if (e.name in saved) {
      if (e.type === "checkbox") e.checked = saved[e.name] === true;
      else if (e.name !== "model") e.value = String(saved[e.name]);
    }
  }
  const problem = /** @type {HTMLElement} */ (document.getElementById("settings-store-error"));
  f.addEventListener("change", () => {
    /** @type {Record<string, string | boolean>} */
    const out = {};
    for (const e of /** @type {HTMLInputElement[]} */ ([...f.elements])) if (e.name) out[e.name] = e.type === "checkbox" ? e.checked : e.value;
    // Local storage holds a few MB: a field larger than that (a long system prompt) cannot be kept.
    // The page goes on with the settings as typed; the user is told they will not survive a reload.
    try {
      localStorage.setItem(SAVED, JSON.stringify(out));
      problem.hidden = true;
      problem.textContent = "";
    } catch (err) {
      const why = /** @type {Error} */ (err).name === "QuotaExceededError" ? "they are larger than this browser's storage holds" : /** @type {Error} */ (err).message;
      problem.hidden = false;
      problem.textContent = `These settings could not be kept in this browser (${why}): they apply on this page, but a reload brings back the ones kept before.`;
    }
  });
  f.addEventListener("submit", (e) => e.preventDefault());
}

/** The model or endpoint picked last time, if any (an option's value). */
export const savedModel = () => /** @type {string | undefined} */ (JSON.parse(localStorage.getItem(SAVED) ?? "{}").model);
