import { z } from "zod";
import { badRequest, unsupportedField } from "../../core/errors.ts";
import { asksNoThinking } from "../../core/reasoning-control.ts";
import type { GenerationRequest } from "../../core/types.ts";

/**
 * Sampling and generation fields of vLLM's, llama-server's, SGLang's, text-generation-inference's and
 * Ollama's APIs (their OpenAI-compatible routes, and fields of their own routes that clients send to
 * the OpenAI ones) that OpenAI
 * does not define. Clients written for those servers send them, often with their neutral value on
 * every request (llama-server's web UI sends all its sampler settings). Dropping them as unknown
 * would answer a request for `ignore_eos` or `mirostat` as if it had not asked, so each is read
 * here: honoured (`ignore_eos`; `n_predict` and `repeat_penalty` as the budget and repetition
 * penalty under their llama-server names; `thinking_token_budget`, and llama-server's
 * `reasoning_budget_tokens` / `thinking_budget_tokens`, as the thinking budget;
 * `include_reasoning: false`), accepted at its neutral value (the behaviour Plinth has anyway), or
 * refused with a 400 naming it. Chat, completions and Responses read the same table.
 */

/** A field's value that asks for nothing Plinth does not do already. */
type Neutral = (value: unknown) => boolean;

const isNull: Neutral = (v) => v == null;
const is = (neutral: unknown): Neutral => (v) => v == null || v === neutral;
const isBoolean: Neutral = (v) => v == null || typeof v === "boolean";
const isEmpty: Neutral = (v) => v == null || (Array.isArray(v) && v.length === 0);
const atMost = (limit: number): Neutral => (v) => v == null || (typeof v === "number" && v <= limit);
const isEmptyObject: Neutral = (v) => v == null || (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0);
const oneOf = (...values: unknown[]): Neutral => (v) => v == null || values.includes(v);
// Labels and hints that change nothing here still have to be of their type, as the servers that
// define them check: a label of the wrong type is a client's mistake, answered with a 400.
const isString: Neutral = (v) => v == null || typeof v === "string";
const isStrings: Neutral = (v) => isString(v) || (Array.isArray(v) && v.every((x) => typeof x === "string"));
const isInt: Neutral = (v) => v == null || Number.isInteger(v);
const isCount: Neutral = (v) => v == null || (Number.isInteger(v) && (v as number) >= 0);
const isDuration: Neutral = (v) => v == null || typeof v === "string" || typeof v === "number";

/** Settings of a sampler that is off unless `switch` turns it on: any value while it is off. */
const whenOff = (body: Record<string, unknown>, sw: string, off: Neutral): Neutral => () => off(body[sw]);

