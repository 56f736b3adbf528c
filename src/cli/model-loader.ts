import { createHash } from "node:crypto";
import { realpathSync, statSync } from "node:fs";
import path from "node:path";
import { freemem } from "node:os";
import { type EngineFactories, ModelFileRefused, type ModelSpec } from "../core/engine-factory.ts";
import { ApiError, badRequest } from "../core/errors.ts";
import type { ModelLoader } from "../core/model-loader.ts";
import type { ModelRegistry } from "../core/registry.ts";
import { formatHfRef, type ModelSource, parseModelArg } from "../models/source.ts";

/** Share of free memory a model file may take: the rest is left for its context and the system. */
const MEMORY_SHARE = 0.9;
/** How long an unload waits for a load it aborted before it goes on without it. */
const ABORTED_LOAD_WAIT_MS = 1000;

/**
 * Models loaded and unloaded while the server runs, through the same engine factories the server
 * starts with. Every model the server knows can be loaded again (scale to zero): its spec is kept.
 */
export class RuntimeModelLoader implements ModelLoader {
  private readonly specs = new Map<string, ModelSpec>();
  /** The models the server started with: the command line serves them again after a restart. */
  private readonly startup = new Set<string>();
  /** Loads under way, each with what aborts it (an unload while it loads). */
  private readonly pending = new Map<string, { job: Promise<string>; abort: AbortController }>();

  constructor(
    private readonly registry: ModelRegistry,
    private readonly engines: EngineFactories,
    /** Settings of a model loaded at run time (the server-wide defaults). */
    private readonly settings: ModelSpec["settings"],
    private readonly log: (line: string) => void,
    /** Bytes of memory available for a new model (tests pass a fake). */
    private readonly available: () => number = freemem,
  ) {}

  /** Models the server started with, so they can be unloaded and loaded again. */
  remember(spec: ModelSpec): void {
    this.specs.set(spec.id, spec);
    this.startup.add(spec.id);
  }

  sourceOf(id: string): string | undefined {
    return this.startup.has(id) ? undefined : this.servedFrom(id);
  }

  servedFrom(id: string): string | undefined {
    const src = this.specs.get(id)?.source as ModelSource | undefined;
    if (src?.kind === "file") return src.path;
    if (src?.kind === "hf") return formatHfRef(src);
    return undefined;
  }

  canReload(id: string): boolean {
    return this.specs.has(id);
  }

  async load(source: string, opts: { name?: string; unique?: boolean } = {}): Promise<string> {
    const known = this.registry.get(source);
    if (known && opts.name === undefined) {
      if (known.status === "ready") return Promise.resolve(source);
      if (known.status === "loading" && !this.pending.has(source)) return this.whenLoaded(source);
      return this.start(source, () => this.specs.get(source));
    }
    let spec = this.specOf(source, opts.name);
    // The file is looked at before the registry, so that what is decided below happens in one go.
    await this.checkFile(spec);
    if (opts.unique && opts.name === undefined) spec = this.uniqueSpec(spec);
    const existing = this.registry.get(spec.id);
    if (existing && existing.status !== "unloaded" && existing.status !== "failed") {
      const same = sameSource(this.specs.get(spec.id)?.source, spec.source);
      if (!same) throw new ApiError(409, `A model named '${spec.id}' is already served from another source.`, { param: "name" });
      if (existing.status === "ready") return spec.id;
      // Still loading: by this loader, or by the server's own start (an endpoint restored while the
      // model it shares with the command line is not up yet).
      return this.pending.get(spec.id)?.job ?? this.whenLoaded(spec.id);
    }
    return this.start(spec.id, () => spec);
  }

  /**
   * A source loaded with no name given, for a caller that needs it served whatever its id: a model
   * already loaded at run time from that source (one load per file), else under the id the source
   * gives or, when another source holds that id (two versions of `model.gguf` in different
   * folders), under that id and a short hash of the source, so the id is the same after a restart
   * whatever order models load in. The models the server started with are not shared this way: a
   * path names a copy of its own (an endpoint may scale it to zero).
   */
  private uniqueSpec(given: ModelSpec): ModelSpec {
    const renamed = (id: string) => ({ ...given, id, source: { ...(given.source as ModelSource), id } });
    for (const [id, known] of this.specs) {
      const m = this.registry.get(id);
      if (!this.startup.has(id) && m && m.status !== "failed" && sameSource(known.source, given.source)) return renamed(id);
    }
    // Named after the file itself, not after the link or spelling that reached it: one file, one id.
    const real = sourceIdentity(given.source);
    const spec = real.kind === "file" ? renamed(path.basename(String(real.path)).replace(/\.gguf$/i, "") || given.id) : given;
    const taken = (id: string) => {
      const m = this.registry.get(id);
      return m !== undefined && m.status !== "failed" && !sameSource(this.specs.get(id)?.source, spec.source);
    };
    if (!taken(spec.id)) return spec;
    const hash = createHash("sha256").update(JSON.stringify(sourceIdentity(spec.source))).digest("hex");
    for (let n = 8; n <= hash.length; n += 4) if (!taken(`${spec.id}-${hash.slice(0, n)}`)) return renamed(`${spec.id}-${hash.slice(0, n)}`);
    throw new ApiError(409, `A model named '${spec.id}' is already served from another source.`, { param: "name" });
  }

  async check(source: string): Promise<void> {
    if (this.registry.has(source)) return;
    await this.checkFile(this.specOf(source));
  }

