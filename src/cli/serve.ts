import { availableParallelism } from "node:os";
import { buildApp } from "../app.ts";
import { lockDataDir, openDataFile, openSecretKeyFile, prepareDataDir, storeFileError } from "../config/data-dir.ts";
import { modelSpecs, upstreamSpecs } from "../config/models.ts";
import type { PlinthConfig } from "../config/schema.ts";
import { EngineFactories } from "../core/engine-factory.ts";
import { GenerationService } from "../core/generation-service.ts";
import { ModelRegistry } from "../core/registry.ts";
import { checkLlamaCppSource, llamaCppFactory } from "../engines/llama-cpp/factory.ts";
import { remoteFactory } from "../engines/remote/factory.ts";
import { loadOrCreateSecretKey, openText, SECRET_KEY_FILE, sealText } from "../store/secret-key.ts";
import { DB_FILE, openSqliteStore, type SqliteStore } from "../store/sqlite-store.ts";
import { TenancyStore } from "../store/tenancy-store.ts";
import { KeyRing, staticKeyId, staticKeyIdBefore } from "../tenancy/keys.ts";
import { LedgerWriter } from "../tenancy/ledger.ts";
import { InProcessLimiter } from "../tenancy/limiter.ts";
import { Tenancy } from "../tenancy/tenancy.ts";
import { readFileSync } from "node:fs";
import { observeService, PlinthMetrics } from "../observability/metrics.ts";
import { loggerOptions } from "../observability/request-log.ts";
import type { Tracing } from "../observability/tracing.ts";
import { schemaCompiler } from "../grammar/schema-compiler.ts";
import { RuntimeModelLoader } from "./model-loader.ts";
import { ModelLoading } from "./model-loading.ts";
import { nativeMemoryPacer } from "./native-memory.ts";
import { createProgressBar } from "./progress-bar.ts";

/** How often expired stored objects are swept. */
const SWEEP_INTERVAL_MS = 10 * 60 * 1000;
/** What sealed reasoning is bound to: it opens only as reasoning content of this server. */
const REASONING_AAD = "plinth:responses:reasoning";
/** The least time a shutdown gives connections still open after the drain before it closes them. */
const CLOSE_GRACE_MS = 1_000;

export interface RunningServer {
  url: string;
  port: number;
  registry: ModelRegistry;
  service: GenerationService;
  /** Resolves once every model is loaded (or has failed). */
  loaded: Promise<void>;
  /** Stop now: new connections are refused and open ones may finish; after `graceMs`, if given, what is left is closed. */
  close(graceMs?: number): Promise<void>;
  /** Graceful stop: refuse new requests, drain running ones for up to `drainTimeoutMs`, then close. */
  shutdown(drainTimeoutMs: number): Promise<void>;
}

export interface ServeHooks {
  log?: (line: string) => void;
  /** Engines to use instead of the default ones (tests pass a scripted engine here). */
  engines?: EngineFactories;
  /**
   * Where request log lines go. Default: standard output, unless `log` is given (a caller that
   * silences the server's messages, such as a test), which turns request logs off.
   */
  logStream?: NodeJS.WritableStream;
}

/** The engines a plain server has: GGUF files and hub downloads through llama.cpp, and remote upstreams. */
export function defaultEngines(config: PlinthConfig): EngineFactories {
  return new EngineFactories()
    .register(
      ["file", "hf"],
      llamaCppFactory((source) => ({
        cacheDir: config["cache-dir"],
        progress: source.kind === "hf" ? createProgressBar(`downloading ${source.id}`) : undefined,
      })),
      checkLlamaCppSource,
    )
    .register(["remote"], remoteFactory());
}

/**
 * Starts listening first and loads models afterwards, so /health can report loading progress and an
 * orchestrator can tell a slow start from a dead one.
 */
