import type { RequestContext } from "../../core/context.ts";
import { ApiError, type FieldNamer, isClientClosed, quoteRequestId, withWireParam } from "../../core/errors.ts";
import type { GenerationService, StartedGeneration } from "../../core/generation-service.ts";
import { afterFirstEvent, failingWith } from "../../core/stream-head.ts";
import type { GenerationRequest, Message, Usage } from "../../core/types.ts";
import { asWireError } from "../../http/error-envelope.ts";
import { responsesFieldName } from "./to-canonical.ts";
import type { RouteResult } from "../../http/respond.ts";
import type { GenerationEvent } from "../../core/types.ts";
import type { ResponseBuilder, ResponseEvent } from "./to-wire.ts";

/**
 * Starts a generation; with `truncation: auto`, a prompt that does not fit loses its oldest
 * conversation turns until it does — never the instructions (system messages) and never the last
 * user turn. Refusals come before anything starts, as on every path.
 *
 * How many turns must go is found by bisection over token counts, not by dropping one turn and
 * rendering the whole conversation again: that was quadratic, and a few thousand turns held the
 * event loop for a minute. Each count renders the prompt once, and the loop yields between them.
 */
export async function startWithTruncation(
  service: GenerationService,
  ctx: RequestContext,
  request: GenerationRequest,
  signal: AbortSignal,
  truncate: boolean,
  fieldName: FieldNamer = responsesFieldName,
): Promise<StartedGeneration> {
  return withTruncation(service, request, truncate, fieldName, (req) => service.start(ctx, req, signal));
}

/**
 * The prompt's token count as a create with the same body would use it: with `truncation: auto`,
 * after the oldest turns that do not fit are dropped (POST /v1/responses/input_tokens).
 */
export async function measureWithTruncation(
  service: GenerationService,
  ctx: RequestContext,
  request: GenerationRequest,
  truncate: boolean,
  fieldName: FieldNamer = responsesFieldName,
): Promise<number> {
  return withTruncation(service, request, truncate, fieldName, (req) => service.measure(ctx, req));
}

/** Runs `attempt` on the request, and with `truncate` on shorter ones while its prompt overflows. */
async function withTruncation<T>(
  service: GenerationService,
  request: GenerationRequest,
  truncate: boolean,
  fieldName: FieldNamer,
  attempt: (req: GenerationRequest) => Promise<T>,
): Promise<T> {
  let req = request;
  let searched = false;
  for (;;) {
    try {
      return await attempt(req);
    } catch (err) {
      if (!(truncate && isPromptOverflow(err))) throw withWireParam(err, fieldName);
      // The search's answer normally fits; a count that disagrees with the start goes on one by one.
      const shorter = searched ? withoutOldestTurns(req, 1) : await fewestTurnsDropped(service, req);
      searched = true;
      if (!shorter) throw withWireParam(err, fieldName);
      req = shorter;
    }
  }
}

/**
 * The prompt leaves the answer no room: it overflows the context, or leaves less than the output
 * budget the request asked for (every agent framework sends one, so a long session met the budget's
 * refusal, not the overflow, and nothing was dropped).
 */
const isPromptOverflow = (err: unknown) =>
  err instanceof ApiError && err.code === "context_length_exceeded" && (err.field === "prompt" || err.field === "maxTokens");

/**
 * The request with the fewest oldest turns dropped whose prompt fits the context with room for its
 * output budget, when it has one (at least one turn dropped).
 */
async function fewestTurnsDropped(service: GenerationService, req: GenerationRequest): Promise<GenerationRequest | undefined> {
  const most = droppableTurns(req);
  if (most === 0) return undefined;
  const extras = { tools: req.tools, toolChoice: req.toolChoice, parallelToolCalls: req.parallelToolCalls, reasoning: req.reasoning };
  const fits = async (k: number): Promise<boolean> => {
    await new Promise((resolve) => setImmediate(resolve));
    const shorter = withoutOldestTurns(req, k)!;
    try {
      const { tokens, contextSize } = await service.tokenize(req.model, shorter.prompt, false, extras);
      return tokens.length + (req.maxTokens ?? 1) <= contextSize;
    } catch (err) {
      if (isPromptOverflow(err)) return false;
      throw err;
    }
  };
  let lo = 1;
  let hi = most;
  if (!(await fits(hi))) return withoutOldestTurns(req, hi);
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (await fits(mid)) hi = mid;
    else lo = mid + 1;
  }
  return withoutOldestTurns(req, lo);
}

