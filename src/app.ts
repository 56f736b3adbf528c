import type { FastifyInstance } from "fastify";
import type { GenerationService } from "./core/generation-service.ts";
import { OPENAI_ENVELOPE } from "./dialects/openai/errors.ts";
import { openAIPlugin, tokenizerPlugin } from "./dialects/openai/plugin.ts";
import { invocationsPlugin } from "./dialects/openai/invocations.ts";
import { konanPlugin } from "./dialects/konan/plugin.ts";
import { BackgroundRuns } from "./dialects/responses/background.ts";
import type { StoreRetryPolicy } from "./dialects/responses/store-writes.ts";
import { ConversationClaims } from "./dialects/responses/claims.ts";
import { responsesPlugin } from "./dialects/responses/plugin.ts";
import { spakPlugin } from "./dialects/spak/plugin.ts";
import { EndpointManager } from "./dialects/databricks/endpoints.ts";
import { DATABRICKS_DATA_PLANE_ENVELOPE, DATABRICKS_ENVELOPE } from "./dialects/databricks/errors.ts";
import { DATABRICKS_ENVELOPE_PREFIXES, DATABRICKS_PREFIXES, databricksPlugin } from "./dialects/databricks/plugin.ts";
import type { ModelLoader } from "./core/model-loader.ts";
import type { Sealer } from "./dialects/responses/sealer.ts";
import { consolePlugin } from "./console/plugin.ts";
import { installErrorEnvelope } from "./http/error-envelope.ts";
import type { Store } from "./store/store.ts";
import { registerHealthRoute } from "./http/health.ts";
import { createHttpServer, envelopeForUrl, type HttpOptions } from "./http/server.ts";
import type { PlinthMetrics } from "./observability/metrics.ts";
import { installRequestLog } from "./observability/request-log.ts";
import type { Tracing } from "./observability/tracing.ts";
import { adminPlugin } from "./tenancy/admin.ts";
import type { Tenancy } from "./tenancy/tenancy.ts";
import type { TenancyStore } from "./store/tenancy-store.ts";

export interface AppOptions extends Omit<HttpOptions, "envelope"> {
  /** Durable state: stored responses, conversations (and the key that seals reasoning). */
  store: Store;
  sealer: Sealer;
  /** Prometheus metrics: GET /metrics and the hooks that count HTTP requests (none: no /metrics). */
  metrics?: PlinthMetrics;
  /** One log line per request (needs `metrics` and a logger); `bodies` adds request and response bodies. */
  requestLog?: { bodies: boolean };
  /** OpenTelemetry request spans (only when an OTLP endpoint is configured). */
  tracing?: Tracing;
  /** Serve the web console at `/` (default: on). */
  ui?: boolean;
  /** API keys, limits and the usage ledger (none: an open server with no ledger). */
  tenancy?: Tenancy;
  /** The admin API (/admin/keys, /admin/usage): the keys store and the admin key (none: it answers 403). */
  admin?: { store: TenancyStore; adminKey: string | undefined };
  /** Loads and unloads models at run time (serving endpoints, scale to zero, the admin routes). */
  loader?: ModelLoader;
  /** Databricks serving endpoints: a seed for the traffic split, and the scale-to-zero idle time. */
  databricks?: { routeSeed?: number; scaleToZeroAfterMs?: number };
  /** How a stored response's writes that the store refused are tried again (default: STORE_RETRY). */
  storeRetry?: StoreRetryPolicy;
}

/**
 * The whole HTTP surface, assembled in one place: the bare server, /health, and each dialect as a
 * plugin under its prefix with its own error envelope. Adding a dialect is a folder under
 * src/dialects and one `register` line here.
 */
export function buildApp(service: GenerationService, opts: AppOptions): FastifyInstance {
  // Routes no dialect owns (unknown paths at the root), and requests too malformed to reach a route,
  // answer in OpenAI's envelope, the one most clients of a local server speak.
  // Those whose URL can still be read answer in the envelope of the dialect that owns the path.
  const envelopesByPrefix = DATABRICKS_ENVELOPE_PREFIXES.map(
    (prefix) => [prefix, prefix === DATABRICKS_PREFIXES[0] ? DATABRICKS_DATA_PLANE_ENVELOPE : DATABRICKS_ENVELOPE] as const,
  );
  const app = createHttpServer({ ...opts, envelope: OPENAI_ENVELOPE, envelopesByPrefix });
  // A path the dialect's own plugin does not see (`//serving-endpoints/…`, `/serving-endpoints;x`)
  // still answers in that dialect's envelope.
  installErrorEnvelope(app, OPENAI_ENVELOPE, { notFound: true, envelopeForUrl: (url) => envelopeForUrl(url, envelopesByPrefix, OPENAI_ENVELOPE) });
  registerHealthRoute(app, service.registry, () => service.draining);
  opts.tracing?.install(app);
  opts.metrics?.install(app);
  if (opts.metrics && opts.requestLog) installRequestLog(app, opts.metrics, opts.requestLog);
  // On the root, so the key check covers every dialect registered below (and any added later); a
  // refusal is rendered by the error handler of the route's own dialect.
  opts.tenancy?.install(app);
  // A key revoked through the admin API ends the requests it still runs at once.
  const revoked = (id: string) => opts.tenancy?.endKey(id, "revoked");
  if (opts.admin) void app.register(adminPlugin, { prefix: "/admin", ...opts.admin, envelope: OPENAI_ENVELOPE, revoked });

  const runs = new BackgroundRuns();
  app.addHook("onClose", () => runs.stopAll());

  void app.register(openAIPlugin, { prefix: "/v1", service, store: opts.store });
  void app.register(responsesPlugin, { prefix: "/v1", service, deps: { store: opts.store, sealer: opts.sealer, runs, claims: new ConversationClaims(), storeRetry: opts.storeRetry } });
  void app.register(tokenizerPlugin, { service });
  void app.register(invocationsPlugin, { service, store: opts.store });
  void app.register(konanPlugin, { prefix: "/v3", service, store: opts.store });
  void app.register(spakPlugin, { service });
  const endpoints = new EndpointManager(service.registry, opts.store.endpoints, opts.loader, {
    routeSeed: opts.databricks?.routeSeed,
    scaleToZeroAfterMs: opts.databricks?.scaleToZeroAfterMs ?? 30 * 60 * 1000,
  });
  app.addHook("onReady", async () => {
    await endpoints.restore();
    endpoints.startScaleToZero();
  });
  app.addHook("onClose", () => endpoints.close());
  void app.register(databricksPlugin, { service, endpoints, sealer: opts.sealer, loader: opts.loader });
  // The console is static files that call the public API above from the browser, like any client.
  if (opts.ui !== false) void app.register(consolePlugin, { adminApi: Boolean(opts.admin?.adminKey) });
  return app;
}
