import type { FastifyInstance, FastifyRequest } from "fastify";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { GenerationHooks, RequestContext } from "../core/context.ts";
import type { GenerationService } from "../core/generation-service.ts";
import type { EngineStats } from "../core/engine.ts";
import type { ModelRegistry } from "../core/registry.ts";
import type { FinishReason } from "../core/types.ts";
import { toApiError } from "../http/to-api-error.ts";
import { notFoundCode } from "../http/error-envelope.ts";
import type { Refusal } from "../http/client-error.ts";

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), so dashboards built for vLLM read these as is.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

/** vLLM's 1-2-5 token buckets (it stops them at the model's context; here at a million tokens). */
export function tokenBuckets(max = 1_000_000): number[] {
  const out: number[] = [];
  for (let exp = 1; ; exp *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * exp > max) return out;
      out.push(m * exp);
    }
  }
}

type PromptCacheStats = NonNullable<EngineStats["promptCache"]>;

/** What is tracked for one generation request between `admitted` and `finished`: a few numbers. */
interface Live {
  model: string;
  promptTokens: number;
  admittedAt: number;
  /** When the service got the request: the start of the time to first token and of the whole request. */
  receivedAt: number;
  startedAt: number;
  firstTokenAt: number;
  lastTokenAt: number;
  finishReason: FinishReason | undefined;
  itl: Histogram.Internal<"model_name">;
}

/** Per-request facts for the request log, by internal id (see request-log.ts). */
export interface GenerationFacts {
  model: string;
  namespace?: string;
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
  ttftMs?: number;
  finishReason?: string;
  errorCode?: string;
}

const now = () => performance.now();

/**
 * How often the event-loop lag histogram (`plinth_nodejs_eventloop_lag_*`) takes a sample. prom-client's
 * default, 10 ms, is a timer that wakes the thread 100 times a second whether or not anything runs:
 * two `epoll_pwait` calls per wake, about one extra turn of the event loop per streamed token (and
 * on a machine whose cores the decode threads fill, a decode thread put off each time). Ten samples
 * a second still give a 15 s scrape 150 of them; a stall shorter than this is seen only when a
 * sample falls inside it.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * Plinth's Prometheus metrics, in a registry of their own: vLLM's names where the meaning matches
 * (so vLLM dashboards and alerts work unchanged), Plinth's own under `plinth_`. Generation is observed
 * through the service's hooks; HTTP requests through an onResponse hook; queue depth and model state
 * are read from the registry at scrape time.
 */
export class PlinthMetrics {
  readonly registry = new Registry();
  /** Facts per internal id (see http/internal-id.ts) for the request log; filled by the hooks, taken by `takeFacts`. */
  private readonly facts = new Map<string, GenerationFacts>();
  private readonly live = new Map<RequestContext, Live>();
  /** Generations admitted and not yet ended, by internal id; and who waits for them to end. */
  private readonly running = new Map<string, number>();
  private readonly waiters = new Map<string, Array<() => void>>();

  private readonly promptTokens: Counter<"model_name">;
  private readonly generationTokens: Counter<"model_name">;
  private readonly success: Counter<"model_name" | "finished_reason">;
  private readonly ttft: Histogram<"model_name">;
  private readonly itl: Histogram<"model_name">;
  private readonly e2e: Histogram<"model_name">;
  private readonly queueTime: Histogram<"model_name">;
  private readonly requestPromptTokens: Histogram<"model_name">;
  private readonly requestGenerationTokens: Histogram<"model_name">;
  private readonly inferenceTime: Histogram<"model_name">;
  private readonly prefillTime: Histogram<"model_name">;
  private readonly decodeTime: Histogram<"model_name">;
  private readonly paramsN: Histogram<"model_name">;
  private readonly paramsMaxTokens: Histogram<"model_name">;
  private readonly preemptions: Counter<"model_name">;
  private readonly prefixQueries: Counter<"model_name">;
  private readonly prefixHits: Counter<"model_name">;
  private readonly failures: Counter<"model_name" | "code">;
  private readonly httpRequests: Counter<"dialect" | "route" | "method" | "status">;
  private readonly rateLimited: Counter<"dialect" | "reason">;
  private readonly rejected: Counter<"dialect" | "status" | "code">;
  private readonly embedInputs: Counter<"model_name">;
  private readonly embedTokens: Counter<"model_name">;
  private readonly loadSeconds: Gauge<"model_name">;
  private readonly errorCodes = new WeakMap<FastifyRequest, string>();
  /** Requests refused by a limit of their key (the 429 reason `key_requests`, `key_tokens`, …). */
  private readonly keyLimits = new WeakMap<FastifyRequest, string>();
  private readonly counted = new WeakSet<FastifyRequest>();

