import { type EngineFactory, EngineNotReady } from "../../core/engine-factory.ts";
import { call, readJson, UpstreamFailure } from "./http.ts";
import { type Replica, ReplicaPool } from "./pool.ts";
import { isLlamaServerModel, llamaServerContext, llamaServerLacks } from "./llama-server.ts";
import { RemoteEngine } from "./remote-engine.ts";
import { learnReplicaSlots } from "./replica-slots.ts";
import { contextLength } from "./wire.ts";
import type { RemoteSource } from "./source.ts";

/**
 * No replica of a remote model could be asked for its models, each for a reason that passes by
 * itself (a refused or timed-out connection, a 5xx or 429): the upstream is not up yet. The model
 * stays loading and is asked for again (an upstream fleet often starts after the router, and vLLM
 * takes minutes to load a model), rather than failing for good.
 */
export class UpstreamNotReady extends EngineNotReady {}

/** Base URL of a replica: what was given, less a trailing `/v1` (the engine adds API paths itself). */
export function replicaBase(url: string): URL {
  const u = new URL(url);
  u.pathname = u.pathname.replace(/\/+$/, "").replace(/\/v1$/, "") + "/";
  return u;
}

/**
 * Remote models: asks the first replica that answers for its model list, to learn the upstream's
 * model id (when not configured), its context length and whether it embeds.
 */
export function remoteFactory(): EngineFactory {
  return async (spec, log) => {
    const source = spec.source as RemoteSource;
    const pool = new ReplicaPool(
      source.urls.map(replicaBase),
      { balance: source.balance, slots: source.slots, ejectAfter: source.ejectAfter, ejectMs: source.ejectMs, loadFactor: 1.25, healthMs: source.healthIntervalMs },
      log,
    );
    const headers: Record<string, string> = source.apiKey ? { authorization: `Bearer ${source.apiKey}` } : {};
    const { models, replica, errors, passing } = await firstModelList(pool, headers, source.connectTimeoutMs);
    if (!models || !replica) {
      const message = `no replica of '${spec.id}' answered: ${errors.join("; ")}`;
      throw passing ? new UpstreamNotReady(message) : new Error(message);
    }
    const ids: string[] = models.map((m) => m?.id).filter((id): id is string => typeof id === "string");
    let upstreamModel = source.model;
    if (upstreamModel === undefined) {
      if (ids.includes(spec.id)) upstreamModel = spec.id;
      else if (ids.length === 1) upstreamModel = ids[0];
      else throw new Error(`the upstream serves ${ids.length} models (${listed(ids)}); name one with model: in the upstream's config entry`);
    } else if (!ids.includes(upstreamModel)) {
      throw new Error(`the upstream does not serve ${shown(upstreamModel)} (it serves ${listed(ids)})`);
    }
    const entry = models.find((m) => m?.id === upstreamModel) ?? {};
    // A Plinth upstream (a router, or a server loading at start) lists a model before it can serve
    // it: its context, embeddings and slots are known only once it is ready, so this model waits.
    if (entry.status === "loading") throw new UpstreamNotReady(`the upstream is still loading ${shown(upstreamModel)}`);
    const llamaServer = isLlamaServerModel(entry);
    const contextSize = contextLength(entry.max_model_len) ?? (llamaServer ? llamaServerContext(entry) : undefined);
    // Asked of the replica that answered first (one that is down would hold these for its timeout).
    const lacks = llamaServer ? await llamaServerLacks(replica.url, headers, source.connectTimeoutMs) : [];
    const probed = await probeEmbedding([replica, ...pool.replicas.filter((r) => r !== replica)], upstreamModel, headers, source.connectTimeoutMs + source.firstTokenTimeoutMs, entry.embedding);
    // A llama-server that embeds was started with --embeddings, which turns generation off (its
    // completions answer 500); a Plinth upstream says so in its model list.
    const embedding = probed && { ...probed, only: llamaServer || entry.embedding?.embedding_only === true };
    // A Plinth upstream says whether the model thinks (others do not): the dialects then answer as
    // they would for that model served here (no thinking fields for a model that cannot think).
    const reasoning = typeof entry.reasoning === "boolean" ? entry.reasoning : undefined;
    if (source.learnSlots) await learnSlots(pool, llamaServer ? "llama-server" : "openai", upstreamModel, headers, source.connectTimeoutMs);
    const engine = new RemoteEngine(spec.id, source, pool, upstreamModel, { contextSize, embedding, flavor: llamaServer ? "llama-server" : "openai", lacks, reasoning });
    log(
      `plinth: model '${spec.id}' ready: ${shown(upstreamModel)} on ${pool.replicas.length} upstream replica(s), ` +
        `${slotsShown(pool, source.learnSlots, source.slots)}, ${source.balance} balancing${embedding ? `, embeddings of ${embedding.dimensions}${embedding.only ? " only" : ""}` : ""}` +
        `${llamaServer ? `, llama-server${lacks.length ? ` (it lacks ${lacks.join(", ")})` : ""}` : ""}`,
    );
    // The model id, context and slots came from one replica's list. The others are asked in the
    // background (the start does not wait for a replica that is down): one that does not list the
    // model is a pool that mixes models, which the operator hears about now rather than as a 502 on
    // every request that reaches it.
    void warnOfOtherModels(pool, replica, upstreamModel, headers, source.connectTimeoutMs, (line) => log(`plinth: warning: ${spec.id}: ${line}`));
    return engine;
  };
}

