import { withWireParam } from "../../core/errors.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import type { EmbeddingsRequest } from "./embeddings-protocol.ts";
import { embeddingsToCanonical } from "./embeddings-to-canonical.ts";
import { renderEmbeddings } from "./embeddings-to-wire.ts";
import { embeddingFieldNames } from "./field-names.ts";

/** POST …/embeddings. */
export async function createEmbeddings(body: EmbeddingsRequest, env: RouteEnv): Promise<RouteResult> {
  const result = await env.service.embed(env.ctx, embeddingsToCanonical(body), env.signal).catch((err) => {
    throw withWireParam(err, embeddingFieldNames(body));
  });
  return { kind: "json", body: renderEmbeddings(body.model, result, body.encoding_format ?? "float") };
}
