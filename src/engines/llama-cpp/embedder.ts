import { type LlamaContext, type LlamaEmbeddingContext, type LlamaModel, LlamaVocabularyType, type Token } from "node-llama-cpp";
import { ApiError } from "../../core/errors.ts";
import type { EmbedInput, Embedder, EmbeddingInfo, EmbeddingPooling } from "../../core/engine.ts";
import { shareEmbeddingDecodes } from "./decode-share.ts";
import { tokenizeRawText } from "./raw-text.ts";
import { PromptBound } from "./prompt-bound.ts";

export interface LlamaEmbedderOptions {
  /** Embedding contexts in the pool: inputs embedded at once. */
  contexts: number;
  /** Tokens per embedding context; an input may use all but one of them. */
  contextSize: number;
  threads: number;
}

/** Architectures llama.cpp runs as encoders: they produce embeddings and cannot generate. */
const ENCODER_ARCHITECTURES = new Set<string>([
  "bert",
  "modern-bert",
  "nomic-bert",
  "nomic-bert-moe",
  "neo-bert",
  "jina-bert-v2",
  "jina-bert-v3",
  "eurobert",
  "t5encoder",
]);

/** GGUF `<arch>.pooling_type` values (llama.cpp's enum llama_pooling_type). */
const POOLING: Record<number, EmbeddingPooling | "rank" | undefined> = { 1: "mean", 2: "cls", 3: "last", 4: "rank" };

export interface EmbeddingTraits {
  /** undefined: the file declares none (or "none"), so the last token's hidden state is used. */
  declaredPooling?: EmbeddingPooling | "rank";
  /** An encoder, non-causal attention or declared pooling: an embedding model with no usable LM head. */
  embeddingOnly: boolean;
}

/** What the GGUF says about embeddings, read from its metadata (no context needed). */
export function embeddingTraits(model: LlamaModel): EmbeddingTraits {
  const arch = String(model.fileInfo.metadata.general?.architecture ?? "");
  const meta = model.fileInfo.architectureMetadata as { pooling_type?: number; attention?: { causal?: boolean } } | undefined;
  const declaredPooling = meta?.pooling_type == null ? undefined : POOLING[meta.pooling_type];
  const embeddingOnly = ENCODER_ARCHITECTURES.has(arch) || meta?.attention?.causal === false || declaredPooling !== undefined;
  return { declaredPooling, embeddingOnly };
}

/**
 * Embeddings through node-llama-cpp. A LlamaEmbeddingContext holds one sequence and embeds one
 * input at a time, so throughput comes from a small pool of them; slot i is context i. The pool is
 * created on first use, so a model that is never asked for embeddings pays nothing for it.
 */
export class LlamaEmbedder implements Embedder {
  private pool: Promise<LlamaEmbeddingContext[]> | null = null;
  private disposed = false;

  /** undefined for a reranker (rank pooling): its output is a score, not an embedding. */
  static create(model: LlamaModel, opts: LlamaEmbedderOptions, traits: EmbeddingTraits, vocabularySize: number): LlamaEmbedder | undefined {
    const pooling = traits.declaredPooling;
    if (pooling === "rank") return undefined;
    return new LlamaEmbedder(model, opts, {
      dimensions: model.embeddingVectorSize,
      pooling: pooling ?? "last",
      poolingDeclared: pooling !== undefined,
      // node-llama-cpp refuses inputs as long as the context itself.
      maxInputTokens: opts.contextSize - 1,
      vocabularySize,
      slots: opts.contexts,
      embeddingOnly: traits.embeddingOnly,
    });
  }

  private readonly bound: PromptBound;

  private constructor(
    private readonly model: LlamaModel,
    private readonly opts: LlamaEmbedderOptions,
    readonly info: EmbeddingInfo,
  ) {
    this.bound = new PromptBound(model);
  }

  minimumTokens(input: EmbedInput): number {
    return input.kind === "text" ? this.bound.minimumTokens(input) : input.tokens.length;
  }

