// @ts-check
// One turn of a conversation: how a streamed answer accumulates, and how a turn is drawn.

/**
 * @typedef {import("./api.js").Chunk} Chunk
 * @typedef {import("./api.js").TokenLogprob} TokenLogprob
 * @typedef {import("./api.js").Usage} Usage
 * @typedef {{ id: string, name: string, arguments: string }} ToolCall
 * @typedef {{ promptTokens?: number, completionTokens?: number, cachedTokens?: number, reasoningTokens?: number,
 *   ttftMs?: number, tokensPerSecond?: number, finishReason?: string }} Stats
 * @typedef {{ role: "user" | "assistant" | "tool", content: string, reasoning?: string, toolCalls?: ToolCall[],
 *   toolCallId?: string, tokens?: TokenLogprob[], stats?: Stats, model?: string, error?: string, json?: boolean,
 *   reasoningOpen?: boolean, others?: Turn[] }} Turn
 * A turn's `others` are the further choices of a request with n > 1 (choice 1 onwards): shown under
 * the answer, each on its own; the conversation goes on with the first.
 */

/** Accumulates one streamed answer into a turn, and times it. */
export class AnswerStream {
  /** @param {Turn} turn */
  constructor(turn) {
    this.turn = turn;
    this.started = performance.now();
    /** @type {number | undefined} */
    this.firstAt = undefined;
  }

  /** @param {Chunk} chunk */
  add(chunk) {
    const t = this.turn;
    for (const choice of chunk.choices ?? []) {
      const d = choice.delta ?? {};
      const produced = Boolean(d.content || d.reasoning_content || d.tool_calls?.length);
      if (produced && this.firstAt === undefined) {
        this.firstAt = performance.now();
        t.stats = { ...t.stats, ttftMs: this.firstAt - this.started };
      }
      // Each choice (n > 1) accumulates on its own: mixed, their texts and tool calls would interleave.
      const index = choice.index ?? 0;
      const c = index > 0 ? ((t.others ??= [])[index - 1] ??= { role: "assistant", content: "" }) : t;
      if (d.reasoning_content) c.reasoning = (c.reasoning ?? "") + d.reasoning_content;
      if (d.content) c.content += d.content;
      for (const call of d.tool_calls ?? []) {
        c.toolCalls ??= [];
        const tc = (c.toolCalls[call.index] ??= { id: "", name: "", arguments: "" });
        if (call.id) tc.id = call.id;
        if (call.function?.name) tc.name += call.function.name;
        if (call.function?.arguments) tc.arguments += call.function.arguments;
      }
      const lp = choice.logprobs?.content;
      if (lp?.length) c.tokens = [...(c.tokens ?? []), ...lp];
      if (choice.finish_reason) c.stats = { ...c.stats, finishReason: choice.finish_reason };
    }
    if (chunk.usage) {
      const u = chunk.usage;
      t.stats = {
        ...t.stats,
        promptTokens: u.prompt_tokens,
        completionTokens: u.completion_tokens,
        cachedTokens: u.prompt_tokens_details?.cached_tokens ?? 0,
        reasoningTokens: u.completion_tokens_details?.reasoning_tokens ?? 0,
      };
    }
  }

  /** Called once the stream ended (or was stopped): tokens per second over the decode time. */
  finish() {
    const t = this.turn;
    const n = t.stats?.completionTokens ?? t.tokens?.length;
    if (this.firstAt !== undefined && n) {
      const seconds = (performance.now() - this.firstAt) / 1000;
      if (seconds > 0 && n > 1) t.stats = { ...t.stats, tokensPerSecond: (n - 1) / seconds };
    }
  }
}

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string>} [attrs]
 * @param {(Node | string)[]} [children]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, attrs = {}, children = []) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

/** Numbers the views, so each token tooltip has an id of its own. */
let views = 0;

/** @param {number} logprob */
const percent = (logprob) => `${(Math.exp(logprob) * 100).toFixed(1)}%`;

/** The tooltip of one token: its probability and the alternatives the model weighed. @param {TokenLogprob} t */
export function tokenTitle(t) {
  const lines = [`${JSON.stringify(t.token)}  ${percent(t.logprob)}  (logprob ${t.logprob.toFixed(3)})`];
  for (const alt of t.top_logprobs ?? []) if (alt.token !== t.token) lines.push(`  ${JSON.stringify(alt.token)}  ${percent(alt.logprob)}`);
  return lines.join("\n");
}

