import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { AdmissionGate, AdmissionRequest, AdmissionTicket, GenerationHooks, RequestContext } from "../core/context.ts";
import { ApiError } from "../core/errors.ts";
import { setRequestKey } from "../http/access.ts";
import { internalId } from "../http/internal-id.ts";
import { dialectOf } from "../observability/metrics.ts";
import { type KeyCheck, type KeyEnd, type KeyRing, type Principal, presentedKey } from "./keys.ts";
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

/**
 * How often the keys of requests still running are read again, to end those of a key revoked from
 * another process (`plinth keys revoke`) or past its expiry. A revocation through the admin API
 * ends them at once.
 */
const RECHECK_MS = 1000;

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
  /**
   * Aborted when the request's key stops being valid while it runs (revoked, expired), with the
   * error it ends with; the generation service listens to it (the gate's `stopSignal`).
   */
  stop: AbortController | undefined;
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
  /** Rereads the keys of running requests (see RECHECK_MS) while any request of a key is tracked. */
  private rechecking: NodeJS.Timeout | undefined;

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
        const known = this.checkKey(request).ok;
        throw controlPlaneRefusal(this.opts.adminKey !== undefined, known);
      }
      if (required) {
        const check = this.checkKey(request);
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

  /** The request's key checked; a request carrying two keys is a 400 (see presentedKey). */
  private checkKey(request: FastifyRequest): KeyCheck {
    const presented = presentedKey(request);
    return presented.key === undefined ? { ok: false, reason: presented.why } : this.opts.keys.check(presented.key);
  }

  private isAdmin(request: FastifyRequest): boolean {
    const given = presentedKey(request).key;
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
      stop: principal ? new AbortController() : undefined,
    };
    this.tracked.set(t.internalId, t);
    if (principal) this.watchKeys();
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
        const t = this.tracked.get(ctx.internalId);
        // A request whose key was revoked after it arrived (while its body was read) starts nothing.
        if (t?.stop?.signal.aborted) throw t.stop.signal.reason;
        const p = t?.principal;
        if (p?.models && !p.models.includes(model)) {
          throw new ApiError(403, `This API key may not use the model '${model}'.`, { field: "model", code: "model_not_allowed" });
        }
      },
      stopSignal: (ctx: RequestContext) => this.tracked.get(ctx.internalId)?.stop?.signal,
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

  /**
   * Ends every request of the key still running: streams, JSON requests, background responses
   * (whose runs outlive their HTTP requests). A revoked or expired key is unusable at once, for
   * what it already started too. Each ends as a failed generation does, in its dialect's form (a
   * stream's error event, a background response `failed`), and is booked with what it had used.
   */
  endKey(id: string, why: KeyEnd): void {
    for (const t of this.tracked.values()) {
      if (t.principal?.id === id && t.stop && !t.stop.signal.aborted) t.stop.abort(keyEnded(why));
    }
  }

  /** Stops rereading keys (the server is closing). */
  close(): void {
    clearInterval(this.rechecking);
    this.rechecking = undefined;
  }

  private watchKeys(): void {
    if (this.rechecking) return;
    this.rechecking = setInterval(() => this.recheckKeys(), RECHECK_MS);
    this.rechecking.unref();
  }

  /** Ends the requests of keys revoked elsewhere or expired since; stops once no request of a key runs. */
  private recheckKeys(): void {
    const ids = new Set<string>();
    for (const t of this.tracked.values()) if (t.principal && t.stop && !t.stop.signal.aborted) ids.add(t.principal.id);
    if (ids.size === 0) return this.close();
    for (const id of ids) {
      let why: KeyEnd | undefined;
      try {
        why = this.opts.keys.standing(id);
      } catch {
        return; // the store is closing with the server; its requests are being ended anyway
      }
      if (why) this.endKey(id, why);
    }
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
  scheme: "The Authorization header does not use the Bearer scheme. Send the key as 'Authorization: Bearer KEY' or in the 'x-api-key' header.",
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

/** What a request still running gets when its key stops being valid: the 401 a new request would get, saying when. */
function keyEnded(why: KeyEnd): ApiError {
  const message = why === "revoked" ? "The API key was revoked while this request ran." : "The API key expired while this request ran.";
  return new ApiError(401, message, { code: "invalid_api_key", headers: { "www-authenticate": WWW_AUTHENTICATE } });
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
  // A spent budget is OpenAI's "insufficient_quota" in both type and code (a 429 all the same), so a
  // client that tells a quota from a rate limit by either field tells them apart here too.
  const [type, code] = refusal.limit === "budget" ? (["insufficient_quota", "insufficient_quota"] as const) : (["rate_limit_error", "rate_limit_exceeded"] as const);
  // The reason tells metrics which of the key's limits it was (to clients, a full queue reads the same).
  return new ApiError(429, refusal.message, { type, code, headers, reason: `key_${refusal.limit}` });
}

/** On the raw response, so they reach JSON answers, error envelopes and event streams alike. */
function setRateHeaders(reply: FastifyReply, state: RateState): void {
  for (const [name, value] of Object.entries(rateHeaders(state))) reply.raw.setHeader(name, value);
}
