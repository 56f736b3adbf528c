import type { FastifyInstance } from "fastify";
import type { GenerationService } from "../../core/generation-service.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { routeEnv, sendResult, requestContext } from "../../http/respond.ts";
import { getModel, listModels } from "../openai/models.ts";
import { spakChatCompletion } from "./chat.ts";
import { SPAK_ENVELOPE } from "./errors.ts";
import { spakChatRequest } from "./protocol.ts";

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
    const body = spakChatRequest.parse(request.body);
    const env = routeEnv(request, reply, service, "spak");
    return sendResult(reply, env.signal, await spakChatCompletion(body, env, { userAgent: request.headers["user-agent"] }));
  });
  scope.get("/models", async (request) => listModels(service, requestContext(request, "spak")));
  scope.get<{ Params: { id: string } }>("/models/:id", async (request) =>
    getModel(service, requestContext(request, "spak"), request.params.id),
  );
}