export const FOREIGN_FIELDS = [
  "use_beam_search",
  "length_penalty",
  "min_tokens",
  "stop_token_ids",
  "bad_words",
  "allowed_token_ids",
  "prompt_logprobs",
  "include_stop_str_in_output",
  "skip_special_tokens",
  "spaces_between_special_tokens",
  "truncate_prompt_tokens",
  "logits_processors",
  "add_generation_prompt",
  "continue_final_message",
  "add_special_tokens",
  "chat_template",
  "documents",
  "return_tokens_as_token_ids",
  "return_token_ids",
  "n_probs",
  "reasoning_budget_message",
  "adaptive_target",
  "adaptive_decay",
  "mirostat",
  "mirostat_tau",
  "mirostat_eta",
  "typical_p",
  "typ_p",
  "tfs_z",
  "dynatemp_range",
  "dynatemp_exponent",
  "dry_multiplier",
  "dry_base",
  "dry_allowed_length",
  "dry_penalty_last_n",
  "dry_sequence_breakers",
  "xtc_probability",
  "xtc_threshold",
  "top_n_sigma",
  "repeat_last_n",
  "penalize_nl",
  "post_sampling_probs",
  "n_cmpl",
  "lora",
  "t_max_predict_ms",
  "samplers",
  "backend_sampling",
  "id_slot",
  "n_keep",
  "n_discard",
  "grammar_lazy",
  "preserved_tokens",
  "grammar_triggers",
  "n_indent",
  "timings_per_token",
  "return_progress",
  "verbose",
  "priority",
  "request_id",
  "include_reasoning",
  "logprob_token_ids",
  "truncation_side",
  "kv_transfer_params",
  "vllm_xargs",
  "mm_processor_kwargs",
  "media_io_kwargs",
  "prompt_embeds",
  "reasoning_format",
  "reasoning_control",
  "thinking_forced_open",
  "parse_tool_calls",
  "response_fields",
  "return_tokens",
  "min_keep",
  "n_cache_reuse",
  "sse_ping_interval",
  "stop_regex",
  "no_stop_trim",
  "separate_reasoning",
  "stream_reasoning",
  "lora_path",
  "session_id",
  "session_params",
  "custom_logit_processor",
  "custom_params",
  "return_hidden_states",
  "return_routed_experts",
  "routed_experts_start_len",
  "return_cached_tokens_details",
  "return_prompt_token_ids",
  "return_meta_info",
  "task",
  "input_ids",
  "max_dynamic_patch",
  "min_dynamic_patch",
  "use_audio_in_video",
  "images_config",
  "bootstrap_host",
  "bootstrap_port",
  "bootstrap_room",
  "rid",
  "extra_key",
  "ngram_corpus_id",
  "routed_dp_rank",
  "disagg_prefill_dp_rank",
  "data_parallel_rank",
  "custom_labels",
  "tool_prompt",
  "guideline",
  "top_n_tokens",
  "decoder_input_details",
  "details",
  "watermark",
  "do_sample",
  "truncate",
  "adapter_id",
  "return_full_text",
  "keep_alive",
  "options",
  "think",
  "format",
  "raw",
  "images",
  "template",
  "context",
  "system",
  "_debug_render_only",
] as const;
type ForeignField = (typeof FOREIGN_FIELDS)[number];

/**
 * The request kinds that read the table: chat and Responses render messages through a template and
 * separate thinking from the answer; a completion's prompt is used as sent and its text is returned
 * as generated.
 */
export type ForeignKind = "chat" | "completion" | "responses";

