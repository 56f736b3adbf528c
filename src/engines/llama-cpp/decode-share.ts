import type { LlamaContext } from "node-llama-cpp";
import { isSplittable, type DecodeItem } from "./decode-item.ts";

// How embedding inputs and generation share the decoder.
//
// Every decode of the process runs on one thread with the engine `npm ci` builds (and competes for
// the same cores without it), in the order decodes are queued. An embedding input is read like a
// prompt, a batch (512 tokens) per decode, two inputs at once (two embedding contexts), and nothing
// set how often a generating sequence got a turn between them: on the bench model a chat stream
// beside one request of eight 870-token inputs waited up to 6.1 s for a token, and beside 64 inputs
// it did not finish its 64 tokens in 5 minutes (docs/benchmarks.md, "Embeddings beside generation").
//
// Embedding inputs are therefore read in pieces of EMBED_PIECE tokens, and while generation runs,
// one piece at a time for the whole process, and after a piece that took t ms the next one waits
// until t ms have passed: generation gets at least as much of the decoder as the embeddings do, and
// a running stream waits at most one piece for a token. With no generation, both contexts read at
// once, except where one thread does every decode (the engine `npm ci` builds) and the second
// context's piece would only queue there: then a new request's first decode would wait behind two
// pieces (its first token came 1.7 s late behind two 512-token batches), so it is one at a time.
//
// Generation activity is what the batch gates report: a step let through and its return.

/**
 * Tokens of an embedding input per decode while generation runs. The batch gate cuts prompts at the
 * same size (PIECE_MIN there): smaller batches read a token at a far higher cost on a CPU.
 */
export const EMBED_PIECE = 256;
/** Generation counts as running until this long after its last step came back. */
const GENERATION_IDLE_MS = 20;
/** A waiting piece looks again at least this often (generation may have stopped meanwhile). */
const POLL_MS = 5;

interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

export class DecodeShare {
  /**
   * Every decode of the process runs on one thread (the engine `npm ci` builds): embedding pieces
   * go one at a time even with no generation, as more would only queue there. Set at engine load.
   */
  oneDecoder = false;
  private generationInFlight = 0;
  private lastGeneration = -Infinity;
  private embeddingInFlight = 0;
  /** Before this moment (ms), a new embedding piece waits while generation runs: generation's turn. */
  private generationTurnUntil = -Infinity;

  constructor(private readonly clock: Clock = realClock) {}

  /** A generation decode (a step, or a piece of a prompt) was let through to the decoder. */
  generationStarted(): void {
    this.generationInFlight++;
    this.lastGeneration = this.clock.now();
  }

  /** That decode came back (or failed). */
  generationEnded(): void {
    this.generationInFlight = Math.max(0, this.generationInFlight - 1);
    this.lastGeneration = this.clock.now();
  }

  /** Whether a generation decode is queued or running, or one came back a moment ago. */
  generating(): boolean {
    return this.generationInFlight > 0 || this.clock.now() - this.lastGeneration <= GENERATION_IDLE_MS;
  }

  /**
   * Waits until an embedding piece may go, and says how many of the `left` tokens it may take. Call
   * `done` once the piece has been decoded.
   */
  async embeddingTurn(left: number): Promise<{ tokens: number; done: () => void }> {
    for (;;) {
      if (!this.generating()) {
        if (!this.oneDecoder || this.embeddingInFlight === 0) break;
        await this.pause(POLL_MS);
        continue;
      }
      const now = this.clock.now();
      if (this.embeddingInFlight === 0 && now >= this.generationTurnUntil) break;
      const wait = this.embeddingInFlight > 0 ? POLL_MS : Math.min(POLL_MS, this.generationTurnUntil - now);
      await this.pause(Math.max(1, wait));
    }
    const tokens = Math.min(left, EMBED_PIECE);
    this.embeddingInFlight++;
    const started = this.clock.now();
    let settled = false;
    return {
      tokens,
      done: () => {
        if (settled) return;
        settled = true;
        this.embeddingInFlight--;
        const ended = this.clock.now();
        // Generation's turn: as long as this piece held the decoder.
        this.generationTurnUntil = Math.max(this.generationTurnUntil, ended + (ended - started));
        for (const wake of this.waiting.splice(0)) wake();
      },
    };
  }

  /** Pieces waiting for their turn, woken when a piece is done (else they look again after `ms`). */
  private readonly waiting: Array<() => void> = [];

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      void this.clock.sleep(ms).then(() => resolve());
    });
  }
}

/** One per process: the decoder it shares is the process's. */
export const decodeShare = new DecodeShare();

type DecodeTokens = (...args: unknown[]) => Promise<unknown>;

/**
 * Makes an embedding context's decodes take their turns (see above). `cuttable`: the input may be
 * read over several decodes (a causal model read by its last token); a pooled or non-causal model
 * needs its whole input in one batch, and its decode only takes its turn. Wraps the same internal
 * of node-llama-cpp 3.21.1 as the batch gate (`_decodeTokens`); without it nothing changes.
 */
export function shareEmbeddingDecodes(context: LlamaContext, cuttable: boolean, share: DecodeShare = decodeShare): void {
  const internals = context as unknown as { _decodeTokens?: DecodeTokens };
  const original = internals._decodeTokens;
  if (typeof original !== "function") return;
  const batch = (context as { batchSize?: unknown }).batchSize;
  const batchSize = typeof batch === "number" && batch > 0 ? batch : 512;
  Object.defineProperty(context, "_decodeTokens", {
    configurable: true,
    writable: true,
    value: async (...args: unknown[]) => {
      const [item, ...rest] = args;
      if (!cuttable || !isSplittable(item)) {
        const turn = await share.embeddingTurn(Number.MAX_SAFE_INTEGER);
        try {
          return await original.apply(context, args);
        } finally {
          turn.done();
        }
      }
      return readInPieces(context, original, item, rest, batchSize, share);
    },
  });
}

async function readInPieces(context: LlamaContext, original: DecodeTokens, item: DecodeItem, rest: unknown[], batchSize: number, share: DecodeShare): Promise<unknown[]> {
  const results: unknown[] = [];
  let offset = 0;
  while (offset < item.tokens.length) {
    const turn = await share.embeddingTurn(Math.min(batchSize, item.tokens.length - offset));
    const n = turn.tokens;
    const piece =
      offset === 0 && n === item.tokens.length
        ? item
        : {
            ...item,
            tokens: item.tokens.slice(offset, offset + n),
            logits: item.logits.slice(offset, offset + n),
            firstTokenSequenceIndex: item.firstTokenSequenceIndex + offset,
          };
    try {
      const value = await original.apply(context, [piece, ...rest]);
      // The logits asked for, by token index, put together as node-llama-cpp does for its own batches.
      if (Array.isArray(value)) for (const v of value) results.push(v);
    } finally {
      turn.done();
    }
    offset += n;
  }
  return results;
}
