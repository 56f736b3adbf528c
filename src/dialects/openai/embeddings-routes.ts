import type { FastifyInstance } from "fastify";
import { embed } from "../../core/embed.ts";
import type { ModelRegistry } from "../../core/registry.ts";
import { abortOnDisconnect } from "../../http/client-abort.ts";
import { embeddingsRequest } from "./embeddings-protocol.ts";
import { embeddingsToCanonical } from "./embeddings-to-canonical.ts";
import { renderEmbeddings } from "./embeddings-to-wire.ts";

export function registerEmbeddingsRoutes(app: FastifyInstance, registry: ModelRegistry): void {
  app.post("/v1/embeddings", async (request, reply) => {
    const body = embeddingsRequest.parse(request.body);
    const canonical = embeddingsToCanonical(body);
    const signal = abortOnDisconnect(reply);
    const result = await embed(registry, canonical, signal);
    return renderEmbeddings(body.model, result, body.encoding_format ?? "float");
  });
}
