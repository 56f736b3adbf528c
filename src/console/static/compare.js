// @ts-check
// Side by side: one prompt to two models, both answers streamed at once.

import { AnswerStream, AnswerView } from "./answer.js";
import { streamChat } from "./api.js";
import { jsonMode, requestBody, SettingsError } from "./settings.js";

/** @typedef {import("./answer.js").Turn} Turn */

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @type {AbortController | undefined} */
let running;

/**
 * Streams one model's answer into its column.
 * @param {string} model @param {string} text @param {HTMLElement} column @param {AbortSignal} signal
 */
async function run(model, text, column, signal) {
  /** @type {Turn} */
  const turn = { role: "assistant", content: "", model, json: jsonMode() };
  const view = new AnswerView();
  column.replaceChildren(view.root);
  const stream = new AnswerStream(turn);
  try {
    const body = requestBody([{ role: "user", content: text }], model);
    await streamChat(body, (chunk) => {
      stream.add(chunk);
      view.update(turn, { done: false, streaming: true });
    }, signal);
  } catch (err) {
    const e = /** @type {Error} */ (err);
    if (e.name === "AbortError") turn.stats = { ...turn.stats, finishReason: "stopped" };
    else turn.error = e instanceof SettingsError ? `Settings: ${e.message}` : e.message;
  }
  stream.finish();
  view.update(turn, { done: true });
}

export function initCompare() {
  const stop = /** @type {HTMLButtonElement} */ ($("compare-stop"));
  const send = /** @type {HTMLButtonElement} */ ($("compare-send"));
  $("compare-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = /** @type {HTMLTextAreaElement} */ ($("compare-prompt")).value.trim();
    if (!text || running) return;
    const a = /** @type {HTMLSelectElement} */ ($("compare-a")).value;
    const b = /** @type {HTMLSelectElement} */ ($("compare-b")).value;
    $("col-a-title").textContent = `A · ${a}`;
    $("col-b-title").textContent = `B · ${b}`;
    running = new AbortController();
    send.disabled = true;
    stop.hidden = false;
    await Promise.all([run(a, text, $("col-a"), running.signal), run(b, text, $("col-b"), running.signal)]);
    running = undefined;
    send.disabled = false;
    stop.hidden = true;
  });
  stop.addEventListener("click", () => running?.abort());
}
