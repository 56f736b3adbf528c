import type { FastifyInstance } from "fastify";
import { ApiError } from "../../core/errors.ts";
import type { GenerationService } from "../../core/generation-service.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { postRoute, type RouteEnv, type RouteResult, requestContext } from "../../http/respond.ts";
import type { Store } from "../../store/store.ts";
import { chatCompletion } from "../openai/chat.ts";
import { OPENAI_ENVELOPE } from "../openai/errors.ts";
import { getModel, listModels } from "../openai/models.ts";
import { konanCodec } from "./codec.ts";
import { type KonanChatRequest, parseKonanChat } from "./protocol.ts";
import { konanToOpenAI } from "./to-openai.ts";
import { wildcardValue } from "../../http/path-segments.ts";

export interface KonanPluginOptions {
  service: GenerationService;
  /** Where completions sent with metadata are kept (listed through /v1/chat/completions). */
  store: Store;
}

/** POST /v3/chat/completions: OpenAI's chat route, configured with Konan's codec. */
export async function konanChatCompletion(body: KonanChatRequest, env: RouteEnv, store: Store): Promise<RouteResult> {
  const { openai, reasoningImplicit } = konanToOpenAI(body);
  const codec = konanCodec(body);
  try {
    return await chatCompletion(openai, env, codec, { store });
  } catch (err) {
    // Thinking is off unless asked for; a model with no thinking section to switch off runs as it is.
    if (reasoningImplicit && err instanceof ApiError && err.field === "reasoning" && err.status === 400)
      return chatCompletion({ ...openai, reasoning: null }, env, codec, { store });
    throw err;
  }
}

/**
 * Konan LLM's API, mounted under /v3: Chat Completions and the model list, every error (unknown
 * routes under the prefix included) in OpenAI's envelope.
 */
export async function konanPlugin(scope: FastifyInstance, { service, store }: KonanPluginOptions): Promise<void> {
  installErrorEnvelope(scope, OPENAI_ENVELOPE, { notFound: true });
  postRoute(scope, "/chat/completions", parseKonanChat, (body, env) => konanChatCompletion(body, env, store), {
    service,
    dialect: "konan",
  });
  scope.get("/models", async (request) => listModels(service, requestContext(request, "konan")));
  // A wildcard: model ids may hold "/" (`Qwen/Qwen2.5-7B-Instruct`), sent encoded or not.
  scope.get<{ Params: { "*": string } }>("/models/*", async (request) =>
    getModel(service, requestContext(request, "konan"), wildcardValue(request.params["*"])),
  );
}
