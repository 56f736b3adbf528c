import type { LlamaModel, Token } from "node-llama-cpp";
import { ReasoningSplitter } from "../../core/reasoning-splitter.ts";
import type { TokenLogprob } from "../../core/types.ts";
import type { EngineChunk } from "../engine.ts";
import type { Steps } from "./decode-steps.ts";
import type { TokenTextDecoder } from "./token-text.ts";

/** How a model's thinking section looks and how this request wants it handled. */
export interface ReasoningPlan {
  open: string;
  close: string;
  /** The prompt already opened the section, so generation starts inside it. */
  startsInside: boolean;
  /** Thinking tokens allowed before the section is closed by force. */
  budget?: number;
  /** Tokens that close the section (the template's closing marker and layout). */
  closeTokens: Token[];
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
  signal: AbortSignal;
  /** Runs once the prompt is evaluated, before any generated token enters the sequence. */
  onPromptEvaluated: () => Promise<void>;
}

/**
 * The engine's single generation loop: tokens in, text chunks out, split into reasoning and answer
 * when the model thinks, ending on end-of-turn tokens or the token budget.
 */
export async function* decodeLoop(setup: LoopSetup): AsyncGenerator<EngineChunk> {
  const { model, steps, decoder, generated, reasoning, signal } = setup;
  const splitter = reasoning ? new ReasoningSplitter(reasoning.open, reasoning.close, reasoning.startsInside) : null;
  let reasoningTokens = 0;

  function* emit(text: string, tokens: number, logprob?: TokenLogprob): Generator<EngineChunk> {
    const logprobs = logprob ? { logprobs: [logprob] } : {};
    if (!splitter) {
      yield { kind: "text", text, tokens, ...logprobs };
      return;
    }
    const wasThinking = splitter.thinking;
    const part = splitter.push(text);
    if (wasThinking || part.reasoning) {
      reasoningTokens += tokens;
      yield { kind: "text", channel: "reasoning", text: part.reasoning, tokens, ...logprobs };
      if (part.content) yield { kind: "text", text: part.content, tokens: 0 };
    } else {
      yield { kind: "text", text: part.content, tokens, ...logprobs };
    }
  }

  function* finish(reason: "stop" | "length", lastTokens: number): Generator<EngineChunk> {
    yield* emit(decoder.flush(), lastTokens);
    if (splitter) {
      const rest = splitter.flush();
      if (rest.reasoning) yield { kind: "text", channel: "reasoning", text: rest.reasoning, tokens: 0 };
      if (rest.content) yield { kind: "text", text: rest.content, tokens: 0 };
    }
    yield { kind: "usage-detail", reasoningTokens };
    yield { kind: "end", reason };
  }

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
      let replacement: Token[] | undefined;
      let tokens: Token[] = [token];
      if (splitter?.thinking && reasoning?.budget !== undefined && reasoningTokens >= reasoning.budget) {
        // Budget spent: the sampled token is dropped and the section is closed in its place.
        replacement = reasoning.closeTokens;
        tokens = replacement;
        logprob = undefined;
      }
      for (const t of tokens) {
        generated.push(t);
        if (replacement === undefined && (model.isEogToken(t) || setup.stopTokens.has(t))) {
          // The end-of-turn token is counted but is not content, so it has no logprob entry.
          yield* finish("stop", 1);
          return;
        }
        yield* emit(decoder.push(t), 1, logprob);
        if (generated.length >= setup.maxTokens) {
          yield* finish("length", 0);
          return;
        }
      }
      step = await steps.next(replacement);
    }
    // The sampler only stops by itself when it has nothing more to say.
    yield* finish("stop", 0);
  } finally {
    await steps.return(undefined);
  }
}
