// @ts-check
// Side by side: one prompt to two models, endpoints or served entities of one endpoint (the A/B
// that serving endpoints exist for), both answers streamed at once.

import { AnswerStream, AnswerView } from "./answer.js";
import { initComposer, setComposerBusy } from "./composer.js";
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

/**
 * @param {{ reloadModels: () => Promise<unknown> }} opts `reloadModels` fills the pickers again from
 *   the server (Send asks for the list again when a picker is empty)
 */
export function initCompare({ reloadModels }) {
  /** @type {import("./composer.js").Composer} */
  const composer = {
    screen: $("screen-compare"),
    form: /** @type {HTMLFormElement} */ ($("compare-form")),
    prompt: /** @type {HTMLTextAreaElement} */ ($("compare-prompt")),
    send: /** @type {HTMLButtonElement} */ ($("compare-send")),
    stop: /** @type {HTMLButtonElement} */ ($("compare-stop")),
    onStop: () => running?.abort(),
  };
  const picker = (/** @type {string} */ id) => /** @type {HTMLSelectElement} */ ($(id));
  let asking = false;
  composer.form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!composer.prompt.value.trim() || running || asking) return;
    if (!picker("compare-a").value || !picker("compare-b").value) {
      asking = true;
      try {
        await reloadModels();
      } finally {
        asking = false;
      }
    }
    // Read after the wait: the prompt as it is now.
    const text = composer.prompt.value.trim();
    if (!text || running) return;
    const a = parseTarget(picker("compare-a").value);
    const b = parseTarget(picker("compare-b").value);
    $("col-a-title").textContent = `A · ${targetLabel(a)}`;
    $("col-b-title").textContent = `B · ${targetLabel(b)}`;
    running = new AbortController();
    // As in the playground: the focus stays in the prompt, Stop is a Tab away, or Escape.
    setComposerBusy(composer, true);
    try {
      await Promise.all([run(a, text, $("col-a"), $("col-a-title"), running.signal), run(b, text, $("col-b"), $("col-b-title"), running.signal)]);
    } finally {
      running = undefined;
      setComposerBusy(composer, false);
    }
  });
  initComposer(composer);
}
