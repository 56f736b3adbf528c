import { type LlamaGrammar, LlamaGrammarEvaluationState, type LlamaModel, type Token } from "node-llama-cpp";
import type { EngineChunk } from "../../core/engine.ts";
import type { TokenLogprob } from "../../core/types.ts";
import type { Steps } from "./decode-steps.ts";
import { type RouterAction, TextRouter } from "./text-router.ts";
import type { ToolCallFormat } from "./tool-call-parser.ts";
import type { TokenTextDecoder } from "./token-text.ts";

// The token half of the decode loop: it samples (through decode-steps.ts), keeps `generated`, ends
// the generation on end-of-turn tokens or the token budget, and forces a thinking section closed.
// What the text of each token means is the TextRouter's business (text-router.ts); the loop only
// carries out what the router asks for in return: tokens written into the sequence and grammar
// switches, which need the model and its tokenizer.

/** How a model's thinking section looks and how this request wants it handled. */
export interface ReasoningPlan {
  open: string;
  /** Closing markers, most specific first (e.g. "\n</think>", then "</think>"). */
  close: string[];
  /** The prompt already opened the section, so generation starts inside it. */
  startsInside: boolean;
  /**
   * The prompt already closed the section (thinking turned off, or a generation prompt that closes
   * it): the answer has no thinking section, and a thinking marker the model writes anyway is text.
   */
  closedInPrompt?: boolean;
  /** Thinking tokens allowed before the section is closed by force. */
  budget?: number;
  /** Marker texts dropped, not answer text, before the section can open (ReasoningSplitter's `stray`). */
  stray?: string[];
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
  /** End-of-turn tokens do not end the answer (ignore_eos): it runs to its budget or a stop string. */
  ignoreEos?: boolean;
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
  /**
   * Those of `markers` that read as their text only inside a tool call (a call layout's closing and
   * inner markers): a stray one in the answer or the thinking decodes as the control token it is,
   * to nothing, instead of showing its text there (Command R7B's <|END_ACTION|>, Kimi K2's
   * <|tool_call_end|> sampled in free text; DeepSeek V3.1's <｜tool▁call▁begin｜> in the thinking
   * before a forced call).
   */
  callMarkers?: ReadonlySet<Token>;
  /**
   * Those of `markers` that open or close the thinking section (Gemma 4's `<|channel>`, `<channel|>`):
   * read as their text only until the section is over, so a stray one in the answer (Gemma 4 may end
   * its answer with a lone `<channel|>`) decodes to nothing rather than showing its text there.
   */
  thoughtMarkers?: ReadonlySet<Token>;
  /**
   * Markers the vocabulary types as user-defined tokens, which decode to their text where a control
   * token decodes to nothing (Gemma 4's own vocabulary types `<|channel>` and `<channel|>` so):
   * wherever they are not read as their text (above), they are nothing, as a control token is.
   */
  silentMarkers?: ReadonlySet<Token>;
  /** Put into the sequence when a thinking section closes, before the answer (gpt-oss's next message header). */
  answerOpening?: Token[];
  /** A header the model may write at the start of its answer, which is not part of the answer. */
  answerHeader?: string;
  signal: AbortSignal;
  /**
   * Runs once the prompt is evaluated, before any generated token enters the sequence: after the
   * first sampled token has been handed to the consumer (or the generation ended at it).
   */
  onPromptEvaluated: () => Promise<void>;
}

/**
 * The engine's single generation loop: tokens in, chunks out. Each token's text goes to the router,
 * which yields the chunks (thinking, answer, tool calls); the loop applies the router's actions and
 * ends on end-of-turn tokens or the token budget.
 */
