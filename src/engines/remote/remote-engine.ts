import { asksNoThinking } from "../../core/reasoning-control.ts";
import { createHash } from "node:crypto";
import type { ChoiceRun, EmbedInput, Embedder, EmbeddingInfo, Engine, EngineChunk, PreparedGeneration, PrepareOptions, PromptExtras, ReplicaStatus } from "../../core/engine.ts";
import { hasImages } from "../../core/content-parts.ts";
import { ApiError, embeddingOnlyModel, invalidField } from "../../core/errors.ts";
import type { GenerationRequest, Message, ModelDescription, PromptInput } from "../../core/types.ts";
import { call, readJson, sseData, statusFailure, UpstreamFailure, upstreamMessage } from "./http.ts";
import { llamaServerTokens, toLlamaServerBody } from "./llama-server.ts";
import { refuseInvalidSchemas } from "./schema-check.ts";
import { chatPromptBound } from "./prompt-bound.ts";
import { TimeSlice } from "./time-slice.ts";
import { type Lease, NoReplica, type Replica, ReplicaPool, ReplicaWaitTimeout } from "./pool.ts";
import { learnReplicaSlots } from "./replica-slots.ts";
import { queueTimeout } from "../../core/scheduler.ts";
import type { RemoteSource } from "./source.ts";
import { chatBody, ChunkReader, completionBody, contextLength, messagesToUpstream, refuseInexpressible, refusedByUpstream, shortageMidAnswer, tokenCount, toolsToUpstream, UpstreamShortage, UpstreamStreamError } from "./wire.ts";

/** The response header that names the replica(s) that served a request. */
export const UPSTREAM_HEADER = "x-plinth-upstream";

interface RemotePrepared extends PreparedGeneration {
  request: GenerationRequest;
  mode: "chat" | "completion";
  /** Affinity key for prefix balancing (namespace and prompt prefix). */
  key: string;
  /** The replica chosen while preparing (tokenize ran there); generation starts there if it can. */
  prefer?: Replica;
  /** Response headers shared with the request context: updated as replicas serve. */
  responseHeaders: Record<string, string>;
  /**
   * The first choice's upstream request, already streaming while preparing: the upstream answered
   * 200 and sent its first output (or its end), so that what the upstream refuses is refused, and
   * a replica that fails before its first token is failed over, before the client's response starts
   * — the response head then names the replica that really serves. Taken by `generate`, or closed
   * by `discard` when the request does not run. Opened by `open`, after admission: a request
   * refused there never reaches the upstream's generation.
   */
  opened?: Opened;
  /** The prompt count `prepare` left to run beside the opening (it is needed only to refuse what cannot fit). */
  countInOpen?: boolean;
  /** Which replica serves each choice (by its seed), for the response header. */
  servedBy: Map<number, string>;
  /** The first choice's failover so far (set by `openStream`), carried on by `generate`. */
  failover?: Failover;
}

/** The replicas one choice failed on, the attempts it made (an open stream among them) and its last failure. */
interface Failover {
  seed: number;
  tried: Set<Replica>;
  attempts: number;
  last: UpstreamFailure | undefined;
}

/** An upstream stream opened while preparing, read up to its first output. */
interface Opened {
  lease: Lease;
  seed: number;
  reader: ChunkReader;
  /** The rest of the stream; `head` holds the chunks already read from it. */
  chunks: AsyncGenerator<EngineChunk>;
  head: EngineChunk[];
  /** Cancels the upstream request (linked to the generation's signal once it runs). */
  abort: AbortController;
}

/** How long prompts go uncounted after the upstream's tokenizer failed on every replica. */
const COUNT_PAUSE_MS = 30_000;
/** The longest the prompt of an answer that came without the upstream's usage is counted for (see uncountedPrompt). */
const USAGE_COUNT_MS = 2_000;

/**
 * A replica's failed active check (its /health unreachable, silent or not 200): the replica is down,
 * so it is never a status failure, which could read as a lack of capacity (a 503: a draining Plinth
 * answers one there) or as the entry's mistake (a 401). It is what ejected the replica when the
 * checks did, and what a request that finds the pool ejected is answered with (see `unavailable`).
 */
class HealthCheckFailure extends UpstreamFailure {
  constructor(replica: Replica, what: string, kind: "connect" | "timeout" | "protocol" = "protocol") {
    super(kind, `${replica.name} failed its health check: ${what}`);
  }
}

/**
 * What a pool-wide failure looks like to the client: try again later. `tried` is what the last
 * replica this request tried answered; `gone`, when no replica was left to try, says when one may
 * take requests again and what ejected it, which stands for `tried` when the request found every
 * replica ejected and tried none.
 */
function unavailable(name: string, tried: UpstreamFailure | undefined, gone?: NoReplica): ApiError {
  const last = tried ?? (gone?.ejectedBy instanceof UpstreamFailure ? gone.ejectedBy : undefined);
  // When to ask again: the replica's own estimate for a request it just refused, else when the
  // pool takes an ejected replica back (not the estimate a replica gave when it was ejected).
  const goneS = gone?.retryInMs === undefined ? undefined : Math.max(1, Math.ceil(gone.retryInMs / 1000));
  const retryAfter = (fallback: number) => String(tried?.retryAfter ?? goneS ?? last?.retryAfter ?? fallback);
  // The last replica tried gave the answer up for lack of capacity: that is what the client hears.
  if (last instanceof UpstreamShortage) return shortageMidAnswer(name);
  if (last?.kind === "status" && last.status === 429)
    return new ApiError(429, `Every replica of '${name}' is overloaded; retry shortly.`, {
      code: "upstream_overloaded",
      reason: "overloaded",
      headers: { "retry-after": retryAfter(1) },
    });
  if (last?.misconfigured)
    return new ApiError(502, `The upstream serving '${name}' refused this server's request (${last.message}); check its entry (URL, api key, model).`, {
      code: "upstream_misconfigured",
    });
  // Overloaded (a reason dialects with their own finish reasons report as such: SpAk answers a
  // request cut short by it with insufficient_system_resource) only where the replicas said so. A
  // replica that broke its stream, answered garbage or a 500, could not be reached, or went silent
  // (a connect, first-token or idle timeout) failed: that is an error, not a lack of capacity, and
  // SpAk had answered it as an empty 200 (a stalled stream's text dropped). So did replicas that
  // failed their health checks (down, whatever their /health answered): a pool ejected by its
  // checks counted as overloaded when no request had tried a replica since.
  const capacity = last?.kind === "status" && last.status === 503;
  const err = new ApiError(503, `No replica of '${name}' could serve the request${last ? ` (last: ${last.message})` : ""}.`, {
    code: "upstream_unavailable",
    ...(capacity ? { reason: "overloaded" as const } : {}),
    // The last replica's own estimate when it gave one (a 503 with Retry-After), else when an
    // ejected replica is due back, else a short wait.
    headers: { "retry-after": retryAfter(2) },
  });
  // The body the client is not shown, logged with the 503 (the error handler logs every 5xx).
  if (last?.detail) Object.assign(err, { upstream_body: last.detail });
  return err;
}

/** A stream that already sent output to the client broke: the dialect ends it in its error form. */
function brokeMidStream(name: string, err: Error): ApiError {
  return new ApiError(502, `The upstream serving '${name}' failed mid-answer: ${err.message}`, { code: "upstream_error" });
}