async function warnOfOtherModels(pool: ReplicaPool, asked: Replica, model: string, headers: Record<string, string>, timeoutMs: number, warn: (line: string) => void): Promise<void> {
  await Promise.all(
    pool.replicas
      .filter((r) => r !== asked)
      .map(async (r) => {
        try {
          const res = await call(new URL("v1/models", r.url), { headers, headTimeoutMs: timeoutMs });
          if (res.status !== 200) return void res.body.resume();
          const json = (await readJson(res, timeoutMs)) as any;
          if (!Array.isArray(json?.data)) return;
          const ids = json.data.map((m: any) => m?.id).filter((id: unknown): id is string => typeof id === "string");
          if (!ids.includes(model))
            warn(`replica ${r.name} does not serve ${shown(model)} (it serves ${listed(ids)}), which ${asked.name} does; requests it gets will fail. Give each model its own upstream entry`);
        } catch {
          // Down or slow: its health checks and requests will say so.
        }
      }),
  );
}

/** How long a model's start waits for its replicas to tell their slot counts. */
const LEARN_SLOTS_WAIT_MS = 2_000;

/**
 * Asks every replica at once how many requests it runs (see askReplicaSlots). The model's start
 * waits for the answers for a short while only: a replica that is down or slow keeps the default,
 * and the engine asks it again once it serves or passes a health check.
 */
async function learnSlots(pool: ReplicaPool, flavor: "openai" | "llama-server", model: string, headers: Record<string, string>, timeoutMs: number): Promise<void> {
  const asked = pool.replicas.map((r) => learnReplicaSlots(pool, r, flavor, model, headers, timeoutMs));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(asked), new Promise((resolve) => (timer = setTimeout(resolve, LEARN_SLOTS_WAIT_MS)))]);
  clearTimeout(timer);
}

/** "4 slots each", or each replica's count when they differ; "(reported)" when learned. */
function slotsShown(pool: ReplicaPool, learned: boolean, fallback: number): string {
  const counts = [...new Set(pool.replicas.map((r) => r.slots))];
  const said = counts.length === 1 ? `${counts[0]} slots each` : `slots ${pool.replicas.map((r) => r.slots).join("/")}`;
  return learned ? `${said} (as reported; ${fallback} where not)` : said;
}

