// @ts-check
// Side by side: one prompt to two models, endpoints or served entities of one endpoint (the A/B
// that serving endpoints exist for), both answers streamed at once.

import { AnswerStream, AnswerView } from "./answer.js";
import { jsonMode, requestBody, SettingsError } from "./settings.js";
import { parseTarget, streamTo, targetLabel } from "./targets.js";

/**
 * @typedef {import("./answer.js").Turn} Turn
 * @typedef {import("./targets.js").Target} Target
 */

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @type {AbortController | undefined} */
let running;

/**
 * Streams one target's answer into its column; the column's title names the entity that answered.
 * @param {Target} target @param {string} text @param {HTMLElement} column @param {HTMLElement} title @param {AbortSignal} signal
 */
async function run(target, text, column, title, signal) {
  /** @type {Turn} */
  const turn = { role: "assistant", content: "", model: targetLabel(target), json: jsonMode() };
  const view = new AnswerView();
  column.replaceChildren(view.root);
  const stream = new AnswerStream(turn);
  try {
    const body = requestBody([{ role: "user", content: text }], target);
    await streamTo(
      target,
      body,
      (chunk) => {
        stream.add(chunk);
        view.update(turn, { done: false, streaming: true });
      },
      signal,
      (entity) => {
        if (target.kind === "endpoint") title.textContent += ` → ${entity}`;
      },
    );
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
    const a = parseTarget(/** @type {HTMLSelectElement} */ ($("compare-a")).value);
    const b = parseTarget(/** @type {HTMLSelectElement} */ ($("compare-b")).value);
    $("col-a-title").textContent = `A · ${targetLabel(a)}`;
    $("col-b-title").textContent = `B · ${targetLabel(b)}`;
    running = new AbortController();
    send.disabled = true;
    stop.hidden = false;
    await Promise.all([run(a, text, $("col-a"), $("col-a-title"), running.signal), run(b, text, $("col-b"), $("col-b-title"), running.signal)]);
    running = undefined;
    send.disabled = false;
    stop.hidden = true;
  });
  stop.addEventListener("click", () => running?.abort());
}
