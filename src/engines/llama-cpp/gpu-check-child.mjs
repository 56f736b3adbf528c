// The GPU check's child process (gpu-check.ts): loads the probe model fully onto the GPU that
// node-llama-cpp picks for the given options (the CPU when it picks none, which the tests use), generates two tokens and prints one JSON line. It is
// plain JavaScript so it starts without the TypeScript loader. A backend that fails its first
// kernel may abort this process; that is what the child is for.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, optionsJson, firstToken] = process.argv.slice(2);
const say = (result) => {
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
};
try {
  const llama = await getLlama({ ...JSON.parse(optionsJson), build: "never", maxThreads: 1, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath, gpuLayers: "max" });
  const context = await model.createContext({ contextSize: 64, sequences: 1, threads: 1 });
  const first = Number(firstToken);
  let generated = 0;
  for await (const _token of context.getSequence().evaluate([1, first, first + 1, first + 2], { temperature: 0 })) {
    if (++generated >= 2) break;
  }
  say({ gpu: llama.gpu, devices: await llama.getGpuDeviceNames(), generated });
} catch (err) {
  // An error node-llama-cpp throws (no binary for this GPU, no device) is said plainly; an abort
  // in llama.cpp never gets here.
  say({ error: err instanceof Error ? (err.message && err.message !== err.name ? `${err.name}: ${err.message}` : err.name) : String(err) });
}
