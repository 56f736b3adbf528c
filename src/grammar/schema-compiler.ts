// JSON Schema → GBNF off the event loop, with a deadline. One long-lived worker thread compiles the
// schemas of every request in turn, so a costly (or hostile) schema never blocks other requests or
// /health; a compilation past its deadline has its worker terminated (a fresh one takes the next
// job) and is refused as a SchemaLimitError. Results are cached here by schema, so a schema seen
// before costs nothing. The in-thread limits (SchemaLimits) still apply inside the worker.
//
// A request may bring many schemas (128 tools), each within the limits and costing up to half a
// second. So a caller passes a CompileControl: one budget of worker time for all of a request's
// schemas (a job is cut at what is left of it), and the client's signal, which takes the request's
// queued jobs out at once. Callers compile a request's schemas one after another, so the queue holds
// at most one job per request and the requests take turns on the worker. Only the time a request's
// own jobs hold the worker is charged to it, not the time they wait for it: charging the wait (a
// deadline from the request's start) refused a small schema queued behind a slow one as if it had
// been slow itself, with every other request queued then.
import { Worker } from "node:worker_threads";
import {
  type CompiledSchema,
  type JsonSchemaToGbnfOptions,
  checkSchemaLimits,
  SchemaLimitError,
  schemaCacheKey,
  UnsupportedSchemaError,
} from "./json-schema-to-gbnf.ts";

type Reply = ({ id: number; ok: true } & CompiledSchema) | { id: number; ok: false; code: string; path: string; message: string };

interface Job {
  id: number;
  schema: unknown;
  opts: JsonSchemaToGbnfOptions;
  /** The request's budget, charged with the time this job holds the worker. */
  control: CompileControl;
  resolve: (c: CompiledSchema) => void;
  reject: (e: unknown) => void;
  /** The worker refused the schema (remembered for the next asker of the same schema). */
  refused: (e: UnsupportedSchemaError) => void;
}

/** What one request's compilations share. */
export interface CompileControl {
  /**
   * Milliseconds of worker time left to the request's schemas (none: no budget but the per-job
   * limit). Each job is cut at what is left and takes what it used; waiting in the queue is free.
   */
  leftMs?: number;
  /** The client's signal: when it aborts, the request's queued jobs are dropped. */
  signal?: AbortSignal;
}

/** Compiled schemas kept (least recently used first out). */
const CACHE_ENTRIES = 256;

export class SchemaCompiler {
  private worker: Worker | undefined;
  private ready: Promise<Worker> | undefined;
  private readonly queue: Job[] = [];
  /** The job the worker holds (set as soon as it leaves the queue, before the worker is up). */
  private current: Current | undefined;
  private nextId = 1;
  private readonly cache = new Map<string, CompiledSchema>();
  /**
   * Schemas the worker refused, by the same key: a refusal is decided by the schema and options
   * alone (a keyword that cannot be enforced, a size or automaton bound; not a deadline, which
   * depends on the machine's load), so the same schema sent again is refused at once. Before, each
   * resend took the worker for its 0.35–0.6 s again, and other clients' schemas queued behind it.
   */
  private readonly refusals = new Map<string, { path: string; message: string; limit: boolean }>();
  /** Servers using the compiler (acquire/release); the worker stops once none is left and it is idle. */
  private users = 0;
  /** Stop the worker as soon as it has nothing to do. */
  private stopWhenIdle = false;

  constructor(
    /** Deadline of one compilation, from when the worker takes it. */
    private readonly timeoutMs = 5000,
  ) {}

  /** Starts the worker ahead of the first schema (its start-up takes a moment under tsx). */
  warm(): void {
    this.stopWhenIdle = false;
    void this.start();
  }

  /** A server starts using the compiler: the worker lives until every user has released it. */
  acquire(): void {
    this.users++;
    this.stopWhenIdle = false;
  }

  /** A server is done with the compiler; the last one out stops the worker (once it is idle). */
  async release(): Promise<void> {
    this.users = Math.max(0, this.users - 1);
    if (this.users === 0) await this.dispose();
  }