/** The longest answer held back whole (see `generate`), in characters: as large as a whole JSON answer may be. */
const MAX_WHOLE_ANSWER_CHARS = 64 * 1024 * 1024;
/** What one held chunk costs beside its text, in characters' worth. */
const HELD_CHUNK_COST = 32;

/** What the router knows of an upstream model's embeddings (a Plinth upstream's model list says it all). */
export interface RemoteEmbedding {
  dimensions: number;
  pooling?: string;
  poolingDeclared?: boolean;
  maxInputTokens?: number;
  only?: boolean;
}

/** How long a health check's answer body may take to end after its head. */
const HEALTH_BODY_MS = 2_000;

/**
 * A model served by OpenAI-compatible upstreams (vLLM, SGLang, llama-server, another Plinth): one
 * pool of replicas behind one model id. It speaks the upstream's HTTP; the core above it schedules,
 * applies stop strings and renders every dialect as for a local model.
 */
export class RemoteEngine implements Engine<RemotePrepared> {
  // No `idle`: an upstream stream the core stops reading just waits in its socket, holding up no
  // other request (its idle timer runs from each read).
  readonly embeddings?: Embedder;
  private hasTokenize: boolean | undefined;
  /** Until when prompts go uncounted because the tokenizer failed on every replica (see count). */
  private countsPausedUntil = 0;
  /** The context the upstream's /tokenize last reported (its /v1/models may not say). */
  private knownContext: number | undefined;
  private healthTimer?: NodeJS.Timeout;
  private readonly unsupported: ReadonlySet<string>;
  /** Replicas being asked for their slot count right now. */
  private readonly asking = new Set<Replica>();
  /** Generations waiting in the pool for a replica slot (embeddings wait there too, not counted). */
  private waitingGenerations = 0;
  /** Admitted requests waiting in the pool for a replica slot to open on (the core does not count them as running yet). */
  private waitingOpenings = 0;

  constructor(
    readonly id: string,
    private readonly source: RemoteSource,
    readonly pool: ReplicaPool,
    /** The model's id on the upstream. */
    readonly upstreamModel: string,
    private readonly info: {
      contextSize?: number;
      /** `only`: the upstream embeds and cannot generate (llama-server --embeddings, an embedding model on Plinth). */
      embedding?: RemoteEmbedding;
      /** Which OpenAI-compatible server it is, where their protocols differ (see llama-server.ts). */
      flavor?: "openai" | "llama-server";
      /** Canonical features the upstream itself says it lacks (beside the operator's `unsupported`). */
      lacks?: string[];
      /** Whether the model thinks, when its upstream says (a Plinth upstream's model list does). */
      reasoning?: boolean;
    },
  ) {
    this.hasTokenize = source.tokenize ? undefined : false;
    this.unsupported = new Set([...source.unsupported, ...(info.lacks ?? [])]);
    // Embeddings run on the upstream's own embedding contexts, beside its generation slots: as many
    // at once as the configured (or default) count per replica (see `request`).
    if (info.embedding) this.embeddings = new RemoteEmbedder(this, info.embedding, info.contextSize, pool.replicas.reduce((n, r) => n + Math.max(r.slots, source.slots), 0));
    if (source.healthIntervalMs > 0) {
      this.healthTimer = setInterval(() => void this.checkHealth(), source.healthIntervalMs);
      this.healthTimer.unref();
    }
  }

  /**
   * What the core runs at once: what the replicas run at once now (see ReplicaPool.runningSlots),
   * so that requests past it wait in the core's queue, where end users take turns and one
   * request's `n` is capped, not in the pool's first-come-first-served wait for a replica slot.
   */
  get slots(): number {
    return this.pool.runningSlots;
  }

  onSlots(listener: (running: number, nominal: number) => void): void {
    let last = "";
    const tell = () => {
      const now = `${this.pool.runningSlots}/${this.pool.totalSlots}`;
      if (now === last) return;
      last = now;
      listener(this.pool.runningSlots, this.pool.totalSlots);
    };
    this.pool.onChange(tell);
    tell();
  }

  describe(): ModelDescription {
    return {
      id: this.id,
      created: 0,
      ownedBy: "upstream",
      contextSize: this.info.contextSize ?? 0,
      // What the replicas run at once (a router in front of this one sends no more than that).
      parallel: this.pool.totalSlots,
      // Whether the upstream's model thinks: what its entry or its model list says, else not known.
      ...(this.unsupported.has("reasoning") ? { reasoning: false } : this.info.reasoning !== undefined ? { reasoning: this.info.reasoning } : {}),
      fingerprint: `fp_${createHash("sha256").update(`${this.upstreamModel}|${this.pool.replicas.map((r) => r.name).join(",")}`).digest("hex").slice(0, 10)}`,
    };
  }

  headers(): Record<string, string> {
    return this.source.apiKey ? { authorization: `Bearer ${this.source.apiKey}` } : {};
  }

  url(replica: Replica, path: string): URL {
    return new URL(replica.url.href.replace(/\/$/, "") + path);
  }

  async prepare(request: GenerationRequest, options: PrepareOptions = {}): Promise<RemotePrepared> {
    // Refused here rather than sent: the upstream's own answer is a 500 (llama-server), which would
    // count against a healthy replica.
    if (this.info.embedding?.only) throw embeddingOnlyModel(this.id);
    // A model known not to think (a Plinth upstream said so, or the entry declares `unsupported:
    // [reasoning]`), asked not to think, already does what was asked: the switch is not sent up at
    // all, and is not refused as a reasoning control the upstream lacks (a local model that does not
    // think answers such a request too).
    if ((this.info.reasoning === false || this.unsupported.has("reasoning")) && asksNoThinking(request.reasoning)) request = { ...request, reasoning: undefined };
    refuseInexpressible(request, this.unsupported, this.id);
    // A Plinth upstream said the model does not think: refused here in the words a local model uses,
    // not passed up to come back as the upstream's refusal.
    if (this.info.reasoning === false && request.reasoning !== undefined && request.prompt.kind === "chat")
      throw invalidField(`The model '${this.id}' has no thinking section in its chat template, so reasoning cannot be controlled.`, "reasoning", "unsupported_parameter");
    // Checked now so that a schema or pattern a local model refuses as wrong (or too large) is the
    // same 400 before anything is sent (see schema-check.ts).
    await refuseInvalidSchemas(request, this.info.flavor === "llama-server", options.signal);
    const mode = request.prompt.kind === "chat" ? "chat" : "completion";
    const key = affinityKey(request);
    const prefer = this.pool.choose(key);
    const responseHeaders: Record<string, string> = {};
    if (prefer) responseHeaders[UPSTREAM_HEADER] = prefer.name;
    const prep: RemotePrepared = { request, mode, key, prefer, responseHeaders, servedBy: new Map(), promptTokens: 0, contextSize: undefined, formatStops: [] };
    if (request.prompt.kind === "tokens") {
      prep.promptTokens = request.prompt.tokens.length;
      return prep;
    }
    // Only measured: the count is the answer, so it is made however long it takes, and an upstream
    // that cannot count says so rather than answering 0.
    if (options.measureOnly) {
      if (!(await this.count(prep, undefined, true))) throw new ApiError(501, `The upstream serving '${this.id}' has no tokenizer endpoint, so the prompt cannot be counted.`, { code: "not_implemented" });
      return prep;
    }
    // An image's token cost depends on the upstream's vision encoder, which no text count knows,
    // and tokenizers rarely take image parts: such prompts are left to the upstream's own check.
    const images = request.prompt.kind === "chat" && hasImages(request.prompt.messages);
    if (this.hasTokenize === false || images || Date.now() < this.countsPausedUntil) return prep;
    // The key's token limits reserve the prompt: counted before admission, whatever the bound says.
    if (options.countPrompt) {
      await this.count(prep);
      return prep;
    }
    // Counting the prompt and opening the generation run side by side, in `open`: the count is only
    // needed to refuse what cannot fit, and waiting for it first would add a whole round trip to
    // every request's first token. A prompt that surely fits is not counted at all.
    if (!this.surelyFits(request)) prep.countInOpen = true;
    return prep;
  }

