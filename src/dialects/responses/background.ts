import { ApiError } from "../../core/errors.ts";
import type { JsonObject } from "../../store/store.ts";
import type { ResponseEvent } from "./to-wire.ts";

/**
 * Why a run was stopped, as its abort reason. An ApiError with its own code, so the
 * generation's failure is counted under it (`plinth_generation_failures_total`), not as the
 * `internal_error` any plain Error would be; the run records the response as cancelled either way.
 */
export const stopReason = {
  cancelled: () => new ApiError(499, "The response was cancelled.", { code: "cancelled" }),
  deleted: () => new ApiError(499, "The response was deleted while it ran.", { code: "cancelled" }),
  shutdown: () => new ApiError(503, "The server is shutting down.", { code: "server_shutting_down" }),
};

/**
 * Stored responses running in this process: background ones, and stored ones whose client waits
 * for them. Each has its own abort (cancel, delete, shutdown); a background one also its events so
 * far, and listeners that tail them live (a resumed stream). Finished runs leave the registry;
 * their events stay in the store.
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

  /**
   * Cancels every run (server shutdown) and waits for them to record it. A run whose store cannot
   * be written now tries once more and gives up (see Run.stopWrites): a shutdown does not wait for
   * a disk to be freed.
   */
  async stopAll(): Promise<void> {
    const all = [...this.runs.values()];
    for (const r of all) r.stop("shutdown");
    await Promise.all(all.map((r) => r.done));
  }
}

/** The stream events that end a response: after one of them a stream has said how it ended. */
export const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

export class Run {
  readonly abort = new AbortController();
  /**
   * Aborted when what the run has left to store should no longer wait for a store that cannot be
   * written: on a delete (the response goes anyway) and on a shutdown (one last try). Not on a
   * cancel: the cancelled response must still be stored as such.
   */
  readonly stopWrites = new AbortController();
  /** Who stopped the run, if anyone did. */
  private stoppedBy: keyof typeof stopReason | undefined;
  private readonly listeners = new Set<(ev: ResponseEvent | null) => void>();
  /**
   * Every event published so far. The store gets them in batches (every 100 ms), so a stream that
   * joins the run must take what came before it from here: the events not yet written would
   * otherwise be in neither place (measured: 3 to 32 events missing from resumed streams, and the
   * first stream of a `background` + `stream` request missing `response.in_progress`).
   */
  private readonly log: ResponseEvent[] = [];
  private ended = false;
  /** The response as the generation left it (see `settle`). */
  private last: JsonObject | undefined;
  private settled!: () => void;
  /** Resolves once the generation has ended and the response's last state is known (`final`). */
  readonly over = new Promise<void>((resolve) => (this.settled = resolve));
  private finish!: () => void;
  /** Resolves once the run has ended and what it had to store is stored (or given up on). */
  readonly done = new Promise<void>((resolve) => (this.finish = resolve));

  /** Stops the run, with the reason its generation ends with. A delete outranks a cancel it overtakes: the response is gone either way. */
  stop(why: keyof typeof stopReason): void {
    if (this.stoppedBy !== "deleted") this.stoppedBy = why;
    if (why !== "cancelled") this.stopWrites.abort();
    this.abort.abort(stopReason[why]());
  }

  /**
   * The response as its run ended, from when its generation ended until the run is over: the store
   * may not have it yet (a write waiting for a full disk), and reads of this process then say how it
   * ended rather than the `in_progress` stored before. Undefined while it still runs.
   */
  get final(): JsonObject | undefined {
    return this.last;
  }

  /**
   * The generation has ended with `final`: streams tailing the run end now (their last events are
   * all in the log), while the run stays registered until what it stores is written (`end`).
   */
  settle(final?: JsonObject): void {
    if (this.ended) return;
    this.ended = true;
    this.last = final;
    for (const l of this.listeners) l(null);
    this.listeners.clear();
    this.settled();
  }

  /**
   * The event that ends a stream tailing this run once it has ended, if its own events do not. A
   * cancelled run's stream just ends, as OpenAI's does (the response, still there, says
   * `cancelled`); a deleted one's streams would end without a word about why, the response being
   * gone, so they end with an `error` event, code `cancelled`, as a stored stream that is not in
   * the background does when it is deleted.
   */
  closing(): ResponseEvent | undefined {
    const last = this.log.at(-1);
    if (this.stoppedBy !== "deleted" || (last && TERMINAL.has(last.type))) return undefined;
    const reason = stopReason.deleted();
    return { type: "error", sequence_number: (last?.sequence_number ?? -1) + 1, code: reason.code, message: reason.message, param: null };
  }

  /** Records an event and sends it to every tailing stream. */
  publish(ev: ResponseEvent): void {
    this.log.push(ev);
    for (const l of this.listeners) l(ev);
  }

  /**
   * Tails the run from after sequence number `after`: returns the events published so far, and
   * `listener` gets each later one, then null when the run ends (at once if it has ended). Both are
   * taken in the same turn, so nothing falls between them.
   */
  tail(after: number, listener: (ev: ResponseEvent | null) => void): { earlier: ResponseEvent[]; unsubscribe: () => void } {
    const earlier = this.log.filter((ev) => ev.sequence_number > after);
    if (this.ended) {
      listener(null);
      return { earlier, unsubscribe: () => {} };
    }
    this.listeners.add(listener);
    return { earlier, unsubscribe: () => this.listeners.delete(listener) };
  }

  /** The run is over: it leaves the registry, and its response is read from the store alone. */
  end(): void {
    this.settle(this.last);
    this.finish();
  }
}
