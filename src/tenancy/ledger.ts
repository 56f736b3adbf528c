import type { TenancyStore, UsageRow } from "../store/tenancy-store.ts";

/** Rows kept for a retry when the database refuses a batch, at most (then the oldest are dropped). */
const MAX_PENDING = 50_000;

/**
 * Writes ledger rows in batches: rows wait in memory for at most `intervalMs` (or until `batchSize`
 * have gathered) and are committed together, one transaction per batch, off the request path. With
 * the default 200 ms a finished request's row is on disk (WAL) well within a second.
 *
 * The same batches charge each key's tokens to its lifetime total (`used_tokens`, which budgets
 * are checked against at the next start). With `keepRows: false` (`--ledger off`) only that charge
 * is written: no rows, but a budget still holds across restarts.
 */
export class LedgerWriter {
  private rows: UsageRow[] = [];
  /** Due while rows wait: armed by the first row of a batch, so an idle ledger sets no timer at all. */
  private timer: NodeJS.Timeout | undefined;
  private readonly intervalMs: number;
  private readonly pruner: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly store: TenancyStore,
    opts: { intervalMs?: number; batchSize?: number; retentionMs?: number; keepRows?: boolean } = {},
  ) {
    this.batchSize = opts.batchSize ?? 512;
    this.keepsRows = opts.keepRows ?? true;
    this.intervalMs = opts.intervalMs ?? 200;
    const retention = opts.retentionMs ?? 0;
    if (retention > 0 && this.keepsRows) {
      const prune = () => {
        try {
          this.store.pruneUsage(Date.now() - retention);
        } catch (err) {
          process.emitWarning(`usage ledger pruning failed: ${(err as Error).message}`);
        }
      };
      prune();
      this.pruner = setInterval(prune, 60 * 60 * 1000);
      this.pruner.unref();
    }
  }

  private readonly batchSize: number;
  /** Whether rows are kept (the ledger is on), or only their tokens charged to their keys. */
  readonly keepsRows: boolean;

  write(row: UsageRow): void {
    if (this.closed) return;
    // Without rows, only what a key spent matters.
    if (!this.keepsRows && (row.keyId === null || row.promptTokens + row.completionTokens === 0)) return;
    this.rows.push(row);
    if (this.rows.length >= this.batchSize) this.flush();
    else this.arm();
  }

  // A timer only while rows wait (an interval woke the thread five times a second on an idle server).
  private arm(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Commits what is waiting now. */
  flush(): void {
    if (this.rows.length === 0) return;
    const batch = this.rows;
    this.rows = [];
    try {
      if (this.keepsRows) this.store.insertUsage(batch);
      else this.store.chargeKeys(batch);
      if (this.failing) process.emitWarning("usage ledger writes go through again");
      this.failing = false;
    } catch (err) {
      // Said once per outage, not at every flush: a full disk made it a warning every 200 ms.
      if (!this.failing) process.emitWarning(`usage ledger write failed (rows are kept and written again): ${(err as Error).message}`);
      this.failing = true;
      this.rows = [...batch, ...this.rows].slice(-MAX_PENDING);
      this.arm();
    }
  }

  /** Whether the last write failed (its rows wait for the next flush). */
  private failing = false;

  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    clearTimeout(this.timer);
    if (this.pruner) clearInterval(this.pruner);
  }
}
