import { ApiError, badRequest, unsupportedField } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import type { SseWriter } from "../../http/sse.ts";
import { MAX_MESSAGES } from "../openai/chat-protocol.ts";
import { isolationKey } from "../openai/sampling-fields.ts";
import { refuseInlineReasoning } from "../openai/foreign-fields.ts";
import { storeNamespace } from "../../core/context.ts";
import { type BackgroundRuns, type Run, TERMINAL } from "./background.ts";
import type { ConversationClaims } from "./claims.ts";
import { echoSettings } from "./echo.ts";
import type { CreateResponseRequest, InputItem, InputTokensRequest, IncludeQuery, ListQuery } from "./protocol.ts";
import { withObfuscation } from "./obfuscation.ts";
import { drive, measureWithTruncation, respondWithBuilder, startWithTruncation } from "./run.ts";
import type { JsonObject, ResponseRecord, Store, StoredEvent } from "../../store/store.ts";
import type { Sealer } from "./sealer.ts";
import { flatTools, refuseUnsupported, responseToCanonical, toolNamespaces } from "./to-canonical.ts";
import { outputFromEvents, ResponseBuilder, type ResponseEvent } from "./to-wire.ts";
import { eventWithInclude, type ItemInclude, itemToWire, readInclude, responseWithInclude } from "./items.ts";
import { EventWriter, isStoreUnavailable, STORE_RETRY, type StoreRetryPolicy, StoreTrouble, writeWithRetry } from "./store-writes.ts";

export interface ResponsesDeps {
  store: Store;
  sealer: Sealer;
  runs: BackgroundRuns;
  claims: ConversationClaims;
  /** How a run's writes that the store refused are tried again (default STORE_RETRY). */
  storeRetry?: StoreRetryPolicy;
}

type Item = Record<string, unknown>;

const notFound = (what: string, id: string, param: string | null = null) =>
  new ApiError(404, `No ${what} with id '${id}' exists here.`, { param, code: "not_found" });

/**
 * A stored response as it stands. A run of this process whose generation has ended, but whose end
 * the store has not taken yet (it cannot be written now: a full disk), is read as it ended, not as
 * the `in_progress` stored before it: polling, a cancel and a turn continuing from it then see it
 * over, as its own client did.
 */
async function currentResponse(deps: ResponsesDeps, ns: string, id: string): Promise<ResponseRecord | undefined> {
  const stored = await deps.store.responses.get(ns, id);
  const final = stored && deps.runs.get(id)?.final;
  return final ? { ...stored, status: final.status as string, body: final } : stored;
}

/** The namespace a Responses request's prompt cache is isolated in: its end-user fields and vLLM's cache_salt. */
export const responsesNamespace = (body: { user?: string | null; safety_identifier?: string | null; cache_salt?: string | null }) =>
  isolationKey(body.safety_identifier ?? body.user, body.cache_salt) ?? "";

/** The id prefix of each item type, as OpenAI's ids have them. */
export const ITEM_ID_PREFIX: Record<string, string> = { message: "msg_", function_call: "fc_", function_call_output: "fco_", custom_tool_call: "ctc_", custom_tool_call_output: "ctco_", reasoning: "rs_" };

/** An id for an input item that came without one, in the prefix style of its type. */
function withId(item: Item): Item {
  if (typeof item.id === "string" && item.id) return item;
  const type = (item.type as string | undefined) ?? "message";
  return { ...item, type, id: newId(ITEM_ID_PREFIX[type] ?? "msg_") };
}

interface ResolvedInput {
  /** Everything the model sees, oldest first. */
  all: Item[];
  /** This request's own input items, with ids. */
  added: Item[];
  /** Each added item's id with the input position it came from. */
  positions: Array<{ id: string; at: number }>;
  conversationId?: string;
}

/**
 * Expands a request's input: the stored input and output of `previous_response_id`, or the items of
 * `conversation`, then the new input, with item references looked up and sealed reasoning checked.
 */
