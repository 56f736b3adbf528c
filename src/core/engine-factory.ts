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

export type EngineFactory = (spec: ModelSpec, log: (line: string) => void) => Promise<Engine>;

/** Engines by source kind, so the assembly (not the core) decides which engines exist. */
export class EngineFactories {
  private readonly byKind = new Map<string, EngineFactory>();

  register(kinds: string[], factory: EngineFactory): this {
    for (const kind of kinds) this.byKind.set(kind, factory);
    return this;
  }

  create(spec: ModelSpec, log: (line: string) => void): Promise<Engine> {
    const factory = this.byKind.get(spec.kind);
    if (!factory) return Promise.reject(new Error(`no engine serves models of kind '${spec.kind}'`));
    return factory(spec, log);
  }
}
