import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";

export type GpuChoice = "auto" | "off" | "cuda" | "vulkan" | "metal";

let shared: Promise<Llama> | null = null;
let sharedGpu: GpuChoice | undefined;

/**
 * One llama.cpp runtime per process, shared by every model. The thread budget is always explicit:
 * the library's own default (4) on a 2-core machine makes decoding about 100x slower. `threads` is
 * the budget all of a caller's contexts together need; a later caller needing more raises it.
 */
export async function getRuntime(opts: { gpu: GpuChoice; threads: number }): Promise<Llama> {
  if (shared && opts.gpu !== sharedGpu) throw new Error(`llama runtime already started with gpu ${sharedGpu}`);
  if (!shared) {
    sharedGpu = opts.gpu;
    shared = getLlama({
      gpu: opts.gpu === "off" ? false : opts.gpu,
      build: "never",
      maxThreads: opts.threads,
      logLevel: LlamaLogLevel.error,
    });
  }
  const llama = await shared;
  if (llama.maxThreads < opts.threads) llama.maxThreads = opts.threads;
  return llama;
}

/**
 * Generation contexts per model on the CPU, when not set: as many as the cores hold at `threads`
 * each. Sequences are spread over them, and each context decodes its own batch on its own thread, so
 * the cores work side by side without the spinning barriers that one context with more threads needs
 * (on 2 cores: two 1-thread contexts, measured in docs/benchmarks.md). With the default thread count
 * that is 2 on a 2-core machine and 1 from 3 cores up.
 */
export function defaultDecodeContexts(cores: number, threads: number): number {
  return Math.max(1, Math.floor(cores / Math.max(1, threads)));
}
