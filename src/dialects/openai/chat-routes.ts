import type { FastifyInstance } from "fastify";
import { startGeneration } from "../../core/generate.ts";
import { newId, SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import type { ModelRegistry } from "../../core/registry.ts";
import { abortOnDisconnect } from "../../http/client-abort.ts";
import { respondWithSse } from "../../http/sse.ts";
import { toApiError } from "../../http/to-api-error.ts";
import { chatCompletionRequest } from "./chat-protocol.ts";
import { chatToCanonical } from "./chat-to-canonical.ts";
import { renderChatCompletion, streamChatCompletion } from "./chat-to-wire.ts";
import { openAIErrorBody } from "./errors.ts";

export function registerChatRoutes(app: FastifyInstance, registry: ModelRegistry): void {
  app.post("/v1/chat/completions", async (request, reply) => {
    const body = chatCompletionRequest.parse(request.body);
    const canonical = chatToCanonical(body);
    const signal = abortOnDisconnect(reply);
    const started = await startGeneration(registry, canonical, signal);
    const meta = {
      id: newId("chatcmpl-"),
      created: Math.floor(Date.now() / 1000),
      model: body.model,
      systemFingerprint: SYSTEM_FINGERPRINT,
      serviceTier: body.service_tier ? "default" : undefined,
      n: canonical.n,
    };
    const withLogprobs = canonical.logprobs !== undefined;
    if (!body.stream) return renderChatCompletion(meta, started.events, withLogprobs);

    await respondWithSse(
      reply,
      signal,
      (sse) => streamChatCompletion(sse, meta, started.events, body.stream_options?.include_usage === true, withLogprobs),
      (err) => openAIErrorBody(toApiError(err)),
    );
  });
}
