// @ts-check
// The playground: one conversation with one model, streamed, with the turn-level controls.

import { AnswerStream, AnswerView, el } from "./answer.js";
import { showCode } from "./code.js";
import { initComposer, setComposerBusy } from "./composer.js";
import { Follower } from "./follow.js";
import { jsonMode, requestBody, selectedTarget, SettingsError } from "./settings.js";
import { streamTo, targetLabel } from "./targets.js";
import { openFromServer, saveToServer } from "./saved.js";
import { deleteConversation, listConversations, newConversation, saveConversation } from "./store.js";

/**
 * @typedef {import("./answer.js").Turn} Turn
 * @typedef {import("./answer.js").ToolCall} ToolCall
 * @typedef {import("./store.js").Conversation} Conversation
 */

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

const messages = /** @type {HTMLOListElement} */ ($("messages"));
const prompt = /** @type {HTMLTextAreaElement} */ ($("prompt"));
const sendButton = /** @type {HTMLButtonElement} */ ($("send"));
const stopButton = /** @type {HTMLButtonElement} */ ($("stop"));
const settingsError = $("settings-error");
const follower = new Follower(messages, $("composer"));

/** @type {Conversation} */
let conv = newConversation();
/** @type {AbortController | undefined} */
let running;
/** @type {Turn | undefined} the answer being streamed (saved marked as cut off, should the page go) */
let streaming;
/** Saves run one after another: an older snapshot never lands over a newer one. */
let saving = Promise.resolve();
/**
 * Each conversation's `updatedAt` as this tab last read or wrote it in IndexedDB: a stored copy
 * with another `updatedAt` was saved by another tab meanwhile (see store()).
 * @type {WeakMap<Conversation, number>}
 */
const bases = new WeakMap();
/** The conversations as last listed, by id (the list's buttons name theirs by id). @type {Map<string, Conversation>} */
const listed = new Map();

/** What a saved answer says when the page went away before it ended. */
const CUT_OFF = "The page was left before this answer ended; this is what had arrived.";

/** @param {string} text */
function showSettingsError(text) {
  settingsError.hidden = !text;
  settingsError.textContent = text;
}

/**
 * Whether the settings make a valid request for these turns; the error is shown when not. Checked
 * before the thread changes, so a bad field leaves the prompt in its box and the thread as it was.
 * @param {Turn[]} turns
 */
function settingsValid(turns) {
  try {
    requestBody(turns, selectedTarget());
    showSettingsError("");
    return true;
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    showSettingsError(err.message);
    return false;
  }
}

/** Draws the whole conversation (after a load, an edit or a regenerate). */
function render() {
  messages.replaceChildren(...conv.messages.map((turn, i) => renderTurn(turn, i)));
}

/** @param {Turn} turn @param {number} index */
function renderTurn(turn, index) {
  const li = el("li", { class: `turn turn-${turn.role}`, "data-index": String(index) });
  const who = turn.role === "assistant" ? `Assistant${turn.model ? ` · ${turn.model}` : ""}` : turn.role === "tool" ? "Tool result" : "You";
  li.append(el("h3", { class: "who", text: who }));
  if (turn.role === "assistant") {
    const view = new AnswerView({ onToolResult: (call, result) => void toolResult(index, call, result) });
    view.update(turn, { done: true });
    li.append(view.root);
  } else {
    li.append(el("div", { class: "content", text: turn.content }));
  }
  const actions = el("div", { class: "turn-actions" });
  if (turn.role !== "tool") {
    const edit = el("button", { type: "button", class: "ghost", text: "Edit", "aria-label": `Edit message ${index + 1}` });
    edit.addEventListener("click", () => editTurn(li, index));
    actions.append(edit);
  }
  if (turn.role === "assistant" && index === conv.messages.length - 1) {
    const again = el("button", { type: "button", class: "ghost", text: "Regenerate" });
    again.addEventListener("click", () => {
      if (running || !settingsValid(conv.messages.slice(0, index))) return;
      conv.messages.splice(index);
      render();
      void generate();
    });
    actions.append(again);
  }
  li.append(actions);
  return li;
}

