import { badRequest, unsupportedField } from "../../core/errors.ts";
import type { GenerationRequest, PromptInput } from "../../core/types.ts";
import type { CompletionRequest } from "./completions-protocol.ts";
import { foreignFields } from "./foreign-fields.ts";
import { noGrammar } from "./structured-fields.ts";
import { streamUsage } from "./stream-usage.ts";
import { isolationKey, normaliseStop, toSamplingParams } from "./sampling-fields.ts";

/** Structured-output fields (OpenAI's and other servers'): the grammar is applied to chat answers only. */
const CHAT_ONLY = ["response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_whitespace_pattern", "grammar", "structured_outputs", "json_schema", "regex", "ebnf"] as const;

/** One canonical request per prompt of the batch; they share everything but the prompt. */
export function completionToCanonical(body: CompletionRequest): { batch: GenerationRequest[]; namespace?: string } {
  const n = body.n ?? 1;
  if (body.best_of != null && body.best_of !== n)
    throw badRequest("best_of is not supported (it was removed from vLLM too); it may only equal n.", "best_of", "unsupported_parameter");
  // As OpenAI: best_of's candidates are chosen from once all are done, so they cannot be streamed.
  if (body.best_of != null && body.best_of > 1 && body.stream)
    throw badRequest("best_of cannot be streamed; send stream: false, or n instead of best_of.", "best_of");
  if (body.stream_options != null && !body.stream)
    throw badRequest("stream_options is only allowed when stream is true.", "stream_options");
  for (const field of CHAT_ONLY) {
    if (field === "grammar" ? !noGrammar(body.grammar) : body[field] != null) throw unsupportedField(field, "constrains answers to chat requests only here; send it to /v1/chat/completions");
  }

  const prompts = toPrompts(body.prompt);
  if (body.suffix != null) {
    if (prompts.some((p) => p.kind !== "text"))
      throw badRequest("'suffix' needs text prompts; token-id prompts cannot be split around it.", "suffix");
  }
  const foreign = foreignFields(body, "completion", body.max_tokens, body.repetition_penalty);
  const { continuous } = streamUsage(body);
  const sampling = { ...toSamplingParams(body), ...(foreign.repetitionPenalty !== undefined ? { repetitionPenalty: foreign.repetitionPenalty } : {}) };
  const batch = prompts.map((prompt): GenerationRequest => ({
    model: body.model,
    prompt: body.suffix != null && prompt.kind === "text" ? { kind: "infill", prefix: prompt.text, suffix: body.suffix } : prompt,
    sampling,
    // max_tokens: -1 is llama-server's "no limit", as n_predict: -1 is.
    maxTokens: body.max_tokens === -1 ? undefined : (body.max_tokens ?? (foreign.noLimit ? undefined : (foreign.maxTokens ?? 16))),
    ...(body.max_tokens == null && !foreign.noLimit && foreign.maxTokens === undefined ? { maxTokensDefaulted: true } : {}),
    ...(foreign.ignoreEos ? { ignoreEos: true } : {}),
    stop: normaliseStop(body.stop),
    n,
    cachePrompt: body.cache_prompt ?? true,
    logprobs: body.logprobs ?? undefined,
    echo: body.echo === true,
    wholeAnswer: body.stream !== true,
    ...(continuous ? { runningUsage: true } : {}),
    ...(foreign.timings ? { timings: true } : {}),
    ...(foreign.promptProgress ? { promptProgress: true } : {}),
  }));
  return { batch, namespace: isolationKey(body.user, body.cache_salt) };
}

function toPrompts(prompt: CompletionRequest["prompt"]): PromptInput[] {
  if (typeof prompt === "string") return [{ kind: "text", text: prompt }];
  if (prompt.every((p) => typeof p === "number")) return [{ kind: "tokens", tokens: prompt as number[] }];
  return (prompt as Array<string | number[]>).map((p) => (typeof p === "string" ? { kind: "text", text: p } : { kind: "tokens", tokens: p }));
}
