import { type LlamaGrammar, LlamaGrammarEvaluationState, type LlamaModel, type Token } from "node-llama-cpp";
import { ReasoningSplitter } from "../../core/reasoning-splitter.ts";
import { StopMatcher } from "../../core/stop-matcher.ts";
import type { TokenLogprob } from "../../core/types.ts";
import type { EngineChunk } from "../../core/engine.ts";
import type { Steps } from "./decode-steps.ts";
import { type ToolCallFormat, ToolCallParser } from "./tool-call-parser.ts";
import type { TokenTextDecoder } from "./token-text.ts";

/** How a model's thinking section looks and how this request wants it handled. */
export interface ReasoningPlan {
  open: string;
  /** Closing markers, most specific first (e.g. "\n</think>", then "</think>"). */
  close: string[];
  /** The prompt already opened the section, so generation starts inside it. */
  startsInside: boolean;
  /** Thinking tokens allowed before the section is closed by force. */
  budget?: number;
  /** Tokens that close the section (the template's closing marker and layout). */
  closeTokens: Token[];
}

/** How tool calls look in this model's output and how this request wants them. */
export interface ToolPlan {
  format: ToolCallFormat;
  /** Text that starts a call in free-running output (the prefix's leading marker). */
  trigger: string;
  /** tool_choice required or named: the answer is a call, from its first token. */
  forced: boolean;
  /** Constrains everything after the call prefix: names, arguments, suffix, further calls. */
  grammar: LlamaGrammar;
  /** The call prefix as tokens (special markers included). */
  prefixTokens: Token[];
}

/** The grammar state the sampler reads each step; swapped as the answer moves between parts. */
export interface GrammarSlot {
  state?: LlamaGrammarEvaluationState;
}

export interface LoopSetup {
  model: LlamaModel;
  steps: Steps;
  decoder: TokenTextDecoder;
  /** Shared with the sampler's repetition penalties, which read it every step. */
  generated: Token[];
  maxTokens: number;
  stopTokens: Set<Token>;
  reasoning?: ReasoningPlan;
  tools?: ToolPlan;
  /** Constrains the answer (structured output); starts where the answer starts. */
  contentGrammar?: LlamaGrammar;
  grammar: GrammarSlot;
  /** Tokenizes text with special markers recognised (for injected call prefixes). */
  tokenize: (text: string) => Token[];
  /**
   * Tokens that structure the output rather than end it, with their text (gpt-oss's <|end|>, which
   * llama.cpp counts as end-of-generation and renders as nothing).
   */
  markers?: ReadonlyMap<Token, string>;
  /** Put into the sequence when a thinking section closes, before the answer (gpt-oss's next message header). */
  answerOpening?: Token[];
  /** A header the model may write at the start of its answer, which is not part of the answer. */
  answerHeader?: string;
  signal: AbortSignal;
  /** Runs once the prompt is evaluated, before any generated token enters the sequence. */
  onPromptEvaluated: () => Promise<void>;
}

/**
 * The engine's single generation loop: tokens in, chunks out. It separates thinking from the answer,
 * recognises tool calls (switching to their grammar once one starts), applies a structured-output
 * grammar to the answer, and ends on end-of-turn tokens or the token budget.
 */
