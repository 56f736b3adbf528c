import type { EmbeddingRequest } from "../../core/embed.ts";
import { badRequest } from "../../core/errors.ts";
import type { EmbedInput } from "../../core/engine.ts";
import type { EmbeddingsRequest } from "./embeddings-protocol.ts";

/**
 * OpenAI's four input shapes → a list of inputs, each with the request field it came from, so an
 * error can point at `input` (a single input) or `input[3]` (one of several).
 */
export function embeddingsToCanonical(body: EmbeddingsRequest): EmbeddingRequest {
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