/** Replaces a turn's text with an editor; a user turn is sent again from there, an answer just kept. */
function editTurn(/** @type {HTMLLIElement} */ li, /** @type {number} */ index) {
  if (running) return;
  const turn = conv.messages[index];
  const id = `edit-${index}`;
  const area = el("textarea", { id, rows: "4" });
  area.value = turn.content;
  const save = el("button", { type: "button", text: turn.role === "user" ? "Save and send" : "Save" });
  const cancel = el("button", { type: "button", class: "ghost", text: "Cancel" });
  const editor = el("div", { class: "editor" }, [el("label", { for: id, class: "visually-hidden", text: "Edit message" }), area, save, cancel]);
  li.replaceChildren(li.querySelector(".who") ?? "", editor);
  area.focus();
  cancel.addEventListener("click", render);
  save.addEventListener("click", () => {
    if (turn.role === "assistant") {
      turn.content = area.value;
      delete turn.tokens;
      render();
      void persist();
      return;
    }
    if (!settingsValid([...conv.messages.slice(0, index), { ...turn, content: area.value }])) return;
    turn.content = area.value;
    conv.messages.splice(index + 1);
    render();
    void generate();
  });
}

/**
 * A hand-entered tool result joins the conversation as a tool message; the model goes on once every
 * call of that turn has its result (the API refuses a turn with a call left unanswered, as OpenAI's
 * does). A call answered again replaces its earlier result.
 */
async function toolResult(/** @type {number} */ index, /** @type {ToolCall} */ call, /** @type {string} */ result) {
  if (running) return;
  const calls = conv.messages[index].toolCalls ?? [];
  const others = conv.messages
    .slice(index + 1)
    .filter((t) => t.role === "tool" && t.toolCallId !== call.id && calls.some((c) => c.id === t.toolCallId));
  conv.messages.splice(index + 1);
  conv.messages.push(...others, { role: "tool", toolCallId: call.id, content: result });
  render();
  if (calls.every((c) => conv.messages.some((t) => t.role === "tool" && t.toolCallId === c.id))) await generate();
}

/** Streams the model's answer to the conversation as it stands. */
async function generate() {
  /** @type {Record<string, unknown>} */
  let body;
  const target = selectedTarget();
  try {
    body = requestBody(conv.messages, target);
    showSettingsError("");
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    showSettingsError(err.message);
    return;
  }
  /** @type {Turn} */
  const turn = { role: "assistant", content: "", model: targetLabel(target), json: jsonMode() };
  conv.messages.push(turn);
  const who = el("h3", { class: "who", text: `Assistant · ${turn.model}` });
  const li = el("li", { class: "turn turn-assistant" }, [who]);
  const view = new AnswerView();
  li.append(view.root);
  messages.append(li);
  follower.start();

  const stream = new AnswerStream(turn);
  running = new AbortController();
  setBusy(true);
  // Kept now (the question), and every few seconds while the answer streams: a reload or a closed
  // tab mid-answer then loses neither.
  streaming = turn;
  void persist();
  const keeper = window.setInterval(() => void persist(), 2000);
  let frame = 0;
  try {
    await streamTo(
      target,
      body,
      (chunk) => {
        stream.add(chunk);
        frame ||= requestAnimationFrame(() => {
          frame = 0;
          view.update(turn, { done: false, streaming: true });
          follower.toEnd();
        });
      },
      running.signal,
      (entity) => {
        // The traffic split's pick, named as soon as the answer starts.
        if (target.kind === "endpoint") turn.model = `${target.name} → ${entity}`;
        who.textContent = `Assistant · ${turn.model}`;
      },
    );
  } catch (err) {
    if (/** @type {Error} */ (err).name === "AbortError") turn.stats = { ...turn.stats, finishReason: "stopped" };
    else turn.error = /** @type {Error} */ (err).message;
  } finally {
    clearInterval(keeper);
    streaming = undefined;
    cancelAnimationFrame(frame);
    stream.finish();
    running = undefined;
    setBusy(false);
  }
  render();
  follower.toEnd();
  await persist();
}

/** @type {import("./composer.js").Composer} */
const composer = {
  screen: $("screen-chat"),
  form: /** @type {HTMLFormElement} */ ($("composer")),
  prompt,
  send: sendButton,
  stop: stopButton,
  onStop: () => running?.abort(),
};

/**
 * Busy while an answer streams. The focus stays in the prompt (or wherever it is): the next message
 * can be typed meanwhile, and Stop is a Tab away, or Escape.
 * @param {boolean} busy
 */
