import { randomBytes } from "node:crypto";
import type { RouteResult } from "../../http/respond.ts";
import type { SseWriter } from "../../http/sse.ts";

/** Padded sizes come in steps of this many bytes (chunks) or characters (Responses deltas). */
export const PADDING_STEP = 32;

/**
 * `stream_options.include_obfuscation: true` on Chat Completions and Completions: every chunk
 * carries a top-level `obfuscation` string of random characters that brings the chunk's JSON to the
 * next multiple of PADDING_STEP bytes, so the size of an encrypted frame no longer tells an observer
 * how long each token was (OpenAI's mitigation of that side channel; the Responses API pads its
 * delta events, see ../responses/obfuscation.ts). Off unless asked, unlike OpenAI: a self-hosted
 * server is mostly read over loopback or a trusted network, where the padding only costs bandwidth.
 */
export function withChunkObfuscation(result: RouteResult): RouteResult {
  return withPaddedStream(result, (sse) => {
    const padded = Object.create(sse) as SseWriter;
    // `[DONE]` is a string and goes out as it is.
    padded.data = (payload: unknown) => sse.data(payload !== null && typeof payload === "object" && !Array.isArray(payload) ? withPadding(payload) : payload);
    return padded;
  });
}

/** A streamed answer written through `pad`'s writer; a JSON answer as it is. */
export function withPaddedStream(result: RouteResult, pad: (sse: SseWriter) => SseWriter): RouteResult {
  if (result.kind !== "sse") return result;
  return { ...result, write: (sse) => result.write(pad(sse)) };
}

/** `length` random URL-safe characters. */
export function randomPadding(length: number): string {
  return randomBytes(length).toString("base64url").slice(0, length);
}

function withPadding(chunk: object): object {
  const size = Buffer.byteLength(JSON.stringify({ ...chunk, obfuscation: "" }));
  return { ...chunk, obfuscation: randomPadding((PADDING_STEP - (size % PADDING_STEP)) % PADDING_STEP) };
}
