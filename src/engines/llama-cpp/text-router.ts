import { ReasoningSplitter, type SplitSpan } from "../../core/reasoning-splitter.ts";
import { StopMatcher } from "../../core/stop-matcher.ts";
import type { TokenLogprob } from "../../core/types.ts";
import type { EngineChunk } from "../../core/engine.ts";
import { callOpening, type ToolCallFormat, ToolCallParser } from "./tool-call-parser.ts";

// The text half of the decode loop. Everything here works on the text of generated tokens and never
// on tokens themselves, so it needs no model: it can be driven from a unit test with plain strings.
// Text passes through, in order: the reasoning splitter (thinking vs. answer), the answer header
// filter (gpt-oss's final-channel header), the tool-call trigger (a call opening in free text), and
// once a call has started, the tool-call parser. What the token side must do in response (write the
// answer's opening, write or rewrite a call prefix, switch grammars) comes back as actions rather
// than as changes to state the two halves share.

/** The parts of a reasoning plan the router reads. */
export interface RouterReasoning {
  open: string;
  /** Closing markers, most specific first. */
  close: string[];
  /** The prompt already opened the section. */
  startsInside: boolean;
  /** The prompt already closed the section: nothing generated is thinking. */
  closedInPrompt?: boolean;
  /** Marker texts dropped, not answer text, before the section can open (ReasoningSplitter's `stray`). */
  stray?: string[];
  /** Thinking tokens allowed before the section must be closed by force. */
  budget?: number;
}

/** The parts of a tool plan the router reads. */
export interface RouterTools {
  format: ToolCallFormat;
  /** Text that starts a call in free-running output. */
  trigger: string;
  /** The answer is a call from its first token. */
  forced: boolean;
}

export interface RouterSetup {
  reasoning?: RouterReasoning;
  tools?: RouterTools;
  /** A header the model may write at the start of its answer, which is not part of the answer. */
  answerHeader?: string;
}

/** How a call's opening gets into the sequence. */
export type CallOpening =
  /** The prompt already ends with the call prefix: nothing to write. */
  | { kind: "in-prompt" }
  /** Write the whole call prefix after the token just sampled. */
  | { kind: "append" }
  /**
   * Put `text` into the sequence instead of the token just sampled: what that token held before the
   * trigger, then the rest of the opening (`inSequence` characters of which are there already).
   */
  | { kind: "replace"; before: string; inSequence: number; text: string };

/** What the token side must do after a piece of text has been routed. */
export type RouterAction =
  /**
   * The answer begins. `viaInjection`: thinking just closed, so the engine writes the answer's
   * opening (if the format has one). `call`: a forced call opens the answer (a `call-starts` follows);
   * otherwise the answer's own grammar (structured output), if any, takes hold.
   */
  | { kind: "answer-starts"; viaInjection: boolean; call: boolean }
  /** A tool call begins: its grammar takes hold, and its opening is written as `opening` says. */
  | { kind: "call-starts"; opening: CallOpening };

/**
 * Routes the text of generated tokens to chunks: thinking, answer text, tool calls and their
 * arguments, with token counts attached where the tokens were generated. Feed it with `start()` once,
 * `push()` per token, and `finish()` at the end; each returns the actions the token side must take.
 */
export class TextRouter {
  private readonly splitter: ReasoningSplitter | null;
  private readonly trigger: StopMatcher | null;
  private readonly header: HeaderFilter | null;
  private parser: ToolCallParser | null = null;
  /**
   * A forced call's opening is to be appended after the token being routed (the thinking section
   * closed): until it is written, text is what goes before the call in the sequence (the "\n\n"
   * after a forced "</think>"), not the call's own text. GLM 4.6's calls came back nameless: the
   * blank line was read as the start of the name.
   */
  private openingPending = false;
  private thoughtTokens = 0;
  /** Characters of token text given to the splitter so far. */
  private splitOffset = 0;
  /**
   * Logprob entries of tokens the splitter has not placed yet, in order (see `placeLogprobs`).
   * `part`: where the token's first released character went; `standing`: the part a token without
   * text (a control token, the first bytes of a split character) is filed under.
   */
  private unplaced: Array<{ start: number; end: number; logprob: TokenLogprob; part?: SplitSpan["part"]; standing: SplitSpan["part"] }> = [];

  constructor(private readonly setup: RouterSetup) {
    const { reasoning, tools } = setup;
    // A section the prompt closed is over before generation starts: the model's turn is all answer,
    // even when it writes an opening marker first (a thinking model told not to think often does;
    // Kimi K2 Thinking's and RWKV World's fixtures did at their first token).
    this.splitter = reasoning && !reasoning.closedInPrompt ? new ReasoningSplitter(reasoning.open, reasoning.close, reasoning.startsInside, reasoning.stray) : null;
    this.trigger = tools && !tools.forced ? new StopMatcher([tools.trigger]) : null;
    this.header = setup.answerHeader ? new HeaderFilter(setup.answerHeader) : null;
  }

  /** Inside the thinking section. */
  get thinking(): boolean {
    return this.splitter?.thinking ?? false;
  }

