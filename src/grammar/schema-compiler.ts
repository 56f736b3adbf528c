// JSON Schema → GBNF off the event loop, with a deadline. One long-lived worker thread compiles the
// schemas of every request in turn, so a costly (or hostile) schema never blocks other requests or
// /health; a compilation past its deadline has its worker terminated (a fresh one takes the next
// job) and is refused as a SchemaLimitError. Results are cached here by schema, so a schema seen
// before costs nothing. The in-thread limits (SchemaLimits) still apply inside the worker.
import { Worker } from "node:worker_threads";
import {
  type CompiledSchema,
  type JsonSchemaToGbnfOptions,
  SchemaLimitError,
  schemaCacheKey,
  UnsupportedSchemaError,
} from "./json-schema-to-gbnf.ts";

type Reply = { id: number; ok: true; gbnf: string; relaxed: CompiledSchema["relaxed"] } | { id: number; ok: false; code: string; path: string; message: string };

interface Job {
  id: number;
  schema: unknown;
  opts: JsonSchemaToGbnfOptions;
  resolve: (c: CompiledSchema) => void;
  reject: (e: unknown) => void;
}

/** Compiled schemas kept (least recently used first out). */
const CACHE_ENTRIES = 256;

export class SchemaCompiler {
  private worker: Worker | undefined;
  private ready: Promise<void> | undefined;
  private readonly queue: Job[] = [];
  private current: { job: Job; timer: NodeJS.Timeout } | undefined;
  private nextId = 1;
  private readonly cache = new Map<string, CompiledSchema>();

  constructor(
    /** Deadline of one compilation, from when the worker takes it. */
    private readonly timeoutMs = 5000,
  ) {}

  /** Starts the worker ahead of the first schema (its start-up takes a moment under tsx). */
  warm(): void {
    this.start();
  }

  compile(schema: unknown, opts: JsonSchemaToGbnfOptions = {}): Promise<CompiledSchema> {
    let key: string | undefined;
    try {
      key = schemaCacheKey(schema, opts);
    } catch {
      key = undefined; // not serialisable as a key: compile without caching
    }
    const hit = key === undefined ? undefined : this.cache.get(key);
    if (hit) {
      this.cache.delete(key!);
      this.cache.set(key!, hit);
      return Promise.resolve(hit);
    }
    return new Promise<CompiledSchema>((resolve, reject) => {
      this.queue.push({
        id: this.nextId++,
        schema,
        opts,
        resolve: (c) => {
          if (key !== undefined) {
            this.cache.set(key, c);
            while (this.cache.size > CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
          }
          resolve(c);
        },
        reject,
      });
      this.pump();
    });
  }

  /**
   * Stops the worker when it is idle (the compiler is shared by every server of the process; one
   * closing must not cut another's compilation short). A later compile starts a fresh worker.
   */
  async dispose(): Promise<void> {
    if (this.current || this.queue.length > 0) return;
    const w = this.worker;
    this.worker = undefined;
    this.ready = undefined;
    await w?.terminate();
  }

  private start(): Promise<void> {
    if (this.ready) return this.ready;
    const here = import.meta.url;
    const underTs = here.endsWith(".ts");
    const entry = new URL(underTs ? "./schema-compiler-thread.ts" : "./schema-compiler-thread.js", here);
    const options = { resourceLimits: { maxOldGenerationSizeMb: 512 } };
    // Under tsx a small bootstrap registers tsx's hooks in the worker before loading the entry.
    const worker = underTs
      ? new Worker(
          `(async () => { const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))}); register(); await import(${JSON.stringify(entry.href)}); })();`,
          { ...options, eval: true },
        )
      : new Worker(entry, options);
    worker.unref();
    this.worker = worker;
    this.ready = new Promise<void>((resolve) => {
      worker.on("message", (m: Reply | { ready: true }) => {
        if ("ready" in m) return resolve();
        this.settle(m);
      });
    });
    worker.on("error", (e) => this.fail(worker, (e as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY" ? new SchemaLimitError("", "compiling the schema needs too much memory") : e));
    worker.on("exit", () => this.fail(worker, new Error("the schema compiler stopped")));
    return this.ready;
  }

  private pump(): void {
    if (this.current || this.queue.length === 0) return;
    const job = this.queue.shift()!;
    void this.start().then(() => {
      const timer = setTimeout(() => {
        // Past the deadline: this worker is busy for who knows how long; drop it.
        const w = this.worker;
        this.worker = undefined;
        this.ready = undefined;
        this.current = undefined;
        job.reject(new SchemaLimitError("", `compiling the schema took longer than ${this.timeoutMs} ms`));
        void w?.terminate();
        this.pump();
      }, this.timeoutMs);
      this.current = { job, timer };
      this.worker!.postMessage({ id: job.id, schema: job.schema, opts: job.opts });
    });
  }

  private settle(m: Reply): void {
    const cur = this.current;
    if (!cur || cur.job.id !== m.id) return;
    clearTimeout(cur.timer);
    this.current = undefined;
    if (m.ok) cur.job.resolve({ gbnf: m.gbnf, relaxed: m.relaxed });
    else if (m.code === "limit") cur.job.reject(new SchemaLimitError(m.path, m.message));
    else if (m.code === "unsupported") cur.job.reject(new UnsupportedSchemaError(m.path, m.message));
    else cur.job.reject(new Error(m.message));
    this.pump();
  }

  /** The worker died: the job it held fails, the queue moves to a fresh worker. */
  private fail(worker: Worker, error: unknown): void {
    if (this.worker !== worker) return;
    this.worker = undefined;
    this.ready = undefined;
    const cur = this.current;
    this.current = undefined;
    if (cur) {
      clearTimeout(cur.timer);
      cur.job.reject(error);
    }
    this.pump();
  }
}

/** The process's compiler: grammar compilation is CPU work, one thread for it is enough. */
export const schemaCompiler = new SchemaCompiler();