async function resolveInput(body: CreateResponseRequest, ns: string, deps: ResponsesDeps): Promise<ResolvedInput> {
  let earlier: Item[] = [];
  let conversationId: string | undefined;
  if (body.previous_response_id) {
    const prev = await currentResponse(deps, ns, body.previous_response_id);
    // OpenAI answers a 400 with its own code here (not the 404 of GET /v1/responses/{id}), and clients
    // that start a conversation afresh when the response has expired look for that code.
    if (!prev)
      throw new ApiError(400, `Previous response with id '${body.previous_response_id}' not found.`, {
        param: "previous_response_id",
        code: "previous_response_not_found",
      });
    // Its output is not there yet: continuing now would leave it out of the prompt without a word.
    if (prev.status === "queued" || prev.status === "in_progress")
      throw badRequest(
        `The response '${body.previous_response_id}' is still ${prev.status === "queued" ? "queued" : "in progress"}; continue from it once it has finished, or cancel it first.`,
        "previous_response_id",
      );
    earlier = [...((await deps.store.responses.inputItems(ns, prev.id)) ?? []), ...((prev.body.output as Item[] | undefined) ?? [])];
  } else if (body.conversation) {
    conversationId = typeof body.conversation === "string" ? body.conversation : body.conversation.id;
    if (!(await deps.store.conversations.get(ns, conversationId))) throw notFound("conversation", conversationId, "conversation");
    earlier = await allConversationItems(deps.store, ns, conversationId);
  }
  const raw: Item[] = body.input === undefined ? [] : typeof body.input === "string" ? [{ type: "message", role: "user", content: body.input }] : (body.input as Item[]);
  if (earlier.length > 0) refuseOversizedHistory(earlier, raw, conversationId !== undefined ? "conversation" : "previous_response_id");
  const added: Item[] = [];
  const positions: Array<{ id: string; at: number }> = [];
  const earlierIds = new Set(earlier.map((e) => e.id).filter((id) => typeof id === "string"));
  // Each item is in the prompt once, and a conversation holds each id once: an id already before
  // this turn, or twice in it, is refused now (for a conversation, storing the finished turn would
  // otherwise fail after the response was generated).
  const addedIds = new Set<string>();
  const addOnce = (item: Item, i: number) => {
    if (typeof item.id === "string" && item.id) {
      const where = conversationId !== undefined ? `the conversation '${conversationId}'` : `the response '${body.previous_response_id}'`;
      const refuse = (message: string) => new ApiError(400, message, { param: `input[${i}].id`, code: "conflict" });
      if (addedIds.has(item.id)) throw refuse(`The id '${item.id}' is given to two items of input; each item needs its own.`);
      if (earlierIds.has(item.id)) throw refuse(`An item with id '${item.id}' is already in ${where}; refer to it with an item_reference, or leave the id out.`);
      addedIds.add(item.id);
      positions.push({ id: item.id, at: i });
    }
    added.push(item);
  };
  for (const [i, item] of raw.entries()) {
    if (item.type === "item_reference") {
      const id = item.id as string;
      // An item already before this turn (of the response continued, or of the conversation) is in
      // the prompt once, where it stands; it is not added again.
      if (earlierIds.has(id)) continue;
      // Else an item of any stored response of this namespace (clients such as the AI SDK send
      // earlier output by reference, without previous_response_id).
      const found = await deps.store.responses.findItem(ns, id);
      if (!found) throw notFound("item", id, `input[${i}].id`);
      addOnce(found, i);
      continue;
    }
    if (item.type === "reasoning" && typeof item.encrypted_content === "string") {
      try {
        deps.sealer.open(item.encrypted_content);
      } catch {
        throw badRequest(`input[${i}].encrypted_content was not produced by this server, or was altered.`, `input[${i}].encrypted_content`);
      }
    }
    addOnce(withId(item), i);
  }
  return { all: [...earlier, ...added], added, positions, conversationId };
}

/** POST /v1/responses. */
export async function createResponse(body: CreateResponseRequest, env: RouteEnv, deps: ResponsesDeps): Promise<RouteResult> {
  const result = await answerResponse(body, env, deps);
  return body.stream_options?.include_obfuscation === true ? withObfuscation(result) : result;
}