function setBusy(busy) {
  setComposerBusy(composer, busy);
  messages.setAttribute("aria-busy", String(busy));
}

/**
 * Saves the conversation in this browser. An answer still streaming is saved as cut off: if the
 * page goes before it ends, that is what it will be on coming back.
 */
async function persist() {
  const c = conv;
  if (c.messages.length === 0) return;
  const saved = saving.then(() => store(c));
  saving = saved.catch(() => {});
  await saved;
  await renderList();
}

/**
 * Writes a conversation as it is when its turn to be saved comes. Should another tab have saved it
 * since this tab read it (the same chat open in two tabs), neither overwrites the other: this tab's
 * version becomes a new conversation, and the page says so.
 * @param {Conversation} c
 */
async function store(c) {
  const first = c.messages.find((t) => t.role === "user");
  c.title = (first?.content ?? "Chat").slice(0, 60) || "Chat";
  const base = bases.get(c);
  // Later than the copy it replaces, even within one millisecond: each save is told apart.
  c.updatedAt = Math.max(Date.now(), (base ?? 0) + 1);
  const partial = streaming && c.messages.includes(streaming) ? streaming : undefined;
  const copy = () => (partial ? { ...c, messages: c.messages.map((t) => (t === partial ? { ...t, error: t.error ?? CUT_OFF } : t)) } : c);
  if (!(await saveConversation(copy(), base))) {
    const fork = newConversation();
    c.id = fork.id;
    c.createdAt = fork.createdAt;
    // Not the other tab's saved conversation on the server either: saving this one makes its own.
    delete c.server;
    await saveConversation(copy());
    saveStatus("This chat was changed in another tab meanwhile: this tab's version is kept as a new conversation, beside the other.");
  }
  bases.set(c, c.updatedAt);
}

/** @param {string | Node} text @param {boolean} [error] */
function saveStatus(text, error = false) {
  const p = $("save-status");
  p.replaceChildren(text);
  p.classList.toggle("error", error);
}

/** "Save to server": the chat as a stored conversation; the id is shown for opening it again. */
async function saveOnServer() {
  if (running) return;
  const system = /** @type {HTMLTextAreaElement} */ ($("system")).value.trim();
  try {
    const id = await saveToServer(conv, system);
    await persist();
    saveStatus(el("span", {}, ["Saved as ", el("code", { class: "secret saved-id", text: id }), ". Open it again by this id, or continue it with the Responses API's conversation field."]));
  } catch (err) {
    saveStatus(/** @type {Error} */ (err).message, true);
  }
}

/** Opens a saved conversation by id (its system prompt too), and keeps a copy in this browser. */
async function openSaved(/** @type {string} */ id) {
  if (running || !id) return;
  try {
    const opened = await openFromServer(id);
    conv = opened.conv;
    // Its own system prompt, or none: the one typed for another chat is not this one's (and Save
    // would then see a changed conversation and store a second copy).
    const system = /** @type {HTMLTextAreaElement} */ ($("system"));
    system.value = opened.system;
    system.dispatchEvent(new Event("change", { bubbles: true }));
    render();
    await saveConversation(conv);
    bases.set(conv, conv.updatedAt);
    await renderList();
    saveStatus(`Opened ${id}: ${conv.messages.length} turns.`);
  } catch (err) {
    saveStatus(/** @type {Error} */ (err).message, true);
  }
}

/**
 * Lists the conversations, newest first. Called on every save (every 2 s while an answer streams),
 * so the rows are updated in place, not drawn anew: a row keeps its buttons, and with them the
 * keyboard focus and a click on its way. A row that moves takes its focus along.
 */
export async function renderList() {
  const list = $("conversation-list");
  const all = await listConversations();
  listed.clear();
  for (const c of all) listed.set(c.id, c);
  /** @type {Map<string, HTMLElement>} */
  const rows = new Map();
  for (const li of /** @type {HTMLElement[]} */ ([...list.children])) rows.set(li.dataset.id ?? "", li);
  let cursor = list.firstElementChild;
  for (const c of all) {
    const li = rows.get(c.id) ?? listRow(c.id);
    fillRow(li, c);
    if (li === cursor) {
      cursor = cursor.nextElementSibling;
      continue;
    }
    const focused = li.contains(document.activeElement) ? /** @type {HTMLElement} */ (document.activeElement) : undefined;
    list.insertBefore(li, cursor);
    focused?.focus();
  }
  // What is left after the rows placed is gone from the store.
  while (cursor) {
    const next = cursor.nextElementSibling;
    cursor.remove();
    cursor = next;
  }
}

