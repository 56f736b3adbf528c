import { createHash } from "node:crypto";
import { availableParallelism } from "node:os";
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type LlamaGrammar, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { refuseImages } from "../../core/content-parts.ts";
import { embeddingOnlyModel, invalidField } from "../../core/errors.ts";
import type { GenerationRequest, ModelDescription, PromptInput } from "../../core/types.ts";
import type { ChoiceRun, Engine, EngineChunk, EngineStats, PreparedGeneration, PrepareOptions, PromptExtras } from "../../core/engine.ts";
import { embeddingTraits, LlamaEmbedder } from "./embedder.ts";
import { defaultDecodeContexts, defaultThreads, engineBuild, getRuntime, type GpuChoice } from "./runtime.ts";
import { BatchGate, sequenceIdOf } from "./batch-gate.ts";
import { decodeShare } from "./decode-share.ts";
import { generationFirstStrategy } from "./batch-strategy.ts";
import { ConstraintPlanner, RELAXED_HEADER, relaxedHeader } from "./constraints.ts";
import { xmlLayoutOfWrapper } from "./xml-tool-calls.ts";
import { usesGemma4Layout } from "./gemma4-tool-calls.ts";
import { usesLfm2Layout } from "./python-tool-calls.ts";
import { decodeLoop, type GrammarSlot, type ReasoningPlan, type ToolPlan } from "./decode-loop.ts";
import { logprobSteps, plainSteps, promptLogprobs } from "./decode-steps.ts";
import { spellAlongText } from "./echo-spelling.ts";
import { logprobReaderSupported } from "./logprob-reader.ts";
import { checkGgufFiles } from "./gguf-header.ts";
import { FINAL_HEADER, HARMONY_CALL_FORMAT, type HarmonyLayout } from "./harmony.ts";
import { PromptRenderer } from "./prompt-renderer.ts";
import { tokenizeRawText } from "./raw-text.ts";
import { buildEvaluateOptions } from "./sampling.ts";
import { PrefixStore } from "./prefix-store.ts";
import { PromptBound } from "./prompt-bound.ts";
import { SlotCache } from "./slot-cache.ts";
import { TokenPieces } from "./token-pieces.ts";
import { TokenTextDecoder } from "./token-text.ts";

// The engine's wiring: loads a model and its context, and connects the pieces that do the work.
// Prompts become tokens in prompt-renderer.ts, tools and response formats become grammars in
// constraints.ts, saved prompt states are reused through slot-cache.ts, and tokens become chunks in
// decode-loop.ts (with the text side in text-router.ts). What stays here is the order in which a
// request passes through them and the checks that need the loaded model.

export interface LlamaEngineOptions {
  id: string;
  modelPath: string;
  /** Per-sequence context; undefined = the model's trained size, capped at 4096. */
  contextSize?: number;
  parallel: number;
  /** CPU threads per context; undefined: defaultThreads for the engine binary. */
  threads?: number;
  gpu: GpuChoice;
  /** Bytes of RAM for saved prompt states; 0 keeps only what the sequences themselves hold. */
  cacheRam?: number;
  /** Prompts shorter than this are not worth saving. */
  cacheMinTokens?: number;
  /** A node-llama-cpp chat wrapper to use instead of the one the model's template resolves to. */
  chatWrapper?: string;
  /** Embedding contexts, created on the first embeddings request (default 2). */
  embeddingContexts?: number;
  /** Generation contexts sharing the sequences (default: defaultDecodeContexts on the CPU, 1 on a GPU). */
  decodeContexts?: number;
  /** Tokens per decode call (node-llama-cpp's default when unset). */
  batchSize?: number;
  /** Hold each step's decodes until every generating sequence has one (batch-gate.ts); default true. */
  batchGate?: boolean;
  /** Aborts the load (the model was unloaded while it loaded, or the server stops). */
  /** Where the runtime's start writes what it decided (the GPU check, gpu-check.ts). */
  log?: (line: string) => void;
  signal?: AbortSignal;
}

/** The prompt's logprobs of a request with echo and logprobs, scored once for all its choices (see generate). */
const promptScores = new WeakMap<LlamaPrepared, Promise<Awaited<ReturnType<typeof promptLogprobs>>>>();

