import type { GenerationEvent } from "../../core/types.ts";
import { asWireError } from "../../http/error-envelope.ts";
import type { RouteResult } from "../../http/respond.ts";
import type { ChatAnswer, ChatCodec } from "../openai/chat-codec.ts";
import { usageToWire } from "../openai/chat-to-wire.ts";
import { SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import { respondWithBuilder } from "../responses/run.ts";
import { ResponseBuilder, type ResponseEvent } from "../responses/to-wire.ts";
import { konanCompletionCap, type KonanChatRequest } from "./protocol.ts";

/** Konan's documented defaults: temperature 0.3, top_p 0.75. */
export const KONAN_SAMPLING_DEFAULTS = { temperature: 0.3, topP: 0.75 };

type Obj = Record<string, unknown>;

/** Konan's finish reasons are stop and length (and, streamed, error): a tool-call ending is a stop. */
const finishReason = (r: unknown) => (r === null || r === "length" || r === "error" ? r : "stop");

/** Konan's usage: the three counts and, at the top level, reasoning_tokens. */
function usageToKonan(u: Obj | null | undefined) {
  if (!u) return u ?? null;
  const details = u.completion_tokens_details as { reasoning_tokens?: number } | undefined;
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.total_tokens,
    reasoning_tokens: details?.reasoning_tokens ?? null,
  };
}

/** OpenAI's message or delta without the fields Konan does not have (refusal, the `reasoning` alias). */
function messageToKonan(m: Obj): Obj {
  const { refusal: _refusal, reasoning: _reasoning, ...rest } = m;
  return rest;
}

/**
 * `content` is a string in Konan's reference (2.1.3, 2.1.4): OpenAI's null (a stream's opening
 * chunk, an answer that is only tool calls) is "", streamed or not.
 */
function contentToKonan(m: Obj): Obj {
  return m.content === null ? { ...m, content: "" } : m;
}

/** The chat.completion object in Konan's field set. */
export function completionToKonan(c: Obj): Obj {
  const choices = (c.choices as Obj[]).map((ch) => ({
    index: ch.index,
    message: contentToKonan(messageToKonan(ch.message as Obj)),
    finish_reason: finishReason(ch.finish_reason),
  }));
  return { id: c.id, object: c.object, created: c.created, model: c.model, choices, usage: usageToKonan(c.usage as Obj | undefined) };
}

/** A chat.completion.chunk in Konan's field set: `usage` on every chunk (null but on the last). */
export function chunkToKonan(c: Obj): Obj {
  const choices = (c.choices as Obj[]).map((ch) => ({
    index: ch.index,
    delta: contentToKonan(messageToKonan(ch.delta as Obj)),
    finish_reason: finishReason(ch.finish_reason),
  }));
  return { id: c.id, object: c.object, created: c.created, model: c.model, choices, usage: usageToKonan(c.usage as Obj | null) };
}

/**
 * The codec of one Konan request: OpenAI's chat route with Konan's defaults, ids, field set,
 * usage on the finishing chunk, errors inside the stream as a `finish_reason: "error"` chunk, and
 * `output_parser: "responses"`.
 */
export function konanCodec(body: KonanChatRequest): ChatCodec {
  return {
    dialect: "konan",
    samplingDefaults: KONAN_SAMPLING_DEFAULTS,
    streamUsage: "always",
    usageOnFinishChunk: true,
    systemFingerprint: () => SYSTEM_FINGERPRINT,
    idPrefix: "cmpl-",
    completionToWire: completionToKonan,
    chunkToWire: chunkToKonan,
    // 000's streams say their errors in band and nothing else (2.1.6): a request that waited past
    // the queue timeout ends so too, not with an HTTP status its clients do not look for.
    inBandStreamErrors: true,
    streamError: (err, meta, names, spent) => {
      const e = asWireError(err, names);
      return [
        {
          id: meta.id,
          object: "chat.completion.chunk",
          created: meta.created,
          model: meta.model,
          choices: [{ index: 0, delta: { role: "assistant", content: `${e.code ?? e.type}: ${e.message}` }, finish_reason: "error" }],
          // The finishing chunk carries the usage (000-31), an error ending too: what was used by then.
          usage: usageToKonan(usageToWire(spent)),
        },
      ];
    },
    respond: body.output_parser === "responses" ? (answer) => respondAsResponse(body, answer) : undefined,
  };
}

/**
 * What a Responses object repeats of the request, in the Responses API's names: every field OpenAI's
 * Response object has, those Konan has no request field for at the value this server runs them with.
 */
function echo(body: KonanChatRequest): Obj {
  const rf = body.response_format;
  const format =
    rf == null || rf.type === "text"
      ? { type: "text" }
      : rf.type === "json_object"
        ? { type: "json_object" }
        : { type: "json_schema", name: rf.json_schema.name, schema: rf.json_schema.schema ?? { type: "object" }, strict: rf.json_schema.strict === true };
  return {
    instructions: null,
    tools: (body.tools ?? []).map((t) => ({
      type: "function",
      name: t.function.name,
      description: t.function.description ?? null,
      parameters: t.function.parameters ?? null,
      strict: t.function.strict === true,
    })),
    tool_choice: "auto",
    parallel_tool_calls: true,
    max_tool_calls: null,
    temperature: body.temperature ?? KONAN_SAMPLING_DEFAULTS.temperature,
    top_p: body.top_p ?? KONAN_SAMPLING_DEFAULTS.topP,
    top_logprobs: 0,
    max_output_tokens: konanCompletionCap(body),
    previous_response_id: null,
    conversation: null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: null },
    text: { format, verbosity: "medium" },
    truncation: "disabled",
    metadata: body.metadata ?? {},
    store: body.metadata != null,
    background: false,
    service_tier: "default",
    user: body.user ?? null,
    safety_identifier: null,
    prompt_cache_key: null,
    prompt_cache_retention: null,
  };
}

/**
 * `output_parser: "responses"`: the answer as a Responses API object, or streamed as the Responses
 * event stream, built by the Responses dialect's own builder. The object's id is the completion's,
 * so a stored completion (with metadata) is found under the id the client received.
 */
async function respondAsResponse(body: KonanChatRequest, { env, meta, events, spent }: ChatAnswer): Promise<RouteResult> {
  const builderFor = (emit?: (e: ResponseEvent) => void) =>
    new ResponseBuilder(
      { id: meta.id, createdAt: meta.created, model: meta.model, echo: echo(body) },
      { logprobs: false, summary: false, customTools: new Set() },
      emit,
    );
  return respondWithBuilder(body.stream === true, builderFor, events as AsyncIterable<GenerationEvent>, env.signal, undefined, spent, { inBandStreamErrors: true, requestId: env.ctx.requestId });
}
