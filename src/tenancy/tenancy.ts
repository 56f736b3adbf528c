import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { AdmissionGate, AdmissionRequest, AdmissionTicket, GenerationHooks, RequestContext } from "../core/context.ts";
import { ApiError } from "../core/errors.ts";
import { setRequestKey } from "../http/access.ts";
import { internalId } from "../http/internal-id.ts";
import { dialectOf } from "../observability/metrics.ts";
import { type KeyCheck, type KeyRing, type Principal, presentedKey } from "./keys.ts";
import type { LedgerWriter } from "./ledger.ts";
import { type Decision, type Lease, type Limiter, rateHeaders, type Refusal, type RateState } from "./limiter.ts";

export interface TenancyOptions {
  keys: KeyRing;
  limiter: Limiter;
  /** The usage ledger (with `keepsRows` false only keys' tokens are charged); none: nothing is written. */
  ledger?: LedgerWriter;
  /** Whether GET /metrics needs a key when keys are configured. */
  metricsNeedKey: boolean;
  /**
   * The admin key (--admin-key). When keys are configured, changing what the server serves (creating,
   * updating or deleting serving endpoints, loading or unloading models) needs it: an API key may
   * use models, not decide which ones run.
   */
  adminKey?: string;
  /**
   * Whether a name is a model this server has. A request refused before it reached a model is booked
   * under the model its body named only when there is one: the names a client invents would each
   * become a group of their own in /admin/usage.
   */
  knownModel?: (name: string) => boolean;
}

/** Routes that change what the server serves (any method but GET under these prefixes). */
const CONTROL_PLANE = ["/api/2.0/serving-endpoints", "/api/2.0/plinth/"];

/** What is known about one HTTP request while it runs, until its ledger row is written. */
interface Tracked {
  /** The server's own id of the request: what `tracked` is keyed by (see internal-id.ts). */
  internalId: string;
  /** The request id the ledger row names (the client's x-request-id when it gave one). */
  requestId: string;
  principal: Principal | undefined;
  reply: FastifyReply;
  method: string;
  endpoint: string;
  start: number;
  lease: Lease | undefined;
  dialect: string | undefined;
  namespace: string | undefined;
  model: string | undefined;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  ttftMs: number | null;
  /** Generations admitted and not yet finished (a background response outlives its HTTP request). */
  running: number;
  status: number | undefined;
}

/**
 * API keys, per-key limits and the usage ledger, attached to the server in three places:
 *
 * - a request hook on the root of the app (so it covers every dialect, present and future) that
 *   checks the key, counts the request against its rate and concurrency limits and sets OpenAI's
 *   `x-ratelimit-*` headers. It throws ApiErrors; Fastify hands a hook's error to the error handler
 *   of the route's own scope, so each dialect renders the 401 or 429 in its own envelope.
 * - an admission gate in the generation service: a key's model list (403) and its token limits,
 *   reserved at admission (prompt + the most the request may generate) and settled at the end.
 * - generation hooks that gather each request's usage for its ledger row.
 */
export class Tenancy {
  /** By internal id, never by request id: two requests may send the same x-request-id. */
  private readonly tracked = new Map<string, Tracked>();

  constructor(private readonly opts: TenancyOptions) {}

  /** Routes anyone may call: health, metrics when so configured, and the admin API (its own key). */
  private isOpen(route: string | undefined, url: string): boolean {
    if (route === "/health" || route === "/ping" || route === "/version") return true;
    // The web console's page and files: public like any web page; its API calls carry their own key.
    if (route === "/" || route === "/ui/:file") return true;
    if (route === "/metrics") return !this.opts.metricsNeedKey;
    // The admin API checks the admin key itself, on its unknown paths too (its own 404 handler):
    // an operator who mistypes a path with the admin key gets a 404, not "The API key is not valid".
    const path = route ?? url.split("?", 1)[0];
    return path === "/admin" || path.startsWith("/admin/");
  }

