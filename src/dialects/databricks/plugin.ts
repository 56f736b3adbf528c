import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { ApiError, badRequest } from "../../core/errors.ts";
import type { GenerationService } from "../../core/generation-service.ts";
import type { ModelLoader } from "../../core/model-loader.ts";
import { describeValue } from "../../http/to-api-error.ts";
import { installErrorEnvelope } from "../../http/error-envelope.ts";
import { type RouteEnv, type RouteResult, requestContext, routeEnv, sendResult } from "../../http/respond.ts";
import type { Sealer } from "../responses/sealer.ts";
import { databricksChat } from "./chat.ts";
import { chatRequest } from "./chat-protocol.ts";
import { completionRequest, databricksCompletion } from "./completions.ts";
import { endpointView } from "./control.ts";
import { databricksEmbeddings, embeddingsRequest } from "./embeddings.ts";
import { createEndpointRequest, endpointConfig, type EndpointManager, endpointRefused, type ModelAccess, type Routed } from "./endpoints.ts";
import { DATABRICKS_DATA_PLANE_ENVELOPE, DATABRICKS_ENVELOPE } from "./errors.ts";
import { databricksResponses, refuseResponsesParameters, responsesRequest } from "./responses.ts";


/** Where the dialect's routes live: the data plane, the control plane, Plinth's model admin. */
export const DATABRICKS_PREFIXES = ["/serving-endpoints", "/api/2.0/serving-endpoints", "/api/2.0/plinth/models"] as const;
/** Paths whose errors are Databricks' even where no route matches: its prefixes, and its REST API's root. */
export const DATABRICKS_ENVELOPE_PREFIXES = [...DATABRICKS_PREFIXES, "/api/2.0"] as const;

export interface DatabricksPluginOptions {
  service: GenerationService;
  endpoints: EndpointManager;
  sealer: Sealer;
  /** Runtime model loading (admin routes); absent: the routes answer 400. */
  loader?: ModelLoader;
}

type Task = "chat" | "completions" | "embeddings" | "responses";

/** The answer, with the entity that served it named in the `served-model-name` header. */
function tagged(result: RouteResult, routed: Routed): RouteResult {
  return { ...result, headers: { ...(result.headers ?? {}), "served-model-name": routed.entity } };
}

const isObject = (b: unknown): b is Record<string, unknown> => b !== null && typeof b === "object" && !Array.isArray(b);

/**
 * Databricks' Foundation Model APIs: the data plane under /serving-endpoints (per-endpoint
 * invocations, and the OpenAI-style paths clients reach with base_url=<host>/serving-endpoints), the
 * control plane under /api/2.0/serving-endpoints, and runtime model loading under
 * /api/2.0/plinth/models. Every error in Databricks' envelope.
 */
export async function databricksPlugin(scope: FastifyInstance, opts: DatabricksPluginOptions): Promise<void> {
  // Unknown fields are a 400 here, "__proto__" included (the body parser drops that key).
  await scope.register(dataPlane, { ...opts, prefix: DATABRICKS_PREFIXES[0] });
  await scope.register(controlPlane, { ...opts, prefix: DATABRICKS_PREFIXES[1] });
  await scope.register(modelAdmin, { ...opts, prefix: DATABRICKS_PREFIXES[2] });
}

