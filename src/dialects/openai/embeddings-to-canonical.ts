import { endianness } from "node:os";
import type { EmbeddingRequest } from "../../core/embed.ts";
import { badRequest, unsupportedField } from "../../core/errors.ts";
import type { EmbedInput } from "../../core/engine.ts";
import type { EmbeddingsRequest } from "./embeddings-protocol.ts";

/**
 * OpenAI's four input shapes → a list of inputs, each with the request field it came from, so an
 * error can point at `input` (a single input) or `input[3]` (one of several).
 */
export function embeddingsToCanonical(body: EmbeddingsRequest): EmbeddingRequest {
  refuseEmbeddingExtras(body);
  const { inputs } = splitInput(body.input);
  return { model: body.model, inputs, dimensions: body.dimensions ?? undefined };
}

function splitInput(input: EmbeddingsRequest["input"]): { inputs: EmbedInput[]; inputParams: string[] } {
  if (typeof input === "string") {
    if (input.length === 0) throw badRequest("input is an empty string; send text to embed.", "input");
    return { inputs: [{ kind: "text", text: input }], inputParams: ["input"] };
  }
  if (input.length === 0) throw badRequest("input is an empty array; send at least one input.", "input");
  const first = input[0];
  if (typeof first === "number") return { inputs: [{ kind: "tokens", tokens: input as number[] }], inputParams: ["input"] };
  const inputParams = input.map((_, i) => `input[${i}]`);
  if (typeof first === "string") {
    const texts = input as string[];
    texts.forEach((t, i) => {
      if (t.length === 0) throw badRequest(`input[${i}] is an empty string; every input needs text.`, `input[${i}]`);
    });
    return { inputs: texts.map((text) => ({ kind: "text", text })), inputParams };
  }
  const arrays = input as number[][];
  arrays.forEach((tokens, i) => {
    if (tokens.length === 0) throw badRequest(`input[${i}] is an empty token array; every input needs tokens.`, `input[${i}]`);
  });
  return { inputs: arrays.map((tokens) => ({ kind: "tokens", tokens })), inputParams };
}

/** base64 vectors are written little-endian (see toBase64); "native" says so on a little-endian host. */
const BYTE_ORDERS = endianness() === "LE" ? ["little", "native"] : ["little"];

/**
 * vLLM's embedding fields, and llama-server's `embd_normalize`. Each is taken at the value that
 * describes what Plinth does anyway (vectors L2-normalised, the model's special tokens added,
 * float32 values, little-endian base64) and refused by name otherwise, so no client gets vectors
 * it did not ask for.
 */
function refuseEmbeddingExtras(body: EmbeddingsRequest): void {
  const refuse: Array<[keyof EmbeddingsRequest, (v: unknown) => boolean, string]> = [
    ["truncate_prompt_tokens", (v) => v == null, "is not supported: an input longer than the model's embedding context is a 400, never cut"],
    ["normalize", (v) => v == null || v === true, "is supported only as true: vectors are always L2-normalised"],
    ["use_activation", (v) => v == null || v === true, "is supported only as true: vectors are always L2-normalised"],
    ["add_special_tokens", (v) => v == null || v === true, "is supported only as true: text inputs get the model's special tokens (send token ids to choose)"],
    ["embed_dtype", (v) => v == null || v === "float32", "is supported only as 'float32'"],
    ["endianness", (v) => v == null || BYTE_ORDERS.includes(v as string), `is supported only as ${BYTE_ORDERS.map((o) => `'${o}'`).join(" or ")}: base64 vectors are little-endian float32`],
    ["messages", (v) => v == null, "is not supported: embeddings take input, not a conversation"],
    ["chat_template", (v) => v == null, "is not supported: inputs are embedded as sent"],
    ["chat_template_kwargs", (v) => v == null, "is not supported: inputs are embedded as sent"],
    ["mm_processor_kwargs", (v) => v == null, "is not supported: inputs are text or token ids"],
    // llama-server's: -1 none, 0 max-abs int16, 1 taxicab, 2 Euclidean (its default), >2 p-norm.
    ["embd_normalize", (v) => v == null || v === 2, "is supported only as 2: vectors are always L2-normalised"],
    // Ollama's: a model's residency changes nothing about the vectors.
    ["keep_alive", () => true, ""],
    ["truncate", (v) => v == null || v === false, "is not supported: an input longer than the model's embedding context is a 400, never cut"],
    ["options", (v) => v == null || (typeof v === "object" && !Array.isArray(v) && Object.keys(v as object).length === 0), "is not supported"],
  ];
  for (const [field, neutral, why] of refuse) if (!neutral(body[field])) throw unsupportedField(field, why);
}
