import { z } from "zod";

/** Wire schema of POST /v1/completions (OpenAI's legacy text completions). */

const tokenIds = z.array(z.int().min(0)).min(1);

export const completionRequest = z.object({
  model: z.string().min(1),
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1).max(2048),
    tokenIds,
    z.array(tokenIds).min(1).max(2048),
  ]),
  suffix: z.string().nullish(),
  max_tokens: z.int().min(0).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: z.int().nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullish(),
  n: z.int().min(1).max(128).nullish(),
  best_of: z.int().min(1).nullish(),
  echo: z.boolean().nullish(),
  // OpenAI caps this at 5; vLLM and Plinth allow up to 20.
  logprobs: z.int().min(0).max(20).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  logit_bias: z.record(z.string().regex(/^\d+$/, "logit_bias keys must be token ids (integers as strings)"), z.number().min(-100).max(100)).nullish(),
  user: z.string().nullish(),
  cache_salt: z.string().nullish(),
  cache_prompt: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
});
export type CompletionRequest = z.infer<typeof completionRequest>;