export async function* decodeLoop(setup: LoopSetup): AsyncGenerator<EngineChunk> {
  const { model, steps, decoder, generated, reasoning, tools, signal } = setup;
  const router = new TextRouter({ reasoning, tools, answerHeader: setup.answerHeader });
  const edits = new SequenceEdits(setup);
  const ends = (t: Token) => !setup.ignoreEos && !setup.markers?.has(t) && (model.isEogToken(t) || setup.stopTokens.has(t));
  /** Set by textOf for a token it read as nothing though it spells text (a silent marker). */
  let silenced = false;
  const textOf = (t: Token) => {
    const marker = setup.markers?.get(t);
    silenced = false;
    if (marker === undefined || (setup.callMarkers?.has(t) && !router.inCall) || (setup.thoughtMarkers?.has(t) && router.thoughtOver)) {
      if (!setup.silentMarkers?.has(t)) return decoder.push(t);
      silenced = true;
      return decoder.flush();
    }
    return decoder.flush() + marker;
  };
  /** A silenced marker's logprob entry is a control token's: named, no text, no bytes (so the bytes spell the text). */
  const entryOf = (logprob: TokenLogprob | undefined) => (silenced && logprob ? asControlEntry(logprob) : logprob);
  /** `turnEnded`: at an end-of-turn token (the last of `lastTokens`). */
  function* finish(reason: "stop" | "length", lastTokens: number, turnEnded = false): Generator<EngineChunk> {
    // No token follows, so what the router asks for now has nothing left to act on.
    yield* router.push(decoder.flush(), lastTokens);
    yield* router.finish(reason, turnEnded);
  }

  // The prompt's state is handed on (onPromptEvaluated: saved for other requests to reuse) once,
  // after the first token's text has gone to the consumer and before any generated token enters
  // the sequence, so saving it is not part of the time to the first token.
  let sampled = false;
  let promptHandedOn = false;
  const handOnPrompt = async () => {
    if (promptHandedOn || !sampled) return;
    promptHandedOn = true;
    await setup.onPromptEvaluated();
  };

  edits.apply(router.start());
  try {
    let step = await steps.next(undefined);
    // The first step evaluated the prompt (its last batch gave the first token's logits).
    if (!step.done && !signal.aborted) yield { kind: "evaluated" };
    while (!step.done) {
      sampled = true;
      if (signal.aborted) return;
      let { token, logprob } = step.value;
      let tokens: Token[] = [token];
      let forced = false;
      const overBudget = router.overBudget;
      // An answer that must be a tool call or match a schema cannot be skipped by ending the turn
      // while still thinking.
      const answerRequired = Boolean(tools?.forced || setup.contentGrammar) && ends(token);
      if (router.thinking && (overBudget || answerRequired)) {
        // The sampled token is dropped and the section is closed in its place.
        tokens = reasoning!.closeTokens;
        forced = true;
        logprob = undefined;
        if (generated.length + tokens.length > setup.maxTokens) {
          // The closing marker does not fit in what is left of the token budget: the generation ends
          // here rather than show the marker's first tokens as thinking text.
          yield* finish("length", 0);
          return;
        }
      }
      for (const t of tokens) {
        generated.push(t);
        if (!forced && ends(t)) {
          // The end-of-turn token is counted but is not content, so it has no logprob entry.
          yield* finish("stop", 1, true);
          return;
        }
        if (generated.length >= setup.maxTokens) {
          // The last token: a character it leaves unfinished is flushed with it (U+FFFD), so its
          // logprob entry spells what the text ends with.
          const text = textOf(t);
          const rest = decoder.flush();
          const entry = entryOf(logprob);
          yield* router.push(text + rest, 1, rest && entry ? withFlushed(entry, rest) : entry, forced);
          yield* finish("length", 0);
          return;
        }
        const text = textOf(t);
        edits.apply(yield* router.push(text, 1, entryOf(logprob), forced));
      }
      let replacement = forced ? tokens : undefined;
      const edit = edits.take();
      if (edit) {
        // What the router puts into the sequence (a call's opening, a closed thinking section) counts
        // against the token budget like what the model samples: when it does not fit, the generation
        // ends here rather than run past max_tokens.
        if (generated.length + edit.tokens.length > setup.maxTokens) {
          yield* finish("length", 0);
          return;
        }
        replacement = forced || !edit.replace ? [...tokens, ...edit.tokens] : edit.tokens;
        generated.push(...edit.tokens);
        yield router.written(edit.tokens.length);
      }
      await handOnPrompt();
      step = await steps.next(replacement);
    }
    // A step source also stops when the request was cancelled while its prompt was read.
    if (signal.aborted) return;
    // The sampler only stops by itself when it has nothing more to say.
    yield* finish("stop", 0);
  } finally {
    // An answer that ended at its first token still leaves the prompt worth keeping.
    await handOnPrompt();
    await steps.return(undefined);
  }
}