  install(app: FastifyInstance): void {
    app.addHook("onRequest", async (request, reply) => {
      const route = request.routeOptions.url;
      if (this.isOpen(route, request.url)) return;
      let principal: Principal | undefined;
      const required = this.opts.keys.required;
      // HEAD is a GET without its body (Fastify answers it from the GET route): a read, as GET is.
      const read = request.method === "GET" || request.method === "HEAD";
      if (required && !read && CONTROL_PLANE.some((p) => route?.startsWith(p))) {
        // The admin key, not an API key: no limits or ledger row for operators' calls.
        if (this.isAdmin(request)) return;
        // Who is asking decides the status: no key or a bad one is a 401 (authenticate, with the
        // admin key), a good API key a 403 (known, but not allowed to change this).
        const known = this.opts.keys.check(presentedKey(request.headers)).ok;
        throw controlPlaneRefusal(this.opts.adminKey !== undefined, known);
      }
      if (required) {
        const check = this.opts.keys.check(presentedKey(request.headers));
        if (!check.ok) {
          // The operator's key reads what it may change (endpoint states after a change of its own)
          // and the metrics; as for its changes, no limits and no ledger row.
          if ((route === "/metrics" || (read && CONTROL_PLANE.some((p) => route?.startsWith(p)))) && this.isAdmin(request)) return;
          throw unauthorized(check);
        }
        principal = check.principal;
        setRequestKey(request, principal.id, principal.name);
      }
      // Scrapes are not usage: they neither count against limits nor write ledger rows.
      if (route === "/metrics") return;
      // Without a key, a request is tracked only for its ledger row.
      if (!principal && !this.opts.ledger?.keepsRows) return;
      const t = this.track(request, reply, route, principal);
      if (!principal) return;
      // Reads (a model list, polling a background response) and cancels take no concurrent place:
      // only requests that may generate or embed do, so a key at its limit can still watch and stop
      // what it runs.
      const decision = await this.opts.limiter.begin(principal, request.method === "POST" && !route?.endsWith("/cancel"));
      setRateHeaders(reply, decision.state);
      if (!decision.ok) throw limitError(decision.refusal, decision.state);
      t.lease = decision.value;
    });
  }

  private isAdmin(request: FastifyRequest): boolean {
    const given = presentedKey(request.headers);
    if (this.opts.adminKey === undefined || given === undefined) return false;
    const a = createHash("sha256").update(given, "utf8").digest();
    const b = createHash("sha256").update(this.opts.adminKey, "utf8").digest();
    return timingSafeEqual(a, b);
  }

  private track(request: FastifyRequest, reply: FastifyReply, route: string | undefined, principal: Principal | undefined): Tracked {
    const t: Tracked = {
      internalId: internalId(request),
      requestId: String(request.id),
      principal,
      reply,
      method: request.method,
      endpoint: route ?? "unmatched",
      start: performance.now(),
      lease: undefined,
      dialect: undefined,
      namespace: undefined,
      model: undefined,
      promptTokens: 0,
      cachedTokens: 0,
      completionTokens: 0,
      reasoningTokens: 0,
      ttftMs: null,
      running: 0,
      status: undefined,
    };
    this.tracked.set(t.internalId, t);
    reply.raw.once("close", () => {
      // A client that left before anything was sent is booked as nginx's 499 (client closed request).
      t.status = reply.raw.headersSent ? reply.raw.statusCode : 499;
      this.maybeRecord(t);
    });
    return t;
  }

  /**
   * Once the response has ended and its generations have finished: gives the key's concurrent place
   * back and writes the request's ledger row. Both wait for the generations: a background response
   * answers at once and runs on, and gave its place back with its answer, so a key limited to one
   * request at a time could run any number of them.
   */
  private maybeRecord(t: Tracked): void {
    if (t.status === undefined || t.running > 0) return;
    t.lease?.release();
    this.tracked.delete(t.internalId);
    this.opts.ledger?.write({
      at: Date.now(),
      requestId: t.requestId,
      keyId: t.principal?.id ?? null,
      namespace: t.namespace === undefined ? null : createHash("sha256").update(t.namespace).digest("hex").slice(0, 16),
      dialect: t.dialect ?? dialectOf(t.endpoint),
      method: t.method,
      endpoint: t.endpoint,
      model: t.model ?? this.knownModelOf(t.reply.request.body) ?? this.knownModelOfPath(t.reply.request.params),
      promptTokens: t.promptTokens,
      cachedTokens: t.cachedTokens,
      completionTokens: t.completionTokens,
      reasoningTokens: t.reasoningTokens,
      status: t.status,
      ttftMs: t.ttftMs === null ? null : Math.round(t.ttftMs),
      durationMs: Math.round(performance.now() - t.start),
    });
  }

  /**
   * A Databricks route names its endpoint in the path (`/serving-endpoints/{name}/…`): a request
   * refused before its body was read (a key's rpm or concurrency) is booked under it when it is a model.
   */
  private knownModelOfPath(params: unknown): string | null {
    const name = params && typeof params === "object" ? (params as { name?: unknown }).name : undefined;
    return typeof name === "string" && name.length <= 200 && (this.opts.knownModel?.(name) ?? false) ? name : null;
  }

  private knownModelOf(body: unknown): string | null {
    const named = modelOf(body);
    return named !== null && (this.opts.knownModel?.(named) ?? true) ? named : null;
  }

