import type { Context, Span, Tracer } from "@opentelemetry/api";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { GenerationHooks } from "../core/context.ts";
import type { Refusal } from "../http/client-error.ts";
import { internalId } from "../http/internal-id.ts";
import { dialectOf } from "./metrics.ts";

/** The spans of one HTTP request: the request's own and its open generation phase. */
interface Traced {
  span: Span;
  ctx: Context;
  phase?: Span;
  phaseName?: "queue" | "prefill" | "decode";
  finishReasons: string[];
  /** Generations admitted and not yet finished. */
  running: number;
  /** The client left before the answer ended: the span ends once `running` is 0. */
  abandoned?: boolean;
}

/** How long the span of a request whose client left waits for its generations to report their end. */
const ABANDONED_SPAN_WAIT_MS = 30_000;

/**
 * OpenTelemetry traces, exported over OTLP/HTTP (JSON). Loaded only when an endpoint is configured:
 * a server without one never imports the SDK and installs no hook. One SERVER span per HTTP request
 * (its parent taken from a W3C `traceparent` header), with child spans for the generation phases:
 * `queue` (waiting for a sequence), `prefill` (prompt evaluation, cached tokens as an attribute) and
 * `decode` (first token to the end). Attribute names follow the OpenTelemetry GenAI conventions.
 */
export class Tracing {
  /** Open spans by internal id (see http/internal-id.ts). */
  private readonly live = new Map<string, Traced>();
  /** Requests whose span this class's onRequest hook opened (whether or not it has ended since). */
  private readonly opened = new WeakSet<FastifyRequest>();

