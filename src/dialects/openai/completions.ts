import { withWireParam } from "../../core/errors.ts";
import { newId, SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import { afterFirstEvent } from "../../core/stream-head.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import type { CompletionRequest } from "./completions-protocol.ts";
import { completionToCanonical } from "./completions-to-canonical.ts";
import { renderCompletion, streamCompletion } from "./completions-to-wire.ts";
import { openAIErrorEvent } from "./errors.ts";
import { pingIntervalMs } from "./foreign-fields.ts";
import { withChunkObfuscation } from "./obfuscation.ts";
import { completionFieldNames } from "./field-names.ts";
import { streamUsage } from "./stream-usage.ts";

/** POST …/completions: a batch of prompts, admitted together, rendered as text_completion. */
export async function textCompletion(body: CompletionRequest, env: RouteEnv): Promise<RouteResult> {
  const { batch, namespace } = completionToCanonical(body);
  const names = completionFieldNames(body);
  const started = await env.service.startBatch({ ...env.ctx, namespace }, batch, env.signal).catch((err) => {
    throw withWireParam(err, names);
  });
  const meta = {
    id: newId("cmpl-"),
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    systemFingerprint: SYSTEM_FINGERPRINT,
    n: batch.length * (body.n ?? 1),
  };
  const logprobs = body.logprobs ?? undefined;
  if (!body.stream) return { kind: "json", body: await renderCompletion(meta, started.events, logprobs) };
  // A stream's head waits for its first event, so a failure before it keeps its own status.
  const events = await afterFirstEvent(started.events).catch((err) => Promise.reject(withWireParam(err, names)));
  const streamed: RouteResult = {
    kind: "sse",
    write: (sse) => streamCompletion(sse, meta, events, logprobs, streamUsage(body).final),
    errorEvent: (err) => openAIErrorEvent(err, names),
    pingMs: pingIntervalMs(body),
  };
  return body.stream_options?.include_obfuscation === true ? withChunkObfuscation(streamed) : streamed;
}
