import { z } from "zod";
import { listOf } from "../list-of.ts";

/** OpenAI's limit on inputs per embeddings request. */
export const MAX_EMBEDDING_INPUTS = 2048;

const tokenIds = listOf(z.int());

/**
 * Wire schema of POST /v1/embeddings. `input` is one of OpenAI's four shapes: a string, strings, token
 * ids, or arrays of token ids. Emptiness is checked in embeddingsToCanonical, which can name the
 * exact element at fault.
 */
export const embeddingsRequest = z.object({
  model: z.string().min(1),
  input: z.union([
    z.string(),
    listOf(z.string(), { max: MAX_EMBEDDING_INPUTS }),
    tokenIds,
    listOf(tokenIds, { max: MAX_EMBEDDING_INPUTS }),
  ]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.int().min(1).nullish(),
  user: z.string().nullish(),
  // vLLM's embedding fields, read by `refuseEmbeddingExtras`: taken at the values Plinth has, else refused.
  truncate_prompt_tokens: z.unknown().optional(),
  normalize: z.unknown().optional(),
  use_activation: z.unknown().optional(),
  add_special_tokens: z.unknown().optional(),
  embed_dtype: z.unknown().optional(),
  endianness: z.unknown().optional(),
  messages: z.unknown().optional(),
  chat_template: z.unknown().optional(),
  chat_template_kwargs: z.unknown().optional(),
  mm_processor_kwargs: z.unknown().optional(),
  // llama-server's normalisation (2: Euclidean), read by `refuseEmbeddingExtras` likewise.
  embd_normalize: z.unknown().optional(),
  // vLLM's request labels: they change nothing about the vectors, and are checked for their type.
  priority: z.int().nullish(),
  request_id: z.string().nullish(),
  // Ollama's.
  keep_alive: z.unknown().optional(),
  truncate: z.unknown().optional(),
  options: z.unknown().optional(),
});
export type EmbeddingsRequest = z.infer<typeof embeddingsRequest>;