  private specOf(source: string, name?: string): ModelSpec {
    // Over the API only a model file or a hub reference is loaded: trying any path would tell the
    // caller whether that file exists and, through the loader's complaint, what its first bytes are.
    if (!/\.gguf$/i.test(source.trim()) && !source.trim().startsWith("hf:"))
      throw badRequest(`'${source}' is neither a served model nor a .gguf path or hf: reference.`, "source");
    try {
      const parsed = parseModelArg(source, name);
      return { id: parsed.id, kind: parsed.kind, source: parsed, settings: this.settings };
    } catch (err) {
      throw badRequest(`'${source}' is neither a served model nor a model source: ${(err as Error).message}`, "source");
    }
  }

  /**
   * The engine's quick look at the file (its header, never its weights): a file that is missing, not
   * a regular file or not a well-formed model is the caller's to fix, a 400 naming the source, where
   * a load that fails later stays a 503.
   */
  private async checkFile(spec: ModelSpec): Promise<void> {
    try {
      await this.engines.check(spec);
    } catch (err) {
      if (err instanceof ModelFileRefused) throw badRequest(err.message, "source");
      throw err;
    }
  }

  /** A model the server itself is loading (at startup): ready, or failed, in its own time. */
  private async whenLoaded(id: string): Promise<string> {
    for (;;) {
      const m = this.registry.get(id);
      if (m?.status === "ready") return id;
      if (!m || m.status !== "loading") throw new ApiError(503, `The model '${id}' failed to load: ${m?.error ?? "it is gone"}`, { code: "model_unavailable" });
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  private start(id: string, specOf: () => ModelSpec | undefined): Promise<string> {
    const running = this.pending.get(id);
    if (running) return running.job;
    const spec = specOf();
    if (!spec) return Promise.reject(new ApiError(409, `The model '${id}' cannot be loaded again: its source is unknown.`));
    this.checkMemory(spec);
    this.specs.set(id, spec);
    if (this.registry.has(id)) this.registry.loading(id);
    else this.registry.register(id);
    this.registry.markRuntime(id);
    const abort = new AbortController();
    const entry = { abort } as { job: Promise<string>; abort: AbortController };
    entry.job = (async () => {
      try {
        const engine = await this.engines.create(spec, this.log, abort.signal);
        if (abort.signal.aborted) {
          await engine.dispose();
          throw abort.signal.reason;
        }
        this.registry.ready(engine);
        this.log(`plinth: model '${id}' loaded`);
        return id;
      } catch (err) {
        // An aborted load was unloaded: the registry is the unload's now.
        if (!abort.signal.aborted) this.registry.failed(id, (err as Error).message);
        throw new ApiError(503, `The model '${id}' failed to load: ${(err as Error).message}`, { code: "model_unavailable" });
      } finally {
        if (this.pending.get(id) === entry) this.pending.delete(id);
      }
    })();
    this.pending.set(id, entry);
    return entry.job;
  }

  /** A model file larger than the memory left is refused before anything is read. */
  private checkMemory(spec: ModelSpec): void {
    const src = spec.source as { kind: string; path?: string };
    if (src.kind !== "file" || !src.path) return;
    let size: number;
    try {
      size = statSync(src.path).size;
    } catch {
      throw badRequest(`The model file '${src.path}' does not exist or cannot be read.`, "source");
    }
    const free = this.available();
    if (size > free * MEMORY_SHARE)
      throw new ApiError(507, `Loading '${spec.id}' needs about ${mib(size)} MiB, but only ${mib(free)} MiB of memory is free.`, {
        code: "RESOURCE_EXHAUSTED",
      });
  }

  async unload(id: string, opts: { keep?: boolean } = {}): Promise<void> {
    const loading = this.pending.get(id);
    if (loading) {
      // A load still under way is aborted, and waited for only so long: one that never ends (a file
      // the engine's reader cannot finish) must not hold the unload, nor a later load of the same
      // name. Should it finish after all, its engine is disposed (see start).
      loading.abort.abort(new Error("it was unloaded while it loaded"));
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([loading.job.catch(() => {}), new Promise((r) => (timer = setTimeout(r, ABORTED_LOAD_WAIT_MS)))]);
      clearTimeout(timer);
      if (this.pending.get(id) === loading) this.pending.delete(id);
    }
    const m = this.registry.get(id);
    if (!m) throw new ApiError(404, `No model named '${id}' is served here.`);
    // New requests are refused (or bring the model back) from now; running ones finish first.
    if (opts.keep) this.registry.unloaded(id);
    else this.registry.unregister(id);
    if (!opts.keep) this.specs.delete(id);
    const scheduler = m.scheduler;
    while (scheduler && (scheduler.busy > 0 || scheduler.queued > 0)) await new Promise((r) => setTimeout(r, 20));
    await m.engine?.dispose();
    this.log(`plinth: model '${id}' ${opts.keep ? "unloaded (kept for reloading)" : "unloaded"}`);
  }
}

/** Whether two sources name the same file or hub file, whatever id each was given. */
function sameSource(a: unknown, b: unknown): boolean {
  if (!a || !b) return false;
  return JSON.stringify(sourceIdentity(a)) === JSON.stringify(sourceIdentity(b));
}

/**
 * A source without its id, a file by its real path: `a/../a/model.gguf`, a link to it and a path
 * relative to the working directory are one file, loaded once.
 */
function sourceIdentity(source: unknown): Record<string, unknown> {
  const { id: _id, ...rest } = source as ModelSource;
  if (rest.kind !== "file") return rest;
  let real = path.resolve(rest.path);
  try {
    real = realpathSync(real);
  } catch {
    // A file that is not there (yet): its resolved path.
  }
  return { ...rest, path: real };
}

const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
