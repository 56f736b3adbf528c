import { setMaxListeners } from "node:events";
import { Channel } from "./channel.ts";
import { choiceSeed } from "./random.ts";
import { type AdmissionGate, type AdmissionTicket, type AdmittedInfo, type GenerationHooks, keyedNamespace, type Outcome, type RequestContext } from "./context.ts";
import { embed, type EmbeddingRequest, type EmbeddingResult } from "./embed.ts";
import type { Engine, PreparedGeneration, PromptExtras } from "./engine.ts";
import { ApiError } from "./errors.ts";
import { BUFFERED_BYTES, BUFFERED_EVENTS, eventWeight } from "./event-weight.ts";
import { newId } from "./ids.ts";
import { PartTracker } from "./part-tracker.ts";
import type { ModelRegistry } from "./registry.ts";
import { AnswerFilter } from "./answer-filter.ts";
import type { FinishReason, GenerationEvent, GenerationRequest, PromptInput, Timings, TokenLogprob, Usage } from "./types.ts";

export interface StartedGeneration {
  /** Prompt tokens per request of the batch. */
  promptTokens: number[];
  /** The canonical events of every choice, merged in arrival order; throws if the generation fails. */
  events: AsyncIterable<GenerationEvent>;
  /**
   * What the generation has used so far: its prompt once a choice has started, what was cached and
   * generated. For a request stopped before its end (a shutdown, say), whose events end with an
   * error instead of a `usage` event; a dialect that reports such an end in band counts with it.
   */
  spent(): Usage;
  /**
   * Settles when a choice has a sequence and starts work (its prompt), after any wait in the model's
   * queue; never, for a request that ends before it gets one. A background response is queued until then.
   */
  running?: Promise<void>;
}

/**
 * The one request path shared by every dialect: check the request with the engine, check it against
 * the model's context, admit it to the model's scheduler, then run its choices concurrently and merge
 * their events. Lifecycle hooks (ledger, limits, metrics, store) observe every request here.
 *
 * Everything that can refuse a request (validation, context length, a full queue) happens before
 * `start` returns, so a dialect can still answer with a plain error instead of a broken stream.
 */
export class GenerationService {
  private readonly hooks: GenerationHooks[] = [];
  /** Requests admitted and not yet finished. */
  private readonly active = new Set<BatchRun>();
  /** See `unread`. */
  private readonly channels = new Set<Channel<GenerationEvent>>();
  /**
   * Embedding requests running, each with the abort that stops it: they take no generation slot,
   * but a shutdown waits for them as for generations (the store closes after it, and their clients
   * are owed an answer), and ends those still running when the drain time is up.
   */
  private readonly embedding = new Map<Promise<unknown>, AbortController>();
  private stopping = false;

  constructor(readonly registry: ModelRegistry) {}

  /** Access and limit checks (API keys); none: every request is admitted as far as keys go. */
  private gate: AdmissionGate | undefined;

  addHooks(hooks: GenerationHooks): void {
    this.hooks.push(hooks);
  }

  setGate(gate: AdmissionGate | undefined): void {
    this.gate = gate;
  }

  /**
   * The client's signal joined with the gate's for this request (its key revoked while it runs):
   * either one ends it, the gate's with its reason as the request's error, which each dialect
   * renders as any failure (mid-stream in its own form).
   */
  private withGateStop(ctx: RequestContext, signal: AbortSignal): AbortSignal {
    const stop = this.gate?.stopSignal?.(ctx);
    return stop ? AbortSignal.any([signal, stop]) : signal;
  }

  /** Throws the gate's refusal (403 naming `model`) when the request's key may not use the model. */
  authorize(ctx: RequestContext, model: string): void {
    this.gate?.authorize(ctx, model);
  }

  /** Whether the request's key may use the model (model lists show only these). */
  mayUse(ctx: RequestContext, model: string): boolean {
    try {
      this.gate?.authorize(ctx, model);
      return true;
    } catch {
      return false;
    }
  }

  /** One request (with its n choices). */
  start(ctx: RequestContext, req: GenerationRequest, signal: AbortSignal): Promise<StartedGeneration> {
    return this.startBatch(ctx, [req], signal);
  }

