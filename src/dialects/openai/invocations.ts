import type { FastifyInstance } from "fastify";
import { badRequest } from "../../core/errors.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { postRoute } from "../../http/respond.ts";
import { chatCompletion } from "./chat.ts";
import { OPENAI_CHAT_CODEC } from "./chat-codec.ts";
import { textCompletion } from "./completions.ts";
import { createEmbeddings } from "./embeddings.ts";
import { OPENAI_ENVELOPE } from "./errors.ts";
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
    (raw) => raw,
    (raw, env) => {
      const body = raw !== null && typeof raw === "object" && !Array.isArray(raw) ? (raw as Record<string, unknown>) : undefined;
      if (body && "messages" in body) return chatCompletion(parseChat(body), env, OPENAI_CHAT_CODEC, storage);
      if (body && "prompt" in body) return textCompletion(parseCompletion(body), env);
      if (body && "input" in body) return createEmbeddings(parseEmbeddings(body), env);
      throw badRequest(
        "POST /invocations takes an OpenAI request: a chat completion (with 'messages'), a completion (with 'prompt') or embeddings (with 'input').",
        null,
        "invalid_request",
      );
    },
    { service, dialect: "openai" },
  );
}