/** The last user turn's index: it and what follows always stay. */
function lastUserTurn(messages: Message[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") return i;
  return -1;
}

/** How many turns could be dropped at most (system messages and the last user turn stay). */
function droppableTurns(req: GenerationRequest): number {
  return dropOldest(req, Number.POSITIVE_INFINITY)?.n ?? 0;
}

/**
 * The request without its k oldest turns, or undefined if it has fewer. A tool result without its
 * call cannot be rendered: an assistant turn goes with its results (which then count as dropped
 * with it, not as turns of their own).
 */
function withoutOldestTurns(req: GenerationRequest, k: number): GenerationRequest | undefined {
  const result = dropOldest(req, k);
  return result && result.n === k ? result.req : undefined;
}

/** Drops up to k oldest turns (see withoutOldestTurns); n is how many went. */
function dropOldest(req: GenerationRequest, k: number): { req: GenerationRequest; n: number } | undefined {
  if (req.prompt.kind !== "chat") return undefined;
  const messages = req.prompt.messages;
  const lastUser = lastUserTurn(messages);
  const dropped = new Set<number>();
  const orphaned = new Set<string>();
  let n = 0;
  for (let i = 0; i < lastUser && n < k; i++) {
    const m = messages[i];
    if (m.role === "system") continue;
    if (m.role === "tool" && m.toolCallId && orphaned.has(m.toolCallId)) continue;
    dropped.add(i);
    n++;
    for (const call of m.toolCalls ?? []) orphaned.add(call.id);
  }
  const rest = messages.filter((m, i) => !dropped.has(i) && !(m.role === "tool" && m.toolCallId && orphaned.has(m.toolCallId)));
  return { req: { ...req, prompt: { kind: "chat", messages: rest } }, n };
}

/**
 * Feeds a generation's events into a builder and closes it the way the run ended; `each` runs after
 * every event (a stream writes what the builder emitted there). Returns the error a failed run
 * ended with, so an answer not yet started can carry its status (a queue timeout's 503).
 */
export async function drive(
  events: AsyncIterable<GenerationEvent>,
  builder: ResponseBuilder,
  signal: AbortSignal,
  each: () => Promise<void> = async () => {},
  spent?: () => Usage,
  opts: { shutdownCancels?: boolean; requestId?: string } = {},
): Promise<ApiError | undefined> {
  try {
    for await (const ev of events) {
      builder.push(ev);
      await each();
    }
    builder.finish();
  } catch (err) {
    // Stopped from outside (the client left, a cancel, a shutdown: the signal's own reason), not
    // failed. A background run that the server's shutdown stops (the generation service ends it
    // with its `shutdown` error) was stopped too: nothing went wrong with it.
    const stopped = signal.aborted && (!(err instanceof ApiError) || isClientClosed(err) || err === signal.reason);
    if (stopped || (opts.shutdownCancels && err instanceof ApiError && err.reason === "shutdown")) {
      // What the run had used when it stopped: it was booked, so the object says it too.
      builder.cancel(spent?.());
      return undefined;
    }
    // A failure of the server's quotes the request id (as every 5xx does), the stored object's too.
    const wire = asWireError(err, responsesFieldName);
    const e = opts.requestId === undefined ? wire : quoteRequestId(wire, opts.requestId);
    // A failure after tokens were generated was booked with them: the object says so as well.
    builder.fail(e.code ?? "server_error", e.message, e.param, spent?.());
    return e;
  }
  return undefined;
}

/**
 * Answers with a Responses API object built from a generation: the drained builder as JSON, or its
 * events as the Responses stream. `done` runs once the response is final (to store it). Shared by
 * the Responses dialect and every dialect that can answer in this shape (Konan's output_parser).
 * `inBandStreamErrors`: a stream's head goes out at once, and every failure is said inside it.
 */
export function respondWithBuilder(
  stream: boolean,
  builderFor: (emit?: (e: ResponseEvent) => void) => ResponseBuilder,
  events: AsyncIterable<GenerationEvent>,
  signal: AbortSignal,
  done: (builder: ResponseBuilder) => Promise<void> = async () => {},
  spent?: () => Usage,
  opts: { inBandStreamErrors?: boolean; requestId?: string } = {},
): Promise<RouteResult> {
  const answer: BuilderAnswer = { builderFor, signal, done, spent, requestId: opts.requestId };
  if (stream && opts.inBandStreamErrors) return Promise.resolve(streamAnswer(answer, events));
  if (stream) return heldStream(answer, events);
  return jsonAnswer(answer, events);
}

/** What answering from a builder needs besides the events (see respondWithBuilder). */
interface BuilderAnswer {
  builderFor: (emit?: (e: ResponseEvent) => void) => ResponseBuilder;
  signal: AbortSignal;
  done: (builder: ResponseBuilder) => Promise<void>;
  spent?: () => Usage;
  /** Quoted in the message of a failure of the server's. */
  requestId?: string;
}

/**
 * A stream's head waits for the generation's first event: a failure before it (a queue timeout, no
 * upstream left) is answered as the JSON request's would be, with its own status, and the failed
 * response is kept as well. A stop from outside before then (the client gone, a DELETE) still
 * ends the stream as it would have ended later.
 */
async function heldStream(answer: BuilderAnswer, events: AsyncIterable<GenerationEvent>): Promise<RouteResult> {
  let held: AsyncIterable<GenerationEvent>;
  try {
    held = await afterFirstEvent(events);
  } catch (err) {
    const failing = failingWith<GenerationEvent>(err);
    if (!answer.signal.aborted) return jsonAnswer(answer, failing);
    held = failing;
  }
  return streamAnswer(answer, held);
}

async function jsonAnswer({ builderFor, signal, done, spent, requestId }: BuilderAnswer, events: AsyncIterable<GenerationEvent>): Promise<RouteResult> {
  const builder = builderFor();
  builder.start("in_progress");
  const failure = await drive(events, builder, signal, undefined, spent, { requestId });
  await done(builder);
  const snapshot = builder.snapshot();
  // Nothing was sent yet, so the failure keeps its own status: a request that waited past the
  // queue timeout (or was refused as overloaded) is a 503 with Retry-After, as on every route;
  // only a fault of the server's is a 500.
  if (builder.status === "failed") {
    if (failure && failure.status !== 500) throw failure;
    throw new ApiError(500, (snapshot.error as { message: string }).message, { code: "server_error" });
  }
  return { kind: "json" as const, body: snapshot };
}

function streamAnswer({ builderFor, signal, done, spent, requestId }: BuilderAnswer, events: AsyncIterable<GenerationEvent>): RouteResult {
  // The stream's builder, for the sequence number of an error event written after a failure.
  let current: ResponseBuilder | undefined;
  return {
    kind: "sse",
    write: async (sse) => {
      const pending: ResponseEvent[] = [];
      const builder = builderFor((e) => pending.push(e));
      current = builder;
      const flush = async () => {
        for (const e of pending.splice(0)) await sse.event(e.type, e);
      };
      builder.start("in_progress");
      await flush();
      try {
        await drive(events, builder, signal, flush, spent, { requestId });
      } finally {
        await done(builder);
      }
      await flush();
    },
    errorEvent: (err) => {
      const e = err instanceof ApiError ? err : new ApiError(500, "The server failed while generating this response.");
      return { event: "error", data: { type: "error", code: e.code, message: e.message, param: e.param, sequence_number: current?.nextSequence ?? 0 } };
    },
  };
}
