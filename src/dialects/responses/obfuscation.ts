import type { RouteResult } from "../../http/respond.ts";
import type { SseWriter } from "../../http/sse.ts";
import { PADDING_STEP, randomPadding, withPaddedStream } from "../openai/obfuscation.ts";

/**
 * `stream_options.include_obfuscation: true`: every delta event carries an `obfuscation` field of
 * random characters that pads the delta to the next multiple of PADDING_STEP characters, so the size
 * of an encrypted frame no longer tells an observer how long each token was (OpenAI's mitigation of
 * that side channel; chat pads whole chunks, see ../openai/obfuscation.ts). Plinth leaves it off
 * unless asked: a self-hosted server is mostly read over loopback or a trusted network, where the
 * padding only costs bandwidth.
 */
export function withObfuscation(result: RouteResult): RouteResult {
  return withPaddedStream(result, (sse) => {
    const padded = Object.create(sse) as SseWriter;
    padded.event = (name: string, payload: unknown) => sse.event(name, name.endsWith(".delta") ? withPadding(payload) : payload);
    return padded;
  });
}

function withPadding(payload: unknown): unknown {
  if (payload === null || typeof payload !== "object") return payload;
  const delta = (payload as { delta?: unknown }).delta;
  const length = typeof delta === "string" ? delta.length : JSON.stringify(delta ?? "").length;
  return { ...payload, obfuscation: randomPadding(PADDING_STEP - (length % PADDING_STEP)) };
}
