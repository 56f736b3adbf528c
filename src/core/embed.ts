import type { EmbedInput, Embedder } from "./engine.ts";
import { ApiError, invalidField } from "./errors.ts";
import type { ModelRegistry } from "./registry.ts";

/** A dialect-free embeddings request. */
export interface EmbeddingRequest {
  model: string;
  /** Errors about one input name it as the canonical field `inputs[i]`. */
  inputs: EmbedInput[];
  /** Matryoshka truncation: keep this many leading components (then renormalise). */
  dimensions?: number;
}

export interface EmbeddingResult {
  /** Unit-length vectors, in input order. */
  vectors: Float32Array[];
  /** Tokens embedded, over all inputs, including the tokens the model adds (BOS/CLS, SEP). */
  promptTokens: number;
}

/**
 * The embeddings path shared by every dialect: check every input (vocabulary, length) before
 * anything runs, reserve its tokens against the key's limits (`admit`), admit the request to the
 * model's embedding scheduler, then spread the inputs over
 * the slots it grants. Vectors come back L2-normalised (after any truncation), as OpenAI's do.
 *
 * A request holds at most min(inputs, slots) slots, each for as long as inputs remain, and its
 * workers queue in arrival order with everyone else's; a full queue is a 429 before any work.
 */
export async function embed(
  registry: ModelRegistry,
  req: EmbeddingRequest,
  signal: AbortSignal,
  /** Called with the request's token count once every input is counted, before any runs (limits). */
  admit: (promptTokens: number) => Promise<void> = async () => {},
  /** Headers the engine wants on the response (see RequestContext.responseHeaders). */
  responseHeaders?: Record<string, string>,
): Promise<EmbeddingResult> {
  const served = registry.resolve(req.model);
  const embedder = served.engine.embeddings;
  const scheduler = served.embeddingScheduler;
  if (!embedder || !scheduler) throw invalidField(`The model '${req.model}' does not produce embeddings.`, "model", "model_not_supported");

  const { dimensions: size } = embedder.info;
  const dimensions = req.dimensions ?? size;
  if (!Number.isInteger(dimensions) || dimensions < 1 || dimensions > size)
    throw invalidField(`{field} must be between 1 and ${size}, this model's embedding size; got ${req.dimensions}.`, "dimensions");

  const tokens: number[][] = [];
  if (embedder.tokenizeMany) {
    // All inputs in one go (a remote upstream embeds them in one request rather than one each).
    // That is the request's work, so it takes its turn like any: a slot (the queue's limit and
    // timeout apply), and a client that leaves while it waits costs the upstream nothing.
    req.inputs.forEach((input, i) => checkInput(embedder, input, `inputs[${i}]`));
    scheduler.admit(1);
    const { release } = await scheduler.acquire(signal);
    try {
      const all = await embedder.tokenizeMany(req.inputs, responseHeaders, signal);
      all.forEach((t, i) => tokens.push(checkTokens(embedder, t, `inputs[${i}]`)));
    } finally {
      release();
    }
  } else {
    // Every input's cheap checks first: a bad last input is refused before the others are tokenized.
    req.inputs.forEach((input, i) => checkInput(embedder, input, `inputs[${i}]`));
    // Tokenizing runs on the event loop, and 2,048 inputs of 7 KB took 4.5 s of it: other clients
    // (even /health) waited that long. It gives the loop back every few milliseconds.
    let slice = performance.now();
    for (const [i, input] of req.inputs.entries()) {
      tokens.push(checkTokens(embedder, await embedder.tokenize(input), `inputs[${i}]`));
      if (performance.now() - slice >= TOKENIZE_SLICE_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        signal.throwIfAborted();
        slice = performance.now();
      }
    }
  }
  const promptTokens = tokens.reduce((sum, t) => sum + t.length, 0);
  await admit(promptTokens);

  const workers = Math.min(tokens.length, scheduler.slots);
  scheduler.admit(workers);

  const vectors = new Array<Float32Array>(tokens.length);
  // One failed input stops the request's other workers before they take another input.
  const stop = new AbortController();
  const onAbort = () => stop.abort(signal.reason);
  if (signal.aborted) onAbort();
  else signal.addEventListener("abort", onAbort, { once: true });
  let next = 0;
  // Each input takes its own turn at a slot: a worker gives its slot back after every input, so a
  // request of 2,048 inputs does not hold every slot until it is done while a one-input request
  // waits (22 s behind two such batches). Requests take turns (a group each); with nobody waiting,
  // taking the slot again costs nothing.
  const group = `embed-${++requests}`;
  const work = async () => {
    while (next < tokens.length) {
      const { slot, release } = await scheduler.acquire(stop.signal, undefined, "", undefined, group);
      try {
        stop.signal.throwIfAborted();
        if (next >= tokens.length) return;
        const i = next++;
        vectors[i] = normalise(await embedder.embed(tokens[i], slot, stop.signal), dimensions);
      } finally {
        release();
      }
    }
  };
  try {
    const results = await Promise.allSettled(
      Array.from({ length: workers }, () =>
        work().catch((err) => {
          stop.abort(err);
          throw err;
        }),
      ),
    );
    const failure = results.find((r) => r.status === "rejected");
    if (failure) throw (failure as PromiseRejectedResult).reason;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
  return { vectors, promptTokens };
}

/** Numbers the embedding requests, so each has its own turn at the slots. */
let requests = 0;

/** Longest stretch of tokenizing before the event loop gets a turn. */
const TOKENIZE_SLICE_MS = 10;

/** What can be refused before tokenizing: token ids outside the vocabulary, empty input, input that can never fit. */
function checkInput(embedder: Embedder, input: EmbedInput, field: string): void {
  const { vocabularySize, maxInputTokens } = embedder.info;
  if (input.kind === "tokens") {
    if (input.tokens.length === 0) throw invalidField("{field} is empty; send at least one token.", field);
    input.tokens.forEach((t, j) => {
      if (!Number.isInteger(t) || t < 0 || t >= vocabularySize)
        throw invalidField(`{field} is token ${t}, which is outside the vocabulary (0..${vocabularySize - 1}).`, `${field}[${j}]`);
    });
  } else if (input.text.length === 0) {
    throw invalidField("{field} is an empty string.", field);
  }
  // A 10 MB text took 2.4 s to tokenize, all of it on the event loop, only to be refused.
  const least = embedder.minimumTokens?.(input) ?? 0;
  if (least > maxInputTokens) throw tooLong(`at least ${least}`, maxInputTokens, field);
}

function checkTokens(embedder: Embedder, tokens: number[], field: string): number[] {
  if (tokens.length === 0) throw invalidField("{field} has no tokens to embed.", field);
  if (tokens.length > embedder.info.maxInputTokens) throw tooLong(String(tokens.length), embedder.info.maxInputTokens, field);
  return tokens;
}

function tooLong(count: string, maxInputTokens: number, field: string): ApiError {
  return new ApiError(
    400,
    `{field} is ${count} tokens, but this model embeds at most ${maxInputTokens} tokens per input. ` +
      "Inputs are never truncated; shorten or split it.",
    { field, code: "context_length_exceeded" },
  );
}

/** The first `dimensions` components, scaled to unit length (a zero vector stays zero). */
export function normalise(vector: Float32Array, dimensions: number): Float32Array {
  const out = Float32Array.from(vector.subarray(0, dimensions));
  let sum = 0;
  for (const x of out) sum += x * x;
  const norm = Math.sqrt(sum);
  if (!Number.isFinite(norm)) throw new ApiError(500, "The model produced an embedding that is not finite.", { code: "internal_error" });
  if (norm > 0) for (let i = 0; i < out.length; i++) out[i] /= norm;
  return out;
}
