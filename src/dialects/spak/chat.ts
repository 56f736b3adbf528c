import { createHash } from "node:crypto";
import { ApiError, badRequest, withWireParam } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import { afterFirstEvent, failingWith } from "../../core/stream-head.ts";
import type { GenerationEvent, ModelDescription } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { spakErrorEvent } from "./errors.ts";
import { spakFieldNames } from "./field-names.ts";
import { SPAK_MODEL, type SpakChatRequest } from "./protocol.ts";
import { spakToCanonical } from "./to-canonical.ts";
import { isResourceShortage, renderSpakCompletion, spakUsageChunk, streamSpakCompletion } from "./to-wire.ts";

/**
 * The backend configuration a response was made with: the model file and the engine build (see
 * ModelDescription.fingerprint), so it stays the same across restarts and changes with either.
 */
export function systemFingerprint(d: ModelDescription | undefined): string {
  const identity = d?.fingerprint ?? `plinth:${d?.id ?? ""}`;
  return `fp_${createHash("sha256").update(identity).digest("hex").slice(0, 12)}`;
}

export interface SpakRequestInfo {
  userAgent?: string;
}

/** A client's value in a message: JSON-quoted (no line breaks or control characters) and cut short. */
function quoted(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}

/** POST /chat/completions: checks the model, builds the canonical request, runs it, renders JSON or SSE. */
export async function spakChatCompletion(body: SpakChatRequest, env: RouteEnv, info: SpakRequestInfo = {}): Promise<RouteResult> {
  // The API's model is an enum of one value (003-05): other models this server serves answer on
  // their own dialects' routes, not under this one's name.
  if (body.model !== SPAK_MODEL) throw badRequest(`'model' must be '${SPAK_MODEL}', the only model of this API; got ${quoted(body.model)}.`, "model", "invalid_value");
  const served = env.service.registry.list().find((m) => m.id === body.model);
  if (!served)
    throw new ApiError(404, `The model '${SPAK_MODEL}' is not served here; the operator serves a model under that name.`, { param: "model", code: "model_not_found" });
  const description = served.engine?.describe();
  const { request, namespace, thinking } = spakToCanonical(body, { userAgent: info.userAgent, modelThinks: description?.reasoning });
  const ctx = { ...env.ctx, namespace };
  const started = await env.service.start(ctx, request, env.signal).catch((err) => {
    throw withWireParam(err, spakFieldNames);
  });
  const meta = {
    id: newId("chatcmpl-"),
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    systemFingerprint: systemFingerprint(description),
    // A remote model whose thinking is not known here counts as thinking, as the upstream decides.
    thinking: thinking && description !== undefined && description.reasoning !== false,
    withLogprobs: request.logprobs !== undefined,
    spent: started.spent,
  };
  if (!body.stream) return { kind: "json", body: await renderSpakCompletion(meta, started.events) };
  const includeUsage = body.stream_options?.include_usage === true;
  // A stream's head waits for its first event, so a failure before it keeps its own status; a
  // shortage of capacity is no failure here (003-56), and ends the stream with its finish reason.
  const events = await afterFirstEvent(started.events).catch((err) => {
    if (isResourceShortage(err)) return failingWith<GenerationEvent>(err);
    throw withWireParam(err, spakFieldNames);
  });
  return {
    kind: "sse",
    write: (sse) => streamSpakCompletion(sse, meta, events, includeUsage),
    // Every stream ends with data: [DONE] (003-25), after the usage chunk when asked for (003-27):
    // one that failed midway too, as its clients read to that line.
    errorEvent: (err) => ({ ...spakErrorEvent(err), after: [...(includeUsage ? [spakUsageChunk(meta)] : []), "[DONE]"] }),
  };
}
