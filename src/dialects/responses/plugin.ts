import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { GenerationService } from "../../core/generation-service.ts";
import { storeNamespace } from "../../core/context.ts";
import { requestKey } from "../../http/access.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { withDefaultModel } from "../openai/default-model.ts";
import { postRoute, type RouteResult, routeEnv, sendResult } from "../../http/respond.ts";
import { openAIErrorBody } from "../openai/errors.ts";
import { ApiError } from "../../core/errors.ts";
import {
  addItems,
  addItemsRequest,
  createConversation,
  createConversationRequest,
  deleteConversation,
  deleteItem,
  getConversation,
  getItem,
  listItems,
  updateConversation,
  updateConversationRequest,
} from "./conversations.ts";
import { createResponseRequest, includeQuery, inputTokensRequest, listQuery, retrieveQuery } from "./protocol.ts";
import {
  cancelResponse,
  countInputTokens,
  createResponse,
  deleteResponse,
  failAbandonedRuns,
  listInputItems,
  type ResponsesDeps,
  retrieveResponse,
} from "./responses.ts";
import { responsesFieldName } from "./to-canonical.ts";
import { type FieldHints, strictTopLevel } from "../unknown-fields.ts";
import { readsNothing } from "../reads-nothing.ts";

const CHAT_FIELD = (name: string) => `'${name}' is a field of the Chat Completions API (POST /v1/chat/completions).`;

/** Fields of Chat Completions and Completions sent to the Responses API, and what it takes instead. */
const RESPONSES_HINTS: FieldHints = {
  max_tokens: "The Responses API takes 'max_output_tokens'.",
  max_completion_tokens: "The Responses API takes 'max_output_tokens'.",
  response_format: "The Responses API takes 'text.format' ({\"text\": {\"format\": {\"type\": \"json_schema\", ...}}}).",
  messages: "The Responses API takes 'input' (a string or a list of messages and items).",
  logprobs: "The Responses API takes 'include: [\"message.output_text.logprobs\"]', with 'top_logprobs' for alternatives.",
  n: "The Responses API makes one answer per request.",
  verbosity: "The Responses API takes 'text.verbosity'.",
  reasoning_effort: "The Responses API takes 'reasoning.effort'.",
  functions: "The Responses API takes 'tools' ({\"type\": \"function\", \"name\": ...}).",
  function_call: "The Responses API takes 'tool_choice'.",
  modalities: CHAT_FIELD("modalities"),
  audio: CHAT_FIELD("audio"),
  prediction: CHAT_FIELD("prediction"),
  web_search_options: CHAT_FIELD("web_search_options"),
};

/**
 * A create's fields sent to input_tokens, which counts a prompt and generates nothing, are said to be
 * so (`stream` or `max_output_tokens` there is no misspelling), and so are Chat's names for them,
 * whose hint on a create would send the client to a field that input_tokens refuses too.
 */
const INPUT_TOKENS_HINTS: FieldHints = {
  ...RESPONSES_HINTS,
  ...Object.fromEntries(
    Object.keys(createResponseRequest.shape)
      .filter((key) => !Object.hasOwn(inputTokensRequest.shape, key))
      .map((key) => [key, `'${key}' is a setting of creating a response (POST /v1/responses); input_tokens only counts the prompt, so it does not take it.`]),
  ),
  ...Object.fromEntries(
    ["max_tokens", "max_completion_tokens", "logprobs"].map((key) => [key, "input_tokens only counts the prompt, so it takes no setting of a generation."]),
  ),
};

export interface ResponsesPluginOptions {
  service: GenerationService;
  deps: ResponsesDeps;
}

/**
 * Where a request that carries no body (retrieve, delete, cancel, lists) finds stored objects: its
 * API key's (see storeNamespace). `?user=` and `?safety_identifier=` are accepted and change nothing.
 */
function queryNamespace(request: FastifyRequest): string {
  return storeNamespace(requestKey(request));
}

/**
 * OpenAI's Responses and Conversations APIs, mounted under /v1 beside the OpenAI plugin (which owns
 * the prefix's not-found answer), in OpenAI's error envelope with this API's field names.
 */