async function answerResponse(body: CreateResponseRequest, env: RouteEnv, deps: ResponsesDeps): Promise<RouteResult> {
  refuseUnsupported(body);
  // A summary of reasoning the model does not do would silently be none (effort is refused the same
  // way, by the engine). Remote models do not say whether they reason, so only a known "no" refuses.
  // The refusal names the field sent: `generate_summary` is the older name of `summary`.
  const summaryField = body.reasoning?.summary != null ? "reasoning.summary" : body.reasoning?.generate_summary != null ? "reasoning.generate_summary" : undefined;
  if (summaryField && env.service.registry.get(body.model)?.engine?.describe().reasoning === false)
    throw unsupportedField(summaryField, `is available only on models that reason; '${body.model}' does not`);
  // Stored objects belong to the API key; the end user isolates the prompt cache only.
  const ns = storeNamespace(env.ctx.apiKey);
  const store = body.store !== false;
  // A stored turn on a conversation has it to itself from before it reads the history until its
  // items are appended (see ConversationClaims.lock).
  const conversationId = body.conversation == null ? undefined : typeof body.conversation === "string" ? body.conversation : body.conversation.id;
  const unlock = store && conversationId !== undefined ? deps.claims.lock(ns, conversationId) : () => {};
  try {
    return await answerTurn(body, env, deps, ns, store, unlock);
  } catch (err) {
    unlock();
    throw err;
  }
}

/** The rest of answerResponse; `unlock` gives back the conversation, once the turn's items are in. */
async function answerTurn(body: CreateResponseRequest, env: RouteEnv, deps: ResponsesDeps, ns: string, store: boolean, unlock: () => void): Promise<RouteResult> {
  const userNs = responsesNamespace(body);
  const input = await resolveInput(body, ns, deps);
  const { request, fieldName } = responseToCanonical(body, input.all as InputItem[], input.all.length - input.added.length);
  refuseInlineReasoning(body, env.service.registry.get(body.model), request.reasoning);
  const ctx = { ...env.ctx, namespace: userNs || undefined };
  const include = new Set(body.include ?? []);
  // One response, however many builders are made of it (a stored one's opening is stored first).
  const id = newId("resp_");
  const createdAt = Math.floor(Date.now() / 1000);
  const builderFor = (emit?: (e: ResponseEvent) => void) =>
    new ResponseBuilder(
      { id, createdAt, model: body.model, echo: echoSettings(body, input.conversationId) },
      {
        logprobs: include.has("message.output_text.logprobs"),
        encrypt: include.has("reasoning.encrypted_content") ? (text) => deps.sealer.seal(text) : undefined,
        summary: Boolean(body.reasoning?.summary ?? body.reasoning?.generate_summary),
        customTools: new Set(flatTools(body.tools).filter(({ tool }) => tool.type === "custom").map(({ tool }) => (tool as { name: string }).name)),
        namespaces: toolNamespaces(body.tools),
        maxToolCalls: body.max_tool_calls ?? undefined,
      },
      emit,
    );
  /** Stores the finished response and, for a conversation, appends this turn's items to it. */
  const persist = async (builder: ResponseBuilder, created: boolean) => {
    if (!store) return;
    const snapshot = builder.snapshot();
    if (created) await deps.store.responses.update(ns, snapshot.id as string, { status: builder.status, body: snapshot });
    else
      await deps.store.responses.create(ns, {
        id: snapshot.id as string,
        status: builder.status,
        model: body.model,
        body: snapshot,
        inputItems: input.all,
        background: body.background === true,
        previousResponseId: body.previous_response_id ?? undefined,
        conversationId: input.conversationId,
      });
    if (input.conversationId && (builder.status === "completed" || builder.status === "incomplete"))
      await deps.store.conversations.addItems(ns, input.conversationId, [...input.added, ...(snapshot.output as Item[])]);
  };

  if (store) {
    // A turn appends its items to the conversation when it ends: its ids are held from now until
    // then, so a concurrent turn with one of them is refused before it generates too.
    const releaseIds = input.conversationId ? deps.claims.claim(ns, input.conversationId, input.positions) : () => {};
    const release = () => {
      releaseIds();
      unlock();
    };
    const setup = { ns, ctx, request, fieldName, builderFor, persist, input, release };
    try {
      return await (body.background ? startBackground(body, env, deps, setup) : startStored(body, env, deps, setup));
    } catch (err) {
      release();
      throw err;
    }
  }

  const started = await startWithTruncation(env.service, ctx, request, env.signal, body.truncation === "auto", fieldName);
  return respondWithBuilder(body.stream === true, builderFor, started.events, env.signal, undefined, started.spent, { requestId: ctx.requestId });
}