  /** Past the point where a thinking section can open or close: it is over, or the answer began without one. */
  get thoughtOver(): boolean {
    return this.splitter?.settled ?? true;
  }

  /** Tokens counted as thinking so far. */
  get reasoningTokens(): number {
    return this.thoughtTokens;
  }

  /** Still thinking with the thinking budget spent: the section must be closed by force. */
  get overBudget(): boolean {
    const budget = this.setup.reasoning?.budget;
    return this.thinking && budget !== undefined && this.thoughtTokens >= budget;
  }

  /** A tool call has started: text now goes to the call parser. */
  get inCall(): boolean {
    return this.parser !== null;
  }

  /** At least one call has been read (its name), so the turn ends in tool calls. */
  get called(): boolean {
    return this.parser !== null && this.parser.callCount > 0;
  }

  /** Before the first token: when generation does not start inside a thinking section, the answer starts now. */
  start(): RouterAction[] {
    const actions: RouterAction[] = [];
    if (!this.thinking) this.answerStarts(false, actions);
    return actions;
  }

  /**
   * Routes the text of `tokens` generated tokens (one logprob entry, when requested). `forcedClose`:
   * tokens of the closing marker written by force at the thinking budget, output (counted in the
   * answer's tokens) but not thinking, so the thinking count never passes the budget.
   */
  *push(text: string, tokens: number, logprob?: TokenLogprob, forcedClose = false): Generator<EngineChunk, RouterAction[]> {
    const actions: RouterAction[] = [];
    const logprobs = logprob ? { logprobs: [logprob] } : {};
    const heldBefore = this.trigger?.heldLength ?? 0;
    const splitter = this.splitter;
    if (!splitter || (!splitter.thinking && this.parser)) {
      yield* this.content(text, tokens, logprobs, heldBefore, actions);
      return actions;
    }
    const wasThinking = splitter.thinking;
    const start = this.splitOffset;
    this.splitOffset += text.length;
    if (logprob) this.unplaced.push({ start, end: this.splitOffset, logprob, standing: wasThinking ? "reasoning" : "content" });
    const part = splitter.push(text);
    const placed = this.placeLogprobs(part.spans, splitter.resolved);
    const thought = wasThinking || part.reasoning !== "";
    if (thought || placed.reasoning) {
      if (thought && !forcedClose) this.thoughtTokens += tokens;
      yield { kind: "text", channel: "reasoning", text: part.reasoning, tokens: thought ? tokens : 0, ...withLogprobs(placed.reasoning) };
      if (wasThinking && !splitter.thinking) {
        // Reported now: a stop string in the answer can end the generation before `finish` runs.
        yield { kind: "usage", reasoningTokens: this.thoughtTokens };
        this.answerStarts(true, actions);
      }
    }
    if (!thought) yield* this.content(part.content, tokens, withLogprobs(placed.content), heldBefore, actions);
    else if (part.content || placed.content) yield* this.content(part.content, 0, withLogprobs(placed.content), heldBefore, actions);
    return actions;
  }

  /**
   * Files the logprob entries of routed tokens under the part their text went to, once the splitter
   * has placed it: a token counts where its first character landed, and a token whose text the
   * splitter dropped whole (a thinking marker, the layout around one) is in neither part, as its
   * text is in neither; listing it would put bytes into a part's logprobs that its text lacks. A
   * token without text goes where it stood, unless a token before it is still held (order is kept).
   */
  private placeLogprobs(spans: SplitSpan[], resolved: number): { reasoning?: TokenLogprob[]; content?: TokenLogprob[] } {
    for (const t of this.unplaced) {
      if (t.part || t.end === t.start) continue;
      t.part = spans.find((s) => s.start < t.end && s.end > t.start)?.part;
    }
    const out: { reasoning?: TokenLogprob[]; content?: TokenLogprob[] } = {};
    while (this.unplaced.length > 0) {
      const t = this.unplaced[0];
      if (!t.part && t.end > resolved) break; // still held: it may yet turn out to be text
      this.unplaced.shift();
      const part = t.end === t.start ? t.standing : t.part;
      if (part) (out[part] ??= []).push(t.logprob);
    }
    return out;
  }

  /** The chunk that accounts for `count` tokens the engine wrote into the sequence itself. */
  written(count: number): EngineChunk {
    this.openingPending = false;
    // Written rather than sampled, but output all the same: counted in usage.
    return this.parser ? { kind: "tool-call-arguments", index: 0, text: "", tokens: count } : { kind: "text", text: "", tokens: count };
  }

