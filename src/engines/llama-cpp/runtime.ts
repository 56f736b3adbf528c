import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";

export type GpuChoice = "auto" | "off" | "cuda" | "vulkan" | "metal";

let shared: Promise<Llama> | null = null;
let sharedKey = "";

/**
 * One llama.cpp runtime per process, shared by every model. The thread budget is always explicit:
 * the library's own default (4) on a 2-core machine makes decoding about 100x slower.
 */
export function getRuntime(opts: { gpu: GpuChoice; threads: number }): Promise<Llama> {
  const key = `${opts.gpu}:${opts.threads}`;
  if (shared && key !== sharedKey) throw new Error(`llama runtime already started with ${sharedKey}`);
  if (!shared) {
    sharedKey = key;
    shared = getLlama({
      gpu: opts.gpu === "off" ? false : opts.gpu,
      build: "never",
      maxThreads: opts.threads,
      logLevel: LlamaLogLevel.error,
    });
  }
  return shared;
}