  async tokenize(input: EmbedInput): Promise<number[]> {
    const tokens = (input.kind === "text" ? tokenizeRawText(this.model, input.text) : input.tokens.slice()) as Token[];
    // A text of nothing but what the tokenizer skips (WordPiece drops whitespace) is still embedded,
    // as its begin and end tokens alone, as BERT's own tokenizer and OpenAI embed " ".
    if (tokens.length === 0 && input.kind !== "text") return [];
    // The begin/end tokens the vocabulary takes, added here already so that the count (for the
    // length limit and for usage) is the count actually embedded. A text gets them whatever it
    // holds, as llama.cpp's tokenizer adds them (llama-server's /embeddings): a text that opens with
    // typed "<s>" is BOS twice, as /tokenize and a completions prompt count it. Given token ids get
    // them where they lack them, as LlamaEmbeddingContext adds them (it adds none where they are).
    const first = beginToken(this.model);
    const last = endToken(this.model);
    const text = input.kind === "text";
    if (first != null && (text || tokens[0] !== first)) tokens.unshift(first);
    if (last != null && (text || tokens.at(-1) !== last)) tokens.push(last);
    return tokens;
  }

  async embed(tokens: number[], slot: number, signal: AbortSignal): Promise<Float32Array> {
    const contexts = await this.contexts();
    signal.throwIfAborted();
    const embedding = await contexts[slot].getEmbeddingFor(tokens as Token[]);
    return Float32Array.from(embedding.vector);
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    const pool = this.pool;
    this.pool = null;
    const contexts = await pool?.catch(() => []);
    await Promise.all((contexts ?? []).map((c) => c.dispose()));
  }

  private contexts(): Promise<LlamaEmbeddingContext[]> {
    if (this.disposed) return Promise.reject(new ApiError(503, "The model is shutting down.", { code: "model_unavailable" }));
    if (!this.pool) {
      const pool = this.createPool();
      this.pool = pool;
      // A failed creation (out of memory, say) is reported to this request and retried by the next.
      pool.catch(() => {
        if (this.pool === pool) this.pool = null;
      });
    }
    return this.pool;
  }

  private async createPool(): Promise<LlamaEmbeddingContext[]> {
    const contexts: LlamaEmbeddingContext[] = [];
    try {
      for (let i = 0; i < this.opts.contexts; i++) {
        const context = await this.model.createEmbeddingContext({
          contextSize: this.opts.contextSize,
          // Pooled (and non-causal) models need a whole input in one batch; a last-token model can
          // take a long input in several.
          batchSize: this.info.poolingDeclared || this.info.embeddingOnly ? this.opts.contextSize : undefined,
          // Always explicit: the library's default is 6 threads, whatever the machine has.
          threads: this.opts.threads,
        });
        contexts.push(context);
        // Embedding inputs take turns with generation (decode-share.ts); a pooled or non-causal
        // model's input is read in one batch and cannot be cut.
        const llamaContext = (context as unknown as { _llamaContext?: LlamaContext })._llamaContext;
        if (llamaContext) shareEmbeddingDecodes(llamaContext, !(this.info.poolingDeclared || this.info.embeddingOnly));
      }
    } catch (err) {
      await Promise.all(contexts.map((c) => c.dispose()));
      throw new ApiError(503, `Could not create the embedding contexts: ${(err as Error).message}`, { code: "model_unavailable" });
    }
    return contexts;
  }
}

/**
 * The begin token llama.cpp's tokenizer adds with its special tokens (llama_tokenize's add_special,
 * as llama-server's /embeddings tokenizes): WordPiece always its [CLS]; RWKV none; every other
 * vocabulary, Unigram included, the BOS token where the model asks for it (add_bos_token, or the
 * vocabulary type's default). node-llama-cpp's resolveBeginningTokenToPrepend never gives a Unigram
 * vocabulary one, which llama.cpp has since changed: nomic-embed-text-v2-moe sets add_bos_token and is
 * fed `<s> … </s>`.
 */
function beginToken(model: LlamaModel): Token | null {
  switch (model.vocabularyType) {
    case LlamaVocabularyType.rwkv:
      return null;
    case LlamaVocabularyType.wpm:
      return model.tokens.bos;
    default:
      return model.tokens.shouldPrependBosToken ? model.tokens.bos : null;
  }
}

/** The end token llama.cpp's tokenizer adds: WordPiece its [SEP], RWKV none, others EOS where the model asks for it. */
function endToken(model: LlamaModel): Token | null {
  switch (model.vocabularyType) {
    case LlamaVocabularyType.rwkv:
      return null;
    case LlamaVocabularyType.wpm:
      return model.tokens.sep;
    default:
      return model.tokens.shouldAppendEosToken ? model.tokens.eos : null;
  }
}
