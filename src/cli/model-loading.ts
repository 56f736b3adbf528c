import { type EngineFactories, EngineNotReady, type ModelSpec } from "../core/engine-factory.ts";
import type { ModelRegistry } from "../core/registry.ts";
import type { PlinthMetrics } from "../observability/metrics.ts";

/**
 * Loads the configured models: local files one after another (they compete for memory and disk),
 * remote ones beside them (they only ask their upstreams). `firstAttempts` settles once every model
 * is ready, failed, or waiting for its upstream; a model whose factory says it is not ready yet
 * (EngineNotReady: its upstream has not started) stays loading and is tried again with growing
 * pauses (1 s doubling to 30 s) until it loads, fails for another reason, or the server stops.
 */
export class ModelLoading {
  readonly firstAttempts: Promise<void>;
  private readonly retries = new Set<Promise<void>>();
  private readonly stopping = new AbortController();

  constructor(
    specs: ModelSpec[],
    private readonly engines: EngineFactories,
    private readonly registry: ModelRegistry,
    private readonly metrics: PlinthMetrics,
    private readonly log: (line: string) => void,
  ) {
    const local = specs.filter((s) => s.kind !== "remote");
    const remote = specs.filter((s) => s.kind === "remote");
    this.firstAttempts = Promise.all([
      (async () => {
        for (const spec of local) await this.first(spec);
      })(),
      ...remote.map((spec) => this.first(spec)),
    ]).then(() => undefined);
  }

  /** Ends the retries and waits for any attempt in flight (its engine, if it came, is disposed). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.firstAttempts;
    await Promise.all([...this.retries]);
  }

  private async first(spec: ModelSpec): Promise<void> {
    const outcome = await this.attempt(spec);
    if (outcome instanceof EngineNotReady) {
      const retry = this.keepTrying(spec, outcome).finally(() => this.retries.delete(retry));
      this.retries.add(retry);
    }
  }

  /** One load: the engine registered as ready, or the model failed; EngineNotReady is handed back. */
  private async attempt(spec: ModelSpec): Promise<EngineNotReady | undefined> {
    const loadStart = performance.now();
    try {
      // Stopping the server aborts a load under way rather than waiting for it.
      const engine = await this.engines.create(spec, this.log, this.stopping.signal);
      if (this.stopping.signal.aborted) {
        await engine.dispose();
        return undefined;
      }
      this.registry.ready(engine);
      this.metrics.modelLoaded(spec.id, (performance.now() - loadStart) / 1000);
    } catch (err) {
      if (err instanceof EngineNotReady && !this.stopping.signal.aborted) return err;
      this.registry.failed(spec.id, (err as Error).message);
      // A load the shutdown aborted did not fail; saying so would only mislead whoever reads the log.
      if (!this.stopping.signal.aborted) this.log(`plinth: model '${spec.id}' failed to load: ${(err as Error).message}`);
    }
    return undefined;
  }

  private async keepTrying(spec: ModelSpec, why: EngineNotReady): Promise<void> {
    for (let round = 0; ; round++) {
      const waitMs = Math.min(30_000, 1_000 * 2 ** round);
      // What the clients and /health see names no upstream address; the log has the details.
      this.registry.waiting(spec.id, `waiting for its upstream to answer (next try in ${waitMs / 1000} s)`, Math.ceil(waitMs / 1000));
      this.log(`plinth: model '${spec.id}' is waiting for its upstream: ${why.message}; next try in ${waitMs / 1000} s`);
      if (!(await pause(waitMs, this.stopping.signal))) return;
      const outcome = await this.attempt(spec);
      if (!(outcome instanceof EngineNotReady)) return;
      why = outcome;
    }
  }
}

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
