import { refuseDroppedProtoKeys } from "../../http/body.ts";
import type { FastifyInstance } from "fastify";
import type { GenerationService } from "../../core/generation-service.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { postRoute, requestContext } from "../../http/respond.ts";
import type { Store } from "../../store/store.ts";
import { chatCompletion } from "./chat.ts";
import { OPENAI_CHAT_CODEC } from "./chat-codec.ts";
import { chatCompletionRequest } from "./chat-protocol.ts";
import { textCompletion } from "./completions.ts";
import { completionRequest } from "./completions-protocol.ts";
import { createEmbeddings } from "./embeddings.ts";
import { embeddingsRequest } from "./embeddings-protocol.ts";
import { OPENAI_ENVELOPE } from "./errors.ts";
import { getModel, listModels } from "./models.ts";
import { registerStoredChatRoutes } from "./stored-chat.ts";
import { detokenize, detokenizeRequest, tokenize, tokenizeRequest } from "./tokenize.ts";
import { wildcardValue } from "../../http/path-segments.ts";

export interface OpenAIPluginOptions {
  service: GenerationService;
  /** Where completions created with `store: true` are kept; without it, `store: true` is refused. */
  store?: Store;
}

/**
 * The OpenAI dialect, mounted under /v1: Chat Completions, Completions, Embeddings and Models, each
 * error (unknown routes under the prefix included) in OpenAI's envelope.
 */
export async function openAIPlugin(scope: FastifyInstance, { service, store }: OpenAIPluginOptions): Promise<void> {
  installErrorEnvelope(scope, OPENAI_ENVELOPE, { notFound: true });
  const opts = { service, dialect: "openai" };
  const storage = store ? { store } : undefined;
  postRoute(scope, "/chat/completions", (b) => chatCompletionRequest.parse(b), (body, env) => chatCompletion(body, env, OPENAI_CHAT_CODEC, storage), opts);
  if (storage) registerStoredChatRoutes(scope, service, storage);
  postRoute(scope, "/completions", (b) => completionRequest.parse(b), textCompletion, opts);
  postRoute(scope, "/embeddings", (b) => embeddingsRequest.parse(b), createEmbeddings, opts);
  scope.get("/models", async (request) => listModels(service, requestContext(request, "openai")));
  // A wildcard: model ids may hold "/" (`Qwen/Qwen2.5-7B-Instruct`), sent encoded or not.
  scope.get<{ Params: { "*": string } }>("/models/*", async (request) =>
    getModel(service, requestContext(request, "openai"), wildcardValue(request.params["*"])),
  );
}

/** vLLM's tokenizer endpoints, at the root as vLLM serves them, in OpenAI's error envelope. */
export async function tokenizerPlugin(scope: FastifyInstance, { service }: OpenAIPluginOptions): Promise<void> {
  installErrorEnvelope(scope, OPENAI_ENVELOPE, { notFound: false });
  // These bodies refuse unknown fields by name (as vLLM's do); a "__proto__" key is one too.
  scope.addHook("preHandler", async (request) => refuseDroppedProtoKeys(request));
  const opts = { service, dialect: "openai" };
  postRoute(scope, "/tokenize", (b) => tokenizeRequest.parse(b), tokenize, opts);
  postRoute(scope, "/detokenize", (b) => detokenizeRequest.parse(b), detokenize, opts);
}
