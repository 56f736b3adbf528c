// @ts-check
// The console's entry: screens by URL hash, the model lists, the API key dialog.

import { ApiError, apiKey, listModels } from "./api.js";
import { initCompare } from "./compare.js";
import { adminApiPresent, initKeys, refreshKeys } from "./keys.js";
import { initOps, setOpsVisible } from "./ops.js";
import { initPlayground } from "./playground.js";
import { persistSettings, savedModel, selectedTarget, showTargetFields } from "./settings.js";
import { fillPicker, listEndpoints } from "./targets.js";

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

const SCREENS = ["chat", "compare", "ops", "keys"];

/** @param {string} text */
function banner(text) {
  const b = $("banner");
  b.hidden = !text;
  b.textContent = text;
}

function route() {
  let screen = location.hash.slice(1);
  if (!SCREENS.includes(screen) || (screen === "keys" && $("nav-keys")?.hidden)) screen = "chat";
  for (const s of SCREENS) $(`screen-${s}`).hidden = s !== screen;
  for (const a of document.querySelectorAll("nav a")) {
    if (/** @type {HTMLElement} */ (a).dataset.screen === screen) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  setOpsVisible(screen === "ops");
  if (screen === "keys") void refreshKeys();
  // Endpoints come and go (the operator's view changes them): the pickers follow.
  if ((screen === "chat" || screen === "compare") && document.body.dataset.ready) void loadModels();
}

/** How long after a model list that failed it is asked for again (a server restarting, say). */
const RETRY_MS = 5000;
/** Whether the last model list failed: then a timer, and the window's focus, ask again. */
let listFailed = false;
let retry = 0;

/**
 * Fills every picker from /v1/models (chat models only) and the serving endpoints, keeping the
 * choices made. Side by side also offers each endpoint's served entities.
 */
async function loadModels() {
  clearTimeout(retry);
  let models;
  try {
    models = (await listModels()).filter((m) => !m.embedding?.embedding_only);
    banner("");
    listFailed = false;
  } catch (err) {
    const e = /** @type {Error} */ (err);
    const refused = apiKey.get() ? `The API key was refused (${e.message}): set another with the API key button.` : "This server needs an API key: set it with the API key button.";
    const unauthorized = e instanceof ApiError && e.status === 401;
    banner(unauthorized ? refused : `Cannot list models: ${e.message}`);
    listFailed = true;
    // A key refused waits for another (the dialog lists again); anything else is asked again soon,
    // not before a rate limit's Retry-After.
    clearTimeout(retry);
    if (!unauthorized) retry = window.setTimeout(() => void loadModels(), Math.max(RETRY_MS, ((e instanceof ApiError && e.retryAfter) || 0) * 1000));
    return;
  }
  // The models are listed; endpoints that cannot be listed now leave the pickers with the models alone.
  const endpoints = await listEndpoints().catch(() => []);
  const model = /** @type {HTMLSelectElement} */ ($("model"));
  fillPicker(model, models, endpoints, { keep: model.value || savedModel() });
  ["compare-a", "compare-b"].forEach((id, i) => {
    const select = /** @type {HTMLSelectElement} */ ($(id));
    fillPicker(select, models, endpoints, { entities: true, keep: select.value || undefined, fallback: i });
  });
  showTargetFields(selectedTarget());
  if (models.length === 0) banner("This server serves no chat model.");
}

/**
 * A pasted key without what copying picks up around it: whitespace and invisible characters (a
 * zero-width space, a byte order mark) at either end.
 * @param {string} key
 */
const cleanKey = (key) => key.replace(/^[\s\u200b-\u200d\u2060\ufeff]+|[\s\u200b-\u200d\u2060\ufeff]+$/g, "");

/**
 * Why a key cannot be sent, if it cannot: keys are visible ASCII, and an Authorization header
 * carries nothing else (the browser refuses to send it).
 * @param {string} key
 * @returns {string | undefined}
 */
function badKeyChar(key) {
  const i = [...key].findIndex((c) => c < "!" || c > "~");
  if (i < 0) return undefined;
  const c = [...key][i];
  const code = `U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, "0")}`;
  return `The key has a character keys do not have (${code} at position ${i + 1}): it may have been picked up when copying. Paste the key again, or type it.`;
}

function initKeyDialog() {
  const dialog = /** @type {HTMLDialogElement} */ ($("settings-dialog"));
  const input = /** @type {HTMLInputElement} */ ($("api-key"));
  const problem = $("api-key-error");
  $("open-settings").addEventListener("click", () => {
    input.value = apiKey.get();
    problem.hidden = true;
    dialog.showModal();
  });
  // Checked before the dialog closes: a key an HTTP header cannot carry is said here, not later as
  // a server that seems down.
  /** @type {HTMLFormElement} */ (dialog.querySelector("form")).addEventListener("submit", (e) => {
    if (/** @type {SubmitEvent} */ (e).submitter?.getAttribute("value") !== "save") return;
    const key = cleanKey(input.value);
    input.value = key;
    const bad = badKeyChar(key);
    problem.hidden = !bad;
    problem.textContent = bad ?? "";
    if (bad) {
      e.preventDefault();
      input.focus();
      return;
    }
    // Kept now, while the dialog closes: its close event comes a task later, and whatever reads
    // the key in between (a request already on its way) would still find the old one.
    apiKey.set(key);
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") void loadModels();
  });
}

async function main() {
  const keysLink = /** @type {HTMLElement} */ (document.querySelector('nav a[data-screen="keys"]'));
  keysLink.id = "nav-keys";
  persistSettings();
  initPlayground({ reloadModels: loadModels });
  initCompare({ reloadModels: loadModels });
  initOps();
  initKeys();
  initKeyDialog();
  window.addEventListener("hashchange", route);
  // Back to the page after the list failed (a server restarted meanwhile, say): asked again.
  window.addEventListener("focus", () => void (listFailed && loadModels()));
  $("model").addEventListener("change", () => showTargetFields(selectedTarget()));
  route();
  await loadModels();
  // The keys screen exists only where the server has the admin API.
  keysLink.hidden = !(await adminApiPresent());
  route();
  document.body.dataset.ready = "true";
}

void main();