export async function serve(config: PlinthConfig, hooks: ServeHooks = {}): Promise<RunningServer> {
  const log = hooks.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const specs = [...modelSpecs(config), ...upstreamSpecs(config)];
  if (config.threads !== undefined && config.threads > availableParallelism())
    log(`plinth: using ${availableParallelism()} threads; only ${availableParallelism()} cores are available`);
  const engines = hooks.engines ?? defaultEngines(config);

  const registry = new ModelRegistry(config["max-queue"], config["queue-timeout"] * 1000);
  for (const s of specs) registry.register(s.id);
  const service = new GenerationService(registry);
  service.addHooks(nativeMemoryPacer());
  // Tracing loads the OpenTelemetry SDK only when an endpoint is set; otherwise it costs nothing.
  const otlpEndpoint = config["otlp-endpoint"] ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  let tracing: Tracing | undefined;
  if (otlpEndpoint) {
    const { Tracing } = await import("../observability/tracing.ts");
    tracing = await Tracing.start(otlpEndpoint);
    service.addHooks(tracing.hooks());
  }
  const staticKeys = [...config["api-key"], ...readKeyFile(config["api-key-file"])];
  if (config["no-auth"] && staticKeys.length > 0) throw new Error("--no-auth and --api-key contradict each other: give one of them");
  // The admin API is for the operator: a key that is also an API key gives every client holding it
  // the power to create and revoke keys.
  if (config["admin-key"] !== undefined && staticKeys.includes(config["admin-key"]))
    throw new Error("--admin-key is also one of the API keys (--api-key or --api-key-file): give the admin API a key of its own");
  prepareDataDir(config["data-dir"]);
  const unlockDataDir = lockDataDir(config["data-dir"]);
  // What a start that fails part way has to give back, in the order it is given back (the data
  // directory last, once nothing of it is open any more).
  const undo: ShutdownStep[] = [["releasing the data directory", unlockDataDir]];
  if (tracing) undo.unshift(["flushing traces", () => tracing.shutdown()]);
  try {
    return await serveLocked(config, hooks, { log, specs, engines, registry, service, tracing, staticKeys, unlockDataDir }, undo);
  } catch (err) {
    // The start's own failure is what the operator needs to read; giving back is best effort.
    await runEveryStep(undo).catch(() => {});
    // A store file that a first read finds damaged (a page failAbandonedRuns reads), or a disk that
    // is full when a start-up write is made, is said naming the file.
    throw storeFileError(config["data-dir"], DB_FILE, err, true);
  }
}

/** What serve() made before it took the data directory. */
interface Started {
  log: (line: string) => void;
  specs: ReturnType<typeof modelSpecs | typeof upstreamSpecs>;
  engines: EngineFactories;
  registry: ModelRegistry;
  service: GenerationService;
  tracing: Tracing | undefined;
  staticKeys: string[];
  unlockDataDir: () => void;
}

/**
 * The rest of serve(), once the data directory is this server's. Everything it opens is put at the
 * front of `undo`, so that a failure before it serves gives it all back.
 */
