import { z } from "zod";
import { samplingFieldsSchema } from "./sampling-fields.ts";
import { budgetSchema, foreignFieldsSchema, openRouterUsage } from "./foreign-fields.ts";
import { structuredFieldsSchema } from "./structured-fields.ts";
import { listOf } from "../list-of.ts";

/** Wire schema of POST /v1/completions (OpenAI's legacy text completions). */

const tokenIds = listOf(z.int().min(0), { min: 1 });

export const completionRequest = z.object({
  model: z.string().min(1),
  prompt: z.union([
    z.string(),
    listOf(z.string(), { min: 1, max: 2048 }),
    tokenIds,
    listOf(tokenIds, { min: 1, max: 2048 }),
  ]),
  suffix: z.string().nullish(),
  max_tokens: budgetSchema(0).nullish(),
  ...samplingFieldsSchema,
  best_of: z.int().min(1).nullish(),
  echo: z.boolean().nullish(),
  // OpenAI caps this at 5; vLLM and Plinth allow up to 20.
  logprobs: z.int().min(0).max(20).nullish(),
  user: z.string().nullish(),
  cache_salt: z.string().nullish(),
  cache_prompt: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional(), continuous_usage_stats: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).nullish(),
  // OpenRouter's: include: true reports usage in a stream's last chunk, as stream_options.include_usage.
  usage: openRouterUsage,
  // Other servers' structured-output fields, declared so they are refused by name, not dropped.
  ...structuredFieldsSchema,
  ...foreignFieldsSchema,
  response_format: z.unknown().optional(),
});
export type CompletionRequest = z.infer<typeof completionRequest>;
