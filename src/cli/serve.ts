import { availableParallelism } from "node:os";
import type { PlinthConfig } from "../config/schema.ts";
import { ModelRegistry } from "../core/registry.ts";
import { LlamaCppEngine } from "../engines/llama-cpp/llama-engine.ts";
import { buildServer } from "../http/server.ts";
import { createProgressBar, resolveModelPath } from "../models/download.ts";
import { DEFAULT_MODEL, parseModelArg, type ModelSource } from "../models/source.ts";

export interface RunningServer {
  url: string;
  port: number;
  registry: ModelRegistry;
  /** Resolves once every model is loaded (or has failed). */
  loaded: Promise<void>;
  close(): Promise<void>;
}

export interface ServeHooks {
  log?: (line: string) => void;
}

/**
 * Starts listening first and loads models afterwards, so /health can report loading progress and an
 * orchestrator can tell a slow start from a dead one.
 */
export async function serve(config: PlinthConfig, hooks: ServeHooks = {}): Promise<RunningServer> {
  const log = hooks.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const sources: ModelSource[] = (config.model.length > 0 ? config.model : [DEFAULT_MODEL]).map(parseModelArg);
  const threads = Math.min(config.threads, availableParallelism());
  if (threads < config.threads) log(`plinth: using ${threads} threads; only ${threads} cores are available`);

  const registry = new ModelRegistry(config["max-queue"]);
  for (const s of sources) registry.register(s.id);

  const app = buildServer(registry, { bodyLimit: config["body-limit"] });
  await app.listen({ host: config.host, port: config.port });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  const url = `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
  log(`plinth: listening on ${url}`);

  const loaded = (async () => {
    for (const source of sources) {
      try {
        const modelPath = await resolveModelPath(source, {
          cacheDir: config["cache-dir"],
          progress: source.kind === "hf" ? createProgressBar(`downloading ${source.id}`) : undefined,
        });
        const engine = await LlamaCppEngine.load({
          id: source.id,
          modelPath,
          contextSize: config["ctx-size"],
          parallel: config.parallel,
          threads,
          gpu: config.gpu,
          embeddingContexts: config["embedding-contexts"],
          cacheRam: config["cache-ram"],
          chatWrapper: config["chat-wrapper"],
          cacheMinTokens: config["cache-min-tokens"],
        });
        registry.ready(engine);
        if (engine.slots === 0)
          log(`plinth: model '${source.id}' ready for embeddings only (inputs up to ${engine.embeddings?.info.maxInputTokens} tokens, ${threads} threads)`);
        else log(`plinth: model '${source.id}' ready (context ${engine.contextSize} x ${config.parallel} sequences, ${threads} threads)`);
      } catch (err) {
        registry.failed(source.id, (err as Error).message);
        log(`plinth: model '${source.id}' failed to load: ${(err as Error).message}`);
      }
    }
  })();

  return {
    url,
    port,
    registry,
    loaded,
    close: async () => {
      await app.close();
      await loaded;
      await registry.dispose();
    },
  };
}