interface BackgroundSetup {
  ns: string;
  ctx: RouteEnv["ctx"];
  request: ReturnType<typeof responseToCanonical>["request"];
  fieldName: ReturnType<typeof responseToCanonical>["fieldName"];
  builderFor: (emit?: (e: ResponseEvent) => void) => ResponseBuilder;
  persist: (builder: ResponseBuilder, created: boolean) => Promise<void>;
  input: ResolvedInput;
  /** Gives back the conversation ids this turn holds (see ConversationClaims); once its run has ended. */
  release: () => void;
}

/**
 * A stored response that its client waits for. It is stored, `in_progress`, before its first event,
 * so it can be read while it runs and continuing from it is the 400 of an unfinished response; and
 * it is a run of this process, as a background one is, so a DELETE stops it and it is not stored
 * again when the run ends. Its client then gets what it had: the object as it stood (`cancelled`),
 * or a stream ended by an `error` event that says why (not a stream that just stops).
 */
async function startStored(body: CreateResponseRequest, env: RouteEnv, deps: ResponsesDeps, s: BackgroundSetup): Promise<RouteResult> {
  const opening = s.builderFor();
  const id = opening.snapshot().id as string;
  const run = deps.runs.add(id);
  void run.done.then(s.release);
  // Stopped by its client going away (a cancel, with the client's own reason, as before) or by the run's abort.
  const signal = AbortSignal.any([env.signal, run.abort.signal]);
  let started: Awaited<ReturnType<typeof startWithTruncation>>;
  try {
    started = await startWithTruncation(env.service, s.ctx, s.request, signal, body.truncation === "auto", s.fieldName);
    opening.start("in_progress");
    await s.persist(opening, false);
  } catch (err) {
    run.abort.abort(err);
    run.end();
    throw err;
  }
  // How the generation ended, once it has: a stream that already said so (completed, incomplete,
  // failed) is over, whatever a DELETE landing while its end is stored does to the run.
  let ended: ResponseBuilder["status"] | undefined;
  const finish = async (builder: ResponseBuilder) => {
    ended = builder.status;
    run.settle(builder.snapshot());
    try {
      await s.persist(builder, true);
    } catch (err) {
      if (!isStoreUnavailable(err)) {
        run.end();
        throw err;
      }
      // The answer is whole, so its client gets it; the store gets it once it takes writes again,
      // and until then this process reads the response as it ended (see currentResponse).
      const trouble = new StoreTrouble(id);
      trouble.failed(err);
      void storeEnd(run, id, () => s.persist(builder, true), deps, trouble);
      return;
    }
    run.end();
  };
  const result = await respondWithBuilder(body.stream === true, s.builderFor, started.events, signal, finish, started.spent, { requestId: env.ctx.requestId });
  if (result.kind !== "sse") return result;
  return {
    ...result,
    write: async (sse) => {
      await result.write(sse);
      // Deleted (or the server stopping) while its client still reads: the stream says so, unless
      // it has already ended with its own terminal event (an `error` after `response.completed`
      // would contradict it).
      const said = ended === "completed" || ended === "incomplete" || ended === "failed";
      if (run.abort.signal.aborted && !env.signal.aborted && !said) throw run.abort.signal.reason;
    },
  };
}

