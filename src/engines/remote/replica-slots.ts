import { call, readJson } from "./http.ts";
import type { Replica, ReplicaPool } from "./pool.ts";

/** How long a replica that could not tell its slot count waits before it is asked again. */
const RETRY_MS = 5_000;

/**
 * Asks a replica for its slot count and applies the answer to the pool: once it has answered, with a
 * count or without, it is not asked again; one that could not answer is asked again after RETRY_MS
 * at the earliest (not on every request).
 */
export async function learnReplicaSlots(
  pool: ReplicaPool,
  r: Replica,
  flavor: "openai" | "llama-server",
  model: string,
  headers: Record<string, string>,
  timeoutMs: number,
): Promise<void> {
  const slots = await askReplicaSlots(r.url, flavor, model, headers, timeoutMs);
  if (slots === undefined) {
    r.slotsRetryAt = Date.now() + RETRY_MS;
    return;
  }
  r.slotsAsked = true;
  if (slots !== null) pool.setSlots(r, slots);
}

/** Beyond this a reported count is not believed (the configuration's own ceiling). */
const MAX_SLOTS = 4096;

/**
 * How many requests a replica runs at once, as the replica itself reports it:
 * - llama-server: `total_slots` in `GET /props` (its `--parallel`);
 * - a Plinth: `parallel` in its model list entry for the model (what its scheduler runs at once;
 *   a Plinth router reports the slots of its own replicas);
 * - vLLM and SGLang report no such number.
 *
 * Answers the count; null when the replica answered without one (nothing more to learn from it:
 * no such route, or a ready model without the field); undefined when it could not be asked now
 * (down, slow, a 5xx, or a Plinth whose model is still loading), so it is asked again later.
 */
export async function askReplicaSlots(
  base: URL,
  flavor: "openai" | "llama-server",
  model: string,
  headers: Record<string, string>,
  timeoutMs: number,
): Promise<number | null | undefined> {
  try {
    const res = await call(new URL(flavor === "llama-server" ? "props" : "v1/models", base), { headers, headTimeoutMs: timeoutMs });
    if (res.status !== 200) {
      res.body.resume();
      return res.status === 404 || res.status === 405 ? null : undefined;
    }
    const json = (await readJson(res, timeoutMs)) as any;
    if (flavor === "llama-server") return slotCount(json?.total_slots);
    const entry = Array.isArray(json?.data) ? json.data.find((m: any) => m?.id === model) : undefined;
    // Not listed (yet), or listed by a Plinth that is still loading it (its count comes once ready).
    if (entry === undefined || (typeof entry?.status === "string" && entry.status !== "ready")) return undefined;
    return slotCount(entry.parallel);
  } catch {
    return undefined;
  }
}

/** A reported slot count when it is a whole number in range, else null. */
export function slotCount(reported: unknown): number | null {
  return typeof reported === "number" && Number.isSafeInteger(reported) && reported >= 1 ? Math.min(reported, MAX_SLOTS) : null;
}