async function serveLocked(config: PlinthConfig, hooks: ServeHooks, started: Started, undo: ShutdownStep[]): Promise<RunningServer> {
  const { log, specs, engines, registry, service, tracing, staticKeys, unlockDataDir } = started;
  const store = openDataFile(config["data-dir"], DB_FILE, () => openSqliteStore({ dataDir: config["data-dir"], ttlSeconds: Math.round(config["store-ttl"] * 86_400) }));
  undo.unshift(["closing the store", () => store.close()]);
  const tenancyStore = new TenancyStore(config["data-dir"]);
  undo.unshift(["closing the key store", () => tenancyStore.close()]);
  const key = openSecretKeyFile(config["data-dir"], SECRET_KEY_FILE, () => loadOrCreateSecretKey(config["data-dir"]));
  const keys = new KeyRing(staticKeys, tenancyStore, undefined, key);
  carryStaticKeyObjects(staticKeys, key, store, tenancyStore);
  if (!keys.required && !isLoopback(config.host) && !config["no-auth"]) {
    throw new Error(
      `refusing to listen on ${config.host} with no API key: anyone who reaches that address could use every model. ` +
        "Give keys (--api-key, or create one with 'plinth keys create'), listen on 127.0.0.1, or pass --no-auth to serve openly anyway.",
    );
  }
  store.startSweeper(SWEEP_INTERVAL_MS);
  // With --ledger off the writer keeps no rows but still charges keys' tokens, so budgets hold
  // across restarts.
  const ledger = new LedgerWriter(tenancyStore, { retentionMs: config["ledger-retention"] * 86_400_000, keepRows: config.ledger });
  undo.unshift(["writing the usage ledger", () => ledger.close()]);
  const tenancy = new Tenancy({
    keys,
    limiter: new InProcessLimiter(config["rate-window"] * 1000),
    ledger,
    metricsNeedKey: config["metrics-auth"],
    adminKey: config["admin-key"],
    knownModel: (name) => registry.has(name),
  });
  service.setGate(tenancy.gate());
  service.addHooks(tenancy.hooks());
  undo.unshift(["stopping the key checks", () => tenancy.close()]);
  const metrics = new PlinthMetrics(registry, { store });
  observeService(service, metrics);
  const sealer = {
    seal: (text: string) => sealText(key, text, REASONING_AAD),
    open: (sealed: string) => openText(key, sealed, REASONING_AAD),
  };

  const loader = new RuntimeModelLoader(registry, engines, modelSpecs({ ...config, model: [], upstream: [] })[0].settings, log);
  for (const s of specs) loader.remember(s);
  const app = buildApp(service, {
    loader,
    databricks: { routeSeed: config["route-seed"], scaleToZeroAfterMs: config["scale-to-zero-after"] * 1000 },
    bodyLimit: config["body-limit"],
    store,
    sealer,
    metrics,
    tracing,
    tenancy,
    admin: { store: tenancyStore, adminKey: config["admin-key"] },
    logger: hooks.logStream || !hooks.log ? loggerOptions(config["log-level"], config["log-format"], hooks.logStream) : false,
    requestLog: { bodies: config["log-bodies"] },
    host: config.host,
    allowedHosts: config["allowed-host"],
    corsOrigins: config["cors-origin"],
    headersTimeoutMs: config["headers-timeout"] * 1000,
    bodyTimeoutMs: config["body-timeout"] * 1000,
    keepAliveTimeoutMs: config["keep-alive-timeout"] * 1000,
    sendTimeoutMs: config["send-timeout"] * 1000,
    maxConnections: config["max-connections"],
    ui: config.ui,
  });
  // Not serving after all (the port taken, a store that fails its first reads): serve() gives back
  // what is open, and the data directory is free for another start.
  undo.unshift(["stopping the HTTP server", () => app.close()]);
  await app.listen({ host: config.host, port: config.port });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  const url = `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
  log(`plinth: listening on ${url}`);
  // Structured outputs compile on a worker shared by every server of the process; start it now
  // (after listen: a server that failed to start holds nothing that would keep the process alive).
  schemaCompiler.acquire();
  schemaCompiler.warm();

  const loading = new ModelLoading(specs, engines, registry, metrics, log);
  const loaded = loading.firstAttempts;
  /**
   * `graceMs`: how long connections still open may take to end before they are closed. Node stops
   * checking its head deadline once the server closes, so without it one client that sent half a
   * request head held a shutdown open for ever (and one that sent half a body, for --body-timeout).
   */
  const close = async (graceMs?: number) => {
    const closing = app.close();
    const timer = graceMs === undefined ? undefined : setTimeout(() => app.server.closeAllConnections(), graceMs);
    // Every step runs whatever an earlier one did: a store that cannot be written (a full disk)
    // once left the data directory locked and the process running after a SIGTERM.
    await runEveryStep([
      ["stopping the HTTP server", () => closing.finally(() => clearTimeout(timer))],
      ["stopping the model loads", () => loading.stop()],
      ["unloading the models", () => registry.dispose()],
      ["stopping the key checks", () => tenancy.close()],
      ["writing the usage ledger", () => ledger.close()],
      ["closing the key store", () => tenancyStore.close()],
      ["closing the store", () => store.close()],
      ["releasing the data directory", unlockDataDir],
      ["flushing traces", () => tracing?.shutdown()],
      ["stopping the schema compiler", () => schemaCompiler.release()],
    ]);
  };

  return {
    url,
    port,
    registry,
    service,
    loaded,
    close,
    shutdown: async (drainTimeoutMs: number) => {
      const deadline = Date.now() + drainTimeoutMs;
      await service.shutdown(drainTimeoutMs);
      // What is still open once generation has drained (a read answering, a request still arriving)
      // gets what is left of the drain time, and at least a moment, before its connection is closed.
      await close(Math.max(deadline - Date.now(), CLOSE_GRACE_MS));
    },
  };
}

/** One step of giving back what a server holds, with what it does in words (for the failure's message). */
type ShutdownStep = [what: string, step: () => unknown];

/**
 * Runs every step in order, each whether or not one before it failed, then throws one error that
 * names each step that failed and why.
 */
export async function runEveryStep(steps: readonly ShutdownStep[]): Promise<void> {
  const failed: string[] = [];
  for (const [what, step] of steps) {
    try {
      await step();
    } catch (err) {
      failed.push(`${what} failed: ${(err as Error)?.message ?? String(err)}`);
    }
  }
  if (failed.length > 0) throw new Error(failed.join("; "));
}

/**
 * Objects and ledger rows an --api-key key stored while its id was a plain hash of it (before
 * 2026-12-02), moved to its id of now: without this, an upgrade left them in the file but out of the
 * key's reach (404s, chains that could not continue, its usage split over two ids).
 */
function carryStaticKeyObjects(staticKeys: readonly string[], secret: Buffer, store: SqliteStore, tenancy: TenancyStore): void {
  for (const k of new Set(staticKeys)) {
    const before = staticKeyIdBefore(k);
    const now = staticKeyId(k, secret);
    if (before === now) continue;
    const moved = store.moveKeyObjects(before, now);
    const booked = tenancy.renameLedgerKey(before, now);
    if (moved + booked > 0) process.stderr.write(`plinth: ${moved} stored objects and ${booked} ledger rows of an --api-key key moved to its current id (${now})\n`);
  }
}

/** Keys from --api-key-file: one a line; blank lines and # comments are skipped. */
function readKeyFile(file: string | undefined): string[] {
  if (file === undefined) return [];
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read the API key file ${file}: ${(err as Error).message}`);
  }
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
}

/** Addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\./.test(h) || /^::ffff:127\./.test(h);
}