/**
 * A background response: admitted now (refusals still come first), answered at once as `queued`,
 * and run without the client. Its events are stored as they happen, so a stream can be resumed
 * from any sequence number; `cancel` aborts it.
 */
async function startBackground(body: CreateResponseRequest, env: RouteEnv, deps: ResponsesDeps, s: BackgroundSetup): Promise<RouteResult> {
  let run: Run | undefined;
  let writer: EventWriter | undefined;
  const builder = s.builderFor((e) => {
    writer?.push({ sequenceNumber: e.sequence_number, event: e as unknown as JsonObject });
    run?.publish(e);
  });
  const id = builder.snapshot().id as string;
  const trouble = new StoreTrouble(id);
  // Events are written in batches (one transaction each), not one write per token.
  writer = new EventWriter((batch) => deps.store.responseEvents.appendMany(s.ns, id, batch), deps.storeRetry ?? STORE_RETRY, trouble);
  const events = writer;
  run = deps.runs.add(id);
  void run.done.then(s.release);
  const started = await startWithTruncation(env.service, s.ctx, s.request, run.abort.signal, body.truncation === "auto", s.fieldName).catch((err) => {
    run!.end();
    throw err;
  });
  builder.start("queued");
  try {
    await s.persist(builder, false);
  } catch (err) {
    // Not stored, so not a background run either: its generation stops and the run ends (which
    // gives the conversation back), as when a stored response cannot be stored at its start.
    run.abort.abort(err);
    run.end();
    throw err;
  }
  await events.flush();
  const queued = builder.snapshot();
  // A flush never rejects: a batch the store refused waits in memory for the next one.
  const timer = setInterval(() => void events.flush(), 100);
  timer.unref();
  // Queued until the run has a sequence of the model (it may wait behind others for one), then in
  // progress: when the generation says it started, or at its first event, whichever comes first.
  // The final write waits for this one, so the stored status never goes back to in_progress.
  let runningWritten: Promise<unknown> = Promise.resolve();
  const markRunning = () => {
    if (builder.status !== "queued") return;
    builder.running();
    runningWritten = deps.store.responses.update(s.ns, id, { status: builder.status, body: builder.snapshot() }).catch(() => {});
  };
  void started.running?.then(markRunning);
  const generation = (async function* () {
    for await (const ev of started.events) {
      markRunning();
      yield ev;
    }
  })();
  const background = run;
  void (async () => {
    try {
      if (!started.running) markRunning();
      await drive(generation, builder, background.abort.signal, undefined, started.spent, { shutdownCancels: true, requestId: env.ctx.requestId });
    } finally {
      clearInterval(timer);
      background.settle(builder.snapshot());
      // Its events first: a finished response's resumed stream is read from the store, which must
      // hold all of them by the time it says the response has ended.
      await storeEnd(
        background,
        id,
        async () => {
          await events.writeAll();
          await runningWritten;
          await s.persist(builder, true);
        },
        deps,
        trouble,
      );
    }
  })();

  if (!body.stream) return { kind: "json", body: queued };
  return { kind: "sse", write: (sse) => replay(sse, deps, s.ns, id, -1), errorEvent: () => ({ data: null }) };
}

/**
 * Writes what a finished run has left to store (see writeWithRetry: a store that cannot be written
 * now is tried again for a bounded time), then ends the run, which gives back its conversation and
 * leaves the response to the store. Never rejects.
 */
async function storeEnd(run: Run, id: string, write: () => Promise<void>, deps: ResponsesDeps, trouble: StoreTrouble): Promise<void> {
  const failure = await writeWithRetry(write, deps.storeRetry ?? STORE_RETRY, run.stopWrites.signal, trouble);
  if (failure !== undefined) {
    if (isStoreUnavailable(failure)) trouble.gaveUp(failure);
    else process.emitWarning(`storing response ${id} failed: ${(failure as Error)?.message ?? String(failure)}`);
  }
  run.end();
}

/**
 * Streams a background response's events after `after`: a run of this process from its own record
 * and then live until it ends; a finished one from the store (written whole before the run ends).
 */