/** Why each field is refused when it asks for more than its neutral value. */
function neutralValues(body: Record<string, unknown>, kind: ForeignKind): Record<ForeignField, [Neutral, string]> {
  const templated = kind !== "completion";
  // Prompt log probabilities exist here only as legacy completions' echo; each route says where.
  const noPrompt =
    templated
      ? "returns prompt log probabilities, which chat requests here do not (use /v1/completions with echo and logprobs)"
      : "is not supported: prompt log probabilities come with echo and logprobs (the echoed prompt's tokens lead the logprobs)";
  // Template switches mean nothing to a text prompt, which is used as sent.
  const noTemplate = "applies to chat templates; a completion prompt is used as sent";
  return {
    // vLLM
    use_beam_search: [is(false), "is not supported: no beam search here"],
    length_penalty: [is(1), "applies to beam search, which is not done here"],
    min_tokens: [is(0), "is not supported; use ignore_eos to run to max_tokens"],
    stop_token_ids: [isEmpty, "is not supported; stop on text with stop"],
    bad_words: [isEmpty, "is not supported; ban tokens with logit_bias"],
    allowed_token_ids: [isNull, "is not supported; shape the answer with a JSON schema, guided_regex or guided_choice"],
    prompt_logprobs: [isNull, noPrompt],
    include_stop_str_in_output: [is(false), "is not supported: the answer ends before the stop string"],
    skip_special_tokens: [is(true), "is not supported: special tokens are never part of the text"],
    spaces_between_special_tokens: [is(true), "is not supported: special tokens are never part of the text"],
    truncate_prompt_tokens: [isNull, "is not supported: a prompt longer than the context is a 400, never cut"],
    logits_processors: [isNull, "is not supported"],
    // With messages these two are read against the conversation (see `templateSwitches`).
    add_generation_prompt: templated ? [() => true, ""] : [is(true), noTemplate],
    continue_final_message: templated ? [() => true, ""] : [is(false), noTemplate],
    // Chat templates place their own special tokens; a text completion gets the model's BOS.
    add_special_tokens: templated ? [is(false), "is not supported on chat requests: the template places the special tokens"] : [is(true), "is not supported: a text prompt always gets the model's BOS token (send token ids to choose)"],
    chat_template: [isNull, "is not supported: the model's own template (or --chat-wrapper) renders the prompt"],
    documents: [isNull, "is not supported by the chat templates here"],
    return_tokens_as_token_ids: [is(false), "is not supported"],
    return_token_ids: [is(false), "is not supported"],
    // llama-server
    n_probs: [is(0), "is not supported; use logprobs and top_logprobs"],
    // Text llama-server writes before the closing marker it forces at the end of a thinking budget.
    reasoning_budget_message: [(v) => v == null || v === "", "is not supported: a thinking budget ends with the closing marker alone"],
    // llama.cpp's adaptive-p sampler, off while its target is negative (its default).
    adaptive_target: [(v) => v == null || (typeof v === "number" && v < 0), "is not supported: no adaptive-p sampling here"],
    adaptive_decay: [whenOff(body, "adaptive_target", (v) => v == null || (typeof v === "number" && v < 0)), "applies to adaptive-p sampling, which is not done here"],
    mirostat: [is(0), "is not supported: no mirostat sampling here"],
    mirostat_tau: [whenOff(body, "mirostat", is(0)), "applies to mirostat sampling, which is not done here"],
    mirostat_eta: [whenOff(body, "mirostat", is(0)), "applies to mirostat sampling, which is not done here"],
    typical_p: [is(1), "is not supported: no typical sampling here"],
    // The name llama-server's web UI sends typical_p under (and its sampler's name in `samplers`).
    typ_p: [is(1), "is not supported: no typical sampling here"],
    tfs_z: [is(1), "is not supported: no tail-free sampling here"],
    dynatemp_range: [is(0), "is not supported: no dynamic temperature here"],
    dynatemp_exponent: [whenOff(body, "dynatemp_range", is(0)), "applies to dynamic temperature, which is not done here"],
    dry_multiplier: [is(0), "is not supported: no DRY sampling here"],
    dry_base: [whenOff(body, "dry_multiplier", is(0)), "applies to DRY sampling, which is not done here"],
    dry_allowed_length: [whenOff(body, "dry_multiplier", is(0)), "applies to DRY sampling, which is not done here"],
    dry_penalty_last_n: [whenOff(body, "dry_multiplier", is(0)), "applies to DRY sampling, which is not done here"],
    dry_sequence_breakers: [whenOff(body, "dry_multiplier", is(0)), "applies to DRY sampling, which is not done here"],
    xtc_probability: [is(0), "is not supported: no XTC sampling here"],
    xtc_threshold: [whenOff(body, "xtc_probability", is(0)), "applies to XTC sampling, which is not done here"],
    top_n_sigma: [atMost(0), "is not supported: no top-n-sigma sampling here"],
    // llama.cpp's default window; a repetition penalty of 1 reads no window at all.
    repeat_last_n: [(v) => v == null || v === 64 || (body.repeat_penalty ?? body.repetition_penalty ?? 1) === 1, "is supported only as 64 (llama.cpp's default window)"],
    penalize_nl: [is(false), "is not supported"],
    post_sampling_probs: [is(false), "is not supported; logprobs are before truncation"],
    n_cmpl: [is(1), "is not supported; use n"],
    lora: [isEmpty, "is not supported: no LoRA adapters here"],
    t_max_predict_ms: [atMost(0), "is not supported; bound the answer with max_tokens"],
    // Accepted as they are: they change nothing about the answer here.
    samplers: [isStrings, "must be a string or a list of strings"],
    // Where llama-server runs its samplers (on the accelerator or the CPU), not what they give; its web
    // UI sends it on every request.
    backend_sampling: [(v) => v == null || typeof v === "boolean", "must be a boolean"],
    id_slot: [isInt, "must be an integer"],
    n_keep: [isInt, "must be an integer"],
    // What a context shift discards; no context is shifted here (a prompt past it is a 400).
    n_discard: [isCount, "must be an integer of at least 0"],
    // llama-server's lazy grammars, set from a template's tool-call format; at their defaults they ask for nothing.
    grammar_lazy: [is(false), "is not supported: grammars here apply from the answer's first token"],
    preserved_tokens: [isEmpty, "is not supported: a template's special tokens are read as the template's tool format says"],
    grammar_triggers: [isEmpty, "is not supported: grammars here apply from the answer's first token"],
    n_indent: [is(0), "is not supported"],
    // Honoured on chat and completions (see `ForeignSettings.timings` and `promptProgress`).
    timings_per_token: kind === "responses" ? [is(false), "is not supported on the Responses API: its events carry no timings"] : [isBoolean, "must be a boolean"],
    return_progress: kind === "responses" ? [is(false), "is not supported on the Responses API: its stream sends no prompt-progress events"] : [isBoolean, "must be a boolean"],
    verbose: [is(false), "is not supported: answers carry no __verbose debug field (POST /tokenize with the messages shows the rendered prompt's tokens)"],
    priority: [isInt, "must be an integer"],
    request_id: [isString, "must be a string"],
    // vLLM, later releases
    // Thinking goes to reasoning_content, as vLLM's default; `false` is honoured by the chat route
    // (see `ForeignSettings.dropReasoning`). A completion's text is never split, and a response's
    // reasoning item is what a later turn continues from.
    include_reasoning:
      kind === "chat"
        ? [(v) => v == null || typeof v === "boolean", "must be a boolean"]
        : [is(true), kind === "completion" ? "applies to chat answers; a completion's text is returned as generated" : "is supported only as true: the reasoning item is part of the output"],
    logprob_token_ids: [isEmpty, "is not supported; logprobs list the likeliest tokens (top_logprobs)"],
    // The side a cut prompt loses; nothing is cut unless truncate_prompt_tokens asks, which is refused.
    truncation_side: [whenOff(body, "truncate_prompt_tokens", isNull), "applies to truncate_prompt_tokens, which is not supported"],
    kv_transfer_params: [isNull, "is not supported: no disaggregated prefill here"],
    vllm_xargs: [isEmptyObject, "is not supported: no custom logits processors run here"],
    mm_processor_kwargs: [isEmptyObject, "is not supported: images are passed to the model as sent"],
    media_io_kwargs: [isEmptyObject, "is not supported: images are passed to the model as sent"],
    prompt_embeds: [isNull, "is not supported: prompts are text or token ids"],
    // llama-server
    // "deepseek" (and "auto", which picks it): thinking in reasoning_content, as here. A completion's
    // text is returned unparsed, which is "none".
    reasoning_format: templated
      ? [oneOf("auto", "deepseek"), "is supported only as 'deepseek' or 'auto': thinking is returned in reasoning_content, never in content"]
      : [oneOf("none"), "applies to chat answers; a completion's text is returned unparsed ('none')"],
    // llama-server arms a sampler that its control endpoint can later tell to end the thinking; until
    // told, it changes nothing. Its web UI sends `true` on every request. Plinth has no such endpoint
    // (end a stream by disconnecting), so the answer is what it would be without the switch.
    reasoning_control: [(v) => v == null || typeof v === "boolean", "must be a boolean"],
    // llama-server sets it from the template, over whatever the request says; so does Plinth.
    thinking_forced_open: [(v) => v == null || typeof v === "boolean", "must be a boolean"],
    parse_tool_calls: [templated ? is(true) : isNull, templated ? "is not supported: calls are always read out of the answer when tools are offered" : "applies to chat answers with tools"],
    response_fields: [isEmpty, "is not supported: answers have the dialect's own fields"],
    return_tokens: [is(false), "is not supported: answers carry text, not token ids"],
    // Every sampler keeps one token at least anyway.
    min_keep: [atMost(1), "is not supported: truncation samplers keep what their own threshold keeps"],
    n_cache_reuse: [is(0), "is not supported: cached prefixes are reused as they stand, never shifted into place"],
    // Seconds of silence after which a chat or completions stream gets a comment line (`:`); 0 and
    // -1 send none. A Responses stream (replayed from storage too) sends none.
    sse_ping_interval:
      kind === "responses"
        ? [atMost(0), "is not supported on the Responses API: no keep-alive events are sent on its streams"]
        : [(v) => v == null || (Number.isInteger(v) && (v as number) >= -1 && (v as number) <= 2_147_483), "must be an integer number of seconds, at least -1 (0 or -1: no pings)"],
    // SGLang (its structured-output `regex` and `ebnf` are read with the others of their kind)
    stop_regex: [isEmpty, "is not supported; stop on text with stop"],
    no_stop_trim: [is(false), "is not supported: the answer ends before the stop string"],
    // false (thinking left in the content) is read against the model once it is known: a model
    // with no thinking section has nothing to separate, so false is what happens anyway
    // (refuseInlineReasoning). A completion's text is never separated, whatever the value.
    separate_reasoning: [isBoolean, "must be a boolean"],
    // false (thinking sent in one piece once it ends) is read with the model, as separate_reasoning
    // is: without thinking, or without a stream, there is nothing to hold back (refuseInlineReasoning).
    stream_reasoning: [isBoolean, "must be a boolean"],
    lora_path: [isEmpty, "is not supported: no LoRA adapters here"],
    session_id: [isNull, "is not supported: no sessions here; send the whole conversation (its prefix comes from the prompt cache)"],
    session_params: [isNull, "is not supported: no sessions here; send the whole conversation (its prefix comes from the prompt cache)"],
    custom_logit_processor: [isEmpty, "is not supported: no custom logits processors run here"],
    custom_params: [isEmptyObject, "is not supported: no custom logits processors run here"],
    return_hidden_states: [is(false), "is not supported: no hidden states are returned"],
    return_routed_experts: [is(false), "is not supported: no expert routing is returned"],
    routed_experts_start_len: [whenOff(body, "return_routed_experts", is(false)), "applies to return_routed_experts, which is not supported"],
    return_cached_tokens_details: [is(false), "is not supported: cached tokens are counted in usage.prompt_tokens_details.cached_tokens"],
    return_prompt_token_ids: [is(false), "is not supported: answers carry text, not token ids (POST /tokenize gives a prompt's tokens)"],
    return_meta_info: [is(false), "is not supported: answers have the dialect's own fields"],
    task: [isNull, "is not supported by the chat templates here"],
    input_ids: [isNull, templated ? "is not supported on chat requests: the template renders the messages (send token ids as a /v1/completions prompt)" : "is not supported; send token ids as the prompt"],
    max_dynamic_patch: [isNull, "is not supported: images are passed to the model as sent"],
    min_dynamic_patch: [isNull, "is not supported: images are passed to the model as sent"],
    use_audio_in_video: [is(false), "is not supported: no audio or video input here"],
    images_config: [isEmptyObject, "is not supported: images are passed to the model as sent"],
    bootstrap_host: [isNull, "is not supported: no disaggregated prefill here"],
    bootstrap_port: [isNull, "is not supported: no disaggregated prefill here"],
    bootstrap_room: [isNull, "is not supported: no disaggregated prefill here"],
    custom_labels: [isEmptyObject, "is not supported: metrics carry no labels of the request's"],
    // Labels and placement hints for SGLang's own scheduling: nothing about the answer changes.
    rid: [isStrings, "must be a string or a list of strings"],
    extra_key: [isString, "must be a string"],
    ngram_corpus_id: [isString, "must be a string"],
    routed_dp_rank: [isCount, "must be an integer of at least 0"],
    disagg_prefill_dp_rank: [isCount, "must be an integer of at least 0"],
    data_parallel_rank: [isCount, "must be an integer of at least 0"],
    // text-generation-inference
    tool_prompt: [isNull, "is not supported: tools are described the way the model's chat template describes them"],
    guideline: [isNull, "is not supported by the chat templates here"],
    top_n_tokens: [atMost(0), templated ? "is not supported; use logprobs and top_logprobs" : "is not supported; use logprobs"],
    decoder_input_details: [is(false), "is not supported: prompt log probabilities come with /v1/completions echo and logprobs"],
    details: [is(false), "is not supported: answers have the dialect's own fields"],
    watermark: [is(false), "is not supported: no watermarking here"],
    // Greedy decoding is temperature 0 here; the two must say the same.
    do_sample: [(v) => v == null || v === ((body.temperature ?? 1) !== 0), "must agree with temperature: false is greedy decoding, which is temperature: 0 here"],
    truncate: [(v) => v == null || v === false, "is not supported: a prompt longer than the context is a 400, never cut"],
    adapter_id: [isNull, "is not supported: no LoRA adapters here"],
    return_full_text: [is(false), templated ? "is not supported: the answer holds the new message only" : "is not supported; use echo"],
    // Ollama (its own routes' fields)
    keep_alive: [isDuration, "must be a duration (a string such as \"5m\", or seconds)"],
    options: [isEmptyObject, "is not supported: send the sampling settings as the request's own fields"],
    think: [isNull, templated ? "is not supported; turn thinking on or off with reasoning_effort or chat_template_kwargs.enable_thinking" : "applies to chat answers"],
    format: [isNull, templated ? "is not supported; use response_format" : "is not supported: completions take no grammar here"],
    raw: [is(false), templated ? "is not supported: messages are rendered by the model's chat template (send a raw prompt to /v1/completions)" : "is not supported: a completion prompt is used as sent anyway"],
    images: [isEmpty, "is not supported; send images as image_url content parts"],
    template: [isNull, "is not supported: the model's own template (or --chat-wrapper) renders the prompt"],
    context: [isEmpty, "is not supported: send the conversation (its prefix comes from the prompt cache)"],
    system: [isNull, templated ? "is not supported; send a system message" : "is not supported: a completion prompt is used as sent"],
    _debug_render_only: [is(false), "is not supported; POST /tokenize with the messages shows the rendered prompt's tokens"],
  };
}

