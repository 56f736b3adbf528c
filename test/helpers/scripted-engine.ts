import { refuseImages } from "../../src/core/content-parts.ts";
import type { ChoiceRun, Embedder, Engine, EngineChunk, PreparedGeneration } from "../../src/core/engine.ts";
import { invalidField } from "../../src/core/errors.ts";
import type { GenerationRequest, ModelDescription, PromptInput } from "../../src/core/types.ts";

/**
 * A SCRIPTED ENGINE for fast tests of request handling, errors and rendering: it runs no model. It
 * "tokenizes" one token per character (code point) and, for each choice, replays the chunks its
 * script returns for the request. It never stands in for real inference: integration tests run the
 * llama.cpp engine on generated GGUF models.
 *
 * It implements the engine contract honestly where the core relies on it: prompt length and the
 * context size (so the core's context checks run), logit-bias token ids checked against a
 * vocabulary, slots, and the abort signal between chunks.
 */
export interface ScriptedEngineOptions {
  id?: string;
  slots?: number;
  contextSize?: number;
  vocabularySize?: number;
  /**
   * Chunks for one choice (its seed tells the choices of a request apart: seed + i). An Error in the
   * list is thrown at that point, as an engine failing mid-answer. Default: "Hello" then stop.
   */
  script?: (req: GenerationRequest, run: ChoiceRun) => Array<EngineChunk | Error>;
  /** Milliseconds between chunks (0: none). */
  delayMs?: number;
  /** Whether it claims a thinking section (its script decides what it emits either way). */
  reasoning?: boolean;
}

export interface ScriptedPrepared extends PreparedGeneration {
  request: GenerationRequest;
}

export class ScriptedEngine implements Engine<ScriptedPrepared> {
  readonly id: string;
  readonly slots: number;
  readonly embeddings?: Embedder = undefined;
  /** Requests the engine was asked to prepare, for assertions. */
  readonly prepared: GenerationRequest[] = [];
  private readonly contextSize: number;
  private readonly vocabularySize: number;

  constructor(private readonly opts: ScriptedEngineOptions = {}) {
    this.id = opts.id ?? "scripted";
    this.slots = opts.slots ?? 2;
    this.contextSize = opts.contextSize ?? 256;
    this.vocabularySize = opts.vocabularySize ?? 1000;
  }

  describe(): ModelDescription {
    // A scripted model has no chat template, so no thinking section unless it is told to claim one.
    return { id: this.id, created: 0, ownedBy: "plinth", contextSize: this.contextSize, parallel: this.slots, reasoning: this.opts.reasoning ?? false };
  }

  async prepare(request: GenerationRequest): Promise<ScriptedPrepared> {
    this.prepared.push(request);
    // A text-only model: images are refused by position, as the llama.cpp engine does.
    if (request.prompt.kind === "chat") refuseImages(request.prompt.messages, this.id);
    for (const id of request.sampling.logitBias.keys())
      if (id >= this.vocabularySize) throw invalidField(`{field} names token ${id}, outside the scripted vocabulary.`, "logitBias");
    const promptTokens = (await this.tokenize(request.prompt, true)).length;
    return { promptTokens, contextSize: this.contextSize, formatStops: [], request };
  }

  async *generate(prepared: ScriptedPrepared, run: ChoiceRun, signal: AbortSignal): AsyncGenerator<EngineChunk> {
    const chunks = this.opts.script?.(prepared.request, run) ?? [
      { kind: "text", text: "Hello", tokens: 1 },
      { kind: "end", reason: "stop" },
    ];
    for (const chunk of chunks) {
      if (signal.aborted) return;
      if (this.opts.delayMs) await new Promise((r) => setTimeout(r, this.opts.delayMs));
      if (chunk instanceof Error) throw chunk;
      yield chunk;
    }
  }

  async tokenize(prompt: PromptInput, _addSpecial: boolean): Promise<number[]> {
    const text =
      prompt.kind === "chat"
        ? prompt.messages.map((m) => `${m.role}:${m.content}`).join("\n")
        : prompt.kind === "text"
          ? prompt.text
          : prompt.kind === "infill"
            ? prompt.prefix + prompt.suffix
            : null;
    if (text === null) return (prompt as { tokens: number[] }).tokens.slice();
    return [...text].map((ch) => ch.codePointAt(0)! % this.vocabularySize);
  }

  async detokenize(tokens: number[]): Promise<string> {
    tokens.forEach((t, i) => {
      if (t < 0 || t >= this.vocabularySize) throw invalidField(`{field} is outside the scripted vocabulary.`, `tokens[${i}]`);
    });
    return String.fromCodePoint(...tokens);
  }

  async dispose(): Promise<void> {}
}