async function replay(sse: SseWriter, deps: ResponsesDeps, ns: string, id: string, after: number, include?: ItemInclude): Promise<void> {
  const send = (ev: { type: string }) => sse.event(ev.type, include ? eventWithInclude(ev, include) : ev);
  const run = deps.runs.get(id);
  if (!run) {
    for (const { event } of (await deps.store.responseEvents.list(ns, id, after)) ?? []) {
      await send(event as { type: string });
      if (sse.closed) return;
    }
    const stored = await deps.store.responses.get(ns, id);
    const ending = stored ? storedStreamEnding(stored, await deps.store.responseEvents.last(ns, id), after) : [];
    for (const event of ending) {
      await send(event);
      if (sse.closed) return;
    }
    return;
  }
  const live: Array<ResponseEvent | null> = [];
  let wake: (() => void) | undefined;
  const { earlier, unsubscribe } = run.tail(after, (ev) => {
    live.push(ev);
    wake?.();
  });
  try {
    for (const ev of earlier) {
      await send(ev);
      if (sse.closed) return;
    }
    for (;;) {
      while (live.length === 0) await new Promise<void>((r) => (wake = r));
      const ev = live.shift()!;
      if (ev === null) {
        const closing = run.closing();
        if (closing) await send(closing);
        return;
      }
      // Asked to start past where the run was when the stream joined: later events up to there too.
      if (ev.sequence_number <= after) continue;
      await send(ev);
      if (sse.closed) return;
    }
  } finally {
    unsubscribe();
  }
}

/**
 * The events that end a finished response's stream when the store does not hold them, numbered
 * after both the last stored event and `after`. A run its killed server left is marked failed at
 * the next start (failAbandonedRuns), and its stream's end cannot be numbered then: the killed
 * server may have sent its clients events past the last one it stored (events are stored every
 * 100 ms), so a client resuming from the last event it received would find nothing after it. The
 * end is therefore made when a stream is read, after whatever the client names: a resumed stream
 * of a finished response always ends with the events that say how it ended.
 */
function storedStreamEnding(stored: ResponseRecord, last: StoredEvent | undefined, after: number): ResponseEvent[] {
  if (last && TERMINAL.has(last.event.type as string)) return [];
  let next = Math.max(after, last?.sequenceNumber ?? -1) + 1;
  const body = stored.body;
  switch (stored.status) {
    case "completed":
      return [{ type: "response.completed", sequence_number: next, response: body }];
    case "incomplete":
      return [{ type: "response.incomplete", sequence_number: next, response: body }];
    case "failed": {
      const error = (body.error ?? {}) as { code?: string; message?: string };
      return [
        { type: "error", sequence_number: next++, code: error.code ?? "server_error", message: error.message ?? "The response failed.", param: null },
        { type: "response.failed", sequence_number: next, response: body },
      ];
    }
    default:
      // Cancelled: OpenAI's stream of a cancelled response just ends. Still queued or in progress
      // with no run here: its end was never stored (see failAbandonedRuns).
      return [];
  }
}

/** GET /v1/responses/{id}, with `?stream=true&starting_after=N` to resume a background stream. */
export async function retrieveResponse(
  id: string,
  query: IncludeQuery & { stream?: string; starting_after?: string; include_obfuscation?: string },
  ns: string,
  deps: ResponsesDeps,
): Promise<RouteResult> {
  const include = readInclude(query, deps.sealer);
  const stored = await currentResponse(deps, ns, id);
  if (!stored) throw notFound("response", id);
  if (query.stream !== "true") {
    if (query.starting_after !== undefined) throw badRequest("starting_after applies to a stream: it needs stream=true.", "starting_after");
    return { kind: "json", body: responseWithInclude(stored.body, include) };
  }
  // A resumed stream replays the events as they were written, with what `include` adds to a retrieve
  // added to the items and response objects they carry.
  if (!stored.background) throw badRequest("Only background responses can be streamed again; this one was not created with background: true.", "stream");
  // Decimal digits only: Number() reads "" as 0 and "0x10" as 16, which would start the stream
  // somewhere the client never asked for.
  if (query.starting_after !== undefined && !/^(-1|\d{1,15})$/.test(query.starting_after))
    throw badRequest("starting_after must be a sequence number.", "starting_after");
  const after = query.starting_after === undefined ? -1 : Number(query.starting_after);
  const result: RouteResult = { kind: "sse", write: (sse) => replay(sse, deps, ns, id, after, include), errorEvent: () => ({ data: null }) };
  return query.include_obfuscation === "true" ? withObfuscation(result) : result;
}

