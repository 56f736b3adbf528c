import { availableParallelism } from "node:os";
import type { ModelSpec } from "../core/engine-factory.ts";
import { DEFAULT_MODEL, parseModelArg, type ModelSource } from "../models/source.ts";
import type { ModelEntry, PlinthConfig, UpstreamEntry } from "./schema.ts";

/**
 * The models a configuration serves, each with its settings: its own where the entry gives them,
 * else the server-wide ones. Threads never exceed the cores available.
 */
export function modelSpecs(config: PlinthConfig): Array<ModelSpec & { source: ModelSource }> {
  // A server that only fronts upstreams has no local model, not the default one.
  const entries: ModelEntry[] = config.model.length > 0 ? config.model : config.upstream.length > 0 ? [] : [DEFAULT_MODEL];
  const threads = config.threads === undefined ? undefined : Math.min(config.threads, availableParallelism());
  return entries.map((entry) => {
    const own: Partial<Exclude<ModelEntry, string>> = typeof entry === "string" ? {} : entry;
    // An entry's own name is not joined to its source with "=": a name that reads as a path ("..",
    // "/x") would turn into part of the path rather than be checked as a name.
    const source = typeof entry === "string" ? parseModelArg(entry) : parseModelArg(entry.source, entry.name);
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

/**
 * Requests Plinth sends one replica at once when neither the configuration nor the replica says how
 * many it runs (vLLM and SGLang do not report it): they queue upstream past its own batch.
 */
export const DEFAULT_UPSTREAM_SLOTS = 64;

/**
 * The remote models a configuration serves (kind "remote"): each upstream entry with the
 * server-wide upstream settings filled in. The remote engine's factory reads the source.
 */
export function upstreamSpecs(config: PlinthConfig): ModelSpec[] {
  return config.upstream.map((entry: UpstreamEntry) => {
    const own = typeof entry === "string" ? parseUpstreamArg(entry) : entry;
    const urls = (Array.isArray(own.url) ? own.url : [own.url]).flatMap((u) => u.split(",")).map((u) => u.trim()).filter(Boolean);
    for (const u of urls) {
      let parsed: URL;
      try {
        parsed = new URL(u);
      } catch {
        throw new Error(`upstream '${own.name}': '${u}' is not a URL`);
      }
      if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error(`upstream '${own.name}': '${u}' is not an http(s) URL`);
    }
    const configuredSlots = own.slots ?? config["upstream-slots"];
    const slots = configuredSlots ?? DEFAULT_UPSTREAM_SLOTS;
    const source = {
      kind: "remote",
      name: own.name,
      urls,
      model: own.model,
      apiKey: own["api-key"],
      slots,
      learnSlots: configuredSlots === undefined,
      queueTimeoutMs: config["queue-timeout"] * 1000,
      balance: config.balance,
      attempts: config["upstream-attempts"],
      connectTimeoutMs: (own["connect-timeout"] ?? config["connect-timeout"]) * 1000,
      firstTokenTimeoutMs: (own["first-token-timeout"] ?? config["first-token-timeout"]) * 1000,
      idleTimeoutMs: (own["idle-timeout"] ?? config["idle-timeout"]) * 1000,
      healthIntervalMs: config["health-interval"] * 1000,
      ejectAfter: config["eject-after"],
      ejectMs: config["eject-time"] * 1000,
      tokenize: own.tokenize ?? true,
      unsupported: own.unsupported ?? [],
    };
    return {
      id: own.name,
      kind: "remote",
      source,
      settings: {
        parallel: slots * urls.length,
        threads: 1,
        gpu: "off",
        embeddingContexts: 0,
        cacheRam: 0,
        cacheMinTokens: 0,
      },
    };
  });
}

/** `NAME=URL[,URL…]`. */
function parseUpstreamArg(arg: string): { name: string; url: string[] } & Partial<Exclude<UpstreamEntry, string>> {
  const eq = arg.indexOf("=");
  return { name: arg.slice(0, eq), url: arg.slice(eq + 1).split(",") };
}
