import v8 from "node:v8";
import vm from "node:vm";
import type { GenerationHooks } from "../core/context.ts";

/**
 * Every request leaves native objects behind (grammar states, samplers) whose memory llama.cpp
 * frees only when their small JavaScript handles are collected. V8 sees only the handles, so with a
 * small JavaScript heap it rarely collects, and resident memory climbs by megabytes per thousand
 * requests although nothing is leaked (measured: bench/soak.ts, +160 MB over 4,000 requests with
 * distinct JSON schemas; flat with a full collection every 1,000). This paces full collections by
 * finished requests: one after every `every` of them, run between requests.
 */
export function nativeMemoryPacer(every = 256): GenerationHooks {
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc") as () => void;
  let finished = 0;
  let scheduled = false;
  return {
    finished: () => {
      if (++finished % every !== 0 || scheduled) return;
      scheduled = true;
      setImmediate(() => {
        scheduled = false;
        gc();
      });
    },
  };
}
