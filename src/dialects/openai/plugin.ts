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
import { withDefaultModel } from "./default-model.ts";
import { detokenize, detokenizeRequest, tokenize, tokenizeRequest } from "./tokenize.ts";
import { serverProps } from "./props.ts";
import { wildcardValue } from "../../http/path-segments.ts";
import { type FieldHints, strictTopLevel } from "../unknown-fields.ts";

const RESPONSES_FIELD = (name: string) => `'${name}' is a field of the Responses API (POST /v1/responses).`;

/** Fields of the other endpoints sent to Chat Completions, and what it takes instead. */
const CHAT_HINTS: FieldHints = {
  max_output_tokens: "Chat Completions takes 'max_completion_tokens' (or 'max_tokens'); 'max_output_tokens' is the Responses API's.",
  instructions: "Give instructions as a 'system' or 'developer' message; 'instructions' is the Responses API's.",
  input: "Chat Completions takes 'messages'; 'input' is the Responses and Embeddings APIs'.",
  text: "Chat Completions takes 'response_format'; 'text' is the Responses API's.",
  prompt: "Chat Completions takes 'messages'; 'prompt' is the Completions API's (POST /v1/completions).",
  previous_response_id: RESPONSES_FIELD("previous_response_id"),
  conversation: RESPONSES_FIELD("conversation"),
  background: RESPONSES_FIELD("background"),
  truncation: RESPONSES_FIELD("truncation"),
  max_tool_calls: RESPONSES_FIELD("max_tool_calls"),
  include: RESPONSES_FIELD("include"),
  suffix: "'suffix' is a field of the Completions API (POST /v1/completions).",
  best_of: "'best_of' is a field of the Completions API (POST /v1/completions); Chat Completions takes 'n'.",
};

/** Fields of Chat Completions (and others) sent to Completions, and what it takes instead. */
const COMPLETIONS_HINTS: FieldHints = {
  max_completion_tokens: "Completions takes 'max_tokens'; 'max_completion_tokens' is the Chat Completions API's.",
  max_output_tokens: "Completions takes 'max_tokens'; 'max_output_tokens' is the Responses API's.",
  messages: "Completions takes 'prompt'; 'messages' is the Chat Completions API's (POST /v1/chat/completions).",
  input: "Completions takes 'prompt'; 'input' is the Responses and Embeddings APIs'.",
  top_logprobs: "Completions takes 'logprobs', the number of alternatives per token; 'top_logprobs' is the Chat Completions API's.",
  tools: "Completions generates text only; tools are offered through Chat Completions (POST /v1/chat/completions).",
  tool_choice: "Completions generates text only; tools are offered through Chat Completions (POST /v1/chat/completions).",
  reasoning_effort: "'reasoning_effort' is a field of the Chat Completions API (POST /v1/chat/completions).",
  instructions: RESPONSES_FIELD("instructions"),
};

/** Fields sent to Embeddings under another name. */
const EMBEDDINGS_HINTS: FieldHints = {
  prompt: "Embeddings takes 'input'.",
  text: "Embeddings takes 'input'.",
  texts: "Embeddings takes 'input'.",
};

export const parseChat = strictTopLevel(chatCompletionRequest, CHAT_HINTS);
export const parseCompletion = strictTopLevel(completionRequest, COMPLETIONS_HINTS);
export const parseEmbeddings = strictTopLevel(embeddingsRequest, EMBEDDINGS_HINTS);

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
  postRoute(scope, "/chat/completions", (raw, req) => parseChat(withDefaultModel(raw, req, service, "generate")), (body, env) => chatCompletion(body, env, OPENAI_CHAT_CODEC, storage), opts);
  if (storage) registerStoredChatRoutes(scope, service, storage);
  postRoute(scope, "/completions", (raw, req) => parseCompletion(withDefaultModel(raw, req, service, "generate")), textCompletion, opts);
  postRoute(scope, "/embeddings", (raw, req) => parseEmbeddings(withDefaultModel(raw, req, service, "embed")), createEmbeddings, opts);
  scope.get("/models", async (request) => listModels(service, requestContext(request, "openai")));
  // A wildcard: model ids may hold "/" (`Qwen/Qwen2.5-7B-Instruct`), sent encoded or not.
  scope.get<{ Params: { "*": string } }>("/models/*", async (request) =>
    getModel(service, requestContext(request, "openai"), wildcardValue(request.params["*"])),
  );
}

/** vLLM's tokenizer endpoints and llama-server's GET /props, at the root as those servers serve them, in OpenAI's error envelope. */
export async function tokenizerPlugin(scope: FastifyInstance, { service }: OpenAIPluginOptions): Promise<void> {
  installErrorEnvelope(scope, OPENAI_ENVELOPE, { notFound: false });
  const opts = { service, dialect: "openai" };
  postRoute(scope, "/tokenize", (raw, req) => tokenizeRequest.parse(withDefaultModel(raw, req, service, "tokenize")), tokenize, opts);
  postRoute(scope, "/detokenize", (raw, req) => detokenizeRequest.parse(withDefaultModel(raw, req, service, "tokenize")), detokenize, opts);
  // llama-server's server properties, read by its web UI and its clients at startup.
  scope.get<{ Querystring: Record<string, unknown> }>("/props", async (request) => serverProps(service, request));
}
