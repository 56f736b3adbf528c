import { badRequest } from "../../core/errors.ts";
import type { ChatCompletionRequest } from "../openai/chat-protocol.ts";
import { konanCompletionCap, type KonanChatRequest } from "./protocol.ts";

/**
 * llama.cpp divides positive logits by the repetition penalty, so Konan's documented lower bound 0
 * would divide by zero; 0 is run as this (the strongest "more repetition" the sampler can take).
 */
export const REPETITION_PENALTY_FLOOR = 0.01;

/**
 * A Konan request as the OpenAI Chat Completions request it runs as. What differs is settled here;
 * the defaults (temperature 0.3, top_p 0.75) are the codec's.
 *
 * - `seed: -1` is Konan's "random", the same as no seed.
 * - `reasoning` absent or null turns thinking off; `{effort}` or `{budget_tokens}` turn it on
 *   (`budget_tokens` only with a null effort); `{}` turns it on with no budget.
 * - `metadata` makes the completion stored (Konan documents metadata as kept and queried later).
 */
export function konanToOpenAI(body: KonanChatRequest): { openai: ChatCompletionRequest; reasoningImplicit: boolean } {
  const r = body.reasoning;
  if (r?.effort != null && r.budget_tokens != null)
    throw badRequest("reasoning.budget_tokens may be used only when reasoning.effort is null.", "reasoning.budget_tokens");
  const reasoning: ChatCompletionRequest["reasoning"] =
    r == null ? { enabled: false } : r.effort != null ? { effort: r.effort } : r.budget_tokens != null ? { budget_tokens: r.budget_tokens } : { enabled: true };
  const openai: ChatCompletionRequest = {
    model: body.model,
    messages: body.messages,
    stream: body.stream,
    max_completion_tokens: konanCompletionCap(body),
    temperature: body.temperature,
    top_p: body.top_p,
    frequency_penalty: body.frequency_penalty,
    presence_penalty: body.presence_penalty,
    logit_bias: body.logit_bias,
    repetition_penalty: body.repetition_penalty == null ? null : Math.max(body.repetition_penalty, REPETITION_PENALTY_FLOOR),
    seed: body.seed === -1 ? null : body.seed,
    stop: body.stop,
    user: body.user,
    tools: body.tools,
    tool_choice: body.tool_choice,
    parallel_tool_calls: body.parallel_tool_calls,
    response_format: body.response_format,
    metadata: body.metadata,
    store: body.metadata != null,
    reasoning,
  };
  return { openai, reasoningImplicit: r == null };
}
