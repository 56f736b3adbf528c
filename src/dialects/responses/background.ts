import type { ResponseEvent } from "./to-wire.ts";

/**
 * Responses running in the background in this process: each has its own abort (cancel), and
 * listeners that tail its events live (a resumed stream). Finished runs leave the registry; their
 * events stay in the store.
 */
export class BackgroundRuns {
  private readonly runs = new Map<string, Run>();

  add(id: string): Run {
    const run = new Run();
    this.runs.set(id, run);
    void run.done.then(() => this.runs.delete(id));
    return run;
  }

  get(id: string): Run | undefined {
    return this.runs.get(id);
  }

  /** Cancels every run (server shutdown) and waits for them to record it. */
  async stopAll(): Promise<void> {
    const all = [...this.runs.values()];
    for (const r of all) r.abort.abort(new Error("the server is shutting down"));
    await Promise.all(all.map((r) => r.done));
  }
}

export class Run {
  readonly abort = new AbortController();
  private readonly listeners = new Set<(ev: ResponseEvent | null) => void>();
  private finish!: () => void;
  readonly done = new Promise<void>((resolve) => (this.finish = resolve));

  /** Sends an event to every tailing stream. */
  publish(ev: ResponseEvent): void {
    for (const l of this.listeners) l(ev);
  }

  /** Tails the run: `listener` gets each event, then null when the run ends. Returns an unsubscribe. */
  subscribe(listener: (ev: ResponseEvent | null) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  end(): void {
    for (const l of this.listeners) l(null);
    this.listeners.clear();
    this.finish();
  }
}
