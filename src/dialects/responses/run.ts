import type { RequestContext } from "../../core/context.ts";
import { ApiError, withWireParam } from "../../core/errors.ts";
import type { GenerationService, StartedGeneration } from "../../core/generation-service.ts";
import type { GenerationRequest, Message } from "../../core/types.ts";
import { asWireError } from "../../http/error-envelope.ts";
import { responsesFieldName } from "./to-canonical.ts";
import type { ResponseBuilder } from "./to-wire.ts";

/**
 * Starts a generation; with `truncation: auto`, a prompt that does not fit loses its oldest
 * conversation turns until it does — never the instructions (system messages) and never the last
 * user turn. Refusals come before anything starts, as on every path.
 */
export async function startWithTruncation(
  service: GenerationService,
  ctx: RequestContext,
  request: GenerationRequest,
  signal: AbortSignal,
  truncate: boolean,
): Promise<StartedGeneration> {
  let req = request;
  for (;;) {
    try {
      return await service.start(ctx, req, signal);
    } catch (err) {
      const overflow = err instanceof ApiError && err.code === "context_length_exceeded" && err.field === "prompt";
      const shorter = truncate && overflow ? dropOldestTurn(req) : undefined;
      if (!shorter) throw withWireParam(err, responsesFieldName);
      req = shorter;
    }
  }
}

function dropOldestTurn(req: GenerationRequest): GenerationRequest | undefined {
  if (req.prompt.kind !== "chat") return undefined;
  const messages = req.prompt.messages;
  let lastUser = -1;
  messages.forEach((m, i) => {
    if (m.role === "user") lastUser = i;
  });
  const drop = messages.findIndex((m, i) => m.role !== "system" && i !== lastUser);
  if (drop === -1 || drop > lastUser) return undefined;
  // A tool result without its call cannot be rendered: an assistant turn goes with its results.
  const rest: Message[] = messages.filter((_, i) => i !== drop);
  const orphaned = new Set((messages[drop].toolCalls ?? []).map((c) => c.id));
  return { ...req, prompt: { kind: "chat", messages: rest.filter((m) => !(m.role === "tool" && m.toolCallId && orphaned.has(m.toolCallId))) } };
}

/** Feeds a generation's events into a builder and closes it the way the run ended. */
export async function drive(started: StartedGeneration, builder: ResponseBuilder, signal: AbortSignal): Promise<void> {
  try {
    for await (const ev of started.events) builder.push(ev);
    builder.finish();
  } catch (err) {
    if (signal.aborted && !(err instanceof ApiError)) {
      builder.cancel();
      return;
    }
    const e = asWireError(err, responsesFieldName);
    builder.fail(e.code ?? "server_error", e.message);
  }
}
