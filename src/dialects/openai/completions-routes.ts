import type { FastifyInstance } from "fastify";
import { startBatch } from "../../core/generate.ts";
import { newId, SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import type { ModelRegistry } from "../../core/registry.ts";
import { abortOnDisconnect } from "../../http/client-abort.ts";
import { respondWithSse } from "../../http/sse.ts";
import { toApiError } from "../../http/to-api-error.ts";
import { completionRequest } from "./completions-protocol.ts";
import { completionToCanonical } from "./completions-to-canonical.ts";
import { renderCompletion, streamCompletion } from "./completions-to-wire.ts";
import { openAIErrorBody } from "./errors.ts";

export function registerCompletionRoutes(app: FastifyInstance, registry: ModelRegistry): void {
  app.post("/v1/completions", async (request, reply) => {
    const body = completionRequest.parse(request.body);
    const batch = completionToCanonical(body);
    const signal = abortOnDisconnect(reply);
    const started = await startBatch(registry, batch, signal);
    const meta = {
      id: newId("cmpl-"),
      created: Math.floor(Date.now() / 1000),
      model: body.model,
      systemFingerprint: SYSTEM_FINGERPRINT,
      n: batch.length * (body.n ?? 1),
    };
    const logprobs = body.logprobs ?? undefined;
    if (!body.stream) return renderCompletion(meta, started.events, logprobs);

    await respondWithSse(
      reply,
      signal,
      (sse) => streamCompletion(sse, meta, started.events, logprobs, body.stream_options?.include_usage === true),
      (err) => openAIErrorBody(toApiError(err)),
    );
  });
}