  /**
   * Counts the prompt through the upstream's tokenizer and sets what the core checks it against;
   * false when the upstream has no tokenizer (the upstream then checks the context for itself).
   */
  private async count(prep: RemotePrepared, signal?: AbortSignal, required = false): Promise<boolean> {
    let counted: { count: number; contextSize?: number } | undefined;
    try {
      counted = await this.countTokens(prep.request.prompt, prep.prefer, prep.request, signal);
    } catch (err) {
      // A tokenizer that fails (a 5xx, a timeout) while generation may work: the count is only a
      // pre-check, so the request goes on as if there were none, and the upstream checks its own
      // context. It took the whole model down before (every request that wanted a count was a 503).
      // Only a count that is itself the answer (measureOnly) must come from the tokenizer.
      if (required || !(err instanceof ApiError) || err.code !== "upstream_unavailable") throw err;
      // Not asked again for a while: each ask fails over the whole pool with its back-off.
      this.countsPausedUntil = Date.now() + COUNT_PAUSE_MS;
      prep.promptTokens = 0;
      prep.contextSize = undefined;
      return false;
    }
    if (counted?.contextSize !== undefined) this.knownContext = counted.contextSize;
    prep.promptTokens = counted?.count ?? 0;
    prep.contextSize = this.hasTokenize ? (counted?.contextSize ?? this.info.contextSize) : undefined;
    return counted !== undefined;
  }

  /**
   * Sends the admitted request's first choice upstream (see `openStream`), with the prompt count
   * `prepare` left for later running beside it. When the count says the request cannot fit, the
   * opened request is closed again and the core refuses it.
   */
  async open(prep: RemotePrepared, signal: AbortSignal, queued = false): Promise<void> {
    signal.throwIfAborted();
    if (queued) {
      // It waits for its turn in the core's queue: nothing goes upstream to generate until then
      // (`generate` opens it), and no replica slot is taken that a running request needs. Only the
      // count, which decides whether it can run at all, is made now (it takes no replica slot).
      if (prep.countInOpen) {
        prep.countInOpen = false;
        await this.count(prep, signal);
      }
      return;
    }
    if (!prep.countInOpen) {
      prep.opened = await this.openStream(prep, signal);
      return;
    }
    prep.countInOpen = false;
    // The generation takes its replica first (openStream leases it before its first await): a
    // replica on a half-open trial must get the request that can re-admit it, not the count.
    const opening = this.openStream(prep, signal);
    const [counted, opened] = await Promise.allSettled([this.count(prep, signal), opening]);
    const close = () => {
      if (opened.status === "fulfilled" && opened.value) this.discard({ ...prep, opened: opened.value });
    };
    if (signal.aborted) {
      close();
      throw signal.reason;
    }
    if (counted.status === "rejected") {
      close();
      throw counted.reason;
    }
    const fits = prep.contextSize === undefined || prep.promptTokens + (prep.request.maxTokens ?? 1) <= prep.contextSize;
    if (!fits) return close();
    if (opened.status === "rejected") throw opened.reason;
    prep.opened = opened.value;
  }

  /**
   * Whether the prompt fits the upstream's known context without counting it: its upper bound
   * (see prompt-bound.ts) and the budget together are within the context. The upstream still
   * checks for itself, and reports the real count in its usage.
   */
  private surelyFits(request: GenerationRequest): boolean {
    const context = this.knownContext ?? this.info.contextSize;
    if (context === undefined) return false;
    const bound = chatPromptBound(request);
    return bound !== undefined && bound + (request.maxTokens ?? 1) <= context;
  }