/**
 * vLLM's template switches, where a conversation is rendered: a last assistant message is always
 * continued as it stands (prefill), any other conversation gets the assistant turn opened. The
 * switches are taken where they ask for that rendering and refused where they ask for the other.
 * Chat, Responses and /tokenize all read them here.
 */
export function templateSwitches(lastRole: string | undefined, addGenerationPrompt: unknown, continueFinalMessage: unknown): void {
  const continues = lastRole === "assistant";
  for (const [field, value] of [["add_generation_prompt", addGenerationPrompt], ["continue_final_message", continueFinalMessage]] as const) {
    if (value != null && typeof value !== "boolean") throw badRequest(`${field} must be a boolean.`, field);
  }
  // vLLM refuses the pair: one closes the last message and opens a new turn, the other continues it.
  if (continueFinalMessage === true && addGenerationPrompt === true)
    throw badRequest("add_generation_prompt and continue_final_message cannot both be true: the first opens a new assistant turn, the second continues the last message (send add_generation_prompt: false, or leave it out).", "add_generation_prompt");
  if (continueFinalMessage === true && !continues)
    throw unsupportedField("continue_final_message", "needs a last assistant message to continue");
  if (continueFinalMessage === false && continues)
    throw unsupportedField("continue_final_message", "is not supported: a last assistant message is always continued (prefill)");
  if (addGenerationPrompt === false && !continues)
    throw unsupportedField("add_generation_prompt", "is not supported: the assistant turn is always opened (send a last assistant message to continue it)");
  if (addGenerationPrompt === true && continues && continueFinalMessage !== true)
    throw unsupportedField("add_generation_prompt", "is not supported after a last assistant message, which is continued, not closed (leave it out, or send add_generation_prompt: false with continue_final_message: true)");
}