export interface LlamaPrepared extends PreparedGeneration {
  tokens: Token[];
  /** Tokens that end a turn in this prompt format, besides the model's end-of-generation tokens. */
  stopTokens: Set<Token>;
  ignoreEos?: boolean;
  logprobs?: number;
  /** The prompt text to report back (echo), when asked for. */
  echo?: string;
  /**
   * Nothing is generated after the echo (max_tokens 0): a character the prompt leaves unfinished
   * reads as U+FFFD, as /detokenize spells it, instead of waiting for a token to complete it.
   */
  echoEnds?: boolean;
  /**
   * How the echo's log-probability entries read along it: `text`, a text prompt as the client sent
   * it (see echo-spelling.ts); `fim`, a fill-in-the-middle prompt whose echo is its prefix, spelled
   * by the tokens before `end` less the one at `marker` (the FIM prefix token: neither it nor the
   * suffix and the FIM tokens after it are in the echo's text); undefined, a token prompt, whose
   * echo is spelled from its own tokens.
   */
  echoSpelling?: "text" | { fim: { marker: number; end: number } };
  reasoning?: ReasoningPlan;
  tools?: ToolPlan;
  contentGrammar?: LlamaGrammar;
  /** Written by the engine when thinking ends, before the answer. */
  answerOpening?: Token[];
  /** Dropped from the start of the answer when the model writes it. */
  answerHeader?: string;
  namespace: string;
  reuse: boolean;
  cacheKey?: string;
}

const DEFAULT_CONTEXT_CAP = 4096;

/**
 * How many prompt tokens a shared prefix must save before a request joins a context that is busier
 * than another with a free sequence. A step of a busier context costs every sequence in it; a cold
 * prompt of this length costs about one step once.
 */
const LANE_BALANCE_TOKENS = 64;

/** The context (lane) each slot belongs to: slots alternate, so the first requests spread out. */
function laneOf(slot: number, lanes: number): number {
  return slot % lanes;
}

/** Runs a GGUF model in-process: one context whose sequences decode together (continuous batching). */
export class LlamaCppEngine implements Engine<LlamaPrepared> {
  readonly id: string;
  readonly slots: number;
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly sequences: LlamaContextSequence[];
  /** How many generation contexts the sequences are spread over (see laneOf). */
  private readonly lanes: number;
  /** One per context, when enabled. */
  private readonly gates: BatchGate[];
  /**
   * Slots whose sequence is generating and counted by its gate, and of those the ones the core has
   * stopped reading (see idle), which the gate no longer waits for.
   */
  private readonly stepping = new Set<number>();
  private readonly idling = new Set<number>();
  /** Set for gpt-oss's message layout. */
  private readonly harmony: HarmonyLayout | undefined;
  private readonly renderer: PromptRenderer;
  private readonly vocabSize: number;
  private readonly bound: PromptBound;
  private readonly pieces: TokenPieces;
  private readonly slotCache: SlotCache;
  private readonly prefixStore: PrefixStore;
  private readonly constraints: ConstraintPlanner;
  readonly embeddings?: LlamaEmbedder;
  private readonly fingerprint: string;
  /** CPU threads per context, as resolved for the engine binary. */
  readonly threads: number;

  private constructor(
    opts: LlamaEngineOptions,
    private readonly model: LlamaModel,
    /** Empty for an embedding-only model, which gets no generation context at all. */
    private readonly contexts: LlamaContext[],
    embeddings: LlamaEmbedder | undefined,
  ) {
    this.id = opts.id;
    this.threads = opts.threads ?? 1;
    this.lanes = Math.max(1, contexts.length);
    this.slots = contexts.length > 0 ? opts.parallel : 0;
    this.sequences = contexts.length > 0 ? Array.from({ length: opts.parallel }, (_, slot) => contexts[laneOf(slot, this.lanes)].getSequence()) : [];
    this.gates = opts.batchGate === false ? [] : contexts.map((c) => new BatchGate(c));
    this.embeddings = embeddings;
    this.fingerprint = buildFingerprint(opts.modelPath, model);
    this.vocabSize = vocabularySize(model);
    this.bound = new PromptBound(model);
    this.renderer = new PromptRenderer(model, { id: opts.id, chatWrapper: opts.chatWrapper, vocabSize: this.vocabSize });
    this.harmony = this.renderer.harmony;
    this.pieces = new TokenPieces(model);
    this.constraints = new ConstraintPlanner(model, this.renderer.wrapper, this.harmony ? HARMONY_CALL_FORMAT : undefined, xmlLayoutOfWrapper(this.renderer.wrapper), usesGemma4Layout(this.renderer.wrapper) ? "gemma4" : usesLfm2Layout(this.renderer.wrapper) ? "python" : undefined);
    this.prefixStore = new PrefixStore(opts.cacheRam ?? 0, opts.cacheMinTokens ?? 16, opts.id);
    this.slotCache = new SlotCache(this.sequences, this.prefixStore);
  }

