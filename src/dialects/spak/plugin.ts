import type { FastifyInstance } from "fastify";
import type { GenerationService } from "../../core/generation-service.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { routeEnv, sendResult, requestContext } from "../../http/respond.ts";
import { getModel, listModels } from "../openai/models.ts";
import { spakChatCompletion } from "./chat.ts";
import { SPAK_ENVELOPE } from "./errors.ts";
import { parseSpakChat, SPAK_MODEL } from "./protocol.ts";
import { modelNotFound } from "../../core/errors.ts";

export interface SpakPluginOptions {
  service: GenerationService;
}

/**
 * SpAk-Aster (DeepSeek style), mounted at the root: POST /chat/completions, and GET /models for
 * clients that list models first. Unknown paths are left to the app's root not-found handler.
 */
export async function spakPlugin(scope: FastifyInstance, { service }: SpakPluginOptions): Promise<void> {
  installErrorEnvelope(scope, SPAK_ENVELOPE, { notFound: false });
  scope.post("/chat/completions", async (request, reply) => {
    const body = parseSpakChat(request.body);
    const env = routeEnv(request, reply, service, "spak");
    return sendResult(reply, env.signal, await spakChatCompletion(body, env, { userAgent: request.headers["user-agent"] }));
  });
  // This API has one model: its list shows that one (when served), and another id is not found
  // here (a client choosing from the list would otherwise pick a model the chat route refuses).
  scope.get("/models", async (request) => {
    const all = listModels(service, requestContext(request, "spak"));
    return { ...all, data: all.data.filter((m) => m.id === SPAK_MODEL) };
  });
  scope.get<{ Params: { id: string } }>("/models/:id", async (request) => {
    const ctx = requestContext(request, "spak");
    const id = request.params.id;
    if (id === SPAK_MODEL) return getModel(service, ctx, id);
    // A key limited to some models gets its 403 for any other name, as on every model route.
    service.authorize(ctx, id);
    throw modelNotFound(id).withParam("model");
  });
}
