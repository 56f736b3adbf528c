import { availableParallelism } from "node:os";
import type { ModelSpec } from "../core/engine-factory.ts";
import { DEFAULT_MODEL, parseModelArg, type ModelSource } from "../models/source.ts";
import type { ModelEntry, PlinthConfig } from "./schema.ts";

/**
 * The models a configuration serves, each with its settings: its own where the entry gives them,
 * else the server-wide ones. Threads never exceed the cores available.
 */
export function modelSpecs(config: PlinthConfig): Array<ModelSpec & { source: ModelSource }> {
  const entries: ModelEntry[] = config.model.length > 0 ? config.model : [DEFAULT_MODEL];
  const threads = Math.min(config.threads, availableParallelism());
  return entries.map((entry) => {
    const own: Partial<Exclude<ModelEntry, string>> = typeof entry === "string" ? {} : entry;
    const arg = typeof entry === "string" ? entry : entry.name ? `${entry.name}=${entry.source}` : entry.source;
    const source = parseModelArg(arg);
    const wrapper = own["chat-wrapper"] ?? config["chat-wrapper"];
    return {
      id: source.id,
      kind: source.kind,
      source,
      settings: {
        contextSize: own["ctx-size"] ?? config["ctx-size"],
        parallel: own.parallel ?? config.parallel,
        chatWrapper: wrapper === "auto" ? undefined : wrapper,
        threads,
        gpu: config.gpu,
        embeddingContexts: config["embedding-contexts"],
        decodeContexts: config["decode-contexts"],
        cacheRam: config["cache-ram"],
        cacheMinTokens: config["cache-min-tokens"],
      },
    };
  });
}