  static async load(opts: LlamaEngineOptions): Promise<LlamaCppEngine> {
    // node-llama-cpp believes the counts a header declares (a malformed one made its reader run
    // forever): the header is checked first, whichever way the file came (--model, a download).
    await checkGgufFiles(opts.modelPath);
    // The defaults depend on the binary the runtime runs on (runtime.ts).
    const build = engineBuild(await getRuntime({ gpu: opts.gpu, threads: 1, log: opts.log }));
    const threads = opts.threads ?? defaultThreads(availableParallelism(), build);
    const configuredLanes = opts.decodeContexts ?? defaultDecodeContexts(availableParallelism(), threads);
    // The runtime's thread budget covers every lane: node-llama-cpp makes a context wait for threads
    // another context holds, which would put the lanes back in single file. (It is one runtime per
    // process, so the budget must not depend on a model's own settings.) With the decode thread every
    // decode takes its turn on one thread anyway, so the budget also covers the embedding contexts:
    // held to the lanes' budget, two 2-thread embedding contexts waited on each other's threads and
    // embedded at 0.6x of one context (measured, docs/benchmarks.md "Embeddings").
    const contextsSharing = build.decodeThread ? configuredLanes + (opts.embeddingContexts ?? 2) : configuredLanes;
    // One thread decodes for the whole process: embedding pieces take it one at a time (decode-share.ts).
    if (build.decodeThread) decodeShare.oneDecoder = true;
    const llama = await getRuntime({ gpu: opts.gpu, threads: threads * contextsSharing, log: opts.log });
    const cpuLanes = Math.min(opts.parallel, configuredLanes);
    const model = await llama.loadModel({ modelPath: opts.modelPath, ...(opts.signal ? { loadSignal: opts.signal } : {}) });
    const trained = model.trainContextSize;
    const contextSize = opts.contextSize ?? Math.min(trained || DEFAULT_CONTEXT_CAP, DEFAULT_CONTEXT_CAP);
    const traits = embeddingTraits(model);
    const embedder = (size: number) =>
      LlamaEmbedder.create(
        model,
        { contexts: opts.embeddingContexts ?? 2, contextSize: size, threads },
        traits,
        vocabularySize(model),
      );
    if (traits.embeddingOnly) {
      // No generation context at all, and no stretching past the trained length (BERT's positions are learned).
      return new LlamaCppEngine({ ...opts, threads }, model, [], embedder(trained > 0 ? Math.min(contextSize, trained) : contextSize));
    }
    // A GPU runs one decode at a time anyway; extra contexts would only cost memory there.
    const lanes = llama.gpu === false ? cpuLanes : Math.min(opts.parallel, opts.decodeContexts ?? 1);
    const contexts: LlamaContext[] = [];
    try {
      for (let lane = 0; lane < lanes; lane++) {
        const sequences = Array.from({ length: opts.parallel }, (_, slot) => slot).filter((slot) => laneOf(slot, lanes) === lane).length;
        contexts.push(
          await model.createContext({
            contextSize,
            sequences,
            threads,
            ...(opts.batchSize ? { batchSize: opts.batchSize } : {}),
            batching: { itemPrioritizationStrategy: generationFirstStrategy },
            // Without a fixed size the library may shrink the context to fit memory; a silently smaller
            // context would turn into surprising 400s, so creation fails loudly instead.
            failedCreationRemedy: false,
          }),
        );
      }
    } catch (err) {
      for (const c of contexts) await c.dispose();
      throw err;
    }
    // Embedding inputs get the same room as prompts.
    return new LlamaCppEngine({ ...opts, threads }, model, contexts, embedder(contexts[0].contextSize));
  }