  /**
   * Generation is over: releases whatever was held back as a possible marker, reports the thinking
   * count and ends. The actions returned are only for completeness; no token follows them.
   * `turnEnded`: the generation ended at an end-of-turn token.
   */
  *finish(reason: "stop" | "length", turnEnded = false): Generator<EngineChunk, RouterAction[]> {
    const actions: RouterAction[] = [];
    if (this.splitter) {
      const rest = this.splitter.flush();
      const placed = this.placeLogprobs(rest.spans, Infinity);
      if (rest.reasoning || placed.reasoning) yield { kind: "text", channel: "reasoning", text: rest.reasoning, tokens: 0, ...withLogprobs(placed.reasoning) };
      if (rest.content || placed.content) yield* this.content(rest.content, 0, withLogprobs(placed.content), 0, actions);
    }
    if (this.header && !this.parser) {
      const held = this.header.flush();
      if (held) yield* this.content(held, 0, {}, 0, actions);
    }
    if (this.trigger && !this.parser) {
      const held = this.trigger.flush();
      if (held) yield { kind: "text", text: held, tokens: 0 };
    }
    if (this.parser) {
      for (const ev of this.parser.flush()) {
        if (ev.type === "name") yield { kind: "tool-call", index: ev.index, name: ev.name };
        else if (ev.type === "arguments") yield { kind: "tool-call-arguments", index: ev.index, text: ev.text, tokens: 0 };
      }
    }
    yield { kind: "usage", reasoningTokens: this.thoughtTokens };
    yield { kind: "end", reason: reason === "stop" && this.called ? "tool_calls" : reason, ...(turnEnded && reason === "stop" ? { turnEnded } : {}) };
    return actions;
  }

  /** The answer begins: a forced call starts, or else the answer's own grammar takes hold. */
  private answerStarts(viaInjection: boolean, actions: RouterAction[]): void {
    const forced = this.setup.tools?.forced ?? false;
    actions.push({ kind: "answer-starts", viaInjection, call: forced });
    if (!forced) return;
    // Without an injection the prompt already ends with the call prefix.
    if (viaInjection) this.openCall({ kind: "append" }, actions);
    else this.openCall({ kind: "in-prompt" }, actions);
  }


  private openCall(opening: CallOpening, actions: RouterAction[]): void {
    this.parser = new ToolCallParser(this.setup.tools!.format);
    this.openingPending = opening.kind === "append";
    actions.push({ kind: "call-starts", opening });
  }

  /** Answer text: through the header filter and the call trigger, or into the call parser once a call runs. */
  private *content(
    text: string,
    tokens: number,
    logprobs: { logprobs?: TokenLogprob[] },
    heldBefore: number,
    actions: RouterAction[],
  ): Generator<EngineChunk> {
    if (this.parser) {
      // What comes before the opening in the sequence is not the call's: text the model wrote after
      // its closing marker, in the same token, is answer text; the closing layout Plinth writes after
      // a forced "</think>" (the blank line) is nothing to show.
      if (this.openingPending) yield { kind: "text", text: text.trim() === "" ? "" : text, tokens, ...logprobs };
      else yield* this.callText(this.parser, text, tokens);
      return;
    }
    if (this.header) text = this.header.push(text);
    if (!this.trigger) {
      yield { kind: "text", text, tokens, ...logprobs };
      return;
    }
    const { emit, stopped } = this.trigger.push(text);
    yield { kind: "text", text: emit, tokens, ...logprobs };
    if (stopped) {
      // A call starts. Whatever of its opening marker is already in the sequence stays; the token
      // just sampled is replaced by the rest of the prefix, after which the call grammar rules.
      // Always a replacement, even when the token's text is exactly the trigger: the sampled token is
      // part of the opening, so appending the whole prefix after it would write the marker twice.
      const fromThisToken = Math.max(0, emit.length - heldBefore);
      const before = text.slice(0, fromThisToken);
      const inSequence = Math.max(0, heldBefore - emit.length);
      const format = this.setup.tools!.format;
      const opening = callOpening(format);
      this.openCall({ kind: "replace", before, inSequence, text: before + opening.slice(inSequence) }, actions);
    }
  }

  /** Call text: names and arguments; the tokens are counted once, with the first argument chunk. */
  private *callText(parser: ToolCallParser, text: string, tokens: number): Generator<EngineChunk> {
    let counted = false;
    for (const ev of parser.push(text)) {
      if (ev.type === "name") yield { kind: "tool-call", index: ev.index, name: ev.name, ...(ev.id ? { id: ev.id } : {}) };
      else if (ev.type === "arguments") {
        yield { kind: "tool-call-arguments", index: ev.index, text: ev.text, tokens: counted ? 0 : tokens };
        counted = true;
      }
    }
    if (!counted && tokens > 0) yield { kind: "tool-call-arguments", index: 0, text: "", tokens };
  }
}

const withLogprobs = (logprobs: TokenLogprob[] | undefined) => (logprobs ? { logprobs } : {});

/**
 * Drops a fixed header from the start of the answer (e.g. gpt-oss's "<|channel|>final<|message|>")
 * and passes everything else through; text that could still become the header is held.
 */
export class HeaderFilter {
  private held = "";
  private done = false;

  constructor(private readonly header: string) {}

  push(text: string): string {
    if (this.done) return text;
    this.held += text;
    if (this.held.startsWith(this.header)) return this.release(this.held.slice(this.header.length));
    if (this.header.startsWith(this.held)) return "";
    return this.release(this.held);
  }

  flush(): string {
    return this.done ? "" : this.release(this.held);
  }

  private release(text: string): string {
    this.done = true;
    this.held = "";
    return text;
  }
}