const anyValue = z.unknown().optional();

/** The fields as the schema declares them: any JSON value, read by `foreignFields`. */
/** OpenRouter's `usage: { include }` on chat and completions: a strict object, so a misspelt key is named. */
export const openRouterUsage = z.strictObject({ include: z.boolean().optional() }).nullish();

/**
 * An answer's token budget (`max_tokens`, `max_completion_tokens`): at least `min`, or -1, which
 * llama-server (whose `n_predict` both are aliases of) reads as no limit but the context, the same
 * as leaving the field out. Its web UI sends -1 when no limit is set.
 */
export const budgetSchema = (min: number) =>
  z.int().refine((v) => v >= min || v === -1, {
    error: (issue) => `is ${String(issue.input)}; it must be at least ${min}, or -1 (no limit: up to the end of the context, as llama-server reads it).`,
  });

/** A budget as the request asked it: -1 (no limit) is the same as none. */
export const budgetOrNone = (budget: number | null | undefined): number | undefined => (budget == null || budget === -1 ? undefined : budget);

export const foreignFieldsSchema = {
  ...(Object.fromEntries(FOREIGN_FIELDS.map((k) => [k, anyValue])) as { [K in ForeignField]: typeof anyValue }),
  ignore_eos: z.boolean().nullish(),
  n_predict: z.int().min(-1).nullish(),
  repeat_penalty: z.number().gt(0).max(10).nullish(),
  // vLLM's thinking budget: the same budget as `reasoning: {budget_tokens}`; -1 is its "no budget".
  thinking_token_budget: z.int().min(-1).nullish(),
  // llama-server's names for it (the second an alias of the first); -1 is its "no budget".
  reasoning_budget_tokens: z.int().min(-1).nullish(),
  thinking_budget_tokens: z.int().min(-1).nullish(),
};

