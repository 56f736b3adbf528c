import { z } from "zod";
import { badRequest, unsupportedField, withWireParam } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { toBase64 } from "../openai/embeddings-to-wire.ts";
import { embeddingFieldNames } from "../openai/field-names.ts";
import type { Routed } from "./endpoints.ts";
import { listOf } from "../list-of.ts";

/** Wire schema of a Databricks embeddings request. */
export const embeddingsRequest = z.strictObject({
  model: z.string().min(1).optional(),
  input: z.union([z.string(), listOf(z.string(), { min: 1, max: 2048 })]),
  instruction: z.string().nullish(),
  dimensions: z.int().nullish(),
  // Not in Databricks' reference, but every OpenAI client sends it; honoured as OpenAI defines it.
  encoding_format: z.enum(["float", "base64"]).nullish(),
});
export type DatabricksEmbeddingsRequest = z.infer<typeof embeddingsRequest>;

const DIMENSIONS = [32, 64, 128, 256, 512, 1024];

/**
 * The instruction format every embedding model gets here (Qwen3-Embedding's): the instruction, then
 * the text as the query. An empty instruction adds nothing.
 */
export function withInstruction(instruction: string, text: string): string {
  return `Instruct: ${instruction}\nQuery:${text}`;
}

/** Embeddings: `instruction` prepended to each input, `dimensions` a power of 2 from 32 to 1024. */
export async function databricksEmbeddings(body: DatabricksEmbeddingsRequest, env: RouteEnv, routed: Routed): Promise<RouteResult> {
  const texts = typeof body.input === "string" ? [body.input] : body.input;
  texts.forEach((t, i) => {
    const at = typeof body.input === "string" ? "input" : `input[${i}]`;
    if (t.length === 0) throw badRequest(`${at} is an empty string; every input needs text.`, at);
  });
  const size = env.service.registry.get(routed.model)?.engine?.embeddings?.info.dimensions;
  if (body.dimensions != null) {
    if (!DIMENSIONS.includes(body.dimensions))
      throw badRequest(`dimensions must be a power of 2 from 32 to 1024 (32, 64, 128, 256, 512, 1024); got ${body.dimensions}.`, "dimensions");
    if (size !== undefined && body.dimensions > size)
      throw unsupportedField("dimensions", `cannot be ${body.dimensions}: the model behind '${routed.entity}' makes ${size}-dimensional vectors, and only shorter ones can be cut from them`);
  }
  const instruction = body.instruction ?? "";
  const inputs = texts.map((t) => ({ kind: "text" as const, text: instruction ? withInstruction(instruction, t) : t }));
  const result = await env.service
    .embed(env.ctx, { model: routed.model, inputs, dimensions: body.dimensions ?? undefined }, env.signal)
    .catch((err) => {
      throw withWireParam(err, embeddingFieldNames({ input: body.input }));
    });
  return {
    kind: "json",
    body: {
      id: newId("emb-"),
      object: "list",
      model: routed.entity,
      data: result.vectors.map((v, index) => ({ object: "embedding", index, embedding: body.encoding_format === "base64" ? toBase64(v) : Array.from(v) })),
      usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
    },
  };
}