  compile(schema: unknown, opts: JsonSchemaToGbnfOptions = {}, control: CompileControl = {}): Promise<CompiledSchema> {
    if (control.signal?.aborted) return Promise.reject(control.signal.reason);
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
    const refused = key === undefined ? undefined : this.refusals.get(key);
    if (refused) return Promise.reject(refused.limit ? new SchemaLimitError(refused.path, refused.message) : new UnsupportedSchemaError(refused.path, refused.message));
    // The size bounds before the worker, here and without recursion: a schema nested thousands of
    // levels deep cannot even be posted to it (the structured clone recurses and overflows the
    // stack), and was refused only when the deadline passed, 5 s later. (A cached schema passed them.)
    try {
      checkSchemaLimits(schema, opts.limits);
    } catch (err) {
      return Promise.reject(err);
    }
    this.stopWhenIdle = false;
    const { signal } = control;
    return new Promise<CompiledSchema>((resolve, reject) => {
      const job: Job = {
        id: this.nextId++,
        schema,
        opts,
        control,
        resolve: (c) => {
          signal?.removeEventListener("abort", onAbort);
          if (key !== undefined) {
            this.cache.set(key, c);
            while (this.cache.size > CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
          }
          resolve(c);
        },
        reject: (e) => {
          signal?.removeEventListener("abort", onAbort);
          reject(e);
        },
        refused: (e) => {
          if (key === undefined) return;
          this.refusals.set(key, { path: e.path, message: e.reason, limit: e.code === "limit" });
          while (this.refusals.size > CACHE_ENTRIES) this.refusals.delete(this.refusals.keys().next().value!);
        },
      };
      // A job still queued leaves with its client; one the worker holds runs on to its deadline
      // (stopping it would cost a fresh worker) and its result is cached for the next asker.
      const onAbort = () => {
        const at = this.queue.indexOf(job);
        if (at === -1) return;
        this.queue.splice(at, 1);
        job.reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.queue.push(job);
      this.pump();
    });
  }

  /**
   * Stops the worker, at once when it is idle, otherwise as soon as the work queued now is done (a
   * worker left running would keep a process alive under tsx). A later compile starts a fresh one.
   */
  async dispose(): Promise<void> {
    if (this.current || this.queue.length > 0) {
      this.stopWhenIdle = true;
      return;
    }
    this.stopWhenIdle = false;
    const w = this.worker;
    this.worker = undefined;
    this.ready = undefined;
    await w?.terminate();
  }

  private start(): Promise<Worker> {
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
    this.ready = new Promise<Worker>((resolve) => {
      worker.on("message", (m: Reply | { ready: true }) => {
        if ("ready" in m) return resolve(worker);
        this.settle(m);
      });
    });
    worker.on("error", (e) => this.fail(worker, (e as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY" ? new SchemaLimitError("", "compiling the schema needs too much memory") : e));
    worker.on("exit", () => this.fail(worker, new Error("the schema compiler stopped")));
    return this.ready;
  }

  private pump(): void {
    if (this.current) return;
    const job = this.queue.shift();
    if (!job) {
      if (this.stopWhenIdle) void this.dispose();
      return;
    }
    if (job.control.leftMs !== undefined && job.control.leftMs <= 0) {
      job.reject(requestDeadlinePassed());
      this.pump();
      return;
    }
    // The job counts as current from here, so a dispose() while the worker starts waits for it.
    const cur: Current = { job, timer: undefined, startedAt: undefined };
    this.current = cur;
    void this.start().then((worker) => {
      if (this.current !== cur) return; // the worker died while starting; fail() moved on
      const left = job.control.leftMs ?? Infinity;
      cur.startedAt = performance.now();
      cur.timer = setTimeout(() => {
        // Past the deadline: this worker is busy for who knows how long; drop it.
        if (this.current !== cur) return;
        charge(cur);
        // Cut at the request's budget, that budget is spent. The timer can fire a fraction of a
        // millisecond before performance.now() shows the whole delay gone (libuv times it from its
        // loop's cached clock), which left a request 0.4 ms for a next schema that must be refused.
        if (left < this.timeoutMs && job.control.leftMs !== undefined) job.control.leftMs = Math.min(job.control.leftMs, 0);
        this.worker = undefined;
        this.ready = undefined;
        this.current = undefined;
        job.reject(left < this.timeoutMs ? requestDeadlinePassed() : new SchemaLimitError("", `compiling the schema took longer than ${this.timeoutMs} ms`));
        void worker.terminate();
        this.pump();
      }, Math.min(this.timeoutMs, left));
      try {
        worker.postMessage({ id: job.id, schema: job.schema, opts: job.opts });
      } catch (err) {
        // Not transferable (a value the structured clone refuses): refused now, the worker kept.
        clearTimeout(cur.timer);
        this.current = undefined;
        charge(cur);
        job.reject(new SchemaLimitError("", `the schema cannot be compiled: ${(err as Error).message}`));
        this.pump();
      }
    });
  }

  private settle(m: Reply): void {
    const cur = this.current;
    if (!cur || cur.job.id !== m.id) return;
    clearTimeout(cur.timer);
    this.current = undefined;
    charge(cur);
    if (m.ok) cur.job.resolve({ gbnf: m.gbnf, relaxed: m.relaxed, loadCost: m.loadCost });
    else if (m.code === "limit" || m.code === "unsupported") {
      const refusal = m.code === "limit" ? new SchemaLimitError(m.path, m.message) : new UnsupportedSchemaError(m.path, m.message);
      cur.job.refused(refusal);
      cur.job.reject(refusal);
    } else cur.job.reject(new Error(m.message));
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
      charge(cur);
      cur.job.reject(error);
    }
    this.pump();
  }
}

/** The job the worker holds, and since when (set once the worker has it). */
interface Current {
  job: Job;
  timer: NodeJS.Timeout | undefined;
  startedAt: number | undefined;
}

/** Charges the request of the job that leaves the worker with the time it held it (once). */
function charge(cur: Current): void {
  if (cur.startedAt === undefined) return;
  const { control } = cur.job;
  if (control.leftMs !== undefined) control.leftMs -= performance.now() - cur.startedAt;
  cur.startedAt = undefined;
}

/** A request's schemas, together, took longer than REQUEST_COMPILE_MS: the fault of them all, not of the one compiling last. */
export class RequestCompileDeadlineError extends SchemaLimitError {}

function requestDeadlinePassed(): SchemaLimitError {
  return new RequestCompileDeadlineError("", `compiling this request's schemas took longer than the ${REQUEST_COMPILE_MS} ms one request may use`);
}

/** How long all of one request's schemas may hold the compiler together (see CompileControl). */
export const REQUEST_COMPILE_MS = 5000;

/** The process's compiler: grammar compilation is CPU work, one thread for it is enough. */
export const schemaCompiler = new SchemaCompiler();
