// @ts-check
// Following a streaming answer: the thread keeps its end in view only while the reader is there.
// Scrolled up (to read an earlier turn) it stays put; back at the end it follows again.

/** How close to the end (px) still counts as being at it. */
const SLACK = 40;

export class Follower {
  /**
   * @param {HTMLElement} list the thread, which scrolls itself on a wide screen
   * @param {HTMLElement} composer the form under it (sticky on a narrow screen, where the page scrolls)
   */
  constructor(list, composer) {
    this.list = list;
    this.composer = composer;
    this.on = true;
    // Any scroll, the user's or ours, decides anew: ours lands at the end, so following goes on.
    const decide = () => (this.on = this.atEnd());
    list.addEventListener("scroll", decide, { passive: true });
    window.addEventListener("scroll", decide, { passive: true });
  }

  /** Whether the thread scrolls inside its own box (wide screens) rather than with the page. */
  scrollsItself() {
    return getComputedStyle(this.list).overflowY !== "visible" && this.list.scrollHeight > this.list.clientHeight + 1;
  }

  atEnd() {
    const l = this.list;
    if (this.scrollsItself()) return l.scrollHeight - l.scrollTop - l.clientHeight <= SLACK;
    // The page scrolls: the end is in view when it is not hidden under the (sticky) composer.
    return l.getBoundingClientRect().bottom <= Math.min(this.composer.getBoundingClientRect().top, innerHeight) + SLACK;
  }

  /** A new answer starts: follow it (the user just sent, and expects to see it). */
  start() {
    this.on = true;
    this.toEnd();
  }

  /** Brings the thread's end into view, if following. */
  toEnd() {
    if (!this.on) return;
    const l = this.list;
    if (this.scrollsItself()) l.scrollTop = l.scrollHeight;
    else {
      const below = l.getBoundingClientRect().bottom - Math.min(this.composer.getBoundingClientRect().top, innerHeight);
      if (below > 0) window.scrollBy(0, below);
    }
  }
}
