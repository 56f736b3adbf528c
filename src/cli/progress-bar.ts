import type { DownloadProgress } from "../models/download.ts";

type ProgressStream = { write(chunk: string): unknown; isTTY?: boolean; columns?: number };

/**
 * A `progress` callback that redraws a single status line on a terminal, and on anything
 * else (logs, pipes) prints a plain line roughly every 10% so logs stay readable.
 */
export function createProgressBar(
  label: string,
  stream: ProgressStream = process.stderr,
): (p: DownloadProgress) => void {
  const tty = stream.isTTY === true;
  let startedAt: number | undefined;
  let startBytes = 0;
  let lastDrawAt = 0;
  let lastStep = -1;
  let done = false;

  return (p) => {
    if (done) return;
    const now = Date.now();
    if (startedAt === undefined) {
      startedAt = now;
      startBytes = p.received;
    }
    const total = p.total && p.total > 0 ? p.total : undefined;
    const finished = total !== undefined && p.received >= total;
    // Bytes already on disk from an earlier run were not transferred now, so leave them
    // out of the speed.
    const seconds = (now - startedAt) / 1000;
    const speed = seconds > 0.2 ? (p.received - startBytes) / seconds : undefined;
    const pct = total ? Math.min(100, Math.floor((p.received / total) * 100)) : undefined;
    const amount = total ? `${(p.received / 1e6).toFixed(1)}/${(total / 1e6).toFixed(1)} MB` : formatMB(p.received);
    const rate = speed === undefined ? "" : ` ${(speed / 1e6).toFixed(1)} MB/s`;

    if (tty) {
      if (!finished && now - lastDrawAt < 100) return;
      lastDrawAt = now;
      const eta =
        !finished && total && speed && speed > 0 ? ` ETA ${formatDuration((total - p.received) / speed)}` : "";
      const tail = `${pct === undefined ? "" : ` ${String(pct).padStart(3)}%`} ${amount}${rate}${eta}`;
      const columns = stream.columns && stream.columns > 20 ? stream.columns : 80;
      // Size the bar against the widest expected tail rather than the current one, so it
      // does not change width from one redraw to the next.
      const barWidth = Math.min(30, columns - 1 - label.length - Math.max(tail.length, 44) - 3);
      let bar = "";
      if (pct !== undefined && barWidth >= 5) {
        const filled = Math.round((barWidth * pct) / 100);
        bar = ` [${"=".repeat(filled)}${" ".repeat(barWidth - filled)}]`;
      }
      // Stay under the terminal width: a wrapped line cannot be redrawn with "\r".
      const line = `${label}${bar}${tail}`.slice(0, columns - 1);
      stream.write(`\r\x1b[K${line}${finished ? "\n" : ""}`);
    } else {
      // Without a total, report every 100 MB instead of every 10%.
      const step = pct === undefined ? Math.floor(p.received / 100e6) : Math.floor(pct / 10);
      if (step > lastStep || finished) {
        lastStep = step;
        stream.write(`${label}: ${pct === undefined ? "" : `${pct}% `}${amount}${rate}\n`);
      }
    }
    if (finished) done = true;
  };
}

function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

function formatMB(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}