  /**
   * Several prompts for one model (a Completions batch), admitted all together. Choice indices run
   * over the batch: request r's choice j is r * n + j. Errors about request r of a batch of several
   * name their field under `batch[r].`.
   */
  async startBatch(ctx: RequestContext, batch: GenerationRequest[], clientSignal: AbortSignal): Promise<StartedGeneration> {
    if (this.stopping) throw shuttingDown();
    const receivedAt = performance.now();
    // The key's model list first: a key limited to some models learns nothing about the others (a
    // 404 for an unknown one and a 403 for a known one told them apart).
    this.gate?.authorize(ctx, batch[0].model);
    const signal = this.withGateStop(ctx, clientSignal);
    const { engine, scheduler } = this.registry.resolve(batch[0].model);
    const reqs = batch.map((r) => ({ ...r, isolationKey: keyedNamespace(ctx.apiKey, ctx.namespace) }));
    const prepared: Array<{ prep: PreparedGeneration; maxTokens: number }> = [];
    const discardAll = () => prepared.forEach((p) => engine.discard?.(p.prep));
    // A key with token limits reserves the prompt too, so its prompt is counted before admission.
    const countPrompt = this.gate?.countsTokens?.(ctx) ?? false;
    for (const [r, req] of reqs.entries()) {
      let prep: PreparedGeneration | undefined;
      try {
        prep = await engine.prepare(req, { countPrompt, signal });
        // The engine keeps writing through prep, so both name the context's (shared) object.
        if (prep.responseHeaders && ctx.responseHeaders && r === 0) prep.responseHeaders = Object.assign(ctx.responseHeaders, prep.responseHeaders);
        prepared.push({ prep, maxTokens: checkContext(req, prep) });
      } catch (err) {
        if (prep) engine.discard?.(prep);
        discardAll();
        throw reqs.length > 1 ? inBatch(err, r) : err;
      }
    }
    const jobs = reqs.reduce((sum, r) => sum + r.n, 0);
    // A request too large for the model's capacity is the fault of its `n`, or, for a batch whose
    // choices only add up past it, of the number of prompts.
    const tooLarge = reqs.length === 1 || reqs.some((r) => r.n > scheduler.capacity) ? "n" : "prompt";
    let promptTokens = prepared.map((p) => p.prep.promptTokens);
    const promptTotal = promptTokens.reduce((a, b) => a + b, 0);
    // Reserve the most the request can use (its prompt and every choice's budget) before it queues;
    // the reservation is settled to the real count when it ends.
    let ticket: AdmissionTicket | undefined;
    if (this.gate) {
      const maxCompletionTokens = reqs.reduce((sum, r, i) => sum + r.n * prepared[i].maxTokens, 0);
      try {
        ticket = await this.gate.admit(ctx, { model: batch[0].model, promptTokens: promptTotal, maxCompletionTokens });
      } catch (err) {
        discardAll();
        throw err;
      }
    }
    try {
      scheduler.admit(jobs, tooLarge);
    } catch (err) {
      ticket?.(0);
      discardAll();
      throw err;
    }
    // Only an admitted request starts work on the model (a remote upstream's generation): one the
    // key's limits or the queue refused has cost nothing but its preparation. The client's signal
    // ends the opening when it leaves. Still before the response starts, so what the engine refuses
    // here is a plain error too.
    // Each request's first choice takes its slot before the engine opens it, when one is free now
    // and nobody waits for one: a request that must queue opens nothing upstream until its turn, so
    // it waits in this fair queue, not in the engine's own (a remote pool's, first come first served,
    // where one user's burst held everyone else's requests behind it).
    const firstSlots: Array<{ slot: number; release: () => void } | undefined> = [];
    /** When each request's first choice began to run upstream (an engine that opens it here). */
    const openedAt: Array<number | undefined> = [];
    if (engine.open) {
      let r = 0;
      try {
        for (; r < reqs.length; r++) {
          firstSlots[r] = scheduler.tryAcquire(fairnessKey(ctx), ctx.internalId);
          if (firstSlots[r] !== undefined) openedAt[r] = performance.now();
          await engine.open(prepared[r].prep, signal, firstSlots[r] === undefined);
          // The engine may have finished the prompt count beside the opening.
          prepared[r].maxTokens = checkContext(reqs[r], prepared[r].prep);
        }
      } catch (err) {
        const held = firstSlots.filter((h) => h !== undefined);
        for (const h of held) h.release();
        scheduler.withdraw(jobs - held.length);
        ticket?.(0);
        discardAll();
        throw reqs.length > 1 ? inBatch(err, r) : err;
      }
      promptTokens = prepared.map((p) => p.prep.promptTokens);
    }
    const params = reqs.map((req, i) => ({ n: req.n, maxTokens: prepared[i].maxTokens }));
    const operation = batch[0].prompt.kind === "chat" ? "chat" : "text_completion";
    this.notify("admitted", ctx, { model: batch[0].model, operation, promptTokens, choices: jobs, params, receivedAt } satisfies AdmittedInfo);

    let markRunning!: () => void;
    const running = new Promise<void>((resolve) => (markRunning = resolve));
    const run = new BatchRun(engine, scheduler, signal, (ev) => this.onEvent(ctx, run, ev), fairnessKey(ctx), ctx.internalId, () => {
      markRunning();
      this.notify("started", ctx);
    });
    const spent = (): Usage => {
      const prompt = run.started ? promptTokens.reduce((sum, p, r) => sum + (run.reportedPrompt.get(r) ?? p), 0) : 0;
      return {
        promptTokens: prompt,
        completionTokens: run.generatedTokens,
        totalTokens: prompt + run.generatedTokens,
        cachedTokens: run.started ? run.cachedTokens : 0,
        reasoningTokens: run.reasoningTokens,
      };
    };
    reqs.forEach((req, r) => {
      for (let j = 0; j < req.n; j++) {
        const first = j === 0;
        run.choice({ req, prep: prepared[r].prep, maxTokens: prepared[r].maxTokens, choice: r * req.n + j, seedOffset: j, held: first ? firstSlots[r] : undefined, openedAt: first ? openedAt[r] : undefined });
      }
    });
    this.active.add(run);
    this.unread().add(run.channel);
    run.whenDone().finally(() => this.active.delete(run)).catch(() => {});
    run.whenDone().then(
      (counts) => {
        const prompt = promptTokens.reduce((sum, p, r) => sum + (run.reportedPrompt.get(r) ?? p), 0);
        const usage: Usage = {
          promptTokens: prompt,
          completionTokens: counts.completionTokens,
          totalTokens: prompt + counts.completionTokens,
          cachedTokens: counts.cachedTokens,
          reasoningTokens: counts.reasoningTokens,
        };
        run.emit({ type: "usage", usage, ...(run.firstTimings ? { timings: run.firstTimings } : {}) });
        run.channel.close();
        ticket?.(usage.totalTokens);
        this.notify("finished", ctx, { usage } satisfies Outcome);
      },
      (error) => {
        // A failed or abandoned request is charged what the ledger books for it: its prompt once it
        // had started (one cancelled while it waited evaluated nothing) and what it generated.
        const used = spent();
        ticket?.(used.totalTokens);
        run.channel.close(error);
        this.notify("finished", ctx, { error, spent: used } satisfies Outcome);
      },
    );
    return { promptTokens, events: run.channel, spent, running };
  }