export async function responsesPlugin(scope: FastifyInstance, { service, deps }: ResponsesPluginOptions): Promise<void> {
  // Before any request: what a killed process left running is over (see failAbandonedRuns).
  await failAbandonedRuns(deps);
  installErrorEnvelope(scope, { render: openAIErrorBody, fieldNames: responsesFieldName }, { notFound: false });
  const opts = { service, dialect: "responses" };
  const send = (reply: FastifyReply, request: FastifyRequest, result: RouteResult) =>
    sendResult(reply, routeEnv(request, reply, service, "responses").signal, result);
  type Id = { Params: { id: string } };
  type Item = { Params: { id: string; item_id: string } };

  const parseCreate = strictTopLevel(createResponseRequest, RESPONSES_HINTS);
  const parseCount = strictTopLevel(inputTokensRequest, INPUT_TOKENS_HINTS);
  postRoute(scope, "/responses", (raw, req) => parseCreate(withDefaultModel(raw, req, service, "generate")), (body, env) => createResponse(body, env, deps), opts);
  // OpenAI's context compaction has a route of its own; without this one the path read as a
  // response id, and the client was told to GET or DELETE a response that does not exist.
  scope.post("/responses/compact", async () => {
    throw new ApiError(404, "POST /v1/responses/compact (context compaction) is not offered by this server.", { code: "not_found" });
  });
  postRoute(scope, "/responses/input_tokens", (raw, req) => parseCount(withDefaultModel(raw, req, service, "generate")), (body, env) => countInputTokens(body, env, deps), opts);
  scope.get<Id>("/responses/:id", async (request, reply) => {
    const q = retrieveQuery.parse(request.query ?? {});
    return send(reply, request, await retrieveResponse(request.params.id, q, queryNamespace(request), deps));
  });
  scope.delete<Id>("/responses/:id", async (request, reply) => {
    readsNothing(request, { body: true });
    return send(reply, request, await deleteResponse(request.params.id, queryNamespace(request), deps));
  });
  scope.post<Id>("/responses/:id/cancel", async (request, reply) => {
    readsNothing(request, { body: true });
    return send(reply, request, await cancelResponse(request.params.id, queryNamespace(request), deps));
  });
  scope.get<Id>("/responses/:id/input_items", async (request, reply) =>
    send(reply, request, await listInputItems(request.params.id, listQuery.parse(request.query), queryNamespace(request), deps)),
  );

  scope.post("/conversations", async (request, reply) => {
    readsNothing(request, { body: false });
    return send(reply, request, await createConversation(createConversationRequest.parse(request.body ?? {}), queryNamespace(request), deps));
  });
  scope.get<Id>("/conversations/:id", async (request, reply) => {
    readsNothing(request, { body: false });
    return send(reply, request, await getConversation(request.params.id, queryNamespace(request), deps));
  });
  scope.post<Id>("/conversations/:id", async (request, reply) => {
    readsNothing(request, { body: false });
    return send(reply, request, await updateConversation(request.params.id, updateConversationRequest.parse(request.body), queryNamespace(request), deps));
  });
  scope.delete<Id>("/conversations/:id", async (request, reply) => {
    readsNothing(request, { body: true });
    return send(reply, request, await deleteConversation(request.params.id, queryNamespace(request), deps));
  });
  scope.get<Id>("/conversations/:id/items", async (request, reply) =>
    send(reply, request, await listItems(request.params.id, listQuery.parse(request.query), queryNamespace(request), deps)),
  );
  scope.post<Id>("/conversations/:id/items", async (request, reply) =>
    send(
      reply,
      request,
      await addItems(request.params.id, addItemsRequest.parse(request.body), includeQuery.parse(request.query ?? {}), queryNamespace(request), deps),
    ),
  );
  scope.get<Item>("/conversations/:id/items/:item_id", async (request, reply) =>
    send(reply, request, await getItem(request.params.id, request.params.item_id, includeQuery.parse(request.query ?? {}), queryNamespace(request), deps)),
  );
  scope.delete<Item>("/conversations/:id/items/:item_id", async (request, reply) => {
    readsNothing(request, { body: true });
    return send(reply, request, await deleteItem(request.params.id, request.params.item_id, queryNamespace(request), deps));
  });
}