export async function* decodeLoop(setup: LoopSetup): AsyncGenerator<EngineChunk> {
  const { model, steps, decoder, generated, reasoning, tools, signal } = setup;
  const splitter = reasoning ? new ReasoningSplitter(reasoning.open, reasoning.close, reasoning.startsInside) : null;
  const trigger = tools && !tools.forced ? new StopMatcher([tools.trigger]) : null;
  let parser: ToolCallParser | null = null;
  let reasoningTokens = 0;
  /** Tokens to put into the sequence after the token just sampled, or (`replace`) instead of it. */
  let inject: Token[] | undefined;
  let replace = false;
  const header = setup.answerHeader ? new HeaderFilter(setup.answerHeader) : null;
  const ends = (t: Token) => !setup.markers?.has(t) && (model.isEogToken(t) || setup.stopTokens.has(t));
  const textOf = (t: Token) => {
    const marker = setup.markers?.get(t);
    return marker === undefined ? decoder.push(t) : decoder.flush() + marker;
  };

  const activate = (grammar: LlamaGrammar | undefined) => {
    setup.grammar.state = grammar ? new LlamaGrammarEvaluationState({ model, grammar }) : undefined;
  };
  /** Starts a call by injecting its prefix; `inSequence` characters of it are there already. */
  const startCall = (before = "", inSequence = 0) => {
    parser = new ToolCallParser(tools!.format);
    const opening = tools!.format.sectionPrefix + tools!.format.prefix;
    if (before === "" && inSequence === 0) inject = [...(inject ?? []), ...tools!.prefixTokens];
    else {
      // The sampled token's own text is re-tokenized together with the rest of the opening.
      inject = [...(inject ?? []), ...setup.tokenize(before + opening.slice(inSequence))];
      replace = true;
    }
    activate(tools!.grammar);
  };
  /** The answer begins: forced calls start, and a structured-output grammar takes hold. */
  const answerStarts = (viaInjection: boolean) => {
    if (viaInjection && setup.answerOpening?.length) inject = [...(inject ?? []), ...setup.answerOpening];
    if (tools?.forced) {
      if (viaInjection) startCall();
      else {
        // The prompt already ends with the call prefix.
        parser = new ToolCallParser(tools.format);
        activate(tools.grammar);
      }
    } else activate(setup.contentGrammar);
  };

  function* callText(text: string, tokens: number): Generator<EngineChunk> {
    let counted = false;
    for (const ev of parser!.push(text)) {
      if (ev.type === "name") yield { kind: "tool-call", index: ev.index, name: ev.name };
      else if (ev.type === "arguments") {
        yield { kind: "tool-call-arguments", index: ev.index, text: ev.text, tokens: counted ? 0 : tokens };
        counted = true;
      }
    }
    if (!counted && tokens > 0) yield { kind: "tool-call-arguments", index: 0, text: "", tokens };
  }

  function* contentText(text: string, tokens: number, logprobs: { logprobs?: TokenLogprob[] }, heldBefore: number): Generator<EngineChunk> {
    if (parser) {
      yield* callText(text, tokens);
      return;
    }
    if (header) text = header.push(text);
    if (!trigger) {
      yield { kind: "text", text, tokens, ...logprobs };
      return;
    }
    const { emit, stopped } = trigger.push(text);
    yield { kind: "text", text: emit, tokens, ...logprobs };
    if (stopped) {
      // A call starts. Whatever of its opening marker is already in the sequence stays; the token
      // just sampled is replaced by the rest of the prefix, after which the call grammar rules.
      const fromThisToken = Math.max(0, emit.length - heldBefore);
      startCall(text.slice(0, fromThisToken), Math.max(0, heldBefore - emit.length));
    }
  }

  function* emit(text: string, tokens: number, logprob?: TokenLogprob): Generator<EngineChunk> {
    const logprobs = logprob ? { logprobs: [logprob] } : {};
    const heldBefore = trigger?.heldLength ?? 0;
    if (!splitter || (!splitter.thinking && parser)) {
      yield* contentText(text, tokens, logprobs, heldBefore);
      return;
    }
    const wasThinking = splitter.thinking;
    const part = splitter.push(text);
    if (wasThinking || part.reasoning) {
      reasoningTokens += tokens;
      yield { kind: "text", channel: "reasoning", text: part.reasoning, tokens, ...logprobs };
      if (wasThinking && !splitter.thinking) {
        // Reported now: a stop string in the answer can end the generation before `finish` runs.
        yield { kind: "usage", reasoningTokens };
        answerStarts(true);
      }
      if (part.content) yield* contentText(part.content, 0, {}, heldBefore);
    } else {
      yield* contentText(part.content, tokens, logprobs, heldBefore);
    }
  }

  function* finish(reason: "stop" | "length", lastTokens: number): Generator<EngineChunk> {
    yield* emit(decoder.flush(), lastTokens);
    if (splitter) {
      const rest = splitter.flush();
      if (rest.reasoning) yield { kind: "text", channel: "reasoning", text: rest.reasoning, tokens: 0 };
      if (rest.content) yield* contentText(rest.content, 0, {}, 0);
    }
    if (header && !parser) {
      const held = header.flush();
      if (held) yield* contentText(held, 0, {}, 0);
    }
    if (trigger && !parser) {
      const held = trigger.flush();
      if (held) yield { kind: "text", text: held, tokens: 0 };
    }
    yield { kind: "usage", reasoningTokens };
    const called = parser !== null && (parser as ToolCallParser).callCount > 0;
    yield { kind: "end", reason: reason === "stop" && called ? "tool_calls" : reason };
  }

  if (!splitter?.thinking) answerStarts(false);
  try {
    let step = await steps.next(undefined);
    let first = true;
    while (!step.done) {
      if (signal.aborted) return;
      if (first) {
        first = false;
        await setup.onPromptEvaluated();
      }
      let { token, logprob } = step.value;
      let tokens: Token[] = [token];
      let forced = false;
      const overBudget = reasoning?.budget !== undefined && reasoningTokens >= reasoning.budget;
      // An answer that must be a tool call or match a schema cannot be skipped by ending the turn
      // while still thinking.
      const answerRequired = Boolean(tools?.forced || setup.contentGrammar) && ends(token);
      if (splitter?.thinking && (overBudget || answerRequired)) {
        // The sampled token is dropped and the section is closed in its place.
        tokens = reasoning!.closeTokens;
        forced = true;
        logprob = undefined;
      }
      for (const t of tokens) {
        generated.push(t);
        if (!forced && ends(t)) {
          // The end-of-turn token is counted but is not content, so it has no logprob entry.
          yield* finish("stop", 1);
          return;
        }
        yield* emit(textOf(t), 1, logprob);
        if (generated.length >= setup.maxTokens) {
          yield* finish("length", 0);
          return;
        }
      }
      let replacement = forced ? tokens : undefined;
      if (inject) {
        replacement = forced || !replace ? [...tokens, ...inject] : inject;
        generated.push(...inject);
        // Written by the engine rather than sampled, but output all the same: counted in usage.
        if (parser) yield { kind: "tool-call-arguments", index: 0, text: "", tokens: inject.length };
        else yield { kind: "text", text: "", tokens: inject.length };
        inject = undefined;
        replace = false;
      }
      step = await steps.next(replacement);
    }
    // The sampler only stops by itself when it has nothing more to say.
    yield* finish("stop", 0);
  } finally {
    await steps.return(undefined);
  }
}

/**
 * Drops a fixed header from the start of the answer (e.g. gpt-oss's "<|channel|>final<|message|>")
 * and passes everything else through; text that could still become the header is held.
 */
class HeaderFilter {
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