/** @param {Stats | undefined} s */
export function statsText(s) {
  if (!s) return "";
  const parts = [];
  if (s.promptTokens !== undefined) parts.push(`${s.promptTokens} prompt tokens`);
  if (s.cachedTokens) parts.push(`${s.cachedTokens} cached`);
  if (s.completionTokens !== undefined) parts.push(`${s.completionTokens} completion tokens`);
  if (s.reasoningTokens) parts.push(`${s.reasoningTokens} reasoning`);
  if (s.ttftMs !== undefined) parts.push(`TTFT ${Math.round(s.ttftMs)} ms`);
  if (s.tokensPerSecond !== undefined) parts.push(`${s.tokensPerSecond.toFixed(1)} tokens/s`);
  if (s.finishReason) parts.push(`finish: ${s.finishReason}`);
  return parts.join(" · ");
}

/**
 * The body of an assistant turn: reasoning (collapsed), text (tokens with their logprobs on hover),
 * tool calls, the parsed JSON of a JSON-mode answer, and the answer's numbers. Updated in place
 * while the answer streams, so an opened reasoning section stays open.
 */
export class AnswerView {
  /** @param {{ onToolResult?: (call: ToolCall, result: string) => void }} [opts] */
  constructor(opts = {}) {
    this.opts = opts;
    this.reasoningText = el("div", { class: "reasoning-text" });
    this.reasoningLabel = el("summary", { text: "Reasoning" });
    this.reasoning = el("details", { class: "reasoning", hidden: "" }, [this.reasoningLabel, this.reasoningText]);
    this.content = el("div", { class: "content" });
    this.tools = el("div", { class: "tool-calls" });
    this.json = el("div", { class: "json-result", hidden: "" });
    this.error = el("p", { class: "error", role: "alert", hidden: "" });
    this.stats = el("p", { class: "stats" });
    this.tokInfo = el("div", { class: "tok-info", role: "tooltip", id: `tok-info-${++views}`, hidden: "" });
    this.choiceLabel = el("h4", { class: "choice-label", text: "Choice 1", hidden: "" });
    /** The further choices (n > 1), one view each. @type {AnswerView[]} */
    this.otherViews = [];
    this.others = el("div", { class: "choices" });
    this.root = el("div", { class: "answer" }, [this.choiceLabel, this.reasoning, this.content, this.tokInfo, this.tools, this.json, this.error, this.stats, this.others]);
    this.renderedTokens = 0;
    /** How much of the answer's text the token spans hold. */
    this.shownChars = 0;
    /** @type {TokenLogprob[]} */
    this.tokenData = [];
    this.wireTokens();
    this.renderedCalls = "";
  }

  /** @param {Turn} turn @param {{ done: boolean, streaming?: boolean }} state */
  update(turn, state) {
    if (turn.reasoning) {
      this.reasoning.hidden = false;
      // Collapsed unless the user opened it; that choice is kept with the turn.
      if (!this.reasoning.ontoggle) {
        this.reasoning.open = Boolean(turn.reasoningOpen);
        this.reasoning.ontoggle = () => (turn.reasoningOpen = this.reasoning.open);
      }
      this.reasoningText.textContent = turn.reasoning;
      const n = turn.stats?.reasoningTokens;
      this.reasoningLabel.textContent = state.done ? `Reasoning${n ? ` (${n} tokens)` : ""}` : "Reasoning…";
    }
    if (turn.tokens?.length) this.renderTokens(turn.tokens, turn.content, state.done);
    else this.content.textContent = turn.content;
    this.content.classList.toggle("streaming", Boolean(state.streaming));
    this.renderCalls(turn, state.done);
    if (state.done && turn.json) this.renderJson(turn.content);
    this.error.hidden = !turn.error;
    this.error.textContent = turn.error ?? "";
    this.stats.textContent = statsText(turn.stats);
    this.updateOthers(turn.others ?? [], state);
  }

  /**
   * The further choices, each under its own heading; tool results are given to the first choice
   * only (the one the conversation goes on with).
   * @param {Turn[]} others @param {{ done: boolean, streaming?: boolean }} state
   */
  updateOthers(others, state) {
    this.choiceLabel.hidden = others.length === 0;
    others.forEach((other, i) => {
      let view = this.otherViews[i];
      if (!view) {
        view = this.otherViews[i] = new AnswerView();
        this.others.append(el("section", { class: "choice", "aria-label": `Choice ${i + 2}` }, [el("h4", { class: "choice-label", text: `Choice ${i + 2}` }), view.root]));
      }
      // An empty slot (a choice whose chunks have not come yet) is drawn empty.
      view.update(other ?? { role: "assistant", content: "" }, state);
    });
  }