  /** The generation service's admission gate: model lists and token limits. */
  gate(): AdmissionGate {
    return {
      authorize: (ctx: RequestContext, model: string) => {
        const p = this.tracked.get(ctx.internalId)?.principal;
        if (p?.models && !p.models.includes(model)) {
          throw new ApiError(403, `This API key may not use the model '${model}'.`, { field: "model", code: "model_not_allowed" });
        }
      },
      countsTokens: (ctx: RequestContext) => {
        const p = this.tracked.get(ctx.internalId)?.principal;
        return p !== undefined && (p.limits.tpm !== null || p.limits.budgetTokens !== null);
      },
      admit: async (ctx: RequestContext, req: AdmissionRequest): Promise<AdmissionTicket | undefined> => {
        const t = this.tracked.get(ctx.internalId);
        const p = t?.principal;
        if (!t || !p || (p.limits.tpm === null && p.limits.budgetTokens === null)) return undefined;
        const output = Number.isFinite(req.maxCompletionTokens) ? req.maxCompletionTokens : 0;
        const decision: Decision<{ settle(used: number): void }> = await this.opts.limiter.reserve(p, req.promptTokens + output, output > 0);
        if (!t.reply.raw.headersSent) setRateHeaders(t.reply, decision.state);
        if (!decision.ok) throw limitError(decision.refusal, decision.state);
        return (used: number) => decision.value.settle(used);
      },
    };
  }

  /** Generation hooks that gather each request's usage for the ledger. */
  hooks(): GenerationHooks {
    return {
      admitted: (ctx, info) => {
        const t = this.tracked.get(ctx.internalId);
        if (!t) return;
        t.running++;
        t.model = info.model;
        t.dialect = ctx.dialect;
        t.namespace = ctx.namespace;
      },
      firstToken: (ctx) => {
        const t = this.tracked.get(ctx.internalId);
        if (t && t.ttftMs === null) t.ttftMs = performance.now() - t.start;
      },
      finished: (ctx, outcome) => {
        const t = this.tracked.get(ctx.internalId);
        if (!t) return;
        t.running--;
        // A request that failed or was cancelled midway is booked with what it had used.
        const used = outcome.usage ?? outcome.spent;
        t.promptTokens += used.promptTokens;
        t.cachedTokens += used.cachedTokens;
        t.completionTokens += used.completionTokens;
        t.reasoningTokens += used.reasoningTokens;
        this.maybeRecord(t);
      },
      embedded: (ctx, info) => {
        const t = this.tracked.get(ctx.internalId);
        if (!t) return;
        t.model = info.model;
        t.dialect = ctx.dialect;
        t.namespace = ctx.namespace;
        t.promptTokens += info.tokens;
      },
    };
  }
}

const modelOf = (body: unknown): string | null => {
  const m = body && typeof body === "object" ? (body as { model?: unknown }).model : undefined;
  return typeof m === "string" ? m.slice(0, 200) : null;
};

const REASONS: Record<Exclude<KeyCheck, { ok: true }>["reason"], string> = {
  missing: "No API key was given. Send it as 'Authorization: Bearer KEY' or in the 'x-api-key' header.",
  unknown: "The API key is not valid.",
  revoked: "The API key has been revoked.",
  expired: "The API key has expired.",
};

/** A change of serving endpoints or loaded models without the admin key, which alone may make one. */
function controlPlaneRefusal(adminKeySet: boolean, apiKeyKnown: boolean): ApiError {
  if (!adminKeySet)
    return new ApiError(403, "Changing serving endpoints or loaded models is off while API keys are on and no --admin-key is set.", { code: "permission_denied" });
  if (apiKeyKnown)
    return new ApiError(403, "Changing serving endpoints or loaded models needs the admin key (--admin-key); an API key may read them, not change them.", {
      code: "permission_denied",
    });
  return new ApiError(401, "Changing serving endpoints or loaded models needs the admin key (--admin-key).", {
    code: "invalid_api_key",
    headers: { "www-authenticate": WWW_AUTHENTICATE },
  });
}

function unauthorized(check: Exclude<KeyCheck, { ok: true }>): ApiError {
  return new ApiError(401, REASONS[check.reason], { code: "invalid_api_key", headers: { "www-authenticate": WWW_AUTHENTICATE } });
}

/** What every 401 says it wants (RFC 9110): a Bearer token. */
const WWW_AUTHENTICATE = 'Bearer realm="plinth"';

/**
 * A refusal as a 429: `Retry-After` (whole seconds) and `retry-after-ms` when waiting helps, which
 * the OpenAI SDKs read before retrying; `x-should-retry: false` when it does not (a spent budget, a
 * request larger than the limit), which they honour.
 */
function limitError(refusal: Refusal, state: RateState): ApiError {
  const headers: Record<string, string> = { ...rateHeaders(state) };
  if (refusal.retryAfterMs === null) headers["x-should-retry"] = "false";
  else {
    headers["retry-after"] = String(Math.max(1, Math.ceil(refusal.retryAfterMs / 1000)));
    headers["retry-after-ms"] = String(Math.ceil(refusal.retryAfterMs));
  }
  const code = refusal.limit === "budget" ? "insufficient_quota" : "rate_limit_exceeded";
  // The reason tells metrics which of the key's limits it was (to clients, a full queue reads the same).
  return new ApiError(429, refusal.message, { code, headers, reason: `key_${refusal.limit}` });
}

/** On the raw response, so they reach JSON answers, error envelopes and event streams alike. */
function setRateHeaders(reply: FastifyReply, state: RateState): void {
  for (const [name, value] of Object.entries(rateHeaders(state))) reply.raw.setHeader(name, value);
}
