import type { EmbeddingResult } from "../../core/embed.ts";

export type EncodingFormat = "float" | "base64";

/** OpenAI's CreateEmbeddingResponse. */
export function renderEmbeddings(model: string, result: EmbeddingResult, format: EncodingFormat) {
  return {
    object: "list" as const,
    data: result.vectors.map((vector, index) => ({
      object: "embedding" as const,
      index,
      embedding: format === "base64" ? toBase64(vector) : Array.from(vector),
    })),
    model,
    usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
  };
}

/** The vector's float32 values, little-endian, base64-encoded (what OpenAI's clients decode). */
export function toBase64(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  vector.forEach((x, i) => bytes.writeFloatLE(x, i * 4));
  return bytes.toString("base64");
}