  /**
   * Events generated and not yet taken by their renderers, over every running request, and their
   * estimated size (see event-weight.ts): what clients reading slower than the models hold here.
   */
  buffered(): { events: number; bytes: number } {
    let events = 0;
    let bytes = 0;
    for (const channel of this.unread()) {
      events += channel.size;
      bytes += channel.bytes;
    }
    return { events, bytes };
  }

  /** The event channels of requests whose renderers have not finished reading (a generation may end before). */
  private unread(): Set<Channel<GenerationEvent>> {
    for (const channel of this.channels) if (channel.finished) this.channels.delete(channel);
    return this.channels;
  }

  /** True once the server is shutting down: new requests are refused. */
  get draining(): boolean {
    return this.stopping;
  }

  /**
   * Graceful shutdown: refuse new requests (503 with Retry-After, or each dialect's own form), end the
   * ones still queued, let the running ones finish for up to `timeoutMs`, then end the rest with the
   * same error, which each dialect renders in its own mid-stream form. Resolves once every request
   * has ended.
   */
  async shutdown(timeoutMs: number): Promise<void> {
    this.stopping = true;
    // Requests still waiting for a sequence end now, not after the drain time: they would only start
    // as running ones finish, likely too late to finish themselves, and their clients can retry
    // elsewhere at once.
    for (const run of this.active) if (!run.started) run.stop(shuttingDown());
    const settled = () => Promise.allSettled([...[...this.active].map((r) => r.whenDone()), ...this.embedding.keys()]);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), timeoutMs)));
    const outcome = await Promise.race([settled().then(() => "done" as const), late]);
    clearTimeout(timer);
    if (outcome === "late") {
      for (const run of this.active) run.stop(shuttingDown());
      for (const stop of this.embedding.values()) stop.abort(shuttingDown());
      await settled();
    }
  }

  /**
   * The prompt tokens a request would use, checked as `start` checks it but not run (the Responses
   * API's input_tokens). Throws the same refusals `start` would.
   */
  async measure(ctx: RequestContext, req: GenerationRequest): Promise<number> {
    this.gate?.authorize(ctx, req.model);
    const { engine } = this.registry.resolve(req.model);
    // Counted, never opened: measuring generates nothing.
    const prep = await engine.prepare({ ...req, isolationKey: keyedNamespace(ctx.apiKey, ctx.namespace) }, { countPrompt: true, measureOnly: true });
    engine.discard?.(prep);
    checkContext(req, prep);
    return prep.promptTokens;
  }

  /** Embeddings share the registry and the request context, not the generation schedulers. */
  async embed(ctx: RequestContext, req: EmbeddingRequest, clientSignal: AbortSignal): Promise<EmbeddingResult> {
    if (this.stopping) throw shuttingDown();
    const signal = this.withGateStop(ctx, clientSignal);
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    const running = this.runEmbed(ctx, req, stop.signal);
    this.embedding.set(running, stop);
    try {
      return await running;
    } finally {
      this.embedding.delete(running);
      signal.removeEventListener("abort", onAbort);
    }
  }

  private async runEmbed(ctx: RequestContext, req: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResult> {
    this.gate?.authorize(ctx, req.model);
    // Embeddings generate nothing: their input tokens are reserved once counted, before any input is
    // embedded, so that requests running at once cannot each spend the same budget or rate.
    let ticket: AdmissionTicket | undefined;
    const admit = async (promptTokens: number) => {
      ticket = await this.gate?.admit(ctx, { model: req.model, promptTokens, maxCompletionTokens: 0 });
    };
    let result: EmbeddingResult;
    try {
      result = await embed(this.registry, req, signal, admit, ctx.responseHeaders);
    } catch (err) {
      ticket?.(0);
      throw err;
    }
    ticket?.(result.promptTokens);
    this.notify("embedded", ctx, { model: req.model, inputs: req.inputs.length, tokens: result.promptTokens });
    return result;
  }

  /**
   * A prompt's tokens exactly as a generation request would see them, and with `pieces` each token
   * as the vocabulary writes it (undefined where the engine cannot say).
   */
  async tokenize(
    model: string,
    prompt: PromptInput,
    addSpecial: boolean,
    extras?: PromptExtras,
    pieces = false,
    responseHeaders?: Record<string, string>,
  ): Promise<{ tokens: number[]; contextSize: number; pieces?: string[] }> {
    const { engine } = this.registry.resolve(model);
    const tokens = await engine.tokenize(prompt, addSpecial, extras, responseHeaders);
    return { tokens, contextSize: engine.describe().contextSize, ...(pieces && engine.vocabularyPieces ? { pieces: engine.vocabularyPieces(tokens) } : {}) };
  }

  /**
   * Text of token ids. No more ids than the model's context holds: a list no sequence of this
   * server could be is refused before any id is looked at (7 million ids held every request 2–5 s).
   */
  async detokenize(model: string, tokens: number[], responseHeaders?: Record<string, string>): Promise<string> {
    const { engine } = this.registry.resolve(model);
    const limit = engine.describe().contextSize;
    if (limit > 0 && tokens.length > limit)
      throw new ApiError(400, `tokens holds ${tokens.length} ids; this model's context holds ${limit}.`, { param: "tokens", code: "invalid_value" });
    return engine.detokenize(tokens, responseHeaders);
  }

  private onEvent(ctx: RequestContext, run: BatchRun, ev: GenerationEvent): void {
    if (!run.sawOutput && (ev.type === "text" || ev.type === "reasoning" || ev.type === "tool-call")) {
      run.sawOutput = true;
      this.notify("firstToken", ctx);
    }
    this.notify("event", ctx, ev);
  }

  private notify<K extends keyof GenerationHooks>(name: K, ...args: Parameters<NonNullable<GenerationHooks[K]>>): void {
    for (const h of this.hooks) {
      try {
        (h[name] as ((...a: unknown[]) => void) | undefined)?.(...args);
      } catch (err) {
        process.emitWarning(`generation hook '${name}' failed: ${(err as Error).message}`);
      }
    }
  }
}