/** DELETE /v1/responses/{id}; a running response (in the background or not) is stopped first. */
export async function deleteResponse(id: string, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const run = deps.runs.get(id);
  if (run && (await deps.store.responses.get(ns, id))) {
    run.stop("deleted");
    await run.done;
  }
  if (!(await deps.store.responses.delete(ns, id))) throw notFound("response", id);
  return { kind: "json", body: { id, object: "response", deleted: true } };
}

/** POST /v1/responses/{id}/cancel: stops a background run; a finished one comes back as it is. */
export async function cancelResponse(id: string, ns: string, deps: ResponsesDeps): Promise<RouteResult> {
  const stored = await deps.store.responses.get(ns, id);
  if (!stored) throw notFound("response", id);
  if (!stored.background) throw badRequest("Only background responses can be cancelled.", null);
  const run = deps.runs.get(id);
  if (run) {
    run.stop("cancelled");
    // Not until it is stored: a store that cannot be written now would hold the answer for as long.
    await run.over;
  }
  // Read again for the object as the run left it; a DELETE that came meanwhile (it stops the same
  // run, and removes the row once the run has ended) leaves nothing to answer with but its 404.
  const after = await currentResponse(deps, ns, id);
  if (!after) throw notFound("response", id);
  return { kind: "json", body: after.body };
}

/**
 * Background responses that a stopped process left running (killed, or crashed: a graceful shutdown
 * ends its runs first) can never finish, and stayed `in_progress` for good, with a resumed stream
 * that never ended. Run once at start, before any request: each is marked failed, so polling,
 * resuming, cancelling and chaining all see it over, with the output its stored events show. Its
 * stream's `error` and `response.failed` are not stored: they are made when a stream is read,
 * numbered after what the client names (see storedStreamEnding). One server per data directory: a second live server on the same store would
 * take the first one's running responses for abandoned ones.
 */
export async function failAbandonedRuns(deps: ResponsesDeps): Promise<number> {
  const left = await deps.store.responses.withStatus(["queued", "in_progress"]);
  let failed = 0;
  for (const { namespace, id } of left) {
    if (deps.runs.get(id)) continue;
    const stored = await deps.store.responses.get(namespace, id);
    if (!stored) continue;
    const message = "The server stopped while this response was running, so it did not finish; create it again.";
    // Its stored body is the one written at its start; a background run's stored events show the
    // output it had made since, which the failed response keeps, as one failed in its run does.
    const events = ((await deps.store.responseEvents.list(namespace, id)) ?? []).map((e) => e.event);
    const summary = Boolean((stored.body.reasoning as { summary?: unknown } | null | undefined)?.summary);
    const output = events.length > 0 ? outputFromEvents(events, summary) : stored.body.output;
    const body = { ...stored.body, status: "failed", error: { code: "server_error", message }, incomplete_details: null, output };
    await deps.store.responses.update(namespace, id, { status: "failed", body });
    failed++;
  }
  return failed;
}

/** GET /v1/responses/{id}/input_items. */
export async function listInputItems(
  id: string,
  q: ListQuery,
  ns: string,
  deps: ResponsesDeps,
): Promise<RouteResult> {
  const include = readInclude(q, deps.sealer);
  const page = await deps.store.responses.listInputItems(ns, id, { after: q.after, limit: q.limit ?? 20, order: q.order ?? "desc" });
  if (!page) throw notFound("response", id);
  return { kind: "json", body: { object: "list", ...page, data: page.data.map((item) => itemToWire(item, include)) } };
}

