import type { FastifyRequest } from "fastify";
import type { GenerationService } from "../../core/generation-service.ts";
import { requestContext } from "../../http/respond.ts";

/** What a route does with its model: generate text, embed, or only read its tokenizer. */
export type ModelUse = "generate" | "embed" | "tokenize";

/**
 * A body without `model` (absent or null) names the one model it could mean, as vLLM and
 * llama-server take it: the only model this caller may use for that route. With several to choose
 * from, the body is left as it came and its schema's 400 names `model`. OpenAI's own API requires
 * the field; a client that sends it sees no difference.
 */
export function withDefaultModel(raw: unknown, request: FastifyRequest, service: GenerationService, use: ModelUse): unknown {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return raw;
  const body = raw as Record<string, unknown>;
  if (body.model !== undefined && body.model !== null) return raw;
  const ctx = requestContext(request, "openai");
  const candidates = service.registry.list().filter((m) => {
    if (!service.mayUse(ctx, m.id)) return false;
    // A model still loading has no engine to say what it does: it counts for every use, and its
    // request gets the loading 503 rather than a 400 it could not fix.
    const embeddings = m.engine?.embeddings;
    if (!m.engine || use === "tokenize") return true;
    return use === "embed" ? embeddings !== undefined : !embeddings?.info.embeddingOnly;
  });
  if (candidates.length !== 1) return raw;
  return { ...body, model: candidates[0].id };
}
