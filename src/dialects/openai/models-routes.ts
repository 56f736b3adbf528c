import type { FastifyInstance } from "fastify";
import { modelNotFound } from "../../core/errors.ts";
import type { ModelRegistry, ServedModel } from "../../core/registry.ts";
import type { EmbeddingInfo } from "../../engines/engine.ts";

function toWire(m: ServedModel) {
  const d = m.engine?.describe();
  return {
    id: m.id,
    object: "model" as const,
    created: d?.created ?? 0,
    owned_by: d?.ownedBy ?? "plinth",
    // Extensions, as vLLM and llama-server report them: what a client needs to size its prompts.
    max_model_len: d?.contextSize ?? null,
    status: m.status,
    ...(m.engine?.embeddings ? { embedding: embeddingToWire(m.engine.embeddings.info) } : {}),
  };
}

/**
 * What POST /v1/embeddings gives for this model. `pooling_declared: false` means the model file
 * declares no pooling and the vector is the last token's hidden state; `embedding_only` models
 * cannot generate.
 */
function embeddingToWire(info: EmbeddingInfo) {
  return {
    dimensions: info.dimensions,
    pooling: info.pooling,
    pooling_declared: info.poolingDeclared,
    max_input_tokens: info.maxInputTokens,
    embedding_only: info.embeddingOnly,
  };
}

export function registerModelRoutes(app: FastifyInstance, registry: ModelRegistry): void {
  app.get("/v1/models", async () => ({ object: "list", data: registry.list().map(toWire) }));
  app.get<{ Params: { id: string } }>("/v1/models/:id", async (request) => {
    const m = registry.list().find((x) => x.id === request.params.id);
    if (!m) throw modelNotFound(request.params.id);
    return toWire(m);
  });
}