  private constructor(
    private readonly api: typeof import("@opentelemetry/api"),
    private readonly tracer: Tracer,
    private readonly propagator: import("@opentelemetry/api").TextMapPropagator,
    private readonly provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> },
  ) {}

  /** Starts the SDK and the exporter. `endpoint`: the OTLP base URL (…/v1/traces is added) or the traces URL. */
  static async start(endpoint: string, opts: { serviceName?: string } = {}): Promise<Tracing> {
    const api = await import("@opentelemetry/api");
    const { BasicTracerProvider, BatchSpanProcessor } = await import("@opentelemetry/sdk-trace-base");
    const { OTLPTraceExporter } = await import("@opentelemetry/exporter-trace-otlp-http");
    const { resourceFromAttributes } = await import("@opentelemetry/resources");
    const { W3CTraceContextPropagator } = await import("@opentelemetry/core");
    const base = endpoint.replace(/\/+$/, "");
    const url = base.endsWith("/v1/traces") ? base : `${base}/v1/traces`;
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ "service.name": opts.serviceName ?? process.env.OTEL_SERVICE_NAME ?? "plinth" }),
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url }), { scheduledDelayMillis: 1000 })],
    });
    return new Tracing(api, provider.getTracer("plinth"), new W3CTraceContextPropagator(), provider);
  }

  /** Sends every finished span now. */
  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }

  /** The request spans: opened as a request is routed, closed as its response ends. */
  install(app: FastifyInstance): void {
    const { api } = this;
    app.refusals?.on((r) => this.refused(r));
    app.addHook("onRequest", async (request, reply) => {
      const { span, parent } = this.openRequestSpan(request);
      this.opened.add(request);
      // Kept by internal id: the request id may be a client's x-request-id that another request shares.
      this.live.set(internalId(request), { span, ctx: api.trace.setSpan(parent, span), finishReasons: [], running: 0 });
      // A client that goes away before the response ends (a cancelled stream) never reaches
      // onResponse; Fastify's onRequestAbort only fires while the request body is still arriving.
      reply.raw.once("close", () => {
        if (!reply.raw.writableFinished) this.abandon(internalId(request), reply.raw.headersSent ? reply.raw.statusCode : 499);
      });
    });
    app.addHook("onResponse", async (request, reply) => {
      const t = this.live.get(internalId(request));
      if (!t) {
        // Answered by a hook that runs before this one (the Host and CORS guards): its span covers
        // the request from its arrival all the same.
        if (!this.opened.has(request)) this.answeredEarly(request, reply.statusCode, Date.now() - reply.elapsedTime);
        return;
      }
      this.live.delete(internalId(request));
      this.endPhase(t);
      t.span.setAttribute("http.response.status_code", reply.statusCode);
      if (reply.statusCode >= 500) t.span.setStatus({ code: api.SpanStatusCode.ERROR });
      t.span.end();
    });
  }

  /** A request's SERVER span, its parent taken from the request's `traceparent`. */
  private openRequestSpan(request: FastifyRequest, startTime?: number): { span: Span; parent: Context } {
    const { api } = this;
    const parent = this.propagator.extract(api.ROOT_CONTEXT, request.headers, api.defaultTextMapGetter);
    const route = request.routeOptions.url ?? "unmatched";
    const span = this.tracer.startSpan(
      `${request.method} ${route}`,
      {
        kind: api.SpanKind.SERVER,
        startTime,
        attributes: {
          "http.request.method": request.method,
          "http.route": route,
          "url.path": request.url.split("?")[0].slice(0, 200),
          "plinth.request_id": String(request.id),
          "plinth.dialect": dialectOf(route),
        },
      },
      parent,
    );
    return { span, parent };
  }

  /** The span of a request answered before this class's hook saw it: opened and ended at once. */
  private answeredEarly(request: FastifyRequest, status: number, startTime: number): void {
    const { span } = this.openRequestSpan(request, startTime);
    span.setAttribute("http.response.status_code", status);
    if (status >= 500) span.setStatus({ code: this.api.SpanStatusCode.ERROR });
    span.end();
  }

  /** An answer written below Fastify (client-error.ts): a span of its own, with what is known of it. */
  private refused(r: Refusal): void {
    const span = this.tracer.startSpan(`${r.method} unmatched`, {
      kind: this.api.SpanKind.SERVER,
      attributes: {
        "http.request.method": r.method,
        "http.route": "unmatched",
        "plinth.request_id": r.requestId,
        "plinth.dialect": "none",
        "http.response.status_code": r.status,
        "error.type": r.code,
      },
    });
    span.end();
  }

  /**
   * A client that went away before its answer ended: the span says so, and stays open until the
   * request's generations have finished (they notice the cancellation within a step), so that it
   * still gets the status that was sent and the tokens that were used, as the log line and the
   * ledger row do.
   */
  private abandon(id: string, status: number): void {
    const t = this.live.get(id);
    if (!t) return;
    t.span.setAttributes({ "plinth.client_aborted": true, "http.response.status_code": status });
    t.abandoned = true;
    if (t.running === 0) this.close(id, t);
    // Bounded: a generation that never reports its end cannot keep the span forever.
    else setTimeout(() => this.close(id, t), ABANDONED_SPAN_WAIT_MS).unref();
  }

  private close(id: string, t: Traced): void {
    if (this.live.get(id) !== t) return;
    this.live.delete(id);
    this.endPhase(t);
    t.span.end();
  }

  /** The generation phases, as child spans of the request's span. */
  hooks(): GenerationHooks {
    return {
      admitted: (ctx, info) => {
        const t = this.live.get(ctx.internalId);
        if (!t) return;
        t.running++;
        t.span.setAttributes({
          "gen_ai.operation.name": info.operation,
          "gen_ai.system": "plinth",
          "gen_ai.request.model": info.model,
          "gen_ai.usage.input_tokens": info.promptTokens.reduce((a, b) => a + b, 0),
          "gen_ai.request.choice.count": info.choices,
        });
        this.phase(t, "queue");
      },
      started: (ctx) => {
        const t = this.live.get(ctx.internalId);
        if (t?.phaseName === "queue") this.phase(t, "prefill");
      },
      firstToken: (ctx) => {
        const t = this.live.get(ctx.internalId);
        if (t && t.phaseName !== "decode") this.phase(t, "decode");
      },
      event: (ctx, ev) => {
        if (ev.type !== "finish") return;
        this.live.get(ctx.internalId)?.finishReasons.push(ev.reason);
      },
      finished: (ctx, outcome) => {
        const t = this.live.get(ctx.internalId);
        if (!t) return;
        this.endPhase(t);
        // A generation that failed or was cancelled is booked with what it had used, as in the
        // ledger and the request log.
        const used = outcome.usage ?? outcome.spent;
        t.span.setAttributes({
          "gen_ai.usage.input_tokens": used.promptTokens,
          "gen_ai.usage.output_tokens": used.completionTokens,
          "gen_ai.usage.cache_read.input_tokens": used.cachedTokens,
          "gen_ai.response.finish_reasons": t.finishReasons,
        });
        if (!outcome.usage && !t.abandoned) {
          t.span.recordException(outcome.error instanceof Error ? outcome.error : String(outcome.error));
          t.span.setStatus({ code: this.api.SpanStatusCode.ERROR });
        }
        t.running--;
        if (t.abandoned && t.running === 0) this.close(ctx.internalId, t);
      },
      embedded: (ctx, info) => {
        const t = this.live.get(ctx.internalId);
        t?.span.setAttributes({
          "gen_ai.operation.name": "embeddings",
          "gen_ai.system": "plinth",
          "gen_ai.request.model": info.model,
          "gen_ai.usage.input_tokens": info.tokens,
        });
      },
    };
  }

  private phase(t: Traced, name: "queue" | "prefill" | "decode"): void {
    this.endPhase(t);
    t.phase = this.tracer.startSpan(name, {}, t.ctx);
    t.phaseName = name;
  }

  private endPhase(t: Traced): void {
    t.phase?.end();
    t.phase = undefined;
  }
}