  constructor(models: ModelRegistry, opts: { defaultMetrics?: boolean; store?: { sizeBytes(): number } } = {}) {
    const registers = [this.registry];
    if (opts.defaultMetrics !== false) {
      collectDefaultMetrics({ register: this.registry, prefix: "plinth_", eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    }

    new Gauge({
      name: "vllm:num_requests_running",
      help: "Number of requests in model execution batches (choices holding a sequence).",
      labelNames: ["model_name"],
      registers,
      collect() {
        this.reset();
        for (const m of models.list()) if (m.scheduler) this.set({ model_name: m.id }, m.scheduler.busy - (m.engine?.waitingInside?.() ?? 0));
      },
    });
    new Gauge({
      name: "vllm:num_requests_waiting",
      help: "Number of requests waiting to be processed (choices waiting for a sequence).",
      labelNames: ["model_name"],
      registers,
      collect() {
        this.reset();
        for (const m of models.list()) if (m.scheduler) this.set({ model_name: m.id }, m.scheduler.queued + (m.engine?.waitingInside?.() ?? 0) + (m.engine?.waitingToOpen?.() ?? 0));
      },
    });
    new Gauge({
      name: "plinth_model_state",
      help: "1 for the state each model is in (loading, ready, failed), 0 for the others.",
      labelNames: ["model_name", "state"],
      registers,
      collect() {
        this.reset();
        for (const m of models.list())
          for (const state of ["loading", "ready", "failed"]) this.set({ model_name: m.id, state }, m.status === state ? 1 : 0);
      },
    });
    // Remote models: each upstream replica's state, load and outcomes.
    const replicas = () => models.list().flatMap((m) => (m.engine?.replicas?.() ?? []).map((r) => ({ model: m.id, ...r })));
    new Gauge({
      name: "plinth_upstream_replica_state",
      help: "1 for the state each upstream replica is in (up, ejected, half-open), 0 for the others.",
      labelNames: ["model_name", "replica", "state"],
      registers,
      collect() {
        this.reset();
        for (const r of replicas())
          for (const state of ["up", "ejected", "half-open"]) this.set({ model_name: r.model, replica: r.name, state }, r.state === state ? 1 : 0);
      },
    });
    new Gauge({
      name: "plinth_upstream_replica_outstanding",
      help: "Requests each upstream replica is running now.",
      labelNames: ["model_name", "replica"],
      registers,
      collect() {
        this.reset();
        for (const r of replicas()) this.set({ model_name: r.model, replica: r.name }, r.outstanding);
      },
    });
    new Gauge({
      name: "plinth_upstream_replica_slots",
      help: "Requests each upstream replica runs at once (configured, or as the replica reports it); more wait in Plinth.",
      labelNames: ["model_name", "replica"],
      registers,
      collect() {
        this.reset();
        for (const r of replicas()) this.set({ model_name: r.model, replica: r.name }, r.slots);
      },
    });
    // A counter (it only grows), read from the pool's own totals at each scrape.
    new Counter({
      name: "plinth_upstream_replica_requests_total",
      help: "Requests each upstream replica completed (result=served) and attempts it failed (result=failed), since start.",
      labelNames: ["model_name", "replica", "result"],
      registers,
      collect() {
        this.reset();
        for (const r of replicas()) {
          this.inc({ model_name: r.model, replica: r.name, result: "served" }, r.served);
          this.inc({ model_name: r.model, replica: r.name, result: "failed" }, r.failed);
        }
      },
    });
    new Gauge({
      name: "vllm:kv_cache_usage_perc",
      help: "KV-cache usage: the share of the model's KV cells held by running requests (1 = full).",
      labelNames: ["model_name"],
      registers,
      collect() {
        this.reset();
        for (const m of models.list()) {
          const stats = m.engine?.stats?.();
          if (!stats || !m.scheduler || stats.kvTokensPerSlot === 0) continue;
          // Like vLLM, cells a finished request left behind (kept only for prompt reuse) count as free.
          let held = 0;
          stats.kvTokens.forEach((tokens, slot) => {
            if (m.scheduler!.isBusy(slot)) held += tokens;
          });
          this.set({ model_name: m.id }, held / (stats.kvTokensPerSlot * stats.kvTokens.length));
        }
      },
    });
    // Saved prompt states, read from the engines at scrape time. The evictions counter's value lives
    // in the engine (it only ever grows), so it is set from there like the gauges.
    const promptCache = (make: typeof Gauge | typeof Counter, name: string, help: string, read: (c: PromptCacheStats) => number) =>
      new make({
        name,
        help,
        labelNames: ["model_name"],
        registers,
        collect(this: Gauge<"model_name"> | Counter<"model_name">) {
          this.reset();
          for (const m of models.list()) {
            const cache = m.engine?.stats?.().promptCache;
            if (!cache) continue;
            if (this instanceof Gauge) this.set({ model_name: m.id }, read(cache));
            else this.inc({ model_name: m.id }, read(cache));
          }
        },
      });
    promptCache(Gauge, "plinth_prompt_cache_bytes", "Bytes of saved prompt states kept for reuse (the --cache-ram budget's use).", (c) => c.bytes);
    promptCache(Gauge, "plinth_prompt_cache_entries", "Saved prompt states kept for reuse.", (c) => c.entries);
    promptCache(Counter, "plinth_prompt_cache_evictions_total", "Saved prompt states dropped to stay within --cache-ram.", (c) => c.evictions);
    const store = opts.store;
    new Gauge({
      name: "plinth_store_bytes",
      help: "Bytes the store (stored responses, conversations, chat completions) takes on disk.",
      registers,
      collect() {
        if (store) this.set(store.sizeBytes());
      },
    });
    this.loadSeconds = new Gauge({
      name: "plinth_model_load_seconds",
      help: "Seconds the model took to load (download included).",
      labelNames: ["model_name"],
      registers,
    });

    const counter = <L extends string>(name: string, help: string, labelNames: L[]) => new Counter<L>({ name: `${name}_total`, help, labelNames, registers });
    // A model's counters exist from the moment it is served, at 0, as vLLM's do: a panel or an
    // alert built on them reads 0 before the first request, not "no data".
    const modelCounter = (name: string, help: string) =>
      new Counter<"model_name">({
        name: `${name}_total`,
        help,
        labelNames: ["model_name"],
        registers,
        collect() {
          for (const m of models.list()) this.inc({ model_name: m.id }, 0);
        },
      });
    const histogram = (name: string, help: string, buckets: number[]) =>
      new Histogram<"model_name">({ name, help, labelNames: ["model_name"], buckets, registers });

    this.promptTokens = modelCounter("vllm:prompt_tokens", "Number of prefill tokens processed (cached ones included).");
    this.generationTokens = modelCounter("vllm:generation_tokens", "Number of generation tokens processed.");
    this.success = counter("vllm:request_success", "Count of successfully processed requests.", ["model_name", "finished_reason"]);
    this.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS);
    this.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS);
    this.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS);
    this.queueTime = histogram("vllm:request_queue_time_seconds", "Histogram of time spent waiting for a sequence, in seconds.", LATENCY_BUCKETS);
    this.requestPromptTokens = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed, per request.", tokenBuckets());
    this.requestGenerationTokens = histogram("vllm:request_generation_tokens", "Number of generation tokens processed, per request.", tokenBuckets());
    this.inferenceTime = histogram("vllm:request_inference_time_seconds", "Histogram of time from a request's first sequence to its end (prefill and decode), in seconds.", LATENCY_BUCKETS);
    this.prefillTime = histogram("vllm:request_prefill_time_seconds", "Histogram of time from a request's first sequence to its first token, in seconds.", LATENCY_BUCKETS);
    this.decodeTime = histogram("vllm:request_decode_time_seconds", "Histogram of time from a request's first token to its end, in seconds.", LATENCY_BUCKETS);
    this.paramsN = histogram("vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20]);
    this.paramsMaxTokens = histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter (what the context leaves when it is not sent).", tokenBuckets());
    // A running request keeps its sequence until it ends: nothing is ever preempted, so this stays 0.
    // It is exported so that vLLM dashboards and alerts on it read 0 rather than "no data".
    this.preemptions = modelCounter("vllm:num_preemptions", "Cumulative number of preemptions (Plinth never preempts a running request).");
    this.prefixQueries = modelCounter("vllm:prefix_cache_queries", "Prefix cache queries, in prompt tokens.");
    this.prefixHits = modelCounter("vllm:prefix_cache_hits", "Prefix cache hits, in prompt tokens reused from a cache.");
    this.failures = counter("plinth_generation_failures", "Admitted generation requests that ended in an error (client disconnects included), by error code.", ["model_name", "code"]);
    this.httpRequests = counter("plinth_http_requests", "HTTP requests answered, by dialect, route pattern, method and status code.", ["dialect", "route", "method", "status"]);
    this.rateLimited = counter("plinth_rate_limited_requests", "Requests refused with 429, by reason (the error code).", ["dialect", "reason"]);
    this.rejected = counter("plinth_rejected_requests", "Requests answered with a 4xx or 5xx status, by error code.", ["dialect", "status", "code"]);
    this.embedInputs = counter("plinth_embedding_inputs", "Inputs embedded.", ["model_name"]);
    this.embedTokens = counter("plinth_embedding_tokens", "Tokens embedded (special tokens included).", ["model_name"]);
  }