/**
 * The context checks every engine needs, owned by the core: a prompt that does not fit is refused,
 * and so is a token budget the context cannot hold. Returns the resolved budget per choice.
 */
function checkContext(req: GenerationRequest, prep: PreparedGeneration): number {
  const size = prep.contextSize;
  if (size === undefined) return req.maxTokens ?? Number.MAX_SAFE_INTEGER;
  const room = size - prep.promptTokens;
  if (room < 1) {
    throw new ApiError(400, `This model's context is ${size} tokens, but the prompt is ${prep.promptTokens} tokens.`, {
      field: "prompt",
      code: "context_length_exceeded",
    });
  }
  if (req.maxTokens !== undefined && req.maxTokens > room) {
    throw new ApiError(
      400,
      `{field} is ${req.maxTokens}${req.maxTokensDefaulted ? " (its default when not sent)" : ""}, but the prompt uses ${prep.promptTokens} of the model's ${size}-token context, ` +
        `leaving room for at most ${room} tokens.`,
      { field: "maxTokens", code: "context_length_exceeded" },
    );
  }
  return req.maxTokens ?? room;
}

/** Requests wait in turn by who sent them: the API key and the end user, when the request names them. */
function fairnessKey(ctx: RequestContext): string {
  return JSON.stringify([ctx.apiKey ?? null, ctx.namespace ?? null]);
}