  /**
   * Which llama.cpp binary runs the model, for the startup log: the package's prebuilt one, or one
   * built on this machine (`npm run engine:build`), which is faster on the CPU (docs/benchmarks.md).
   */
  get runtime(): string {
    const llama = this.model.llama;
    const build = engineBuild(llama);
    const name = build.decodeThread ? "llama.cpp built on this machine, one decode thread" : build.local ? "llama.cpp built on this machine" : "prebuilt llama.cpp";
    return `${name}, ${llama.gpu === false ? "CPU" : llama.gpu}`;
  }

  /** Generation contexts the sequences are spread over (0 for an embedding-only model). */
  get decodeContexts(): number {
    return this.contexts.length;
  }

  get contextSize(): number {
    return this.contexts[0]?.contextSize ?? (this.embeddings ? this.embeddings.info.maxInputTokens + 1 : 0);
  }

  describe(): ModelDescription {
    return {
      id: this.id,
      created: this.created,
      ownedBy: "plinth",
      contextSize: this.contextSize,
      trainedContextSize: this.model.trainContextSize,
      parallel: this.slots,
      reasoning: this.contexts.length > 0 && this.renderer.thought !== undefined,
      fingerprint: this.fingerprint,
      ...(this.contexts.length > 0 && this.renderer.templateText !== undefined ? { chatTemplate: this.renderer.templateText } : {}),
    };
  }

