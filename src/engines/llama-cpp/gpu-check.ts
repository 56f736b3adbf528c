import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PROBE_TOKENS, writeProbeModel } from "./probe-model.ts";

/**
 * Before a GPU backend serves, the probe model (probe-model.ts) is loaded onto it and decoded in a
 * child process. A GPU binary can load, list the device and load a model, and still fail at its first
 * kernel: on an H200 whose driver supports CUDA 13.0, node-llama-cpp 3.21.1's prebuilt CUDA binary
 * aborted the whole process at the first decode ("the provided PTX was compiled with an unsupported
 * toolchain", 2026-12-04, docs/benchmarks.md). llama.cpp aborts on such errors, and an abort cannot be
 * caught, so the first decode happens where it can only end the check.
 */
export type GpuCheckResult =
  | { outcome: "ok"; gpu: string | false; devices?: string[] }
  /** crashed: the child died (llama.cpp aborted) rather than reporting an error. */
  | { outcome: "failed"; reason: string; crashed: boolean }
  | { outcome: "timeout"; seconds: number };

const CHILD = fileURLToPath(new URL("./gpu-check-child.mjs", import.meta.url));
/** Long enough for a driver that compiles the binary's kernels for this GPU the first time. */
export const GPU_CHECK_TIMEOUT_MS = 120_000;

/** Runs the check with the options the runtime would give getLlama (gpu, cmakeOptions). */
export async function runGpuCheck(options: Record<string, unknown>, timeoutMs = GPU_CHECK_TIMEOUT_MS, modelPath?: string): Promise<GpuCheckResult> {
  const dir = mkdtempSync(path.join(tmpdir(), "plinth-gpu-check-"));
  try {
    const file = modelPath ?? path.join(dir, "probe.gguf");
    if (!modelPath) await writeProbeModel(file);
    return await runCheckProcess([CHILD, file, JSON.stringify(options), String(PROBE_TOKENS.firstPiece)], timeoutMs);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs a check process (node with `args`): its last stdout line is the JSON result, its stderr the reason of a crash. */
export function runCheckProcess(args: string[], timeoutMs: number): Promise<GpuCheckResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => { stdout = (stdout + d.toString()).slice(-8192); });
    child.stderr.on("data", (d: Buffer) => { stderr = (stderr + d.toString()).slice(-16384); });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; child.kill("SIGKILL"); }, timeoutMs);
    child.on("error", (err) => { clearTimeout(timer); resolve({ outcome: "failed", reason: err.message, crashed: false }); });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return resolve({ outcome: "timeout", seconds: Math.round(timeoutMs / 1000) });
      const line = stdout.trim().split("\n").pop() ?? "";
      if (code === 0 && line.startsWith("{")) {
        try {
          const r = JSON.parse(line) as { gpu: string | false; devices?: string[]; generated?: number; error?: string };
          if (r.error) return resolve({ outcome: "failed", reason: r.error, crashed: false });
          if (r.generated) return resolve({ outcome: "ok", gpu: r.gpu, ...(r.devices ? { devices: r.devices } : {}) });
        } catch { /* reported below */ }
      }
      resolve({ outcome: "failed", reason: failureReason(stderr, code, signal), crashed: true });
    });
  });
}

/**
 * The lines of a failed check's output that say what went wrong: llama.cpp prints its error and then
 * a backtrace of library frames, which are left out. At most 600 characters.
 */
export function failureReason(stderr: string, code: number | null, signal: NodeJS.Signals | null): string {
  const lines = stderr.split("\n").map((l) => l.replace(/^\[node-llama-cpp\]\s*/, "").trim()).filter(Boolean);
  const frame = /^(\/|node\(|node\[|\S+\.so|at\s)|\(\+0x[0-9a-f]+\)|\[0x[0-9a-f]+\]$/;
  const said = lines.filter((l) => !frame.test(l));
  const errors = said.filter((l) => /error|failed|abort|unsupported|not supported/i.test(l));
  const picked = [...new Set(errors.length ? errors : said.slice(-3))].join("; ");
  const ended = signal ? `ended by ${signal}` : `exit code ${code}`;
  const text = picked ? `${picked} (${ended})` : ended;
  return text.length > 600 ? `${text.slice(0, 597)}...` : text;
}

export interface GpuChoiceDeps {
  /** The GPU backends node-llama-cpp would try for `auto` on this machine, in its order (false: the CPU). */
  supported: () => Promise<Array<string | false>>;
  /** Runs the check with this backend named. */
  check: (gpu: string) => Promise<GpuCheckResult>;
  log: (line: string) => void;
}

/**
 * The GPU setting the runtime starts with. `off` and a machine where `auto` finds no GPU need no
 * check. With `auto`, each backend the machine supports is checked in node-llama-cpp's order (CUDA
 * before Vulkan) and the first that passes serves, named, so the runtime loads the backend that was
 * checked; when none passes the CPU serves and the log says why. A backend the user named is checked
 * alone, and failing is an error at start rather than an abort at the first request. A check that does
 * not finish (a driver still compiling kernels) leaves that GPU in use, with a warning.
 */
export async function usableGpu<G extends string>(choice: G | "auto" | "off", deps: GpuChoiceDeps): Promise<G | "auto" | "off"> {
  if (choice === "off") return choice;
  const candidates = choice === "auto" ? (await deps.supported()).filter((g): g is string => g !== false) : [choice];
  if (candidates.length === 0) return choice;
  const failures: string[] = [];
  for (const [i, gpu] of candidates.entries()) {
    const result = await deps.check(gpu);
    if (result.outcome === "ok") return gpu as G;
    if (result.outcome === "timeout") {
      deps.log(`plinth: warning: the GPU check of ${gpu} did not finish in ${result.seconds} s; serving on it anyway (the first requests may be slow)`);
      return gpu as G;
    }
    // A binary that loads but dies at its first kernel was usually built with a newer toolkit than the
    // driver runs (the case measured above).
    const advice = result.crashed ? "; a GPU driver as new as the toolkit the binary was built with usually fixes this" : "";
    if (choice !== "auto") throw new Error(`--gpu ${choice}: the GPU backend failed a one-token check: ${result.reason}${advice}. --gpu off serves on the CPU`);
    failures.push(`${gpu}: ${result.reason}${advice}`);
    const next = candidates[i + 1];
    if (next) deps.log(`plinth: warning: the ${gpu} backend failed a one-token check (${result.reason}${advice}); trying ${next}`);
  }
  deps.log(`plinth: warning: ${failures.length > 1 ? "no GPU backend passed" : "the GPU backend failed"} a one-token check, so models run on the CPU: ${failures.join("; ")}; --gpu off skips the check`);
  return "off";
}
