// Schema → GBNF compilation off the event loop, with a deadline: a worker thread compiles, and is
// terminated when the deadline passes (SchemaLimitError), so one hostile schema can neither block
// other requests nor run unbounded. The in-thread limits (SchemaLimits) still apply inside.
//
// One worker per call (its start-up costs tens of milliseconds, more under tsx): meant for
// schemas that miss the caller's grammar cache. Under tsx (the .ts sources), the worker is started
// with `--import tsx` so it can load the TypeScript file too.
import { Worker } from "node:worker_threads";
import {
  SchemaLimitError,
  UnsupportedSchemaError,
  type CompiledSchema,
  type JsonSchemaToGbnfOptions,
} from "./json-schema-to-gbnf.ts";

export type WorkerCompileOptions = {
  /** Deadline for the whole compilation, start-up included (default 5000 ms). */
  timeoutMs?: number;
  /** Heap limit of the worker (default 512 MiB); running out is reported as a SchemaLimitError. */
  maxHeapMb?: number;
};

/** compileJsonSchema in a worker thread; rejects with UnsupportedSchemaError / SchemaLimitError as the in-thread call would. */
export function compileSchemaWithReportInWorker(schema: unknown, opts: JsonSchemaToGbnfOptions = {}, wopts: WorkerCompileOptions = {}): Promise<CompiledSchema> {
  const timeoutMs = wopts.timeoutMs ?? 5000;
  const here = import.meta.url;
  const underTs = here.endsWith(".ts");
  const entry = new URL(underTs ? "./schema-worker-thread.ts" : "./schema-worker-thread.js", here);
  const workerOpts = { workerData: { schema, opts }, resourceLimits: { maxOldGenerationSizeMb: wopts.maxHeapMb ?? 512 } };
  // Under tsx, `execArgv: ["--import", "tsx"]` does not reach the worker's loader on Node 20; a
  // small bootstrap registers tsx's ESM hooks in the worker first, then loads the entry.
  const worker = underTs
    ? new Worker(
        `(async () => { const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))}); register(); await import(${JSON.stringify(entry.href)}); })().catch((e) => { throw e; });`,
        { ...workerOpts, eval: true },
      )
    : new Worker(entry, workerOpts);
  return new Promise<CompiledSchema>((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
      void worker.terminate();
    };
    const timer = setTimeout(() => finish(() => reject(new SchemaLimitError("", `compiling the schema took longer than ${timeoutMs} ms`))), timeoutMs);
    worker.once("message", (m: ({ ok: true } & CompiledSchema) | { ok: false; code: string; path: string; message: string }) => {
      finish(() => {
        if (m.ok) resolve({ gbnf: m.gbnf, relaxed: m.relaxed, loadCost: m.loadCost });
        else if (m.code === "limit") reject(new SchemaLimitError(m.path, m.message));
        else if (m.code === "unsupported") reject(new UnsupportedSchemaError(m.path, m.message));
        else reject(new Error(m.message));
      });
    });
    worker.once("error", (e) => {
      const oom = (e as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY";
      finish(() => reject(oom ? new SchemaLimitError("", "compiling the schema needs too much memory") : e));
    });
    worker.once("exit", (code) => finish(() => reject(new Error(`schema worker exited with code ${code}`))));
  });
}

/** The GBNF text of compileSchemaWithReportInWorker. */
export async function compileSchemaInWorker(schema: unknown, opts: JsonSchemaToGbnfOptions = {}, wopts: WorkerCompileOptions = {}): Promise<string> {
  return (await compileSchemaWithReportInWorker(schema, opts, wopts)).gbnf;
}
