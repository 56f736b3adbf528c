import { randomBytes } from "node:crypto";
import type { RouteResult } from "../../http/respond.ts";
import type { SseWriter } from "../../http/sse.ts";

/** Padded delta sizes come in steps of this many characters. */
const STEP = 32;

/**
 * `stream_options.include_obfuscation: true`: every delta event carries an `obfuscation` field of
 * random characters that pads the delta to the next multiple of STEP characters, so the size of an
 * encrypted frame no longer tells an observer how long each token was (OpenAI's mitigation of that
 * side channel). Plinth leaves it off unless asked: a self-hosted server is mostly read over
 * loopback or a trusted network, where the padding only costs bandwidth.
 */
export function withObfuscation(result: RouteResult): RouteResult {
  if (result.kind !== "sse") return result;
  return { ...result, write: (sse) => result.write(obfuscating(sse)) };
}

function obfuscating(sse: SseWriter): SseWriter {
  const padded = Object.create(sse) as SseWriter;
  padded.event = (name: string, payload: unknown) => sse.event(name, name.endsWith(".delta") ? withPadding(payload) : payload);
  return padded;
}

function withPadding(payload: unknown): unknown {
  if (payload === null || typeof payload !== "object") return payload;
  const delta = (payload as { delta?: unknown }).delta;
  const length = typeof delta === "string" ? delta.length : JSON.stringify(delta ?? "").length;
  const padding = STEP - (length % STEP);
  return { ...payload, obfuscation: randomBytes(padding).toString("base64url").slice(0, padding) };
}