  /** Records how long a model took to load. */
  modelLoaded(model: string, seconds: number): void {
    this.loadSeconds.set({ model_name: model }, seconds);
  }

  /** The generation hooks that feed the vllm: metrics (and the request log's facts). */
  hooks(): GenerationHooks {
    return {
      admitted: (ctx, info) => {
        const t = now();
        const promptTokens = info.promptTokens.reduce((a, b) => a + b, 0);
        this.live.set(ctx, {
          model: info.model,
          promptTokens,
          admittedAt: t,
          receivedAt: info.receivedAt,
          startedAt: 0,
          firstTokenAt: 0,
          lastTokenAt: 0,
          finishReason: undefined,
          itl: this.itl.labels(info.model),
        });
        this.promptTokens.inc({ model_name: info.model }, promptTokens);
        this.prefixQueries.inc({ model_name: info.model }, promptTokens);
        this.preemptions.inc({ model_name: info.model }, 0);
        for (const p of info.params) {
          this.paramsN.observe({ model_name: info.model }, p.n);
          this.paramsMaxTokens.observe({ model_name: info.model }, p.maxTokens);
        }
        this.remember(ctx.internalId, { model: info.model, namespace: ctx.namespace, promptTokens });
        this.running.set(ctx.internalId, (this.running.get(ctx.internalId) ?? 0) + 1);
      },
      started: (ctx) => {
        const l = this.live.get(ctx);
        if (!l || l.startedAt !== 0) return;
        l.startedAt = now();
        this.queueTime.observe({ model_name: l.model }, (l.startedAt - l.admittedAt) / 1000);
      },
      firstToken: (ctx) => {
        const l = this.live.get(ctx);
        if (!l) return;
        l.firstTokenAt = now();
        l.lastTokenAt = -1; // the event that carries the first token follows: it starts the intervals
        this.ttft.observe({ model_name: l.model }, (l.firstTokenAt - l.receivedAt) / 1000);
        const f = this.facts.get(ctx.internalId);
        if (f) f.ttftMs = Math.round(l.firstTokenAt - l.receivedAt);
      },
      event: (ctx, ev) => {
        // Per token: a map lookup, a timestamp and one histogram observation; nothing else.
        if (ev.type === "text" || ev.type === "reasoning" || ev.type === "tool-call-arguments") {
          const l = this.live.get(ctx);
          if (!l || l.firstTokenAt === 0) return;
          const t = now();
          if (l.lastTokenAt >= 0) l.itl.observe((t - l.lastTokenAt) / 1000);
          l.lastTokenAt = t;
        } else if (ev.type === "finish") {
          const l = this.live.get(ctx);
          if (l && l.finishReason === undefined) l.finishReason = ev.reason;
        }
      },
      finished: (ctx, outcome) => {
        const l = this.live.get(ctx);
        if (!l) return;
        this.live.delete(ctx);
        const model_name = l.model;
        const f = this.facts.get(ctx.internalId);
        if (outcome.usage === undefined) {
          const code = errorCode(outcome.error);
          this.failures.inc({ model_name, code });
          // What it generated before it ended was generated all the same (vLLM counts it too).
          const { spent } = outcome;
          this.generationTokens.inc({ model_name }, spent.completionTokens);
          this.prefixHits.inc({ model_name }, spent.cachedTokens);
          if (f) {
            f.errorCode = code;
            // As the ledger books it: no prompt for a request that ended before it started.
            f.promptTokens = spent.promptTokens;
            f.completionTokens = spent.completionTokens;
            f.cachedTokens = spent.cachedTokens;
          }
          this.ended(ctx.internalId);
          return;
        }
        const { usage } = outcome;
        // A remote engine may learn the prompt's size only from the upstream's final usage (it
        // skips /tokenize when nothing needs the count up front): count what admission could not.
        const unseen = usage.promptTokens - l.promptTokens;
        if (unseen > 0) {
          this.promptTokens.inc({ model_name }, unseen);
          this.prefixQueries.inc({ model_name }, unseen);
        }
        this.generationTokens.inc({ model_name }, usage.completionTokens);
        this.prefixHits.inc({ model_name }, usage.cachedTokens);
        this.success.inc({ model_name, finished_reason: l.finishReason ?? "stop" });
        const end = now();
        this.e2e.observe({ model_name }, (end - l.receivedAt) / 1000);
        if (l.startedAt > 0) {
          this.inferenceTime.observe({ model_name }, (end - l.startedAt) / 1000);
          // A request that generated nothing (its first token an end of turn) has no decode phase.
          if (l.firstTokenAt > 0) {
            this.prefillTime.observe({ model_name }, Math.max(0, l.firstTokenAt - l.startedAt) / 1000);
            this.decodeTime.observe({ model_name }, (end - l.firstTokenAt) / 1000);
          }
        }
        this.requestPromptTokens.observe({ model_name }, usage.promptTokens);
        this.requestGenerationTokens.observe({ model_name }, usage.completionTokens);
        if (f) {
          f.promptTokens = usage.promptTokens;
          f.cachedTokens = usage.cachedTokens;
          f.completionTokens = usage.completionTokens;
          f.finishReason = l.finishReason ?? "stop";
        }
        this.ended(ctx.internalId);
      },
      embedded: (ctx, info) => {
        this.embedInputs.inc({ model_name: info.model }, info.inputs);
        this.embedTokens.inc({ model_name: info.model }, info.tokens);
        this.remember(ctx.internalId, { model: info.model, namespace: ctx.namespace, promptTokens: info.tokens });
      },
    };
  }