/** What a request gets from a server that is shutting down: retry elsewhere or later. */
function shuttingDown(): ApiError {
  return new ApiError(503, "The server is shutting down; retry shortly.", {
    code: "server_shutting_down",
    reason: "shutdown",
    headers: { "retry-after": "5" },
  });
}

function inBatch(err: unknown, r: number): unknown {
  if (!(err instanceof ApiError) || err.field === null) return err;
  return new ApiError(err.status, err.message, { ...err, field: `batch[${r}].${err.field}`, reason: err.reason ?? undefined });
}

/** One choice of a request, as the batch runs it. */
interface ChoiceJob {
  req: GenerationRequest;
  prep: PreparedGeneration;
  maxTokens: number;
  /** Its index over the whole batch (request × n + its own). */
  choice: number;
  /** Its index within its request: the seed's offset, and 0 for the choice that counts the prompt. */
  seedOffset: number;
  /** The slot the choice already took (see startBatch), else it waits for one in its turn. */
  held?: { slot: number; release: () => void };
  /** When the engine began to run it (its `open`), for its timings. */
  openedAt?: number;
}

/**
 * The choices of one request running together. They share one abort: the client going away, or any
 * choice failing, stops every sibling at its next token (a failed request has no partial answer).
 */
class BatchRun {
  readonly channel = new Channel<GenerationEvent>(BUFFERED_EVENTS, BUFFERED_BYTES, eventWeight);
  sawOutput = false;
  /** Prompt tokens an engine reported while generating, by request of the batch. */
  readonly reportedPrompt = new Map<number, number>();
  /** Tokens generated so far over every choice (what a failed request still cost). */
  generatedTokens = 0;
  /** Of those, thinking tokens. */
  reasoningTokens = 0;
  /** Prompt tokens found in the cache so far (the first choice's, as in the usage). */
  cachedTokens = 0;
  /** Whether any choice got its slot, so the prompt was (at least partly) evaluated. */
  started = false;
  /** The first choice's timings once it has finished (when the request asked for them). */
  firstTimings?: Timings;
  private readonly abort = new AbortController();
  private readonly parts = new PartTracker();
  private readonly running: Array<Promise<ChoiceCounts>> = [];

  constructor(
    private readonly engine: Engine,
    private readonly scheduler: NonNullable<ReturnType<ModelRegistry["resolve"]>["scheduler"]>,
    clientSignal: AbortSignal,
    private readonly observe: (ev: GenerationEvent) => void,
    /** Whose turn this request waits in (see Scheduler). */
    private readonly queueKey: string,
    /** The request's own turn among that key's requests, so its n choices do not queue ahead of the next request's. */
    private readonly queueGroup: string,
    /** Called as each choice gets its slot. */
    private readonly onStarted: () => void = () => {},
  ) {
    // Every choice (n of them) listens on this one signal in several places; Node warns of a leak
    // past ten listeners, which here is only a large n.
    setMaxListeners(0, this.abort.signal);
    if (clientSignal.aborted) this.abort.abort(clientSignal.reason);
    else clientSignal.addEventListener("abort", () => this.abort.abort(clientSignal.reason), { once: true });
  }