export interface ForeignSettings {
  ignoreEos: boolean;
  /** llama-server's budget, when the request gave no OpenAI one. */
  maxTokens?: number;
  /** llama-server's `n_predict: -1`: no budget but the context. */
  noLimit?: boolean;
  repetitionPenalty?: number;
  /** vLLM's `thinking_token_budget` or llama-server's budget (chat and Responses). */
  thinkingBudget?: number;
  /** The field `thinkingBudget` came in, for errors about it. */
  thinkingBudgetParam?: string;
  /** vLLM's `include_reasoning: false`: the thinking is generated and counted, but not returned. */
  dropReasoning?: boolean;
  /** llama-server's `timings_per_token: true`: `timings` on every chunk and on the answer. */
  timings?: boolean;
  /** llama-server's `return_progress: true` on a stream: prompt-progress chunks before the first output. */
  promptProgress?: boolean;
}

/**
 * Refuses the fields that ask for what Plinth does not do, and returns what the honoured ones ask
 * for. `budget` and `penalty` are the OpenAI-style fields the request also set, which must agree
 * with their llama-server names.
 */
export function foreignFields(
  body: Record<string, unknown>,
  kind: ForeignKind,
  budget: number | null | undefined,
  penalty: number | null | undefined,
  /** The field `budget` came in (max_tokens or max_completion_tokens), for the message. */
  budgetName = "max_tokens",
  /** The role of the conversation's last message (chat and Responses), for the template switches. */
  lastRole?: string,
): ForeignSettings {
  for (const [field, [neutral, why]] of Object.entries(neutralValues(body, kind))) {
    if (neutral(body[field])) continue;
    // "must be …": a value of the wrong type, not a feature this server lacks.
    throw why.startsWith("must ") ? badRequest(`'${field}' ${why}.`, field, "invalid_value") : unsupportedField(field, why);
  }
  if (kind !== "completion") templateSwitches(lastRole, body.add_generation_prompt, body.continue_final_message);
  // vLLM's chat `echo` repeats the last message in the answer; a completion's echo is its own field.
  if (kind === "chat" && !is(false)(body.echo))
    throw unsupportedField("echo", "is not supported on chat requests: the answer holds the new message only");
  const [thinkingParam, thinking] = thinkingBudget(body);
  if (thinking != null && kind === "completion")
    throw unsupportedField(thinkingParam, "applies to chat answers; a completion's text is not split into thinking and answer");
  // OpenRouter's reasoning.exclude says what include_reasoning: false says; the two must agree.
  const excluded = kind === "chat" && (body.reasoning as { exclude?: unknown } | null | undefined)?.exclude === true;
  if (excluded && body.include_reasoning === true)
    throw badRequest("reasoning.exclude and include_reasoning disagree; send one of them.", "reasoning.exclude");
  const nPredict = body.n_predict as number | null | undefined;
  if (nPredict != null && budget != null && nPredict !== budget)
    throw badRequest(`n_predict and ${budgetName} disagree; send one of them.`, "n_predict");
  const repeat = body.repeat_penalty as number | null | undefined;
  if (repeat != null && penalty != null && repeat !== penalty)
    throw badRequest("repeat_penalty and repetition_penalty disagree; send one of them.", "repeat_penalty");
  return {
    ignoreEos: body.ignore_eos === true,
    ...(nPredict != null && nPredict >= 0 && budget == null ? { maxTokens: nPredict } : {}),
    ...(nPredict === -1 && budget == null ? { noLimit: true } : {}),
    ...(repeat != null ? { repetitionPenalty: repeat } : {}),
    ...(thinking != null ? { thinkingBudget: thinking, thinkingBudgetParam: thinkingParam } : {}),
    ...(kind === "chat" && (body.include_reasoning === false || excluded) ? { dropReasoning: true } : {}),
    ...(kind !== "responses" && body.timings_per_token === true ? { timings: true } : {}),
    // Without a stream there is no chunk to report progress in: llama-server then sends none either.
    ...(kind !== "responses" && body.return_progress === true && body.stream === true ? { promptProgress: true } : {}),
  };
}

