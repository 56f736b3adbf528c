import { modelNotFound } from "../../core/errors.ts";
import type { RequestContext } from "../../core/context.ts";
import type { GenerationService } from "../../core/generation-service.ts";
import type { ServedModel } from "../../core/registry.ts";
import type { EmbeddingInfo } from "../../core/engine.ts";

export function modelToWire(m: ServedModel) {
  const d = m.engine?.describe();
  return {
    id: m.id,
    object: "model" as const,
    created: d?.created ?? 0,
    owned_by: d?.ownedBy ?? "plinth",
    // vLLM's and SGLang's model cards name the model a served name stands for in `root` (SGLang's
    // own tests read it back equal to the id). The name it is served under here: a file path would
    // show callers the server's disk.
    root: m.id,
    // Extensions, as vLLM and llama-server report them: what a client needs to size its prompts.
    max_model_len: d?.contextSize ?? null,
    // Requests the model runs at once: a router in front of this server sends it no more than that
    // and queues the rest itself.
    ...(d?.parallel ? { parallel: d.parallel } : {}),
    status: m.status,
    // Whether the model thinks, when known (a router in front of this server reads it).
    ...(d?.reasoning !== undefined ? { reasoning: d.reasoning } : {}),
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

/** GET …/models: every registered model the caller may use, loading or not, with its state. */
export function listModels(service: GenerationService, ctx: RequestContext) {
  return { object: "list" as const, data: service.registry.list().filter((m) => service.mayUse(ctx, m.id)).map(modelToWire) };
}

/** GET …/models/{id}: 403 for a model the caller's API key may not use, served or not; else 404 for one not served. */
export function getModel(service: GenerationService, ctx: RequestContext, id: string) {
  // The key's model list first: a key limited to some models gets its 403 for any other name, served
  // or not (a 404 for unknown names would tell it which models exist).
  service.authorize(ctx, id);
  const m = service.registry.list().find((x) => x.id === id);
  if (!m) throw modelNotFound(id).withParam("model");
  return modelToWire(m);
}