  /**
   * Calls `then` once the request's generation has ended (at once if it has none running), so a
   * line written for a client that went away carries what the generation used until it noticed.
   * Called again after `maxWaitMs` whatever happens, so the line is never lost.
   */
  afterGeneration(internalId: string, then: () => void, maxWaitMs = 5_000): void {
    if (!this.running.has(internalId)) return then();
    let done = false;
    const once = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      then();
    };
    const timer = setTimeout(once, maxWaitMs);
    const waiting = this.waiters.get(internalId);
    if (waiting) waiting.push(once);
    else this.waiters.set(internalId, [once]);
  }

  private ended(internalId: string): void {
    const left = (this.running.get(internalId) ?? 1) - 1;
    if (left > 0) return void this.running.set(internalId, left);
    this.running.delete(internalId);
    const waiting = this.waiters.get(internalId);
    this.waiters.delete(internalId);
    for (const w of waiting ?? []) w();
  }

  /** The generation facts of a request, once (the request log takes them as the response ends). */
  takeFacts(internalId: string): GenerationFacts | undefined {
    const f = this.facts.get(internalId);
    this.facts.delete(internalId);
    return f;
  }

  private remember(internalId: string, f: GenerationFacts): void {
    // Requests that outlive their response (background runs) are never taken: keep the map bounded.
    if (this.facts.size >= 10_000) this.facts.delete(this.facts.keys().next().value!);
    this.facts.set(internalId, f);
  }

  /** The error code a request was refused with, if it was (for the request log). */
  errorCodeOf(request: FastifyRequest): string | undefined {
    return this.errorCodes.get(request) ?? notFoundCode(request);
  }

  private countAnswer(request: FastifyRequest, status: number): void {
    // Once: an answer that fails while being written can reach both onResponse and close.
    if (this.counted.has(request)) return;
    this.counted.add(request);
    const route = request.routeOptions.url ?? "unmatched";
    const dialect = dialectOf(route);
    this.httpRequests.inc({ dialect, route, method: request.method, status: String(status) });
    if (status >= 400) {
      const code = status === 499 ? "client_closed" : (this.errorCodeOf(request) ?? (status === 404 ? "not_found" : `http_${status}`));
      this.rejected.inc({ dialect, status: String(status), code });
      // A key's own limit is not the server's queue, though both are "rate_limit_exceeded" to clients.
      if (status === 429) this.rateLimited.inc({ dialect, reason: this.keyLimits.get(request) ?? code });
    }
  }

  /** An answer written below Fastify (client-error.ts): no route, no dialect. */
  private countRefusal(r: Refusal): void {
    const status = String(r.status);
    this.httpRequests.inc({ dialect: "none", route: "unmatched", method: r.method, status });
    this.rejected.inc({ dialect: "none", status, code: r.code });
  }

  /** GET /metrics, and the hooks that count HTTP requests and refusals. */
  install(app: FastifyInstance): void {
    app.refusals?.on((r) => this.countRefusal(r));
    app.addHook("onError", async (request, _reply, error) => {
      this.errorCodes.set(request, errorCode(error));
      const reason = toApiError(error).reason;
      if (reason?.startsWith("key_")) this.keyLimits.set(request, reason);
    });
    app.addHook("onResponse", async (request, reply) => this.countAnswer(request, reply.statusCode));
    // An answer its client left before it ended (a cancelled stream) never reaches onResponse: it
    // is counted as the connection closes, with the status it had sent, or 499 (client closed
    // request) when it had sent nothing.
    app.addHook("onRequest", (request, reply, done) => {
      reply.raw.once("close", () => {
        if (!reply.raw.writableFinished) this.countAnswer(request, reply.raw.headersSent ? reply.statusCode : 499);
      });
      done();
    });
    app.get("/metrics", async (_request, reply) => {
      const text = await this.registry.metrics();
      return reply.type(this.registry.contentType).send(spellNaN(text));
    });
  }
}