/** POST /v1/responses/input_tokens: the prompt a request would use, counted without generating. */
export async function countInputTokens(body: InputTokensRequest, env: RouteEnv, deps: ResponsesDeps): Promise<RouteResult> {
  // A preset would change the prompt being counted, and this server has none to apply.
  if (body.personality != null) throw unsupportedField("personality", "is not supported: this server has no style presets");
  // The count's body is a create's without the fields that only a generation reads (see
  // inputTokensRequest), so it is read as that create.
  const create: CreateResponseRequest = { ...body, background: false, store: false };
  const input = await resolveInput(create, storeNamespace(env.ctx.apiKey), deps);
  const { request, fieldName } = responseToCanonical(create, input.all as InputItem[], input.all.length - input.added.length);
  // As a create would count it: truncation: auto drops the oldest turns that do not fit. It names no
  // end user (the body has no `user`), so the prompt cache's namespace is the key's own.
  const tokens = await measureWithTruncation(env.service, env.ctx, request, body.truncation === "auto", fieldName);
  return { kind: "json", body: { object: "response.input_tokens", input_tokens: tokens } };
}

/**
 * The most a response's whole input (the history it continues and its own input) may hold: what one
 * request may send (10,000 items, as `input`; 16 MiB of text, the default body limit). A stored
 * response keeps its whole input, and each turn reads it back, stores it again and indexes every
 * item, all on the one JavaScript thread: a chain of turns that each sent 14 MB (with
 * `truncation: "auto"` dropping what did not fit) held every other request for 1.4 s on the first
 * turn and 9 s by the fifth, and grew without end.
 */
const HISTORY_MAX_ITEMS = MAX_MESSAGES;
const HISTORY_MAX_CHARS = 16 * 1024 * 1024;

function refuseOversizedHistory(earlier: Item[], input: Item[], field: "previous_response_id" | "conversation"): void {
  const items = earlier.length + input.length;
  const chars = textLength(earlier, HISTORY_MAX_CHARS + 1) + textLength(input, HISTORY_MAX_CHARS + 1);
  if (items <= HISTORY_MAX_ITEMS && chars <= HISTORY_MAX_CHARS) return;
  const what = field === "conversation" ? "the conversation" : "the response continued";
  const over = items > HISTORY_MAX_ITEMS ? `${items} items (at most ${HISTORY_MAX_ITEMS})` : `more than ${HISTORY_MAX_CHARS} characters of text`;
  throw badRequest(
    `The input with the history of ${what} comes to ${over}; one response's whole input may hold no more than one request may send. Start a new conversation, carrying over what is still needed.`,
    field,
  );
}

/** Characters in the strings (keys included) of a JSON value, counted up to `stopAt`. */
function textLength(root: unknown, stopAt: number): number {
  let total = 0;
  const stack: unknown[] = [root];
  while (stack.length > 0 && total < stopAt) {
    const value = stack.pop();
    if (typeof value === "string") total += value.length;
    else if (Array.isArray(value)) for (const v of value) stack.push(v);
    else if (value !== null && typeof value === "object")
      for (const [k, v] of Object.entries(value)) {
        total += k.length;
        stack.push(v);
      }
  }
  return total;
}

/** Every item of a conversation, oldest first: the prompt of a response that continues it. */
async function allConversationItems(store: Store, ns: string, id: string): Promise<Item[]> {
  const out: Item[] = [];
  let after: string | undefined;
  let chars = 0;
  for (;;) {
    const page = await store.conversations.listItems(ns, id, { after, limit: 100, order: "asc" });
    if (!page) return out;
    out.push(...page.data);
    // Past the bound the turn is refused anyway (refuseOversizedHistory): the rest is not read.
    chars += textLength(page.data, HISTORY_MAX_CHARS + 1);
    if (out.length > HISTORY_MAX_ITEMS || chars > HISTORY_MAX_CHARS) return out;
    if (!page.has_more || !page.last_id) return out;
    after = page.last_id;
  }
}