async function dataPlane(scope: FastifyInstance, { service, endpoints, sealer }: DatabricksPluginOptions): Promise<void> {
  installErrorEnvelope(scope, DATABRICKS_DATA_PLANE_ENVELOPE, { notFound: true });
  const env = (request: FastifyRequest, reply: FastifyReply): RouteEnv => routeEnv(request, reply, service, "databricks");
  // The caller's model list, checked before anything about the endpoint is looked at or said (its
  // task, its entities, whether it exists): a 400 "serves an embedding model" or a 404 told a key
  // limited to some models which other endpoints and models are served here.
  const access = (request: FastifyRequest): ModelAccess => {
    const caller = requestContext(request, "databricks");
    return { mayUse: (model) => service.mayUse(caller, model), authorize: (model) => service.authorize(caller, model) };
  };

  const run = async (task: Task, raw: unknown, e: RouteEnv, routed: Routed): Promise<RouteResult> => {
    const embeddingModel = endpoints.taskOf(routed.model) === "llm/v1/embeddings";
    if (embeddingModel && task !== "embeddings")
      throw badRequest(
        `The endpoint '${routed.endpoint.name}' serves an embedding model: it answers embeddings requests only (POST /serving-endpoints/${routed.endpoint.name}/invocations or /serving-endpoints/embeddings, with 'input').`,
        task === "chat" ? "messages" : task === "completions" ? "prompt" : "input",
      );
    if (!embeddingModel && task === "embeddings")
      throw badRequest(`The endpoint '${routed.endpoint.name}' serves a generative model; it does not embed.`, "input");
    switch (task) {
      case "chat":
        return databricksChat(chatRequest.parse(raw), e, routed);
      case "completions":
        return databricksCompletion(completionRequest.parse(raw), e, routed);
      case "embeddings":
        return databricksEmbeddings(embeddingsRequest.parse(raw), e, routed);
      case "responses":
        refuseResponsesParameters(raw);
        return databricksResponses(responsesRequest.parse(raw), e, routed, sealer);
    }
  };

  // POST /serving-endpoints/{name}/invocations: the task comes from the served model and the body.
  // With /served-models/{entity}/ between, one served entity answers whatever the traffic split says
  // (Databricks' way to query the models behind an A/B endpoint one at a time).
  const invoke = async (request: FastifyRequest, reply: FastifyReply, name: string, entity?: string) => {
    const raw = request.body;
    if (!isObject(raw)) throw badRequest("The request body must be a JSON object.");
    const caller = access(request);
    if (!endpoints.mayQuery(name, caller.mayUse)) throw endpointRefused(name);
    // A `model` that names one of the endpoint's served entities is honoured: that entity answers,
    // as it would under /served-models/{entity}/, whatever the traffic split says.
    let target = entity;
    if (target === undefined && typeof raw.model === "string" && raw.model !== name && endpoints.get(name).live?.models.has(raw.model)) target = raw.model;
    const routed = await endpoints.route(name, target, caller);
    const embeddingModel = endpoints.taskOf(routed.model) === "llm/v1/embeddings";
    // `input` before `prompt`: a Responses body may hold both (`prompt` is its stored-template
    // reference), while a completions body never holds `input`.
    const task: Task | undefined =
      "messages" in raw ? "chat" : "input" in raw ? (embeddingModel ? "embeddings" : "responses") : "prompt" in raw ? "completions" : undefined;
    if (!task) throw badRequest("The body needs 'messages' (chat), 'prompt' (completions) or 'input' (embeddings, or responses on a generative model).");
    if (typeof raw.model === "string" && raw.model !== routed.endpoint.name) {
      if (entity !== undefined && raw.model !== entity)
        throw badRequest(`'model' is '${raw.model}', but this path queries the served entity '${entity}'.`, "model");
      if (!routed.endpoint.live?.models.has(raw.model))
        throw badRequest(`'model' is '${raw.model}', which is neither this endpoint nor one of its served entities.`, "model");
    }
    const e = env(request, reply);
    return sendResult(reply, e.signal, tagged(await run(task, raw, e, routed), routed));
  };
  scope.post<{ Params: { name: string } }>("/:name/invocations", (request, reply) => invoke(request, reply, request.params.name));
  scope.post<{ Params: { name: string; entity: string } }>("/:name/served-models/:entity/invocations", (request, reply) =>
    invoke(request, reply, request.params.name, request.params.entity),
  );

  // The paths OpenAI clients reach with base_url=<host>/serving-endpoints; `model` names the endpoint.
  const byModel = (path: string, task: Task) =>
    scope.post(path, async (request, reply) => {
      const raw = request.body;
      if (!isObject(raw)) throw badRequest("The request body must be a JSON object.");
      if (task === "responses") refuseResponsesParameters(raw);
      if (raw.model === undefined || raw.model === null || raw.model === "")
        throw badRequest("'model' is required here: it names the serving endpoint.", "model");
      if (typeof raw.model !== "string") throw badRequest(`Invalid 'model': expected a string naming the serving endpoint, got ${describeValue(raw.model)}.`, "model");
      const routed = await endpoints.route(raw.model, undefined, access(request));
      const e = env(request, reply);
      return sendResult(reply, e.signal, tagged(await run(task, raw, e, routed), routed));
    });
  byModel("/chat/completions", "chat");
  byModel("/completions", "completions");
  byModel("/embeddings", "embeddings");
  byModel("/responses", "responses");

}

/**
 * The control plane's routes read no query string, and those that act on their path alone (list,
 * get, delete) no body: a key there is a 400 naming it, as on every route that reads nothing,
 * rather than be dropped (`DELETE …/{name}` with `{"name": "other"}` deleted the path's endpoint).
 */
const NOTHING = z.strictObject({});
function readsOnly(request: FastifyRequest, what: "path" | "body"): void {
  NOTHING.parse(request.query ?? {});
  if (what === "path") NOTHING.parse(request.body ?? {});
}