/**
 * prom-client (15.1) writes a value that is not a number as `Nan`; the exposition formats spell it
 * `NaN` (Prometheus reads any case, an OpenMetrics parser does not). The event loop's mean lag is
 * one such value when two scrapes come within milliseconds of each other.
 */
export function spellNaN(exposition: string): string {
  return exposition.replace(/ Nan$/gm, " NaN");
}

/** An error's code for labels: its own, else its type (`invalid_request_error`, …). */
function errorCode(err: unknown): string {
  const e = toApiError(err);
  return e.code ?? e.type;
}

/**
 * The dialect a route belongs to, from its pattern (requests no route takes: "none"). The same name
 * the dialect gives its requests once admitted (`databricks`), so a ledger row or a metric does not
 * name one dialect for a refusal and another for a success. The server's own routes (health,
 * metrics, the admin API, the console's files) are `server`.
 */
export function dialectOf(route: string): string {
  if (route === "unmatched") return "none";
  if (route.startsWith("/v1/responses") || route.startsWith("/v1/conversations")) return "responses";
  if (route.startsWith("/v1/") || route === "/tokenize" || route === "/detokenize" || route === "/invocations") return "openai";
  if (route.startsWith("/v3/")) return "konan";
  // Databricks' data plane, control plane and Plinth's model admin (DATABRICKS_PREFIXES).
  if (route === "/serving-endpoints" || route.startsWith("/serving-endpoints/") || route.startsWith("/api/2.0/")) return "databricks";
  if (route === "/health" || route === "/ping" || route === "/version" || route === "/metrics" || route === "/admin" || route.startsWith("/admin/") || route === "/" || route.startsWith("/ui/")) {
    return "server";
  }
  return "spak";
}

/** Wires metrics into a service: its hooks, once. */
export function observeService(service: GenerationService, metrics: PlinthMetrics): void {
  service.addHooks(metrics.hooks());
}