/**
 * The model list of whichever replica answers first: all are asked at once, so a replica that is
 * down (its connection timing out) does not hold the model's start for the connect timeout, and the
 * others' requests are dropped once one has answered. `passing`: every replica failed in a way that
 * passes by itself (not started yet, still loading its model, overloaded), so the model should wait
 * for its upstream rather than fail for good.
 */
async function firstModelList(
  pool: ReplicaPool,
  headers: Record<string, string>,
  timeoutMs: number,
): Promise<{ models?: any[]; replica?: Replica; errors: string[]; passing: boolean }> {
  const done = new AbortController();
  const errors: string[] = [];
  let passing = true;
  const ask = async (r: Replica, i: number): Promise<{ models: any[]; replica: Replica }> => {
    try {
      const res = await call(new URL("v1/models", r.url), { headers, headTimeoutMs: timeoutMs, signal: done.signal });
      // The status first: a redirect or an error page is not "a body that is not JSON".
      if (res.status !== 200) {
        res.body.destroy();
        // llama-server answers 503 while it loads its model; vLLM's port is closed until it is up.
        if (!(res.status >= 500 || res.status === 429)) passing = false;
        throw new Error(`GET /v1/models answered ${res.status}`);
      }
      const json = (await readJson(res)) as any;
      if (!Array.isArray(json?.data)) {
        passing = false;
        throw new Error("GET /v1/models answered without a model list");
      }
      return { models: json.data, replica: r };
    } catch (err) {
      if (err instanceof UpstreamFailure && err.kind === "protocol") passing = false;
      errors[i] = `${r.name}: ${(err as Error).message}`;
      throw err;
    }
  };
  try {
    return { ...(await Promise.any(pool.replicas.map(ask))), errors: [], passing };
  } catch {
    return { errors: errors.filter((e) => e !== undefined), passing };
  } finally {
    done.abort();
  }
}

/** Whether the upstream embeds with this model, and the vector size: one tiny request. */
async function probeEmbedding(
  replicas: Replica[],
  model: string,
  headers: Record<string, string>,
  timeoutMs: number,
  declared: any,
): Promise<{ dimensions: number; pooling?: string; poolingDeclared?: boolean; maxInputTokens?: number } | undefined> {
  for (const r of replicas) {
    try {
      const res = await call(new URL("v1/embeddings", r.url), { body: { model, input: "plinth", encoding_format: "float" }, headers, headTimeoutMs: timeoutMs });
      if (res.status >= 500) {
        res.body.resume();
        continue;
      }
      // Any other refusal (a 404 without a body, a 400 "not an embedding model") is the answer: no.
      if (res.status !== 200) {
        res.body.resume();
        return undefined;
      }
      const json = (await readJson(res)) as any;
      const v = json?.data?.[0]?.embedding;
      if (!Array.isArray(v)) return undefined;
      // A Plinth upstream describes its embeddings in its model list: passed on as it says them.
      const limit = declared?.max_input_tokens;
      return {
        dimensions: v.length,
        pooling: typeof declared?.pooling === "string" ? declared.pooling : undefined,
        poolingDeclared: typeof declared?.pooling_declared === "boolean" ? declared.pooling_declared : undefined,
        maxInputTokens: Number.isSafeInteger(limit) && limit > 0 ? limit : undefined,
      };
    } catch (err) {
      // Only a replica that could not be asked leaves the question to the next one.
      if (err instanceof UpstreamFailure && err.kind === "protocol") return undefined;
      continue;
    }
  }
  return undefined;
}

/**
 * An upstream's model id as messages and log lines show it: quoted, control characters escaped
 * (a newline in an id must not start a forged log line), and cut when long.
 */
export function shown(id: string): string {
  const cut = id.length > 100 ? `${id.slice(0, 100)}…` : id;
  return `'${cut.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)}'`;
}

/** Some of an upstream's model ids, for a message: a list of 100,000 must not become a 1 MB log line. */
function listed(ids: string[]): string {
  const some = ids.slice(0, 10).map(shown).join(", ");
  return ids.length > 10 ? `${some} and ${ids.length - 10} more` : some || "none";
}
