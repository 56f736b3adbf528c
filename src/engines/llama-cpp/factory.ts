import type { EngineFactory, SourceCheck } from "../../core/engine-factory.ts";
import { resolveModelPath, type ResolveOptions } from "../../models/download.ts";
import type { ModelSource } from "../../models/source.ts";
import type { GpuChoice } from "./runtime.ts";
import { checkGgufFiles } from "./gguf-header.ts";
import { LlamaCppEngine } from "./llama-engine.ts";

/**
 * A local file's header is checked before it is loaded (gguf-header.ts), so a malformed or wrong file
 * is refused at once; a hub reference is checked by the load itself, once it is downloaded.
 */
export const checkLlamaCppSource: SourceCheck = async (spec) => {
  const source = spec.source as ModelSource;
  if (source.kind === "file") await checkGgufFiles(source.path);
};

/**
 * Serves GGUF files in-process: a local path as it is, an `hf:` reference after downloading it into
 * the cache (with whatever progress display the caller gives).
 */
export function llamaCppFactory(download: (source: ModelSource) => ResolveOptions): EngineFactory {
  return async (spec, log, signal) => {
    const source = spec.source as ModelSource;
    // The load's signal stops a download as well: a shutdown or an unload must not wait for the
    // rest of a multi-gigabyte file (the part already fetched is kept, and a later load resumes it).
    const modelPath = await resolveModelPath(source, { ...download(source), signal });
    const s = spec.settings;
    const engine = await LlamaCppEngine.load({
      id: spec.id,
      modelPath,
      contextSize: s.contextSize,
      parallel: s.parallel,
      threads: s.threads,
      gpu: s.gpu as GpuChoice,
      embeddingContexts: s.embeddingContexts,
      decodeContexts: s.decodeContexts,
      cacheRam: s.cacheRam,
      chatWrapper: s.chatWrapper,
      cacheMinTokens: s.cacheMinTokens,
      signal,
      log,
    });
    if (engine.slots === 0)
      log(`plinth: model '${spec.id}' ready for embeddings only (inputs up to ${engine.embeddings?.info.maxInputTokens} tokens, ${engine.threads} threads)`);
    else
      log(
        `plinth: model '${spec.id}' ready (context ${engine.contextSize} x ${s.parallel} sequences, ${engine.threads} thread${engine.threads === 1 ? "" : "s"}` +
          (engine.decodeContexts > 1 ? ` in each of ${engine.decodeContexts} decode contexts` : "") +
          `; ${engine.runtime})`,
      );
    return engine;
  };
}