  async prepare(req: GenerationRequest, options: PrepareOptions = {}): Promise<LlamaPrepared> {
    if (this.contexts.length === 0) throw embeddingOnlyModel(this.id);
    if (req.prompt.kind === "chat") refuseImages(req.prompt.messages, this.id);
    // The reader relies on node-llama-cpp internals; a library that lacks them refuses logprobs.
    if (req.logprobs !== undefined && !logprobReaderSupported(this.sequences[0]))
      throw invalidField("Log probabilities are not available with this build of the inference engine.", "logprobs");
    if (req.prompt.kind !== "chat" && (req.tools || req.responseFormat))
      throw invalidField("Tools and response formats need a chat prompt.", req.tools ? "tools" : "responseFormat");
    this.bound.check(req.prompt, this.contextSize, req.tools);
    const { constraints, rendered, reasoning, tokens } = await this.promptFor(req, options.signal);
    const { stopTokens, formatStops, formatEndings } = rendered;
    if (tokens.length === 0) throw invalidField("The prompt is empty.", "prompt");
    for (const id of req.sampling.logitBias.keys()) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize)
        throw invalidField(`{field} names token ${id}, which is outside the vocabulary (0..${this.vocabSize - 1}).`, "logitBias");
    }
    // The core checks the prompt and the token budget against the context; the engine never
    // shifts it, so a sequence cannot overflow mid-answer.
    return {
      tokens,
      stopTokens,
      formatStops,
      formatEndings,
      ignoreEos: req.ignoreEos,
      promptTokens: tokens.length,
      contextSize: this.contextSize,
      logprobs: req.logprobs,
      echo: req.echo ? this.renderer.promptText(req.prompt, tokens, (t) => this.textOf(t, req.maxTokens === 0)) : undefined,
      echoEnds: req.maxTokens === 0,
      echoSpelling:
        req.prompt.kind === "text"
          ? "text"
          : req.prompt.kind === "infill"
            ? { fim: { marker: tokens.indexOf(this.model.tokens.infill.prefix!), end: tokens.indexOf(this.model.tokens.infill.suffix!) } }
            : undefined,
      reasoning: reasoning?.plan,
      tools: constraints.tools,
      contentGrammar: constraints.contentGrammar,
      answerOpening: reasoning?.answerOpening,
      answerHeader: this.harmony && constraints.tools && !constraints.tools.forced ? FINAL_HEADER : undefined,
      namespace: req.isolationKey ?? "",
      // Prompt log probabilities need every prompt position evaluated, so echo with logprobs starts cold.
      reuse: req.cachePrompt !== false && !(req.echo && req.logprobs !== undefined),
      cacheKey: req.cacheKey,
      // A non-strict schema's keywords the grammar could not enforce are named, never dropped silently.
      responseHeaders: constraints.relaxed.length > 0 ? { [RELAXED_HEADER]: relaxedHeader(constraints.relaxed) } : undefined,
    };
  }

  /** The prompt's tokens as generation evaluates them, with the plans that decided them. */
  private async promptFor(req: GenerationRequest, signal?: AbortSignal) {
    const constraints = await this.constraints.plan(req, this.harmony ? FINAL_HEADER : undefined, signal);
    const rendered = this.renderer.render(req, constraints.functions, this.textBound);
    const constrained = constraints.tools?.forced === true || constraints.contentGrammar !== undefined;
    const reasoning = this.renderer.planReasoning(req, constraints.tools !== undefined, rendered.openTurn, constrained);
    // Thinking is opened (or closed, when turned off) at the end of the prompt, as the template does;
    // a forced tool call opens right after, unless thinking comes first.
    let tokens = reasoning ? [...rendered.tokens, ...reasoning.promptSuffix] : rendered.tokens;
    if (constraints.tools?.forced && !reasoning?.plan.startsInside) tokens = [...tokens, ...constraints.tools.prefixTokens];
    return { constraints, rendered, reasoning, tokens };
  }

  stats(): EngineStats {
    return {
      kvTokens: this.sequences.map((s) => s.nextTokenIndex),
      kvTokensPerSlot: this.contexts[0]?.contextSize ?? 0,
      promptCache: { bytes: this.prefixStore.bytesUsed, entries: this.prefixStore.size, evictions: this.prefixStore.evictions },
    };
  }

  async *generate(prepared: LlamaPrepared, run: ChoiceRun, signal: AbortSignal): AsyncGenerator<EngineChunk> {
    const { slot, maxTokens } = run;
    const sequence = this.sequences[slot];
    const gate = this.gates[laneOf(slot, this.lanes)];
    // Preparing the cache takes the context's lock; the gate lets running steps give it up. The
    // join lasts until this sequence's first decode reaches the gate (enter takes it over), so
    // requests that arrive together start in one step: ended right after the preparation, it let a
    // step go while the last newcomer was still handing its cached count to the HTTP side, and that
    // one waited a whole step longer (measured with eight simultaneous streams).
    const joined = gate?.join();
    let input: Token[];
    try {
      const cached = await this.slotCache.prepare(slot, prepared.namespace, prepared.tokens, prepared.reuse, prepared.cacheKey);
      yield { kind: "cached", tokens: cached };
      input = prepared.tokens.slice(cached);
      if (prepared.echo !== undefined) {
        if (prepared.logprobs === undefined) yield { kind: "prompt", text: prepared.echo };
        else {
          // Decoding the prompt for its logprobs goes through the gate, which must not wait for us.
          joined?.();
          // The prompt's logprobs are the same for every choice of the request: the first choice
          // scores it (on its own sequence, which is then evaluated), the others take its answer
          // and read the prompt as any prompt. Scored once per choice, n = 36 over a long prompt
          // took minutes and a gigabyte, and held the decode thread from every other request.
          let scoring = promptScores.get(prepared);
          const first = scoring === undefined;
          if (scoring === undefined) {
            const echo = prepared.echo;
            const scored = input;
            const spelling = prepared.echoSpelling;
            scoring = promptLogprobs(sequence, scored, prepared.logprobs, this.pieces, signal, prepared.echoEnds).then((logprobs) =>
              typeof spelling === "object"
                ? logprobs.slice(0, spelling.fim.end).filter((_, i) => i !== spelling.fim.marker)
                : spelling === "text"
                  ? spellAlongText(logprobs, echo, scored, this.pieces)
                  : logprobs,
            );
            promptScores.set(prepared, scoring);
          }
          const logprobs = await scoring;
          if (first && input.length > 1) input = input.slice(-1);
          yield { kind: "prompt", text: prepared.echo, logprobs };
        }
      }
      if (maxTokens === 0) {
        yield { kind: "end", reason: "length" };
        return;
      }
      // From here on this sequence decodes every step; its context's gate waits for it.
      gate?.enter(sequenceIdOf(sequence));
      this.stepping.add(slot);
    } finally {
      joined?.();
    }
    try {
      yield* this.decode(prepared, run, sequence, input, signal);
    } finally {
      this.stepping.delete(slot);
      // An idle sequence has already left its gate.
      if (!this.idling.delete(slot)) gate?.leave(sequenceIdOf(sequence));
    }
  }

  /**
   * The core stops reading this slot's generation (its client is far behind). Its sequence then
   * queues no decode (each step's decode is queued when the next token is asked for), so it only
   * has to leave its gate, which would otherwise hold every step of the context's other sequences
   * for it (up to a quarter of a step each time). Back when read again, as a sequence that starts.
   */
  idle(slot: number): () => void {
    const gate = this.gates[laneOf(slot, this.lanes)];
    // Not yet generating (its cached count or echo is what waits): the gate does not count it.
    if (!gate || !this.stepping.has(slot) || this.idling.has(slot)) return () => {};
    this.idling.add(slot);
    gate.leave(sequenceIdOf(this.sequences[slot]));
    return () => {
      if (this.idling.delete(slot)) gate.enter();
    };
  }

  private async *decode(
    prepared: LlamaPrepared,
    { sampling, slot, maxTokens }: ChoiceRun,
    sequence: LlamaContextSequence,
    input: Token[],
    signal: AbortSignal,
  ): AsyncGenerator<EngineChunk> {
    const generated: Token[] = [];
    const grammar: GrammarSlot = {};
    const options = { ...buildEvaluateOptions(this.model, sampling, generated, maxTokens), grammarEvaluationState: () => grammar.state };
    yield* decodeLoop({
      model: this.model,
      steps:
        prepared.logprobs === undefined
          ? plainSteps(sequence, input, options, signal)
          : logprobSteps(sequence, input, options, prepared.logprobs, this.pieces, signal),
      decoder: new TokenTextDecoder(this.model, prepared.tokens),
      generated,
      maxTokens,
      stopTokens: prepared.stopTokens,
      ignoreEos: prepared.ignoreEos,
      reasoning: prepared.reasoning,
      tools: prepared.tools,
      contentGrammar: prepared.contentGrammar,
      // The call layout's control-token markers are read as their text only while calls can be made:
      // otherwise such a token stays what it decodes to, nothing. So are the thinking section's, only
      // while a section can be open (a section the prompt closed has no markers to read).
      markers: this.markersFor(prepared),
      thoughtMarkers: prepared.reasoning && !prepared.reasoning.closedInPrompt ? new Set(this.renderer.thinkingMarkers.keys()) : undefined,
      callMarkers: prepared.tools ? this.constraints.innerMarkers : undefined,
      silentMarkers: this.renderer.silentMarkers,
      answerOpening: prepared.answerOpening,
      answerHeader: prepared.answerHeader,
      grammar,
      tokenize: (text) => this.constraints.tokenize(text),
      signal,
      onPromptEvaluated: () => this.slotCache.promptEvaluated(slot),
    });
  }

  /** The control tokens the decode loop reads as their text for this request (see generate). */
  private markersFor(prepared: LlamaPrepared): ReadonlyMap<Token, string> | undefined {
    const thinking = prepared.reasoning && !prepared.reasoning.closedInPrompt ? this.renderer.thinkingMarkers : undefined;
    const calls = prepared.tools ? this.constraints.markers : undefined;
    if (!thinking?.size && !calls) return this.harmony?.markers;
    return new Map([...(thinking ?? []), ...(this.harmony?.markers ?? []), ...(calls ?? [])]);
  }

  pickSlot(prepared: LlamaPrepared, free: readonly number[]): number {
    const penalty = this.laneLoad(free);
    if (!prepared.reuse) return free.reduce((best, slot) => (penalty(slot) < penalty(best) ? slot : best), free[0]);
    return this.slotCache.pick(free, prepared.namespace, prepared.tokens, prepared.cacheKey, penalty);
  }

  /**
   * With several lanes, what joining each free slot's lane costs, in prompt tokens: busy sequences
   * beyond those of the least busy lane, so requests spread over the lanes unless a long shared
   * prefix says otherwise.
   */
  private laneLoad(free: readonly number[]): (slot: number) => number {
    if (this.lanes === 1) return () => 0;
    const busy = new Array<number>(this.lanes).fill(0);
    const isFree = new Set(free);
    for (let slot = 0; slot < this.slots; slot++) if (!isFree.has(slot)) busy[laneOf(slot, this.lanes)]++;
    const least = Math.min(...free.map((slot) => busy[laneOf(slot, this.lanes)]));
    return (slot) => (busy[laneOf(slot, this.lanes)] - least) * LANE_BALANCE_TOKENS;
  }

  /** The templated text of a chat prompt, checked against the context before it is tokenized. */
  private readonly textBound = (bytes: number): void => this.bound.checkText(bytes, this.contextSize);

  async tokenize(prompt: PromptInput, addSpecial: boolean, extras?: PromptExtras): Promise<number[]> {
    if (prompt.kind === "chat") refuseImages(prompt.messages, this.id);
    // A prompt no request could use is not worth holding the event loop for.
    this.bound.check(prompt, this.contextSize, extras?.tools);
    // The same path as prepare: tools and the thinking switch are part of what the template renders.
    if (prompt.kind === "chat") return (await this.promptFor({ prompt, ...extras } as GenerationRequest)).tokens;
    if (prompt.kind === "text" && !addSpecial) return tokenizeRawText(this.model, prompt.text);
    // An embedding-only model's text is counted as embeddings count it: with the begin and end
    // tokens its vocabulary takes (BERT's [CLS] and [SEP]), so /tokenize agrees with the length
    // limit and the usage of /v1/embeddings.
    if (prompt.kind === "text" && this.contexts.length === 0 && this.embeddings) return this.embeddings.tokenize({ kind: "text", text: prompt.text });
    return this.renderer.render({ prompt } as GenerationRequest).tokens;
  }

  vocabularyPieces(tokens: number[]): string[] {
    return tokens.map((t) => this.pieces.piece(t) ?? this.model.detokenize([t as Token], true));
  }

  async detokenize(tokens: number[]): Promise<string> {
    tokens.forEach((t, i) => this.renderer.checkToken(t, `tokens[${i}]`));
    return this.textOf(tokens, true);
  }

  /**
   * Token ids as text, spelled as generated text and logprob tokens are (see TokenPieces), so that
   * `/tokenize` then `/detokenize` gives the text back and an echo matches its own token list;
   * llama.cpp's detokenizer for vocabularies TokenPieces cannot spell exactly.
   */
  private textOf(tokens: number[], flush: boolean): string {
    if (this.pieces.exact) return this.pieces.textOf(tokens, flush);
    const text = this.model.detokenize(tokens as Token[], false);
    return this.pieces.wordPiece && text.startsWith(" ") ? text.slice(1) : text;
  }

  async dispose(): Promise<void> {
    this.slotCache.dispose();
    for (const gate of this.gates) gate.dispose();
    await this.embeddings?.dispose();
    for (const context of this.contexts) await context.dispose();
    await this.model.dispose();
  }
}

function vocabularySize(model: LlamaModel): number {
  const embd = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
  const fromTensor = embd ? Number(embd.dimensions[1]) : 0;
  const tokens = model.fileInfo.metadata.tokenizer?.ggml?.tokens;
  return fromTensor || tokens?.length || 0;
}

/**
 * The model file (size and modification time, so no multi-gigabyte read) and the engine build
 * (node-llama-cpp's version, the llama.cpp release and the GPU backend), hashed: stable across
 * restarts, changed by a new file or a new build.
 */
function buildFingerprint(modelPath: string, model: LlamaModel): string {
  const st = statSync(modelPath);
  const parts = [st.size, Math.floor(st.mtimeMs), libraryVersion(), model.llama.llamaCppRelease.release, String(model.llama.gpu)];
  return createHash("sha256").update(JSON.stringify(parts)).digest("hex");
}

function libraryVersion(): string {
  try {
    const entry = fileURLToPath(import.meta.resolve("node-llama-cpp"));
    return (JSON.parse(readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8")) as { version?: string }).version ?? "";
  } catch {
    return "";
  }
}