/** A row of the list, its buttons acting on the conversation by id (as last listed). @param {string} id */
function listRow(id) {
  const open = el("button", { type: "button", class: "conv-open" });
  open.addEventListener("click", () => {
    const c = listed.get(id);
    if (running || !c) return;
    // The one open already stays as this tab has it: the list's copy may be a save behind.
    if (id !== conv.id) {
      conv = c;
      bases.set(c, c.updatedAt);
    }
    render();
    void renderList();
  });
  const del = el("button", { type: "button", class: "ghost conv-delete", text: "×" });
  del.addEventListener("click", async () => {
    const li = /** @type {HTMLElement} */ (del.parentElement);
    // The focus, which goes with the row, goes to the row that takes its place (or New chat).
    const near = /** @type {HTMLElement | null} */ (li.nextElementSibling ?? li.previousElementSibling);
    await deleteConversation(id);
    if (id === conv.id) {
      conv = newConversation();
      render();
    }
    await renderList();
    if (document.activeElement === document.body || !document.activeElement)
      /** @type {HTMLElement} */ ((near?.isConnected && near.querySelector(".conv-open")) || $("new-chat")).focus();
  });
  return el("li", { "data-id": id }, [open, del]);
}

/** Brings a row up to its conversation, changing only what differs. @param {HTMLElement} li @param {Conversation} c */
function fillRow(li, c) {
  const open = /** @type {HTMLElement} */ (li.querySelector(".conv-open"));
  const del = /** @type {HTMLElement} */ (li.querySelector(".conv-delete"));
  const saved = c.server?.id ?? "";
  if (open.dataset.title !== c.title || open.dataset.saved !== saved) {
    open.dataset.title = c.title;
    open.dataset.saved = saved;
    open.replaceChildren(c.title);
    if (c.server) open.append(el("span", { class: "saved-badge", text: " · saved", title: c.server.id }));
    del.setAttribute("aria-label", `Delete ${c.title}`);
  }
  if (c.id === conv.id) open.setAttribute("aria-current", "true");
  else open.removeAttribute("aria-current");
}

/**
 * @param {{ reloadModels: () => Promise<unknown> }} opts `reloadModels` fills the pickers again from
 *   the server (Send asks for the list again when the picker is empty)
 */
export function initPlayground({ reloadModels }) {
  /** Set while Send waits for the model list: a second Enter meanwhile sends nothing. */
  let asking = false;
  $("composer").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!prompt.value.trim() || running || asking) return;
    // No model to pick (the list failed as the page loaded, a server restarting): asked again now.
    if (!selectedTarget().name) {
      asking = true;
      try {
        await reloadModels();
      } finally {
        asking = false;
      }
    }
    const text = prompt.value.trim();
    if (!text || running) return;
    /** @type {Turn} */
    const question = { role: "user", content: text };
    if (!settingsValid([...conv.messages, question])) return;
    conv.messages.push(question);
    prompt.value = "";
    render();
    void generate();
  });
  initComposer(composer);
  // The last moment to keep what has arrived of an answer (the periodic save may be 2 s behind).
  window.addEventListener("pagehide", () => {
    if (streaming) void persist();
  });
  $("save-server").addEventListener("click", () => void saveOnServer());
  $("open-saved").addEventListener("submit", (e) => {
    e.preventDefault();
    void openSaved(/** @type {HTMLInputElement} */ ($("saved-id")).value.trim());
  });
  $("new-chat").addEventListener("click", () => {
    if (running) return;
    conv = newConversation();
    render();
    void renderList();
    prompt.focus();
  });
  $("view-code").addEventListener("click", () => {
    const pending = prompt.value.trim();
    /** @type {Turn[]} */
    const turns = pending ? [...conv.messages, { role: "user", content: pending }] : conv.messages;
    try {
      showSettingsError("");
      const target = selectedTarget();
      showCode({ ...requestBody(turns, target), stream: true }, target);
    } catch (err) {
      if (!(err instanceof SettingsError)) throw err;
      showSettingsError(err.message);
    }
  });
  void renderList();
}
