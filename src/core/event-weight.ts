import type { GenerationEvent } from "./types.ts";

// How much of a request's output may wait between its generation and its client (the Channel in
// generation-service.ts), and what one event counts towards that.
//
// The size is an estimate of the event as a dialect renders it, close enough to what it holds in
// memory: its text, a chunk's envelope (ids, model, indices: about 200 bytes in every dialect), and
// for each token with log probabilities the token's entry and each of its top alternatives (text,
// bytes and number: about 60 bytes rendered, and about as much again on the heap). With 20 top
// logprobs a token's event weighs about 1.5 KB, against about 200 bytes for a plain text delta.

/** Events of one request held for a client that reads slower than the model writes. */
export const BUFFERED_EVENTS = 1024;
/** Their estimated size: 1 MiB, about 700 tokens with 20 top logprobs each, or all 1,024 plain events. */
export const BUFFERED_BYTES = 1024 * 1024;

const ENVELOPE_BYTES = 200;
const LOGPROB_ENTRY_BYTES = 64;

/** An event's estimated rendered size in bytes. */
export function eventWeight(ev: GenerationEvent): number {
  switch (ev.type) {
    case "text":
    case "reasoning":
    case "prompt": {
      let bytes = ENVELOPE_BYTES + ev.text.length;
      if (ev.logprobs) for (const lp of ev.logprobs) bytes += LOGPROB_ENTRY_BYTES * (1 + lp.top.length) + lp.token.length;
      return bytes;
    }
    case "tool-call":
      return ENVELOPE_BYTES + ev.name.length + ev.id.length;
    case "tool-call-arguments":
      return ENVELOPE_BYTES + ev.text.length;
    default:
      return ENVELOPE_BYTES;
  }
}