/** llama-server's `sse_ping_interval` on a stream, in milliseconds; undefined where no pings are asked. */
export function pingIntervalMs(body: { stream?: boolean | null; sse_ping_interval?: unknown }): number | undefined {
  const seconds = body.sse_ping_interval;
  return body.stream === true && typeof seconds === "number" && seconds > 0 ? seconds * 1000 : undefined;
}

/**
 * SGLang's `separate_reasoning: false` on a chat or Responses request asks for the thinking inside
 * the content. Here thinking always goes to its own field, so that is refused on a model that
 * thinks (or may: its engine not loaded, so not known); on a model with no thinking section, or a
 * request that turns thinking off, there is nothing to separate, and the answer is what false asks
 * for. An unknown model is left to its 404. Its `stream_reasoning: false` (a stream's thinking sent
 * in one piece at its end) is read the same way, and changes nothing on a request not streamed.
 */
export function refuseInlineReasoning(
  body: Record<string, unknown>,
  model: { engine?: { describe(): { reasoning?: boolean } } } | undefined,
  reasoning: GenerationRequest["reasoning"],
): void {
  if (model === undefined || asksNoThinking(reasoning) || model.engine?.describe().reasoning === false) return;
  if (body.separate_reasoning === false)
    throw unsupportedField("separate_reasoning", "is supported only as true on a model that thinks: its thinking is returned apart from the answer, never in it");
  // SGLang's stream_reasoning: false holds a stream's thinking back until it ends; only a stream of a
  // model that thinks has any to hold.
  if (body.stream_reasoning === false && body.stream === true)
    throw unsupportedField("stream_reasoning", "is supported only as true on a stream of a model that thinks: thinking streams as it is generated");
}

/**
 * The thinking budget under vLLM's name or llama-server's two (`thinking_budget_tokens` is what its
 * chat route reads when `reasoning_budget_tokens` is absent), with the field it came in. -1 is no
 * budget in both servers (vLLM reads it as None), as if absent. Its 0 ends the thinking before it starts; that is not taken here,
 * where turning thinking off is a switch of the template's, not a budget.
 */
function thinkingBudget(body: Record<string, unknown>): [string, number | undefined] {
  const given = (["thinking_token_budget", "reasoning_budget_tokens", "thinking_budget_tokens"] as const)
    .map((field) => [field, body[field] as number | null | undefined] as const)
    .filter((entry): entry is readonly [(typeof entry)[0], number] => entry[1] != null && entry[1] !== -1);
  if (given.length === 0) return ["thinking_token_budget", undefined];
  const [[field, value], ...others] = given;
  const other = others.find(([, v]) => v !== value);
  if (other) throw badRequest(`${field} and ${other[0]} disagree; send one of them.`, other[0]);
  if (value === 0)
    throw unsupportedField(field, "is not supported as 0; turn thinking off with reasoning_effort: 'none' or chat_template_kwargs.enable_thinking: false");
  return [field, value];
}
