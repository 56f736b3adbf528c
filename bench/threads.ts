import { availableParallelism } from "node:os";
import { defaultThreads, engineBuild, getRuntime } from "../src/engines/llama-cpp/runtime.ts";

/** The server's default CPU threads on this machine, for the engine binary installed (runtime.ts). */
export async function serverDefaultThreads(cores = availableParallelism()): Promise<number> {
  return defaultThreads(cores, engineBuild(await getRuntime({ gpu: "off", threads: 1 })));
}
