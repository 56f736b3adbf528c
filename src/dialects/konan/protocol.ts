import { z } from "zod";
import { badRequest } from "../../core/errors.ts";
import { messageList, openAiResponseFormat, toolChoice } from "../openai/chat-protocol.ts";
import { metadataSchema } from "../openai/metadata.ts";
import { logitBiasSchema, seedSchema } from "../openai/sampling-fields.ts";
import { boundedStop } from "../stop-field.ts";
import { sdkMessageEchoes } from "../sdk-echo-fields.ts";
import { functionParameters } from "../function-parameters.ts";
import { listOf } from "../list-of.ts";
import { type FieldHints, strictTopLevel } from "../unknown-fields.ts";

/**
 * Wire schema of Konan's POST /v3/chat/completions: the fields its reference documents, with its
 * ranges, and the OpenAI fields its chat route can run as OpenAI's does (see parseKonanChat).
 * Any other key is a 400 naming it: a field taken and not acted on would change nothing without a word.
 */

// A message holds its role and string content, nothing else: a `name` or an assistant's `tool_calls`
// would otherwise be dropped without a word, so they are 400s naming the key. An assistant's
// `reasoning_content` is the exception: Plinth's own answers carry it, and a client that appends the
// answer to its history sends it back. Earlier turns' thinking is never shown to the model again (on
// any dialect), so it is accepted and not read.
const message = z.discriminatedUnion("role", [
  z.strictObject({ role: z.literal("system"), content: z.string() }),
  z.strictObject({ role: z.literal("user"), content: z.string() }),
  z.strictObject({ role: z.literal("assistant"), content: z.string(), reasoning_content: z.string().nullish(), ...sdkMessageEchoes }),
]);

// Strict: a misspelt `budget_tokens` would otherwise read as `{}` (thinking on, no budget).
export const konanReasoning = z.strictObject({
  effort: z.enum(["low", "medium", "high"]).nullish(),
  budget_tokens: z.int().min(1).nullish(),
});

export const konanChatRequest = z.object({
  model: z.string().min(1),
  messages: messageList(message),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  max_completion_tokens: z.int().min(1).nullish(),
  // Not in Konan's reference, but what OpenAI clients (the AI SDK, older LangChain) send for the cap:
  // dropped, it would leave their requests to run to the end of the context. Taken as an alias.
  max_tokens: z.int().min(1).nullish(),
  metadata: metadataSchema.nullish(),
  output_parser: z.enum(["responses"]).nullish(),
  reasoning: konanReasoning.nullish(),
  repetition_penalty: z.number().min(0).max(2).nullish(),
  response_format: openAiResponseFormat.nullish(),
  seed: seedSchema().nullish(),
  stop: boundedStop.nullish(),
  stream: z.boolean().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  tools: listOf(
    // Strict at both levels: a misspelt or misplaced key (`strcit`, a `strict` beside `function`)
    // would otherwise be dropped without a word.
    z.strictObject({
      type: z.literal("function"),
      function: z.strictObject({
        name: z.string().min(1),
        description: z.string().optional(),
        parameters: functionParameters().optional(),
        strict: z.boolean().nullish(),
      }),
    }),
  ).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  user: z.string().nullish(),
  // OpenAI's, not in Konan's reference: run as OpenAI's chat route runs them.
  presence_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: logitBiasSchema().nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  // OpenAI's, with only the value Konan's answer can carry: one choice, no logprobs.
  n: z.int().nullish().refine((v) => v == null || v === 1, "Konan's answer has one choice, so n may only be 1 (/v1/chat/completions takes more)"),
  logprobs: z.boolean().nullish().refine((v) => v !== true, "Konan's answer has no logprobs (/v1/chat/completions gives them)"),
  top_logprobs: z.int().min(0).max(20).nullish().refine((v) => !v, "Konan's answer has no logprobs (/v1/chat/completions gives them)"),
  // Konan's streams always end with usage on their last chunk, so `include_usage` is met either way.
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullish(),
});
export type KonanChatRequest = z.infer<typeof konanChatRequest>;

/** The completion cap: `max_completion_tokens`, or OpenAI's older `max_tokens` for it; two different caps are a 400. */
export function konanCompletionCap(body: Pick<KonanChatRequest, "max_completion_tokens" | "max_tokens">): number | null {
  const { max_completion_tokens: cap, max_tokens: alias } = body;
  if (cap != null && alias != null && cap !== alias)
    throw badRequest("max_tokens and max_completion_tokens set different caps; send max_completion_tokens alone.", "max_tokens");
  return cap ?? alias ?? null;
}

/** Fields of other APIs sent to Konan, and what it takes instead. */
const KONAN_HINTS: FieldHints = {
  reasoning_effort: "Konan takes 'reasoning': {\"effort\": …} or {\"budget_tokens\": …}.",
  max_output_tokens: "Konan takes 'max_completion_tokens'.",
  input: "Konan takes 'messages'.",
  prompt: "Konan takes 'messages'.",
};

/** The body as Konan reads it: an unknown top-level key is a 400 naming it. */
export const parseKonanChat = strictTopLevel(konanChatRequest, KONAN_HINTS);