  /** Ends every choice at its next token with `reason` as the request's error. */
  stop(reason: unknown): void {
    this.abort.abort(reason);
  }

  emit(ev: GenerationEvent): void {
    for (const out of this.parts.track(ev)) {
      this.observe(out);
      this.channel.push(out);
    }
  }

  choice(job: ChoiceJob): void {
    const done = this.runChoice(job);
    done.catch((err) => this.abort.abort(err));
    this.running.push(done);
  }

  /** Sums of every choice once all have finished; rejects with the first failure. */
  async whenDone(): Promise<ChoiceCounts> {
    const results = await Promise.allSettled(this.running);
    const failure = results.find((r) => r.status === "rejected");
    if (failure) throw (failure as PromiseRejectedResult).reason;
    const total: ChoiceCounts = { completionTokens: 0, cachedTokens: 0, reasoningTokens: 0 };
    for (const r of results as Array<PromiseFulfilledResult<ChoiceCounts>>) {
      total.completionTokens += r.value.completionTokens;
      total.cachedTokens += r.value.cachedTokens;
      total.reasoningTokens += r.value.reasoningTokens;
    }
    if (this.abort.signal.aborted) throw this.abort.signal.reason;
    return total;
  }

  private async runChoice({ req, prep, maxTokens, choice, seedOffset, held, openedAt }: ChoiceJob) {
    const signal = this.abort.signal;
    const engine = this.engine;
    const choose = engine.pickSlot ? (free: readonly number[]) => engine.pickSlot!(prep, free) : undefined;
    // The first choice is the one whose upstream request `open` may have opened.
    const onWait = seedOffset === 0 && engine.waiting ? () => engine.waiting!(prep) : undefined;
    const asked = Date.now();
    const { slot, release } = held ?? (await this.scheduler.acquire(signal, choose, this.queueKey, onWait, this.queueGroup).catch((err: unknown) => {
      engine.discard?.(prep);
      throw err;
    }));
    const waitedMs = Date.now() - asked;
    this.started = true;
    this.onStarted();
    const counts: ChoiceCounts = { completionTokens: 0, cachedTokens: 0, reasoningTokens: 0 };
    // vLLM's continuous usage stats: each event of the choice carries its counts when it was sent
    // (a text the stop-string check held back counts the tokens generated meanwhile too). Off, as
    // nearly always, events go out as they are, nothing added per token.
    const request = Math.floor(choice / req.n);
    const promptOf = () => this.reportedPrompt.get(request) ?? prep.promptTokens;
    // llama-server's timings: when the prompt's evaluation began (the cached prefix known, else the
    // engine's `open` or the slot taken) and ended (the engine says so, else the first output), and
    // the choice's own cached count (the usage counts the first choice's only).
    const clock = { start: openedAt ?? performance.now(), evaluated: undefined as number | undefined, cached: 0 };
    const timingsNow = (): Timings => {
      // Nothing is counted for a stage before it has run (llama-server's counts grow the same way).
      if (clock.evaluated === undefined) return { cachedTokens: clock.cached, promptTokens: 0, promptMs: 0, generatedTokens: counts.completionTokens, generationMs: 0 };
      const generated = counts.completionTokens;
      return {
        cachedTokens: clock.cached,
        promptTokens: Math.max(0, promptOf() - clock.cached),
        promptMs: clock.evaluated - clock.start,
        generatedTokens: generated,
        generationMs: generated > 0 ? performance.now() - clock.evaluated : 0,
      };
    };
    const progress = (processed: number) => {
      if (!req.promptProgress) return;
      const ev: GenerationEvent = { type: "progress", choice, total: promptOf(), cached: clock.cached, processed, ms: (clock.evaluated ?? performance.now()) - clock.start };
      if (req.timings) ev.timings = timingsNow();
      this.emit(ev);
    };
    const evaluated = () => {
      if (clock.evaluated !== undefined) return;
      clock.evaluated = performance.now();
    };
    const emit: (ev: GenerationEvent) => void =
      req.runningUsage || req.timings
        ? (ev) => {
            if (ev.type === "usage" || ev.type === "part-start" || ev.type === "part-end" || ev.type === "progress") return this.emit(ev);
            if (ev.type !== "prompt" && ev.type !== "finish") evaluated();
            if (req.runningUsage) ev.running = { promptTokens: promptOf(), completionTokens: counts.completionTokens };
            if (req.timings) ev.timings = timingsNow();
            this.emit(ev);
          }
        : (ev) => this.emit(ev);
    try {
      const answer = new AnswerFilter(choice, [...req.stop, ...prep.formatStops], emit, prep.formatEndings);
      const sampling = { ...req.sampling, seed: choiceSeed(req.sampling.seed, seedOffset) };
      let reason: FinishReason = "stop";
      let turnEnded = false;
      for await (const chunk of engine.generate(prep, { sampling, maxTokens, slot, waitedMs }, signal)) {
        // A reader slower than the engine (a client reading slowly, or not at all) holds the engine
        // here, so the events between them stay a bounded buffer (see event-weight.ts) instead of
        // the whole answer. The generation is not read meanwhile: a remote upstream waits in its
        // socket, and a llama.cpp sequence skips its context's steps (the engine's `idle`), so its
        // batch goes on without it. A client that takes nothing for long is cut off by the HTTP
        // side (see SseWriter), which ends this like any disconnect.
        if (this.channel.full) {
          const resume = engine.idle?.(slot);
          try {
            await this.channel.room(signal);
          } finally {
            resume?.();
          }
          signal.throwIfAborted();
        }
        switch (chunk.kind) {
          case "end":
            reason = chunk.reason;
            turnEnded = chunk.turnEnded === true && chunk.reason === "stop";
            break;
          case "evaluated":
            if (clock.evaluated !== undefined) continue;
            evaluated();
            progress(promptOf());
            continue;
          case "cached":
            if (clock.evaluated === undefined) {
              clock.cached = chunk.tokens;
              clock.start = performance.now();
              // The prompt's evaluation begins from its cached prefix (llama-server's first progress).
              progress(chunk.tokens);
            } else clock.cached += chunk.tokens;
            // The prompt is counted once per request, so is its cached part: the first choice's.
            if (seedOffset === 0) {
              counts.cachedTokens += chunk.tokens;
              this.cachedTokens += chunk.tokens;
            }
            continue;
          case "usage":
            if (chunk.reasoningTokens !== undefined) counts.reasoningTokens = chunk.reasoningTokens;
            if (chunk.completionTokens !== undefined) {
              // The engine's own count stands for the chunks counted so far, in the run's total too
              // (what a request that then fails is booked with).
              this.generatedTokens += chunk.completionTokens - counts.completionTokens;
              counts.completionTokens = chunk.completionTokens;
            }
            if (chunk.promptTokens !== undefined && seedOffset === 0) this.reportedPrompt.set(Math.floor(choice / req.n), chunk.promptTokens);
            continue;
          case "prompt":
            emit({ type: "prompt", choice, text: chunk.text, ...withLogprobs(chunk.logprobs) });
            continue;
          case "tool-call":
            emit({ type: "tool-call", choice, index: chunk.index, id: chunk.id ?? newId("call_"), name: chunk.name });
            continue;
          case "tool-call-arguments":
            counts.completionTokens += chunk.tokens;
            this.generatedTokens += chunk.tokens;
            if (chunk.text) emit({ type: "tool-call-arguments", choice, index: chunk.index, text: chunk.text });
            continue;
          case "text":
            counts.completionTokens += chunk.tokens;
            this.generatedTokens += chunk.tokens;
            if (chunk.channel === "reasoning") {
              this.reasoningTokens += chunk.tokens;
              // Thinking is reported as it comes: stop strings apply to the answer only.
              if (chunk.text || chunk.logprobs) emit({ type: "reasoning", choice, text: chunk.text, ...withLogprobs(chunk.logprobs) });
              continue;
            }
            if (!answer.push(chunk.text, chunk.logprobs)) continue;
            reason = "stop"; // a stop string ended the answer
            break;
        }
        break;
      }
      answer.finish(turnEnded);
      signal.throwIfAborted();
      emit({ type: "finish", choice, reason });
      if (req.timings && choice === 0) this.firstTimings = timingsNow();
      return counts;
    } finally {
      release();
    }
  }
}

interface ChoiceCounts {
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
}

const withLogprobs = (logprobs: TokenLogprob[] | undefined) => (logprobs ? { logprobs } : {});
