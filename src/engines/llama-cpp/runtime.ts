import { getLlama, getLlamaGpuTypes, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { runGpuCheck, usableGpu } from "./gpu-check.ts";
import { currentMarker, type EngineMarker } from "./engine-marker.mjs";

export type GpuChoice = "auto" | "off" | "cuda" | "vulkan" | "metal";

let shared: Promise<Llama> | null = null;
let sharedGpu: GpuChoice | undefined;

/**
 * One llama.cpp runtime per process, shared by every model. The thread budget is always explicit:
 * the library's own default (4) on a 2-core machine makes decoding about 100x slower. `threads` is
 * the budget all of a caller's contexts together need; a later caller needing more raises it.
 */
export async function getRuntime(opts: { gpu: GpuChoice; threads: number; log?: (line: string) => void }): Promise<Llama> {
  if (shared && opts.gpu !== sharedGpu) throw new Error(`llama runtime already started with gpu ${sharedGpu}`);
  if (!shared) {
    sharedGpu = opts.gpu;
    // node-llama-cpp names a local build's folder by its CMake options (the portable build sets
    // GGML_NATIVE=OFF), and only finds it when asked with the same ones.
    const cmake = engineMarker()?.cmakeOptions ? { cmakeOptions: engineMarker()!.cmakeOptions } : {};
    const log = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    shared = (async () => {
      // A GPU backend decodes one token in a child process before it serves (gpu-check.ts).
      const gpu = await usableGpu(opts.gpu, {
        supported: () => getLlamaGpuTypes("supported"),
        check: (gpu) => runGpuCheck({ gpu, ...cmake }),
        log,
      });
      return getLlama({ gpu: gpu === "off" ? false : gpu, build: "never", ...cmake, maxThreads: opts.threads, logLevel: LlamaLogLevel.error });
    })();
    // A failed start is not kept: the next model's load asks again (and fails the same way, by itself).
    shared.catch(() => { shared = null; sharedGpu = undefined; });
  }
  const llama = await shared;
  if (llama.maxThreads < opts.threads) llama.maxThreads = opts.threads;
  return llama;
}

/** Which llama.cpp binary a runtime runs on (see `npm run engine:build`, scripts/engine-build.mjs). */
export interface EngineBuild {
  /** Built on this machine rather than node-llama-cpp's prebuilt binary. */
  local: boolean;
  /** Every decode and sampling of the process runs on one native thread (Plinth's addon edit). */
  decodeThread: boolean;
}

export function engineBuild(llama: Llama): EngineBuild {
  const local = llama.buildType === "localBuild";
  return { local, decodeThread: local && llama.gpu === false && hasDecodeThreadMarker() };
}

let marker: EngineMarker | null | undefined;
/** The marker of the build scripts/engine-build.mjs made, if it is current (src/engines/llama-cpp/engine-marker.mjs). */
function engineMarker(): EngineMarker | undefined {
  if (marker === undefined) marker = currentMarker() ?? null;
  return marker ?? undefined;
}

function hasDecodeThreadMarker(): boolean {
  return engineMarker()?.decodeThread === true;
}

/**
 * llama.cpp's CPU threads per context when not set. With the decode thread (engine:build), all the
 * cores: one OpenMP team does every decode, and the JavaScript thread's work falls between decodes
 * (on 2 cores, 124-136 tok/s for one stream against 85-88 at one thread; docs/benchmarks.md). Else
 * one core fewer than the machine has, so the JavaScript thread keeps a core of its own: the prebuilt
 * engine synchronises its threads with barriers that only spin, so a decode thread that loses its
 * core to anything else stalls the others (on a 2-core VM one thread decoded ~2x faster than two,
 * and 20-100x faster once other work shared the machine; docs/benchmarks.md).
 */
export function defaultThreads(cores: number, build: EngineBuild): number {
  return build.decodeThread ? cores : Math.max(1, cores - 1);
}

/**
 * Generation contexts per model on the CPU, when not set: as many as the cores hold at `threads`
 * each. Sequences are spread over them, and each context decodes its own batch on its own thread, so
 * the cores work side by side without the spinning barriers that one context with more threads needs
 * (on 2 cores: two 1-thread contexts, measured in docs/benchmarks.md). With the default thread count
 * that is 2 on a 2-core machine and 1 from 3 cores up with the prebuilt engine, and 1 with the decode
 * thread, where all of a process's decodes take turns on one thread anyway.
 */
export function defaultDecodeContexts(cores: number, threads: number): number {
  return Math.max(1, Math.floor(cores / Math.max(1, threads)));
}
