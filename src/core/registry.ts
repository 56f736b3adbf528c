import type { Engine } from "./engine.ts";
import { ApiError, modelNotFound } from "./errors.ts";
import { Scheduler } from "./scheduler.ts";

/** `unloaded`: known, with its engine freed (idle, scaled to zero); it loads again on demand. */
export type ModelStatus = "loading" | "ready" | "failed" | "unloaded";

export interface ServedModel {
  id: string;
  status: ModelStatus;
  error?: string;
  /** While loading: what it waits for (a remote upstream that has not started), when known. */
  note?: string;
  /** While waiting: seconds until it is tried again (the Retry-After its 503s carry). */
  retryAfterS?: number;
  engine?: Engine;
  scheduler?: Scheduler;
  /** Slots of the model's embedding contexts, when it embeds; separate from generation's. */
  embeddingScheduler?: Scheduler;
}

/**
 * The models this server answers for. Models are registered before they finish loading so the
 * server can listen (and report progress on /health) while weights are still being read.
 */
export class ModelRegistry {
  private readonly models = new Map<string, ServedModel>();
  /** Models loaded while the server runs: their loading or failing does not make the server unready. */
  private readonly runtime = new Set<string>();

  constructor(
    private readonly maxQueue: number,
    /** Longest a request may wait for a sequence, in ms; 0: no limit. */
    private readonly queueTimeoutMs = 0,
  ) {}

  register(id: string): void {
    if (this.models.has(id)) throw new Error(`two models are named '${id}'; give one a name with name=path`);
    this.models.set(id, { id, status: "loading" });
  }

  ready(engine: Engine): void {
    const scheduler = new Scheduler(engine.slots, this.maxQueue, this.queueTimeoutMs);
    engine.onSlots?.((running, nominal) => scheduler.resize(running, nominal));
    this.models.set(engine.id, {
      id: engine.id,
      status: "ready",
      engine,
      scheduler,
      embeddingScheduler: engine.embeddings ? new Scheduler(engine.embeddings.info.slots, this.maxQueue) : undefined,
    });
  }

  failed(id: string, error: string): void {
    this.models.set(id, { id, status: "failed", error });
  }

  /** Whether a model of this id is known (in any state). */
  has(id: string): boolean {
    return this.models.has(id);
  }

  /** The model's entry as it stands, without resolving it for a request. */
  get(id: string): ServedModel | undefined {
    return this.models.get(id);
  }

  /** Still loading, waiting for what `note` says (its upstream to start); asked for again later. */
  waiting(id: string, note: string, retryAfterS?: number): void {
    this.models.set(id, { id, status: "loading", note, retryAfterS });
  }

  /** A known model goes back to loading (a model loaded again after being unloaded). */
  loading(id: string): void {
    this.models.set(id, { id, status: "loading" });
  }

  /** The model's engine was freed; the id stays known so a request can bring it back. */
  unloaded(id: string): void {
    this.models.set(id, { id, status: "unloaded" });
  }

  /** Forgets a model (its engine must already be disposed). */
  unregister(id: string): void {
    this.models.delete(id);
    this.runtime.delete(id);
  }

  /** The model is loaded at run time (an endpoint, the admin route, a scaled-to-zero reload). */
  markRuntime(id: string): void {
    this.runtime.add(id);
  }

  list(): ServedModel[] {
    return [...this.models.values()];
  }

  get allReady(): boolean {
    return this.list().every((m) => m.status === "ready" || m.status === "unloaded" || this.runtime.has(m.id));
  }

  /** The model a request names, ready to run; 404 for unknown names, 503 while it loads. */
  resolve(id: string): Required<Pick<ServedModel, "engine" | "scheduler">> & ServedModel {
    const m = this.models.get(id);
    if (!m) throw modelNotFound(id);
    if (m.status === "unloaded")
      throw new ApiError(503, `The model '${id}' is unloaded; load it again first.`, { code: "model_unloaded", headers: { "retry-after": "2" } });
    if (m.status === "loading")
      throw new ApiError(503, m.note ? `The model '${id}' is not available yet: ${m.note}` : `The model '${id}' is still loading.`, {
        code: "model_loading",
        headers: { "retry-after": String(m.retryAfterS ?? 2) },
      });
    if (m.status === "failed" || !m.engine || !m.scheduler)
      throw new ApiError(503, `The model '${id}' failed to load: ${m.error ?? "unknown error"}`, { code: "model_unavailable" });
    return m as Required<Pick<ServedModel, "engine" | "scheduler">> & ServedModel;
  }

  async dispose(): Promise<void> {
    await Promise.all(this.list().map((m) => m.engine?.dispose()));
  }
}