  /**
   * Token probabilities for the mouse and the keyboard alike: the tokens are one tab stop (the
   * first token), the arrow keys (and Home, End) move between them, and the focused or hovered
   * token's probabilities show in a tooltip that describes it to screen readers too.
   */
  wireTokens() {
    /** @param {EventTarget | null} t */
    const tokenOf = (t) => (t instanceof HTMLElement && t.classList.contains("tok") ? t : undefined);
    /** @param {HTMLElement} span */
    const show = (span) => {
      const t = this.tokenData[Number(span.dataset.i)];
      if (!t) return;
      this.tokInfo.textContent = tokenTitle(t);
      this.tokInfo.hidden = false;
      // Just below the token, inside the answer (which is the positioned box).
      this.tokInfo.style.left = `${span.offsetLeft}px`;
      this.tokInfo.style.top = `${span.offsetTop + span.offsetHeight + 2}px`;
    };
    const hide = () => (this.tokInfo.hidden = true);
    this.content.addEventListener("focusin", (e) => {
      const span = tokenOf(e.target);
      if (span) show(span);
    });
    this.content.addEventListener("focusout", hide);
    this.content.addEventListener("mouseover", (e) => {
      const span = tokenOf(e.target);
      if (span) show(span);
    });
    this.content.addEventListener("mouseleave", () => {
      if (!this.content.contains(document.activeElement)) hide();
    });
    this.content.addEventListener("keydown", (e) => {
      const span = tokenOf(e.target);
      if (!span) return;
      const spans = /** @type {HTMLElement[]} */ ([...this.content.querySelectorAll(".tok")]);
      const i = spans.indexOf(span);
      const to = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: spans.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      const next = spans[Math.max(0, Math.min(spans.length - 1, to))];
      span.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    });
  }

  /**
   * The answer's text cut at its tokens, each span with its token's probabilities. The text shown is
   * the answer's own (`content`), not the tokens': the server cuts a stop sequence from the text but
   * not from the logprobs (" t" answered, " tel" the token), and a token that is part of a UTF-8
   * character is not the character. Once the answer is done it is drawn again whole, with any text
   * the tokens did not cover.
   * @param {TokenLogprob[]} tokens @param {string} content @param {boolean} done
   */
  renderTokens(tokens, content, done) {
    if (done) this.renderedTokens = 0;
    if (this.renderedTokens === 0) {
      this.content.textContent = "";
      this.shownChars = 0;
      this.content.setAttribute("role", "group");
      this.content.setAttribute("aria-label", "Answer, token by token: arrow keys move between tokens and show each one's probability");
    }
    this.tokenData = tokens;
    for (const [k, t] of tokens.slice(this.renderedTokens).entries()) {
      const i = this.renderedTokens + k;
      const text = content.slice(this.shownChars, this.shownChars + t.token.length);
      // Past the answer's end (cut by a stop sequence): nothing of it to show.
      if (!text) continue;
      this.shownChars += text.length;
      const first = !this.content.querySelector(".tok");
      const span = el("span", { class: "tok", text, "data-i": String(i), tabindex: first ? "0" : "-1", "aria-describedby": this.tokInfo.id });
      // Shade unlikely tokens so the uncertain spots stand out before hovering.
      const p = Math.exp(t.logprob);
      if (p < 0.5) span.classList.add(p < 0.1 ? "tok-low" : "tok-mid");
      this.content.append(span);
    }
    this.renderedTokens = tokens.length;
    if (done && this.shownChars < content.length) this.content.append(content.slice(this.shownChars));
  }

  /** @param {Turn} turn @param {boolean} done */
  renderCalls(turn, done) {
    const calls = turn.toolCalls ?? [];
    const key = JSON.stringify(calls) + done;
    if (key === this.renderedCalls) return;
    this.renderedCalls = key;
    this.tools.replaceChildren(
      ...calls.map((call) => {
        let args = call.arguments;
        try {
          args = JSON.stringify(JSON.parse(call.arguments), null, 2);
        } catch {}
        const card = el("section", { class: "tool-call", "aria-label": `Tool call ${call.name}` }, [
          el("h4", {}, ["Tool call ", el("code", { class: "tool-name", text: call.name })]),
          el("pre", { class: "tool-args", text: args }),
        ]);
        if (done && this.opts.onToolResult) {
          const id = `result-${call.id || Math.random().toString(36).slice(2)}`;
          const input = el("textarea", { id, rows: "2", class: "tool-result-input", placeholder: '{"result": …}' });
          const button = el("button", { type: "button", text: "Send result" });
          button.addEventListener("click", () => this.opts.onToolResult?.(call, input.value));
          card.append(el("label", { for: id, text: `Result of ${call.name}` }), input, button);
        }
        return card;
      }),
    );
  }

  /** @param {string} text */
  renderJson(text) {
    this.json.hidden = false;
    try {
      const value = JSON.parse(text);
      this.json.replaceChildren(el("h4", { text: "Parsed JSON" }), el("pre", { class: "json-ok", text: JSON.stringify(value, null, 2) }));
    } catch (err) {
      this.json.replaceChildren(el("h4", { text: "Not valid JSON" }), el("p", { class: "error", text: String(err) }));
    }
  }
}
