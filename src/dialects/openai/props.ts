import type { FastifyRequest } from "fastify";
import { badRequest, modelNotFound } from "../../core/errors.ts";
import type { GenerationService } from "../../core/generation-service.ts";
import { VERSION } from "../../http/health.ts";
import { requestContext } from "../../http/respond.ts";
import { OPENAI_SAMPLING_DEFAULTS } from "./sampling-fields.ts";

/**
 * GET /props: llama-server's server-properties endpoint, which its web UI and clients written for
 * llama-server read at startup (the context size, the sampler defaults they then send back, the
 * slots, the chat template). A Plinth serves several models; as llama-server's router mode does,
 * `?model=` picks one, and without it the answer is the one model the caller may generate with,
 * or, with several, the router's answer (`role: "router"`, no model's settings), after which the
 * web UI asks for each model by name.
 */
export function serverProps(service: GenerationService, request: FastifyRequest<{ Querystring: Record<string, unknown> }>) {
  const ctx = requestContext(request, "openai");
  const asked = request.query?.model;
  if (asked !== undefined && typeof asked !== "string") throw badRequest("model must be given once, as a string.", "model");
  let id = asked === undefined || asked === "" ? undefined : asked;
  if (id === undefined) {
    const candidates = service.registry.list().filter((m) => service.mayUse(ctx, m.id) && !m.engine?.embeddings?.info.embeddingOnly);
    if (candidates.length !== 1) return routerProps();
    id = candidates[0].id;
  }
  // The key's model list first, as on GET /v1/models/{id}: a 403 for any name the key may not use.
  service.authorize(ctx, id);
  if (!service.registry.get(id)) throw modelNotFound(id).withParam("model");
  // 503 while it loads (or after it failed), as a request for it gets.
  const { engine } = service.registry.resolve(id);
  const d = engine.describe();
  return {
    default_generation_settings: {
      // The context one request can use, as llama-server's is one slot's.
      n_ctx: d.contextSize ?? 0,
      params: defaultParams(),
    },
    total_slots: d.parallel,
    // The name the model is served under: its file's path would show callers the server's disk (the
    // model list's `root` is the id for the same reason).
    model_alias: d.id,
    model_path: d.id,
    // Images are refused by the in-process engine; no audio or video input anywhere.
    modalities: { vision: false, audio: false, video: false },
    chat_template: d.chatTemplate ?? "",
    build_info: `plinth-${VERSION}`,
    // llama-server's /slots and POST /props are not served here.
    endpoint_slots: false,
    endpoint_props: false,
  };
}

/** llama-server's router answer: server-wide settings, no model's (its web UI then asks per model). */
function routerProps() {
  return {
    role: "router",
    model_alias: "plinth",
    model_path: "none",
    default_generation_settings: { params: {}, n_ctx: 0 },
    build_info: `plinth-${VERSION}`,
  };
}

/**
 * What a chat request that sends no sampling fields gets here (OpenAI's defaults), under
 * llama-server's names, with every sampler Plinth does not run at its off value: a client that
 * copies them into its requests (llama-server's web UI does) sends only what is taken.
 */
function defaultParams() {
  return {
    temperature: OPENAI_SAMPLING_DEFAULTS.temperature,
    top_p: OPENAI_SAMPLING_DEFAULTS.topP,
    // 0: the whole vocabulary (llama.cpp's "off").
    top_k: 0,
    min_p: 0,
    presence_penalty: 0,
    frequency_penalty: 0,
    repeat_penalty: 1,
    repeat_last_n: 64,
    typical_p: 1,
    dynatemp_range: 0,
    dynatemp_exponent: 1,
    xtc_probability: 0,
    xtc_threshold: 0.1,
    dry_multiplier: 0,
    dry_base: 1.75,
    dry_allowed_length: 2,
    dry_penalty_last_n: 64,
    mirostat: 0,
    mirostat_tau: 5,
    mirostat_eta: 0.1,
    top_n_sigma: -1,
    // A chat answer's budget is what the context leaves (-1, as llama-server writes it).
    max_tokens: -1,
    n_predict: -1,
    ignore_eos: false,
    stream: false,
    n_probs: 0,
    min_keep: 0,
    timings_per_token: false,
    post_sampling_probs: false,
    backend_sampling: false,
    lora: [],
  };
}
