import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { failureReason, type GpuCheckResult, usableGpu } from "../../src/engines/llama-cpp/gpu-check.ts";

// What node-llama-cpp 3.21.1's prebuilt CUDA binary printed on an H200 whose driver supports CUDA
// 13.0 when the first decode ran (2026-12-04), shortened: llama.cpp's error, then its backtrace.
const H200_ABORT = `/home/runner/work/node-llama-cpp/node-llama-cpp/llama/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:108: CUDA error
/work/main/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/libggml-base.so(+0x1c8eb)[0x7f72f92388eb]
/work/main/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/libggml-base.so(ggml_abort+0x152)[0x7f72f9238f42]
/work/main/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/libllama.cuda.v0.4.0.so(_ZN13llama_context6decodeERK11llama_batch+0x55f)[0x7f72cf308e8f]
[node-llama-cpp] CUDA error: the provided PTX was compiled with an unsupported toolchain.
/work/main/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/llama-addon.node(_ZN29AddonContextDecodeBatchWorker7ExecuteEv+0x66)[0x7f72f9328826]
[node-llama-cpp]   current device: 0, in function ggml_cuda_kernel_can_use_pdl at /home/runner/work/node-llama-cpp/node-llama-cpp/llama/llama.cpp/ggml/src/ggml-cuda/common.cuh:1640
[node-llama-cpp]   cudaFuncGetAttributes(&attr, kernel)
node(_ZZN4node14ThreadPoolWork12ScheduleWorkEvENUlP9uv_work_sE_4_FUNES2_+0x59)[0xc71349]
node[0x18a7b40]
/lib/x86_64-linux-gnu/libc.so.6(+0x9cb84)[0x7f72f909cb84]
`;

describe("the GPU check's failure reason", () => {
  it("keeps llama.cpp's error and drops the backtrace", () => {
    assert.equal(
      failureReason(H200_ABORT, null, "SIGABRT"),
      "CUDA error: the provided PTX was compiled with an unsupported toolchain. (ended by SIGABRT)",
    );
  });
  it("falls back to the last lines, then to the exit status", () => {
    assert.equal(failureReason("loading\nsomething odd happened\n", 3, null), "loading; something odd happened (exit code 3)");
    assert.equal(failureReason("", null, "SIGSEGV"), "ended by SIGSEGV");
  });
  it("is bounded", () => {
    assert.ok(failureReason(`error ${"x".repeat(5000)}`, 1, null).length <= 600);
  });
});

/** Check results by backend: each backend's check answers what `results` holds for it. */
function deps(supported: Array<string | false>, results: Record<string, GpuCheckResult> | GpuCheckResult = {}) {
  const calls = { checked: [] as string[], lines: [] as string[] };
  const resultOf = (gpu: string) => ("outcome" in results ? (results as GpuCheckResult) : (results as Record<string, GpuCheckResult>)[gpu]);
  return {
    calls,
    deps: {
      supported: async () => supported,
      check: async (gpu: string) => {
        calls.checked.push(gpu);
        const result = resultOf(gpu);
        if (!result) throw new Error(`no check of ${gpu} expected`);
        return result;
      },
      log: (line: string) => calls.lines.push(line),
    },
  };
}

const CRASH: GpuCheckResult = { outcome: "failed", reason: "CUDA error: the provided PTX was compiled with an unsupported toolchain. (ended by SIGABRT)", crashed: true };
const OK: GpuCheckResult = { outcome: "ok", gpu: "vulkan", devices: ["NVIDIA H200"] };

describe("the GPU setting the runtime starts with", () => {
  it("checks nothing for --gpu off or where auto finds no GPU", async () => {
    const off = deps(["cuda", false]);
    assert.equal(await usableGpu("off", off.deps), "off");
    const cpu = deps([false]);
    assert.equal(await usableGpu("auto", cpu.deps), "auto");
    assert.equal(off.calls.checked.length + cpu.calls.checked.length, 0);
  });
  it("auto: the first backend that passes serves, named, and the others are not checked", async () => {
    const d = deps(["cuda", "vulkan", false], { cuda: { outcome: "ok", gpu: "cuda", devices: ["NVIDIA H200"] } });
    assert.equal(await usableGpu("auto", d.deps), "cuda");
    assert.deepEqual(d.calls.checked, ["cuda"]);
    assert.deepEqual(d.calls.lines, []);
  });
  it("auto: a backend that crashes makes way for the next one, and the log says why", async () => {
    const d = deps(["cuda", "vulkan", false], { cuda: CRASH, vulkan: OK });
    assert.equal(await usableGpu("auto", d.deps), "vulkan");
    assert.deepEqual(d.calls.checked, ["cuda", "vulkan"]);
    assert.equal(d.calls.lines.length, 1);
    assert.match(d.calls.lines[0], /the cuda backend failed a one-token check \(CUDA error: the provided PTX.*driver.*\); trying vulkan/);
  });
  it("auto: when every backend fails, the CPU serves, and the log gives each reason", async () => {
    const one = deps(["cuda", false], CRASH);
    assert.equal(await usableGpu("auto", one.deps), "off");
    assert.equal(one.calls.lines.length, 1);
    assert.match(one.calls.lines[0], /the GPU backend failed a one-token check, so models run on the CPU: cuda: CUDA error: the provided PTX was compiled with an unsupported toolchain/);
    assert.match(one.calls.lines[0], /driver/);
    const noVulkan: GpuCheckResult = { outcome: "failed", reason: "Error: NoBinaryFoundError", crashed: false };
    const two = deps(["cuda", "vulkan", false], { cuda: CRASH, vulkan: noVulkan });
    assert.equal(await usableGpu("auto", two.deps), "off");
    assert.equal(two.calls.lines.length, 2);
    assert.match(two.calls.lines[1], /no GPU backend passed a one-token check, so models run on the CPU: cuda: CUDA error.*; vulkan: Error: NoBinaryFoundError; --gpu off skips the check$/);
  });
  it("a GPU the user named is checked alone and fails the start with the reason", async () => {
    const named = deps(["vulkan", false], CRASH);
    await assert.rejects(usableGpu("cuda", named.deps), /--gpu cuda: the GPU backend failed a one-token check: CUDA error: the provided PTX.*--gpu off serves on the CPU/);
    assert.deepEqual(named.calls.checked, ["cuda"]);
    const noBinary = deps([false], { outcome: "failed", reason: "Error: NoBinaryFoundError", crashed: false });
    await assert.rejects(usableGpu("vulkan", noBinary.deps), (err: Error) => !/driver/.test(err.message) && /NoBinaryFoundError/.test(err.message));
  });
  it("a check that does not finish keeps the GPU, with a warning", async () => {
    const d = deps(["cuda", false], { outcome: "timeout", seconds: 120 });
    assert.equal(await usableGpu("cuda", d.deps), "cuda");
    assert.match(d.calls.lines[0], /GPU check of cuda did not finish in 120 s/);
    const auto = deps(["cuda", "vulkan", false], { cuda: { outcome: "timeout", seconds: 120 } });
    assert.equal(await usableGpu("auto", auto.deps), "cuda");
    assert.deepEqual(auto.calls.checked, ["cuda"]);
  });
});
