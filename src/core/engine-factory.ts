import type { Engine } from "./engine.ts";

/**
 * What the server knows about one model before an engine exists for it: where it comes from (its
 * `kind` picks the engine: a local file, a hub download, later a remote upstream) and how it should
 * run. Per-model values fall back to the server-wide settings.
 */
export interface ModelSpec {
  id: string;
  kind: string;
  /** The source as its kind describes it (a path, a hub reference, an upstream URL); read by its factory. */
  source: unknown;
  settings: ModelSettings;
}

export interface ModelSettings {
  /** Context tokens per sequence; undefined: the engine's own choice. */
  contextSize?: number;
  /** Generations that run at once (sequences, or an upstream's concurrency). */
  parallel: number;
  /** Prompt format override, by name; undefined: the model's own template. */
  chatWrapper?: string;
  /** CPU threads per context; undefined: the engine's own choice. */
  threads?: number;
  gpu: string;
  embeddingContexts: number;
  /** Contexts the generation sequences are spread over; undefined: the engine's own choice. */
  decodeContexts?: number;
  cacheRam: number;
  cacheMinTokens: number;
}

/**
 * A factory could not make the engine yet, for a reason that passes by itself (a remote upstream that
 * has not started): the model stays loading and the server asks the factory again later, where any
 * other error fails the model.
 */
export class EngineNotReady extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EngineNotReady";
  }
}

/**
 * The model's file cannot be served as it is: missing, unreadable, not a regular file, not a model
 * or a malformed one. The fault is the file's, so a loader answers it as a client error naming the
 * source, not as a failure worth retrying. Engines raise it from their checks of a file.
 */
export class ModelFileRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelFileRefused";
  }
}

/**
 * Makes the engine. `signal` aborts a load nobody waits for any more (the model was unloaded, the
 * server stops); a factory passes it on where its engine can stop early.
 */
export type EngineFactory = (spec: ModelSpec, log: (line: string) => void, signal?: AbortSignal) => Promise<Engine>;

/**
 * A quick look at a source before it is loaded (a file's header, not its weights): throws
 * ModelFileRefused for one that can never load, so a caller hears of it at once.
 */
export type SourceCheck = (spec: ModelSpec) => Promise<void>;

/** Engines by source kind, so the assembly (not the core) decides which engines exist. */
export class EngineFactories {
  private readonly byKind = new Map<string, EngineFactory>();
  private readonly checks = new Map<string, SourceCheck>();

  register(kinds: string[], factory: EngineFactory, check?: SourceCheck): this {
    for (const kind of kinds) {
      this.byKind.set(kind, factory);
      if (check) this.checks.set(kind, check);
    }
    return this;
  }

  create(spec: ModelSpec, log: (line: string) => void, signal?: AbortSignal): Promise<Engine> {
    const factory = this.byKind.get(spec.kind);
    if (!factory) return Promise.reject(new Error(`no engine serves models of kind '${spec.kind}'`));
    return factory(spec, log, signal);
  }

  /** The source's check, where its engine has one (throws ModelFileRefused). */
  async check(spec: ModelSpec): Promise<void> {
    await this.checks.get(spec.kind)?.(spec);
  }
}