async function controlPlane(scope: FastifyInstance, { service, endpoints }: DatabricksPluginOptions): Promise<void> {
  installErrorEnvelope(scope, DATABRICKS_ENVELOPE, { notFound: true });
  const view = (name: string) => endpointView(endpoints.get(name), endpoints, service.registry);
  // An API key limited to some models sees the endpoints it may query (one of their models is its),
  // as /v1/models lists only its models: the others' names and models are not its to know.
  const visible = (request: FastifyRequest, name: string) => {
    const ctx = requestContext(request, "databricks");
    return endpoints.mayQuery(name, (m) => service.mayUse(ctx, m));
  };
  scope.post("/", async (request) => {
    readsOnly(request, "body");
    const ep = await endpoints.create(createEndpointRequest.parse(request.body));
    return view(ep.name);
  });
  scope.get("/", async (request) => {
    readsOnly(request, "path");
    return {
      endpoints: endpoints
        .list()
        .filter((ep) => visible(request, ep.name))
        .map((ep) => endpointView(ep, endpoints, service.registry)),
    };
  });
  scope.get<{ Params: { name: string } }>("/:name", async (request) => {
    readsOnly(request, "path");
    // Asked before the lookup: a limited key gets its 403 for a name no endpoint has too, as the
    // data plane answers it, so a 404 does not tell it which endpoints exist.
    if (!visible(request, request.params.name)) throw endpointRefused(request.params.name);
    return view(request.params.name);
  });
  scope.put<{ Params: { name: string } }>("/:name/config", async (request) => {
    readsOnly(request, "body");
    await endpoints.updateConfig(request.params.name, endpointConfig.parse(request.body));
    return view(request.params.name);
  });
  scope.delete<{ Params: { name: string } }>("/:name", async (request) => {
    readsOnly(request, "path");
    await endpoints.delete(request.params.name);
    return {};
  });

}

// "." and ".." are left out, as from serving endpoints' entity names: clients and proxies fold them
// out of the paths that name the model (/api/2.0/plinth/models/{name}, /serving-endpoints/{name}).
const modelName = z
  .string()
  .regex(/^(?!\.\.?$)[A-Za-z0-9_.-]{1,63}$/, "model names are 1 to 63 letters, digits, '.', '_' or '-', and not '.' or '..'");

/** Runtime model loading, a Plinth extension beside the control plane. */
async function modelAdmin(scope: FastifyInstance, { service, endpoints, loader }: DatabricksPluginOptions): Promise<void> {
  installErrorEnvelope(scope, DATABRICKS_ENVELOPE, { notFound: true });
  const needLoader = () => {
    if (!loader) throw badRequest("This server cannot load models at run time.");
    return loader;
  };
  const modelView = (id: string) => {
    const m = service.registry.get(id);
    if (!m) throw new ApiError(404, `No model named '${id}' is served here.`);
    return { name: m.id, status: m.status, ...(m.error ? { error: m.error } : {}) };
  };
  scope.get("/", async (request) => {
    readsOnly(request, "path");
    const ctx = requestContext(request, "databricks");
    return { models: service.registry.list().filter((m) => service.mayUse(ctx, m.id)).map((m) => modelView(m.id)) };
  });
  scope.post("/", async (request) => {
    readsOnly(request, "body");
    const body = z.strictObject({ source: z.string().min(1), name: modelName.optional() }).parse(request.body);
    // The model becomes a pay-per-token endpoint of its name; /serving-endpoints/{name} could then
    // mean either, so the name of a provisioned endpoint is taken, as a second endpoint's would be.
    if (body.name !== undefined && endpoints.isProvisioned(body.name))
      throw new ApiError(409, `A serving endpoint named '${body.name}' already exists; load the model under another name.`, { code: "RESOURCE_ALREADY_EXISTS" });
    const id = await needLoader().load(body.source, { name: body.name });
    endpoints.addPayPerToken(id);
    return modelView(id);
  });
  scope.delete<{ Params: { name: string } }>("/:name", async (request) => {
    readsOnly(request, "path");
    const id = request.params.name;
    const users = endpoints.usersOf(id);
    if (users.length > 0)
      throw new ApiError(409, `The model '${id}' serves the endpoint(s) ${users.map((u) => `'${u.name}'`).join(", ")}; update or delete them first.`, {
        code: "RESOURCE_CONFLICT",
      });
    if (!service.registry.has(id)) throw new ApiError(404, `No model named '${id}' is served here.`);
    await needLoader().unload(id);
    endpoints.removePayPerToken(id);
    return {};
  });
}
