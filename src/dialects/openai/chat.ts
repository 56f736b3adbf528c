import { unsupportedField, withWireParam } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import { afterFirstEvent } from "../../core/stream-head.ts";
import type { GenerationEvent } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { quoteServerFailure } from "../../http/sse.ts";
import { type ChatCodec, OPENAI_CHAT_CODEC } from "./chat-codec.ts";
import type { ChatCompletionRequest } from "./chat-protocol.ts";
import { chatToCanonical, customToolNames } from "./chat-to-canonical.ts";
import { renderChatCompletion, streamChatCompletion } from "./chat-to-wire.ts";
import { openAIErrorEvent } from "./errors.ts";
import { pingIntervalMs, refuseInlineReasoning } from "./foreign-fields.ts";
import { withChunkObfuscation } from "./obfuscation.ts";
import { chatFieldNames } from "./field-names.ts";
import { streamUsage } from "./stream-usage.ts";
import { storeNamespace } from "../../core/context.ts";
import { type ChatStorage, storeChatCompletion } from "./stored-chat.ts";

/**
 * POST …/chat/completions as a plain function of the parsed body: canonical request → generation
 * service → renderer. Dialects that are OpenAI's with other defaults call it with their own codec.
 * With `storage`, a request with `store: true` is kept once its answer is complete (streamed or not).
 */
export async function chatCompletion(
  body: ChatCompletionRequest,
  env: RouteEnv,
  codec: ChatCodec = OPENAI_CHAT_CODEC,
  storage?: ChatStorage,
): Promise<RouteResult> {
  if (body.store === true && !storage) throw unsupportedField("store", "needs a store, and this server was started without one");
  const { request, namespace, reasoningParam, formatParam, budgetParam, dropReasoning } = chatToCanonical(body, codec.samplingDefaults);
  refuseInlineReasoning(body, env.service.registry.get(body.model), request.reasoning);
  const names = chatFieldNames(body, reasoningParam, formatParam, budgetParam);
  const ctx = { ...env.ctx, namespace };
  const started = await env.service.start(ctx, request, env.signal).catch((err) => {
    throw withWireParam(err, names);
  });
  const meta = {
    id: newId(codec.idPrefix ?? "chatcmpl-"),
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    systemFingerprint: codec.systemFingerprint(),
    serviceTier: codec.serviceTier ?? (body.service_tier ? "default" : undefined),
    n: request.n,
    customTools: customToolNames(body),
  };
  const withLogprobs = request.logprobs !== undefined;
  const render = async (events: AsyncIterable<GenerationEvent>) => {
    const completion = await renderChatCompletion(meta, events, withLogprobs);
    return codec.completionToWire ? codec.completionToWire(completion) : completion;
  };
  // include_reasoning: false: the thinking still runs and counts in usage, as vLLM counts it.
  const answered = dropReasoning ? withoutReasoning(started.events) : started.events;
  const kept =
    storage && body.store === true
      ? keepWhenDone(answered, async (all) => {
          // Kept in OpenAI's shape whatever the dialect answered in: stored completions are read
          // back through OpenAI's /v1/chat/completions routes.
          // llama-server's timings (timings_per_token) describe this one run, not the completion kept.
          const { timings: _timings, ...rendered } = await renderChatCompletion(meta, replay(all), withLogprobs);
          const completion = rendered as Parameters<typeof storeChatCompletion>[2];
          const messages = body.messages.map((m) => ({ ...m }) as Record<string, unknown>);
          await storeChatCompletion(storage, storeNamespace(env.ctx.apiKey), completion, messages, body.metadata);
        })
      : answered;
  // A stream's head waits for its first event, so a failure before it keeps its own status.
  const events = body.stream && !codec.inBandStreamErrors ? await afterFirstEvent(kept).catch((err) => Promise.reject(withWireParam(err, names))) : kept;

  const other = await codec.respond?.({ body, env, meta, events, names, spent: started.spent });
  if (other) return other;
  if (!body.stream) return { kind: "json", body: await render(events) };
  const usage = streamUsage(body);
  const includeUsage = codec.streamUsage === "always" || usage.final;
  // vLLM's continuous usage stats: the role chunks, sent before any event, carry the prompt alone.
  const shape = { usageOnFinishChunk: codec.usageOnFinishChunk, chunkToWire: codec.chunkToWire, ...(usage.continuous ? { runningPrompt: started.promptTokens[0] } : {}) };
  const streamError = codec.streamError;
  const streamed: RouteResult = {
    kind: "sse",
    write: !streamError
      ? (sse) => streamChatCompletion(sse, meta, events, includeUsage, withLogprobs, shape)
      : async (sse) => {
          try {
            await streamChatCompletion(sse, meta, events, includeUsage, withLogprobs, shape);
          } catch (err) {
            if (env.signal.aborted) throw err;
            // What the ledger books: a request that never got a sequence (it timed out waiting)
            // evaluated nothing, so its prompt counts 0, not the prompt it would have run.
            // A failure of the server's quotes the request id, as respondWithSse's error events do.
            for (const data of streamError(quoteServerFailure(err, env.ctx.requestId), meta, names, started.spent())) await sse.data(data);
            await sse.data("[DONE]");
          }
        },
    errorEvent: (err) => openAIErrorEvent(err, names),
    pingMs: pingIntervalMs(body),
  };
  return body.stream_options?.include_obfuscation === true ? withChunkObfuscation(streamed) : streamed;
}

/**
 * The events, passed through and kept; once they have all been read (the answer is complete),
 * `done` gets them. A stream the client left, or a failed one, never reaches `done`.
 *
 * The answer's end (each choice's `finish`, then the usage) is held back until `done` has stored
 * it: `store: true` promises a completion that can be read back, so a failure to store it (a full
 * disk) fails the request instead of being a warning in the server's log. Nothing has said the
 * answer finished by then: an answer not streamed is that failure (503 `store_unavailable` for a
 * store that cannot be written now), and a stream ends with the dialect's error event in place of
 * its finish chunk.
 */
async function* keepWhenDone(events: AsyncIterable<GenerationEvent>, done: (all: GenerationEvent[]) => Promise<void>): AsyncGenerator<GenerationEvent> {
  const all: GenerationEvent[] = [];
  const ending: GenerationEvent[] = [];
  for await (const ev of events) {
    all.push(ev);
    if (ev.type === "finish" || ev.type === "usage") ending.push(ev);
    else yield ev;
  }
  await done(all);
  yield* ending;
}

async function* withoutReasoning(events: AsyncIterable<GenerationEvent>): AsyncGenerator<GenerationEvent> {
  for await (const ev of events) if (ev.type !== "reasoning") yield ev;
}

async function* replay(events: GenerationEvent[]): AsyncGenerator<GenerationEvent> {
  yield* events;
}