  /**
   * Sends the first choice upstream and reads it up to its first output, trying other replicas
   * after failures that are not the client's (an error status, a broken or silent stream).
   * Upstreams check a request before they answer its head, so their refusals (context, features
   * they lack) become a 400 here, before the client's response starts. When every replica is busy
   * this waits here for a slot (within the queue timeout, as `generate` would): returning without
   * an upstream answer let the response head (a stream's 200 and first chunk) go out first, so a
   * request the upstream refuses got a 200 and an error event when the pool was busy and a 400
   * when it was idle. The replicas tried and the attempts made are kept in `prep.failover`, so
   * that `generate`, should it open the choice again, neither retries them nor makes more attempts
   * than --upstream-attempts in all.
   */
  private async openStream(prep: RemotePrepared, signal: AbortSignal): Promise<Opened> {
    const req = prep.request;
    const body = this.body(prep, req.sampling, req.maxTokens);
    const path = prep.mode === "chat" ? "/v1/chat/completions" : "/v1/completions";
    const seed = req.sampling.seed >>> 0;
    const failover: Failover = (prep.failover = { seed, tried: new Set<Replica>(), attempts: 0, last: undefined });
    const { tried } = failover;
    while (failover.attempts < this.source.attempts) {
      const attempt = failover.attempts++;
      const lease = await this.waitForSlot(prep, tried, signal, attempt === 0 ? prep.prefer : undefined, this.source.queueTimeoutMs, undefined, true);
      this.noteReplica(prep, seed, lease.replica);
      const reader = new ChunkReader(prep.mode, this.id);
      const abort = new AbortController();
      // The client leaving closes the upstream request at once, not at the first-token timeout.
      const onAbort = () => abort.abort(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      const chunks = this.stream(lease.replica, path, body, reader, abort.signal);
      const head: EngineChunk[] = [];
      try {
        signal.throwIfAborted();
        for (;;) {
          const next = await chunks.next();
          if (next.done) break;
          head.push(next.value);
          if (reader.sawOutput || next.value.kind === "end") break;
        }
        signal.throwIfAborted();
        return { lease, seed, reader, chunks, head, abort };
      } catch (err) {
        abort.abort();
        if (signal.aborted) {
          // The client's leaving: no failure of the replica's, and no one to try another for.
          void chunks.return(undefined);
          lease.release();
          throw signal.reason;
        }
        if (err instanceof ApiError) {
          // The client's fault (a 4xx the upstream gave): the replica is fine.
          lease.success();
          lease.release();
          throw err;
        }
        const failure = asFailure(err);
        lease.failure(failure);
        lease.release();
        // The header names the replicas that serve, never one that failed.
        this.forgetReplica(prep, seed);
        tried.add(lease.replica);
        failover.last = failure;
        await backoff(attempt, signal);
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
    throw unavailable(this.id, failover.last);
  }

  /**
   * A slot on a replica this request has not failed on, waiting in the pool while all are busy
   * (counted as waiting inside); `limitMs` bounds the wait (0: none). No replica left, or none free
   * in time, is the pool-wide answer (503, or the queue timeout).
   */
  private async waitForSlot(prep: RemotePrepared, tried: ReadonlySet<Replica>, signal: AbortSignal, prefer: Replica | undefined, limitMs: number, last?: UpstreamFailure, opening = false): Promise<Lease> {
    if (opening) this.waitingOpenings++;
    else this.waitingGenerations++;
    try {
      return await this.pool.acquire(prep.key, tried, signal, prefer, limitMs);
    } catch (err) {
      if (err instanceof NoReplica) throw unavailable(this.id, last ?? prep.failover?.last, err);
      if (err instanceof ReplicaWaitTimeout) throw queueTimeout(this.source.queueTimeoutMs);
      throw err;
    } finally {
      if (opening) this.waitingOpenings--;
      else this.waitingGenerations--;
    }
  }

  /**
   * The request queues for a slot: the upstream request opened for it is closed and its replica
   * slot given back, so the requests that run can have it; `generate` opens it again in its turn.
   */
  waiting(prep: RemotePrepared): void {
    this.discard(prep);
  }

  /** A prepared request that will not run: close the upstream request opened for it. */
  discard(prep: RemotePrepared): void {
    const opened = prep.opened;
    prep.opened = undefined;
    if (!opened) return;
    // Closed unused (the request queues, or will not run): not one of its attempts.
    if (prep.failover?.seed === opened.seed) prep.failover.attempts--;
    opened.abort.abort();
    void opened.chunks.return(undefined);
    opened.lease.release();
  }

  private body(prep: RemotePrepared, sampling: GenerationRequest["sampling"], maxTokens: number | undefined) {
    const body = prep.mode === "chat" ? chatBody(prep.request, this.upstreamModel, sampling, maxTokens) : completionBody(prep.request, this.upstreamModel, sampling, maxTokens);
    return this.info.flavor === "llama-server" ? toLlamaServerBody(body) : body;
  }

  private get llamaServer(): boolean {
    return this.info.flavor === "llama-server";
  }

  /** llama-server's tokenizer endpoints, through the pool like every JSON call. */
  private llamaTokens(
    prompt: PromptInput,
    addSpecial: boolean,
    prefer?: Replica,
    signal?: AbortSignal,
    onServed?: (replica: Replica) => void,
  ): Promise<number[] | undefined> {
    return llamaServerTokens((path, body) => this.request(path, body, prefer, true, signal, onServed), prompt, addSpecial);
  }

  /**
   * Records which replica a choice is on now, so the response header names the replicas that
   * serve the choices (a failed attempt's replica is replaced by the one that took over).
   */
  private noteReplica(prep: RemotePrepared, seed: number, replica: Replica): void {
    this.learnSlots(replica);
    prep.servedBy.set(seed, replica.name);
    prep.responseHeaders[UPSTREAM_HEADER] = [...new Set(prep.servedBy.values())].join(", ");
  }

  /** A choice's attempt failed: its replica is no longer named as serving it. */
  private forgetReplica(prep: RemotePrepared, seed: number): void {
    prep.servedBy.delete(seed);
    const names = [...new Set(prep.servedBy.values())];
    if (names.length > 0) prep.responseHeaders[UPSTREAM_HEADER] = names.join(", ");
    else delete prep.responseHeaders[UPSTREAM_HEADER];
  }

  /**
   * Prompt tokens through the upstream's /tokenize (vLLM's shape, which Plinth serves too). An
   * upstream without one is remembered, and the context check is left to it.
   */
  private async countTokens(
    prompt: PromptInput,
    prefer: Replica | undefined,
    extras?: PromptExtras,
    signal?: AbortSignal,
  ): Promise<{ count: number; contextSize?: number } | undefined> {
    if (this.llamaServer) {
      const tokens = await this.llamaTokens(prompt, true, prefer, signal);
      this.hasTokenize = tokens !== undefined;
      return tokens && { count: tokens.length };
    }
    // The count is of what the generation renders: its tools and thinking switch too (a count of the
    // messages alone was 12 where the prompt was 300, and the room it reported was not there).
    const body = prompt.kind === "chat" ? this.chatTokenizeBody(prompt.messages, extras) : { model: this.upstreamModel, prompt: prompt.kind === "text" ? prompt.text : "" };
    const json = (await this.request("/tokenize", body, prefer, true, signal)) as any;
    if (json === undefined) return undefined;
    // A count that is not one (negative, fractional, astronomic) is no count: it would be the
    // prompt's tokens in the usage, the ledger and the context check.
    const count = json.count !== undefined ? tokenCount(json.count) : Array.isArray(json.tokens) ? json.tokens.length : undefined;
    // No count, or none for a prompt that has text (an endpoint of another shape, such as
    // llama-server's, which reads `content`): the upstream checks for itself instead.
    const hasText = prompt.kind === "chat" ? prompt.messages.length > 0 : prompt.kind === "text" && prompt.text !== "";
    if (count === undefined || (count === 0 && hasText)) {
      this.hasTokenize = false;
      return undefined;
    }
    this.hasTokenize = true;
    // A context of 0 is an upstream that does not know its own (a router in front of another).
    return { count, contextSize: contextLength(json.max_model_len) };
  }

  /**
   * A JSON call with failover (tokenize, detokenize, embeddings). With `optional`, an upstream
   * that has no such route (404/405) answers undefined.
   */
  async request(
    path: string,
    body: unknown,
    prefer?: Replica,
    optional = false,
    signal = new AbortController().signal,
    /** Told the replica that answered (for the response's x-plinth-upstream). */
    onServed?: (replica: Replica) => void,
  ): Promise<unknown> {
    const tried = new Set<Replica>();
    let last: UpstreamFailure | undefined;
    // Token counts and template renders ride along with a request that may hold the replica's only
    // slot: they take none (see ReplicaPool.peek). Embeddings are work of their own and queue.
    const auxiliary = path !== "/v1/embeddings";
    for (let attempt = 0; attempt < this.source.attempts; attempt++) {
      let lease;
      try {
        if (auxiliary) {
          lease = this.pool.peek(tried, attempt === 0 ? prefer : undefined);
          if (!lease) throw this.pool.noReplica();
        } else {
          // Embeddings run on the upstream's own embedding contexts, beside its generation slots:
          // they are held to the configured (or default) count, not to the generation slots a
          // replica reports.
          const atMost = (r: Replica) => Math.max(r.slots, this.source.slots);
          lease = await this.pool.acquire(undefined, tried, signal, attempt === 0 ? prefer : undefined, this.source.queueTimeoutMs, atMost);
        }
      } catch (err) {
        if (err instanceof NoReplica) throw unavailable(this.id, last, err);
        if (err instanceof ReplicaWaitTimeout) throw queueTimeout(err.waitedMs);
        throw err;
      }
      try {
        const res = await call(this.url(lease.replica, path), { body, headers: this.headers(), headTimeoutMs: this.source.connectTimeoutMs + this.source.firstTokenTimeoutMs, signal });
        if (res.status === 200) {
          const json = await readJson(res, this.source.idleTimeoutMs);
          // A working tokenizer says little about generation: only real work clears failures.
          if (!path.endsWith("tokenize") && path !== "/apply-template") lease.success();
          onServed?.(lease.replica);
          return json;
        }
        const failure = await statusFailure(res, lease.replica.name);
        if (optional && (res.status === 404 || res.status === 405)) {
          lease.success();
          if (path === "/tokenize") this.hasTokenize = false;
          return undefined;
        }
        if (!failure.retryable) {
          lease.success();
          throw refusedByUpstream(res.status, failure.body, upstreamMessage(failure.body) ?? failure.message, this.id);
        }
        throw failure;
      } catch (err) {
        if (!(err instanceof UpstreamFailure) || !err.retryable) throw err;
        // A failing tokenizer says as little about generation as a working one does: only the
        // replica's own work ejects it (a broken /tokenize ejected replicas that generated fine).
        if (!auxiliary) lease.failure(err);
        tried.add(lease.replica);
        last = err;
        await backoff(attempt);
      } finally {
        lease.release();
      }
    }
    throw unavailable(this.id, last);
  }

  /**
   * How far an answer without a client budget may run: what the model's context leaves after the
   * prompt, as a local model stops at its context. The context is the one the upstream reported
   * (its /tokenize answer, else its model list); the prompt's count is taken off when there is one
   * (a prompt not counted leaves the whole context, which is past anything the upstream can really
   * generate, so only an upstream that never stops is cut). Undefined when no context is known:
   * only the hold limit then bounds a whole answer.
   */
  private contextBudget(prep: RemotePrepared): number | undefined {
    const context = prep.contextSize ?? this.knownContext ?? this.info.contextSize;
    if (context === undefined) return undefined;
    return Math.max(1, context - prep.promptTokens);
  }

  async *generate(prep: RemotePrepared, run: ChoiceRun, signal: AbortSignal): AsyncGenerator<EngineChunk> {
    const req = prep.request;
    // The budget goes upstream only when the client set one: a budget the core derived from a
    // context count made without tools could exceed what the upstream has left.
    const maxTokens = req.maxTokens === undefined ? undefined : run.maxTokens;
    const body = this.body(prep, run.sampling, maxTokens);
    // Where the answer is cut here (see pastBudget): the client's budget, else what the context leaves.
    const budget = maxTokens ?? this.contextBudget(prep);
    const path = prep.mode === "chat" ? "/v1/chat/completions" : "/v1/completions";
    const seed = run.sampling.seed >>> 0;
    // The first choice goes on from its opening: the replicas it failed on there are not tried
    // again, and its attempts there count towards --upstream-attempts.
    const carried = prep.failover?.seed === seed ? prep.failover : undefined;
    const tried = carried?.tried ?? new Set<Replica>();
    let last = carried?.last;
    /** Attempts made for this choice, the opened one included. */
    let made = carried?.attempts ?? 0;
    // The first choice takes the request opened while preparing (same seed, same budget).
    let opened = prep.opened?.seed === seed ? prep.opened : undefined;
    if (opened) prep.opened = undefined;
    /** What the last replica answered before it gave the answer up for lack of capacity. */
    let shortage: EngineChunk[] | undefined;
    for (;;) {
      let lease: Lease;
      let reader: ChunkReader;
      let chunks: AsyncGenerator<EngineChunk>;
      let head: EngineChunk[] = [];
      let stop: () => void = () => {};
      if (opened) {
        const o = opened;
        ({ lease, reader, chunks, head } = o);
        const onAbort = () => o.abort.abort(signal.reason);
        if (signal.aborted) onAbort();
        signal.addEventListener("abort", onAbort, { once: true });
        stop = () => signal.removeEventListener("abort", onAbort);
        opened = undefined;
      } else {
        // One queue timeout for the whole wait: what the choice already waited for the core's
        // slot counts (two limits in a row let a request wait twice as long).
        const limit = this.source.queueTimeoutMs > 0 ? Math.max(1, this.source.queueTimeoutMs - (run.waitedMs ?? 0)) : 0;
        try {
          lease = await this.waitForSlot(prep, tried, signal, made === 0 ? prep.prefer : undefined, limit, last);
        } catch (err) {
          // No replica left after one that gave up for lack of capacity: its answer, then the shortage.
          if (!shortage || signal.aborted) throw err;
          for (const c of shortage) yield c;
          throw shortageMidAnswer(this.id);
        }
        made++;
        this.noteReplica(prep, seed, lease.replica);
        reader = new ChunkReader(prep.mode, this.id);
        chunks = this.stream(lease.replica, path, body, reader, signal);
      }
      // A whole answer is held back until its end, so a replica that dies midway is failed over
      // like one that died before its first token: the client has seen nothing either way.
      const held: EngineChunk[] | undefined = req.wholeAnswer ? [] : undefined;
      let heldChars = 0;
      const hold = (chunk: EngineChunk) => {
        held!.push(chunk);
        // Bounded like an answer that came whole (readText): an upstream that ignores the budget and
        // streams on must not fill the router's memory before the end it never sends. Each chunk
        // counts for what holding it costs besides its text, so millions of one-character chunks
        // are stopped too (2 million at most: far past any model's longest answer).
        heldChars += HELD_CHUNK_COST + (chunk.kind === "text" || chunk.kind === "tool-call-arguments" ? chunk.text.length : 0);
        if (heldChars > MAX_WHOLE_ANSWER_CHARS) throw new UpstreamFailure("protocol", `the upstream's answer is longer than ${MAX_WHOLE_ANSWER_CHARS} characters`);
      };
      // What was held back goes out in one go at the end: a long answer is many chunks, each a few
      // microtasks through the core, so the event loop gets its turns between them.
      const slice = new TimeSlice();
      // The client's budget, held here too: an upstream that ignores max_tokens must not stream on
      // (or, not streamed, hold the request) for as long as it likes. Without one, the context is
      // the budget (an upstream that never stops would otherwise run for hours). Each delta counts
      // as one token at least (as many as its log probabilities), never more than it holds, so an
      // upstream that keeps to the budget is never cut.
      let produced = 0;
      const pastBudget = (chunk: EngineChunk) => {
        if (budget === undefined || (chunk.kind !== "text" && chunk.kind !== "tool-call-arguments")) return false;
        produced += chunk.tokens;
        return produced > budget;
      };
      try {
        for await (const chunk of afterHead(head, chunks)) {
          if (pastBudget(chunk)) {
            lease.success();
            yield* this.uncountedPrompt(prep, seed, reader, signal);
            yield* release(held, { kind: "end", reason: "length" });
            return;
          }
          // The core stops reading at the end chunk, so success is recorded before it is handed over.
          if (chunk.kind === "end") {
            lease.success();
            yield* this.uncountedPrompt(prep, seed, reader, signal);
          }
          if (held && chunk.kind !== "end") hold(chunk);
          else
            for (const c of release(held, chunk)) {
              yield c;
              await slice.breathe();
            }
        }
        return;
      } catch (err) {
        if (signal.aborted) throw signal.reason;
        if (err instanceof ApiError) {
          // The client's fault (a 4xx the upstream gave): the replica is fine.
          lease.success();
          throw err;
        }
        const failure = asFailure(err);
        lease.failure(failure);
        if (failure instanceof UpstreamShortage && ((reader.sawOutput && !held) || made >= this.source.attempts)) {
          // Given up after output reached the client, or by the last replica there was to try: what
          // it answered and counted goes out, then the shortage (SpAk's finish reason; a 503 or
          // mid-stream error elsewhere).
          for (const c of held ?? []) yield c;
          for (const c of failure.usage) yield c;
          yield* this.uncountedPrompt(prep, seed, reader, signal);
          throw shortageMidAnswer(this.id);
        }
        if (reader.sawOutput && !held) {
          // The client has part of the answer and will be told its usage (and the ledger books it):
          // the upstream's counts come at a stream's end, which this one never reached.
          yield* this.uncountedPrompt(prep, seed, reader, signal);
          throw brokeMidStream(this.id, failure);
        }
        tried.add(lease.replica);
        last = failure;
        // Kept in case no other replica is left to try: then this one's answer is the answer.
        shortage = failure instanceof UpstreamShortage ? [...(held ?? []), ...failure.usage] : undefined;
        if (made >= this.source.attempts) throw unavailable(this.id, last);
        await backoff(made - 1, signal);
      } finally {
        stop();
        void chunks.return(undefined);
        lease.release();
      }
    }
  }

  /**
   * The prompt's count for a first choice whose upstream sent none (its stream broke mid-answer, was
   * cut at the budget here, or the upstream reports no usage), when `prepare` made none either (the
   * prompt surely fit, so it was not counted): the client's usage and the ledger read the prompt as
   * the upstream's count, else as `prepare`'s, which was 0 then. Counted by the upstream's
   * tokenizer on any replica that answers within USAGE_COUNT_MS; none when it has no tokenizer or
   * no replica can count (a lone replica that died), and then the prompt stays uncounted.
   */
  private async *uncountedPrompt(prep: RemotePrepared, seed: number, reader: ChunkReader, signal: AbortSignal): AsyncGenerator<EngineChunk> {
    if (reader.totals.promptTokens !== undefined || prep.promptTokens > 0 || this.hasTokenize === false || Date.now() < this.countsPausedUntil || signal.aborted) return;
    // Only the first choice's prompt stands for the request's (as the core reads it).
    if (seed !== prep.request.sampling.seed >>> 0) return;
    if (prep.request.prompt.kind === "chat" && hasImages(prep.request.prompt.messages)) return;
    const counted = await this.countTokens(prep.request.prompt, undefined, prep.request, AbortSignal.any([signal, AbortSignal.timeout(USAGE_COUNT_MS)])).catch(() => undefined);
    if (counted) yield { kind: "usage", promptTokens: counted.count };
  }

  /** One attempt on one replica: the response head, then the SSE chunks as engine chunks. */
  private async *stream(
    replica: Replica,
    path: string,
    body: unknown,
    reader: ChunkReader,
    signal: AbortSignal,
  ): AsyncGenerator<EngineChunk> {
    const res = await call(this.url(replica, path), { body, headers: this.headers(), headTimeoutMs: this.source.connectTimeoutMs, signal });
    if (res.status !== 200) {
      const failure = await statusFailure(res, replica.name);
      if (failure.retryable) throw failure;
      throw refusedByUpstream(res.status, failure.body, upstreamMessage(failure.body) ?? failure.message, this.id);
    }
    if (/^application\/json/i.test(String(res.headers["content-type"] ?? ""))) {
      // An upstream (or a proxy before it) that ignored `stream: true` and answered whole: its answer
      // is read as one chunk of the stream it did not send.
      const whole = (await readJson(res, this.source.firstTokenTimeoutMs)) as any;
      const slice = new TimeSlice();
      for (const c of reader.read(wholeAsChunk(whole))) {
        yield c;
        await slice.breathe();
      }
      yield* reader.finish();
      return;
    }
    const ms = this.source.firstTokenTimeoutMs;
    const firstToken = setTimeout(() => res.body.destroy(new UpstreamFailure("timeout", `no token from ${replica.name} within ${ms} ms`)), ms);
    try {
      const idleMs = this.source.idleTimeoutMs;
      const timeouts = { firstMs: ms, idleMs, started: () => reader.sawOutput };
      const slice = new TimeSlice();
      // sseData times the gaps between events; this times the gaps between events that carry output.
      // An upstream that goes on sending empty deltas, or usage alone, after its first token is as
      // stalled as a silent one (and its request would hold a slot for ever: the token budget counts
      // output only). Timed from when the last output was taken, so a slow client is not the upstream.
      let outputAt = performance.now();
      for await (const data of sseData(res, timeouts)) {
        await slice.breathe();
        let json: unknown;
        try {
          json = JSON.parse(data);
        } catch {
          throw new UpstreamStreamError("the upstream sent an event that is not JSON");
        }
        const chunks = reader.read(json);
        if (reader.sawOutput) clearTimeout(firstToken);
        for (const c of chunks) {
          yield c;
          await slice.breathe();
        }
        if (chunks.length > 0 || !reader.sawOutput) outputAt = performance.now();
        else if (performance.now() - outputAt > idleMs)
          throw new UpstreamFailure("timeout", `the upstream sent no output for ${idleMs} ms, only events without any`);
      }
    } finally {
      clearTimeout(firstToken);
    }
    yield* reader.finish();
  }

  /** A vLLM-style /tokenize body for chat messages, with what the upstream's template renders besides them. */
  private chatTokenizeBody(messages: Message[], extras: PromptExtras | undefined) {
    return {
      model: this.upstreamModel,
      messages: messagesToUpstream(messages),
      ...(extras ? toolsToUpstream(extras) : {}),
      ...(extras?.reasoning?.enabled !== undefined ? { chat_template_kwargs: { enable_thinking: extras.reasoning.enabled } } : {}),
    };
  }

  async tokenize(prompt: PromptInput, addSpecial: boolean, extras?: PromptExtras, responseHeaders?: Record<string, string>): Promise<number[]> {
    const served = nameServer(responseHeaders);
    if (prompt.kind === "tokens") return prompt.tokens;
    if (prompt.kind === "infill") throw invalidField("{field} (fill-in-the-middle) is not supported by remote upstreams.", "prompt.suffix", "unsupported_parameter");
    if (this.llamaServer) {
      // A chat prompt's special tokens are the template's to place (the dialects pass false for
      // it): llama-server renders it by /apply-template and tokenizes that text with its special
      // tokens added (a BOS where the model wants one) before it generates, so the count that
      // matches its prompt_tokens is the one with them.
      const tokens = await this.llamaTokens(prompt, prompt.kind === "chat" || addSpecial, undefined, undefined, served);
      if (!tokens) throw new ApiError(501, `The upstream serving '${this.id}' has no tokenizer endpoint.`, { code: "not_implemented" });
      return tokens;
    }
    const body =
      prompt.kind === "chat"
        ? { ...this.chatTokenizeBody(prompt.messages, extras), add_special_tokens: addSpecial }
        : { model: this.upstreamModel, prompt: prompt.text, add_special_tokens: addSpecial };
    const json = (await this.request("/tokenize", body, undefined, true, undefined, served)) as any;
    if (!json || !Array.isArray(json.tokens))
      throw new ApiError(501, `The upstream serving '${this.id}' has no tokenizer endpoint.`, { code: "not_implemented" });
    // Handed to the client as token ids: nulls, strings or fractions are the upstream's fault, not ids.
    if (!json.tokens.every((t: unknown) => Number.isInteger(t) && (t as number) >= 0 && (t as number) < 2 ** 31))
      throw new ApiError(502, `The upstream serving '${this.id}' answered its tokenizer with values that are not token ids.`, { code: "upstream_error" });
    return json.tokens;
  }

  async detokenize(tokens: number[], responseHeaders?: Record<string, string>): Promise<string> {
    const json = (await this.request("/detokenize", { model: this.upstreamModel, tokens }, undefined, true, undefined, nameServer(responseHeaders))) as any;
    // vLLM and Plinth answer `prompt`, llama-server `content`.
    if (this.llamaServer && typeof json?.content === "string") return json.content;
    if (!json || typeof json.prompt !== "string")
      throw new ApiError(501, `The upstream serving '${this.id}' has no detokenizer endpoint.`, { code: "not_implemented" });
    return json.prompt;
  }

  /**
   * Asks a replica that has not told its slot count yet (it was down when the model loaded) for it;
   * once it answers, with a count or without, it is not asked again.
   */
  learnSlots(r: Replica): void {
    if (!this.source.learnSlots || r.slotsAsked || this.asking.has(r) || Date.now() < r.slotsRetryAt) return;
    this.asking.add(r);
    void learnReplicaSlots(this.pool, r, this.info.flavor ?? "openai", this.upstreamModel, this.headers(), this.source.connectTimeoutMs).finally(() => this.asking.delete(r));
  }

  /** Generations the core admitted that wait here for a replica slot (all replicas are full). */
  waitingInside(): number {
    return this.waitingGenerations;
  }

  waitingToOpen(): number {
    return this.waitingOpenings;
  }

  /** Active checks: /health on every replica; a failure counts like a failed request. */
  async checkHealth(): Promise<void> {
    await Promise.all(
      this.pool.replicas.map(async (r) => {
        try {
          const res = await call(this.url(r, "/health"), { headers: this.headers(), headTimeoutMs: this.source.connectTimeoutMs });
          // The status is the answer; the body is read off so the socket can be reused, but a body
          // that does not end soon (a broken server streaming it forever) is cut, not read each
          // interval on one more socket.
          const cut = setTimeout(() => res.body.destroy(), HEALTH_BODY_MS);
          res.body.once("close", () => clearTimeout(cut));
          res.body.resume();
          if (res.status === 200) {
            this.pool.recordHealthy(r);
            this.learnSlots(r);
          }
          else if (r.state === "up") this.pool.recordFailure(r, new HealthCheckFailure(r, `/health answered ${res.status}`));
        } catch (err) {
          const kind = err instanceof UpstreamFailure && err.kind === "timeout" ? "timeout" : "connect";
          if (r.state === "up") this.pool.recordFailure(r, new HealthCheckFailure(r, (err as Error).message, kind));
        }
      }),
    );
  }

  replicas(): ReplicaStatus[] {
    return this.pool.replicas.map((r) => ({ name: r.name, state: r.state, outstanding: r.outstanding, slots: r.slots, served: r.served, failed: r.failed }));
  }

  async dispose(): Promise<void> {
    clearInterval(this.healthTimer);
  }
}

/** The largest batch whose too-long input is looked for by counting each input (see longestInput). */
const LOCATE_AT_MOST = 64;

/**
 * Embeddings through the upstream's /v1/embeddings. The core asks for each input's tokens before
 * it embeds; the upstream does both in one call, so "tokenizing" embeds the input, keeps the vector
 * for the `embed` call that follows and reports as many tokens as the upstream counted.
 */
class RemoteEmbedder implements Embedder {
  readonly info: EmbeddingInfo;
  private readonly vectors = new WeakMap<number[], Float32Array>();

  constructor(
    private readonly engine: RemoteEngine,
    embedding: RemoteEmbedding,
    contextSize: number | undefined,
    slots: number,
  ) {
    const known = embedding.pooling === "cls" || embedding.pooling === "last" || embedding.pooling === "mean";
    this.info = {
      dimensions: embedding.dimensions,
      pooling: known ? (embedding.pooling as EmbeddingInfo["pooling"]) : "mean",
      poolingDeclared: known ? (embedding.poolingDeclared ?? true) : false,
      maxInputTokens: embedding.maxInputTokens ?? contextSize ?? 2 ** 31 - 1,
      vocabularySize: 2 ** 31 - 1,
      slots,
      embeddingOnly: embedding.only === true,
    };
  }

  async tokenize(input: EmbedInput): Promise<number[]> {
    return (await this.tokenizeMany([input]))[0];
  }

  /**
   * Every input in one upstream request (one each made a 2,048-input request 7x slower than
   * straight). The vectors are kept for `embed`; the token counts come from the upstream's usage,
   * which covers the whole request, shared out over the inputs by their size (see shareTokens).
   */
  async tokenizeMany(inputs: EmbedInput[], responseHeaders?: Record<string, string>, signal?: AbortSignal): Promise<number[][]> {
    const body = {
      model: this.engine.upstreamModel,
      input: inputs.map((input) => (input.kind === "text" ? input.text : input.tokens)),
      encoding_format: "float",
    };
    const json = (await this.engine
      .request("/v1/embeddings", body, undefined, false, signal, (replica) => {
        if (responseHeaders) responseHeaders[UPSTREAM_HEADER] = replica.name;
      })
      .catch(async (err: unknown) => {
        // An input too long for the upstream is the input's fault, as when embedded here (the wire
        // reader calls any context refusal the prompt's).
        if (err instanceof ApiError && err.field === "prompt") {
          const which = inputs.length === 1 ? 0 : await this.longestInput(inputs);
          throw new ApiError(err.status, err.message, { field: which === undefined ? "input" : `inputs[${which}]`, code: err.code ?? undefined });
        }
        throw err;
      })) as any;
    const unknownShape = () => new ApiError(502, `The upstream serving '${this.engine.id}' sent embeddings in an unknown shape.`, { code: "upstream_error" });
    const data = json?.data;
    if (!Array.isArray(data) || data.length !== inputs.length) throw unknownShape();
    const vectors = new Array<Float32Array | undefined>(inputs.length);
    data.forEach((d: any, k: number) => {
      // Placed by their index (an upstream may list them in any order), each input exactly once.
      const i = d?.index === undefined ? k : d.index;
      if (!Number.isInteger(i) || i < 0 || i >= inputs.length || vectors[i] !== undefined || !Array.isArray(d?.embedding)) throw unknownShape();
      vectors[i] = this.vector(d.embedding, i);
    });
    const counts = shareTokens(tokenCount(json.usage?.prompt_tokens), inputs);
    return counts.map((count, i) => {
      const tokens = new Array<number>(count).fill(0);
      this.vectors.set(tokens, vectors[i]!);
      return tokens;
    });
  }

  /**
   * Which input of a batch the upstream found too long, when it did not say (vLLM and llama-server
   * name no index): the one with the most tokens, counted by the upstream's own tokenizer. If any
   * input is past the limit, that one is. Undefined where it cannot be counted (no /tokenize) or the
   * batch is too large to count one input at a time on an error path.
   */
  private async longestInput(inputs: EmbedInput[]): Promise<number | undefined> {
    if (inputs.length > LOCATE_AT_MOST) return undefined;
    const counts = await Promise.all(
      inputs.map((input) => (input.kind === "tokens" ? input.tokens.length : this.engine.tokenize({ kind: "text", text: input.text }, true).then((t) => t.length))),
    ).catch(() => undefined);
    if (!counts) return undefined;
    return counts.indexOf(Math.max(...counts));
  }

  /**
   * An upstream's vector as the model's embedding, or the upstream's 502 saying what is wrong with
   * it: it must have the model's size (a shorter one would reach the client as a vector of the wrong
   * size, cut to `dimensions` or not; a longer one is not this model's) and only finite numbers
   * that a float32 can hold (anything else was the core's 500 "not finite", or a NaN sent on).
   */
  private vector(raw: unknown[], input: number): Float32Array {
    const fault = (what: string) =>
      new ApiError(502, `The upstream serving '${this.engine.id}' sent a malformed embedding for input ${input}: ${what}.`, { code: "upstream_error" });
    if (raw.length !== this.info.dimensions) throw fault(`${raw.length} components where the model's embeddings have ${this.info.dimensions}`);
    const out = new Float32Array(raw.length);
    for (let k = 0; k < raw.length; k++) {
      const x = raw[k];
      if (typeof x !== "number" || !Number.isFinite(Math.fround(x))) throw fault(`component ${k} is ${describeValue(x)}, not a finite number`);
      out[k] = x;
    }
    return out;
  }

  async embed(tokens: number[]): Promise<Float32Array> {
    const v = this.vectors.get(tokens);
    if (!v) throw new ApiError(500, "An embedding was asked for input that was not sent upstream.", { code: "internal_error" });
    return v;
  }
}

/** A value from an upstream's answer, short enough for an error message. */
function describeValue(v: unknown): string {
  if (typeof v === "number") return String(v);
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return JSON.stringify(v.length > 20 ? `${v.slice(0, 20)}…` : v);
  return typeof v === "object" ? "an object" : typeof v;
}

/**
 * Each input's share of an embeddings request's reported token count: the count stands for the
 * inputs' tokens in the usage, the ledger and key budgets, and sizes the arrays that stand for them.
 * Shared by size (token ids: their number; text: its UTF-8 bytes), each at least 1 and at most what
 * the input could hold (a token covers at least a byte, plus a few special tokens), so a broken
 * upstream's count cannot ask for gigabytes. Without a count: token ids count as themselves, a text
 * as 1.
 */
export function shareTokens(reported: number | undefined, inputs: EmbedInput[]): number[] {
  const most = inputs.map((input) => (input.kind === "text" ? Buffer.byteLength(input.text) : input.tokens.length) + 16);
  if (reported === undefined) return inputs.map((input) => (input.kind === "text" ? 1 : Math.max(1, input.tokens.length)));
  const weights = most.map((m) => m - 16);
  const weightSum = weights.reduce((a, b) => a + b, 0) || 1;
  const total = Math.max(inputs.length, Math.min(reported, most.reduce((a, b) => a + b, 0)));
  const counts = weights.map((w, i) => Math.min(most[i], Math.max(1, Math.floor((total * w) / weightSum))));
  // What the rounding left over goes to the inputs that can still take it, in order.
  let left = total - counts.reduce((a, b) => a + b, 0);
  for (let i = 0; left > 0 && i < counts.length; i++) {
    const add = Math.min(left, most[i] - counts[i]);
    counts[i] += add;
    left -= add;
  }
  return counts;
}

/**
 * The prefix that decides which replica a request goes to, within its isolation namespace: the
 * client's cache key when it gave one; else the conversation up to its first user turn (so every
 * turn of one conversation lands where its earlier turns are cached); else the first 1 KiB of text.
 */
export function affinityKey(req: GenerationRequest): string {
  const ns = req.isolationKey ?? "";
  if (req.cacheKey !== undefined) return `${ns}\u0000key\u0000${req.cacheKey}`;
  const p = req.prompt;
  let prefix: string;
  if (p.kind === "chat") {
    const firstUser = p.messages.findIndex((m) => m.role === "user");
    const head = p.messages.slice(0, firstUser < 0 ? 1 : firstUser + 1);
    prefix = JSON.stringify(head.map((m) => [m.role, m.content])).slice(0, 4096);
  } else if (p.kind === "text") prefix = p.text.slice(0, 1024);
  else if (p.kind === "tokens") prefix = p.tokens.slice(0, 256).join(",");
  else prefix = p.prefix.slice(0, 1024);
  return `${ns}\u0000${p.kind}\u0000${prefix}`;
}

/** What was held back (if anything), then the chunk that ends it. */
/** The chunks read while the request was checked, then the rest of the stream. */
async function* afterHead(head: readonly EngineChunk[], rest: AsyncIterable<EngineChunk>): AsyncGenerator<EngineChunk> {
  yield* head;
  yield* rest;
}

function* release(held: EngineChunk[] | undefined, last: EngineChunk): Generator<EngineChunk> {
  if (held) yield* held.splice(0);
  yield last;
}

/** Any error of an attempt that is not the client's fault, as a failure of the replica. */
/**
 * A whole (not streamed) chat or completion answer as the one stream chunk that says the same:
 * its first choice's message as a delta (tool calls numbered in order), its finish reason, its usage.
 * An error body stays what it is, for the reader to judge.
 */
function wholeAsChunk(whole: any): unknown {
  if (!whole || typeof whole !== "object" || whole.error !== undefined || !Array.isArray(whole.choices)) return whole;
  // Every choice is kept, with its own index, so that the reader refuses an answer of more than the
  // one choice asked for rather than this passing its first along.
  const choices = whole.choices.map((c: any) => {
    if (!c || typeof c !== "object") return c;
    if (c.message === undefined) return c; // a completion's choice reads the same either way
    const m = c.message ?? {};
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls.map((t: any, index: number) => ({ ...t, index })) : undefined;
    return { index: c.index, delta: { ...m, ...(calls ? { tool_calls: calls } : {}) }, logprobs: c.logprobs, finish_reason: c.finish_reason };
  });
  return { ...whole, choices };
}

/** For a JSON call made for the client (/tokenize, /detokenize): names the replica that answered it. */
function nameServer(responseHeaders: Record<string, string> | undefined): ((replica: Replica) => void) | undefined {
  return responseHeaders && ((replica) => void (responseHeaders[UPSTREAM_HEADER] = replica.name));
}

function asFailure(err: unknown): UpstreamFailure {
  if (err instanceof UpstreamFailure) return err;
  return new UpstreamFailure("protocol", err instanceof UpstreamStreamError ? err.message : `the upstream stream was malformed: ${(err as Error).message}`);
}

/** Jittered exponential back-off between attempts: about 25, 50, 100 ms …, at most 1 s. */
function backoff(attempt: number, signal?: AbortSignal): Promise<void> {
  const ms = Math.min(1000, 25 * 2 ** attempt) * (0.5 + Math.random());
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}
