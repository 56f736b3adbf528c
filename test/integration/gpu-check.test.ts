import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runCheckProcess, runGpuCheck } from "../../src/engines/llama-cpp/gpu-check.ts";

// The GPU check's child process, for real. This machine has no GPU, so node-llama-cpp runs the probe
// model on the CPU; on a GPU the same child loads it onto the GPU (docs/benchmarks.md has the run on
// an H200 whose prebuilt CUDA binary aborted, which the check caught).
describe("the GPU check's child process", () => {
  it("loads the probe model and generates with it", async () => {
    const result = await runGpuCheck({ gpu: false });
    assert.deepEqual(result, { outcome: "ok", gpu: false, devices: [] });
  });

  it("reports an error node-llama-cpp throws, as an error rather than a crash", async () => {
    const result = await runGpuCheck({ gpu: false }, 60_000, "/nonexistent/probe.gguf");
    assert.equal(result.outcome, "failed");
    assert.ok(result.outcome === "failed" && !result.crashed && /ENOENT/.test(result.reason), JSON.stringify(result));
  });

  it("reports a process that dies by a signal with the error it printed", async () => {
    // SIGKILL rather than a real abort, which could leave a core file behind.
    const script = "process.stderr.write('/lib/libggml-base.so(ggml_abort+0x152)[0x7f]\\n[node-llama-cpp] CUDA error: an illegal instruction was encountered\\n', () => process.kill(process.pid, 'SIGKILL'));";
    const result = await runCheckProcess(["-e", script], 30_000);
    assert.deepEqual(result, { outcome: "failed", reason: "CUDA error: an illegal instruction was encountered (ended by SIGKILL)", crashed: true });
  });

  it("gives up on a process that does not finish", async () => {
    const started = performance.now();
    const result = await runCheckProcess(["-e", "setInterval(() => {}, 1000)"], 500);
    assert.deepEqual(result, { outcome: "timeout", seconds: 1 });
    assert.ok(performance.now() - started < 5_000);
  });
});
