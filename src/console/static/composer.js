// @ts-check
// The keyboard of a prompt and its Send and Stop buttons, the same in the playground and side by
// side: Enter sends (Shift+Enter adds a line), the focus stays in the prompt while an answer streams
// (so the next message can be typed meanwhile), Stop is the next Tab stop and Escape stops.

/**
 * @typedef {{ screen: HTMLElement, form: HTMLFormElement, prompt: HTMLTextAreaElement,
 *   send: HTMLButtonElement, stop: HTMLButtonElement, onStop: () => void }} Composer
 */

/**
 * Wires a composer's keys: Enter in the prompt submits its form; Escape anywhere on its screen (a
 * dialog's own Escape aside) calls `onStop`, which does nothing while nothing runs.
 * @param {Composer} c
 */
export function initComposer(c) {
  c.prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      c.form.requestSubmit();
    }
  });
  c.stop.addEventListener("click", () => c.onStop());
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || e.defaultPrevented || e.isComposing || c.screen.hidden || c.stop.hidden) return;
    if (e.target instanceof Element && e.target.closest("dialog")) return;
    e.preventDefault();
    c.onStop();
  });
}

/**
 * Shows the composer busy (Send disabled, Stop shown) or not. The focus is left where it is, unless
 * it has nowhere to be: on Send (disabled now), on Stop (hidden now) or on nothing (the element
 * that had it was redrawn away), where it goes to the prompt.
 * @param {Composer} c @param {boolean} busy
 */
export function setComposerBusy(c, busy) {
  c.send.disabled = busy;
  c.stop.hidden = !busy;
  const at = document.activeElement;
  if (at === null || at === document.body || at === c.send || at === c.stop) c.prompt.focus();
}
