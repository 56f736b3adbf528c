import type { FastifyInstance } from "fastify";
import { badRequest } from "../../core/errors.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { postRoute } from "../../http/respond.ts";
import { chatCompletion } from "./chat.ts";
import { OPENAI_CHAT_CODEC } from "./chat-codec.ts";
import { textCompletion } from "./completions.ts";
import { createEmbeddings } from "./embeddings.ts";
import { OPENAI_ENVELOPE } from "./errors.ts";
import { type ModelUse, withDefaultModel } from "./default-model.ts";
import { type OpenAIPluginOptions, parseChat, parseCompletion, parseEmbeddings } from "./plugin.ts";

/**
 * POST /invocations, at the root: the one generation route of a SageMaker container, as vLLM serves
 * it. The body is an OpenAI request, and what it holds says which: `messages` a chat completion,
 * `prompt` a completion, `input` embeddings. Each is then exactly its /v1 route (same checks, same
 * answer, streamed when it asks), in OpenAI's error envelope.
 */
export async function invocationsPlugin(scope: FastifyInstance, { service, store }: OpenAIPluginOptions): Promise<void> {
  installErrorEnvelope(scope, OPENAI_ENVELOPE, { notFound: false });
  const storage = store ? { store } : undefined;
  postRoute(
    scope,
    "/invocations",
    (raw, request) => ({ raw, request }),
    ({ raw, request }, env) => {
      const body = raw !== null && typeof raw === "object" && !Array.isArray(raw) ? (raw as Record<string, unknown>) : undefined;
      // A SageMaker container serves one model, and its clients often leave model out.
      const named = (use: ModelUse) => withDefaultModel(body, request, service, use);
      if (body && "messages" in body) return chatCompletion(parseChat(named("generate")), env, OPENAI_CHAT_CODEC, storage);
      if (body && "prompt" in body) return textCompletion(parseCompletion(named("generate")), env);
      if (body && "input" in body) return createEmbeddings(parseEmbeddings(named("embed")), env);
      throw badRequest(
        "POST /invocations takes an OpenAI request: a chat completion (with 'messages'), a completion (with 'prompt') or embeddings (with 'input').",
        null,
        "invalid_request",
      );
    },
    { service, dialect: "openai" },
  );
}
