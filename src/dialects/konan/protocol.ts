import { z } from "zod";
import { messageList, openAiResponseFormat } from "../openai/chat-protocol.ts";
import { metadataSchema } from "../openai/metadata.ts";
import { boundedStop } from "../stop-field.ts";
import { functionParameters } from "../function-parameters.ts";

/**
 * Wire schema of Konan's POST /v3/chat/completions: the fields its reference documents, with its
 * ranges. Fields it does not document (n, logprobs, presence_penalty, tool_choice, …) are dropped,
 * as the OpenAI schema drops unknown fields.
 */

// A message holds its role and string content, nothing else: a `name`, an assistant's `tool_calls` or
// `reasoning_content` would otherwise be dropped without a word, so they are 400s naming the key.
const message = z.discriminatedUnion("role", [
  z.strictObject({ role: z.literal("system"), content: z.string() }),
  z.strictObject({ role: z.literal("user"), content: z.string() }),
  z.strictObject({ role: z.literal("assistant"), content: z.string() }),
]);

export const konanReasoning = z.object({
  effort: z.enum(["low", "medium", "high"]).nullish(),
  budget_tokens: z.int().min(1).nullish(),
});

export const konanChatRequest = z.object({
  model: z.string().min(1),
  messages: messageList(message),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  max_completion_tokens: z.int().min(1).nullish(),
  metadata: metadataSchema.nullish(),
  output_parser: z.enum(["responses"]).nullish(),
  reasoning: konanReasoning.nullish(),
  repetition_penalty: z.number().min(0).max(2).nullish(),
  response_format: openAiResponseFormat.nullish(),
  seed: z.int().nullish(),
  stop: boundedStop.nullish(),
  stream: z.boolean().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  tools: z
    .array(
      z.object({
        type: z.literal("function"),
        function: z.object({
          name: z.string().min(1),
          description: z.string().optional(),
          parameters: functionParameters().optional(),
          strict: z.boolean().nullish(),
        }),
      }),
    )
    .nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  user: z.string().nullish(),
});
export type KonanChatRequest = z.infer<typeof konanChatRequest>;