/** `entry` (and its own line among the alternatives) as a control token's: its text as its name, no text, no bytes. */
function asControlEntry(entry: TokenLogprob): TokenLogprob {
  const same = (t: TokenLogprob["top"][number]) => t.logprob === entry.logprob && t.token === entry.token && t.special === entry.special;
  const named = { token: "", bytes: [], special: entry.special ?? entry.token };
  return { ...entry, ...named, top: entry.top.map((t) => (same(t) ? { ...t, ...named } : t)) };
}

/**
 * The last token's entry when the text's unfinished character was flushed with it: the token, and
 * its own line among the alternatives (the same bytes and log probability), spell what the text
 * ends with.
 */
function withFlushed(entry: TokenLogprob, rest: string): TokenLogprob {
  const same = (t: TokenLogprob["top"][number]) => t.logprob === entry.logprob && t.special === entry.special && t.token === entry.token && t.bytes.length === entry.bytes.length && t.bytes.every((b, i) => b === entry.bytes[i]);
  return { ...entry, token: entry.token + rest, top: entry.top.map((t) => (same(t) ? { ...t, token: t.token + rest } : t)) };
}

/**
 * Carries out the router's actions on the token side: collects the tokens to put into the sequence
 * after the token just sampled (or, `replace`, instead of it), and swaps the sampler's grammar.
 */
class SequenceEdits {
  private inject: Token[] | undefined;
  private replace = false;

  constructor(private readonly setup: LoopSetup) {}

  apply(actions: readonly RouterAction[]): void {
    const { setup } = this;
    for (const action of actions) {
      if (action.kind === "answer-starts") {
        if (action.viaInjection && setup.answerOpening?.length) this.write(setup.answerOpening);
        if (!action.call) this.activate(setup.contentGrammar);
        continue;
      }
      const tools = setup.tools!;
      const opening = action.opening;
      if (opening.kind === "append") this.write(tools.prefixTokens);
      else if (opening.kind === "replace") {
        this.write(setup.tokenize(opening.text));
        this.replace = true;
      }
      this.activate(tools.grammar);
    }
  }

  /** The tokens collected since the last call, if any. */
  take(): { tokens: Token[]; replace: boolean } | undefined {
    if (!this.inject) return undefined;
    const edit = { tokens: this.inject, replace: this.replace };
    this.inject = undefined;
    this.replace = false;
    return edit;
  }

  private write(tokens: Token[]): void {
    this.inject = [...(this.inject ?? []), ...tokens];
  }

  private activate(grammar: LlamaGrammar | undefined): void {
    this.setup.grammar.state = grammar ? freshGrammarState(this.setup.model, grammar) : undefined;
  }
}

/** One untouched state per compiled grammar, never sampled with: requests get copies of it. */
const pristineStates = new WeakMap<LlamaGrammar, LlamaGrammarEvaluationState>();

/**
 * A new evaluation state for `grammar`. Building one from the grammar makes llama.cpp parse the
 * grammar text again and re-run its left-recursion check, on the JavaScript thread, for every
 * request (see grammar/load-cost.ts); copying a state built once copies the parsed rules instead.
 */
function freshGrammarState(model: LlamaModel, grammar: LlamaGrammar): LlamaGrammarEvaluationState {
  let pristine = pristineStates.get(grammar);
  if (!pristine) {
    pristine = new LlamaGrammarEvaluationState({ model, grammar });
    pristineStates.set(grammar, pristine);
  }
  return pristine.clone();
}
