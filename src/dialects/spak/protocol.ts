import { z } from "zod";
import { functionTools, messageList, toolChoice } from "../openai/chat-protocol.ts";
import { listOf } from "../list-of.ts";
import { sdkFunctionEchoes, sdkMessageEchoes } from "../sdk-echo-fields.ts";
import { logitBiasSchema, seedSchema } from "../openai/sampling-fields.ts";
import { type FieldHints, strictTopLevel } from "../unknown-fields.ts";

/**
 * Wire schema of SpAk-Aster's POST /chat/completions (DeepSeek style). Limits the document states are
 * enforced here (a 400 naming the field). Of the fields it does not list, OpenAI's that this route can
 * run are run (`seed`, `logit_bias`, `user`, `n` of 1); any other key is a 400 naming it
 * (parseSpakChat): a field taken and not acted on would change nothing without a word.
 */

// Messages, their text parts and tool calls are strict, as the body is: a key none of them defines
// is a 400 naming it (`messages[0].foo`) rather than dropped. Taken besides the document's keys:
// what clients send back from an answer (the openai SDK's `refusal: null` and `parsed`, a call's
// `function.parsed_arguments` and `index`), a tool message's `name` (LangChain, LlamaIndex; the call
// id already says which call it answers) and DeepSeek's `prefix` (below). None of them is read.
const textPart = z.strictObject({ type: z.literal("text"), text: z.string() });
/** Only the system message's schema is printed: `content` is a string. */
const systemMessage = z.strictObject({ role: z.literal("system"), content: z.string(), name: z.string().nullish() });
const userMessage = z.strictObject({
  role: z.literal("user"),
  content: z.union([z.string(), listOf(textPart, { min: 1 })]),
  name: z.string().nullish(),
});
const toolCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.strictObject({ name: z.string().min(1), arguments: z.string(), ...sdkFunctionEchoes }),
  index: z.int().min(0).nullish(),
});
const assistantMessage = z.strictObject({
  role: z.literal("assistant"),
  content: z.union([z.string(), listOf(textPart)]).nullish(),
  name: z.string().nullish(),
  /** Earlier thinking, sent back by clients that echo whole messages; not shown to the model again. */
  reasoning_content: z.string().nullish(),
  tool_calls: listOf(toolCall).nullish(),
  /**
   * DeepSeek's chat prefix completion: the last message, an assistant's, is the start of the answer
   * to continue. Plinth continues a trailing assistant message anyway, so `true` there is taken;
   * on an earlier message it is a 400 (spak/to-canonical.ts).
   */
  prefix: z.boolean().nullish(),
  ...sdkMessageEchoes,
});
const toolMessage = z.strictObject({
  role: z.literal("tool"),
  content: z.union([z.string(), listOf(textPart, { min: 1 })]),
  tool_call_id: z.string().min(1),
  name: z.string().nullish(),
});

export const spakMessage = z.discriminatedUnion("role", [systemMessage, userMessage, assistantMessage, toolMessage]);
export type SpakMessage = z.infer<typeof spakMessage>;

/** The one value the API's `model` takes (an enum of one): the operator serves a model under this name. */
export const SPAK_MODEL = "SpAk-Aster-V1-MOE";
export const USER_ID = /^[A-Za-z0-9_-]{1,512}$/;

export const spakChatRequest = z.object({
  messages: messageList(spakMessage),
  model: z.string().min(1),
  // Strict, as stream_options: a misspelt `type` left thinking on without a word.
  thinking: z.strictObject({ type: z.enum(["enabled", "disabled"]).optional() }).nullish(),
  /** `high` and `max`; `low`/`medium` are taken as `high` and `xhigh` as `max`, for compatibility. */
  reasoning_effort: z.enum(["low", "medium", "high", "xhigh", "max"]).nullish(),
  max_tokens: z.int().min(1).nullish(),
  // Not in the reference, but what newer OpenAI clients (langchain-openai among them) send for the
  // cap: dropped, it would leave their answers to run to the end of the context. Taken as an alias.
  max_completion_tokens: z.int().min(1).nullish(),
  response_format: z.strictObject({ type: z.enum(["text", "json_object"]) }).nullish(),
  stop: z.union([z.string(), listOf(z.string(), { max: 16 })]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  tools: functionTools.nullish(),
  tool_choice: toolChoice.nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  user_id: z.string().regex(USER_ID, "user_id is 1 to 512 letters, digits, '_' or '-'").nullish(),
  /** Deprecated by the vendor: accepted, whatever the value, and without effect. */
  frequency_penalty: z.unknown().optional(),
  presence_penalty: z.unknown().optional(),
  // OpenAI's, not in the document: run as OpenAI's chat route runs them.
  seed: seedSchema().nullish(),
  logit_bias: logitBiasSchema().nullish(),
  /** OpenAI's end-user id: the prompt cache's isolation, as user_id is (which wins when both are sent). */
  user: z.string().nullish(),
  n: z.int().nullish().refine((v) => v == null || v === 1, "This API answers one choice, so n may only be 1"),
});
export type SpakChatRequest = z.infer<typeof spakChatRequest>;

/** Fields of other APIs sent here, and what this one takes instead. */
const SPAK_HINTS: FieldHints = {
  reasoning: "This API takes 'thinking': {\"type\": \"enabled\" | \"disabled\"} and 'reasoning_effort'.",
  max_output_tokens: "This API takes 'max_tokens'.",
  enable_thinking: "This API takes 'thinking': {\"type\": \"enabled\" | \"disabled\"}.",
};

/** The body as this API reads it: an unknown top-level key is a 400 naming it. */
export const parseSpakChat = strictTopLevel(spakChatRequest, SPAK_HINTS);
