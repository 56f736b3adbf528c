import { withWireParam } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { type ChatCodec, OPENAI_CHAT_CODEC } from "./chat-codec.ts";
import type { ChatCompletionRequest } from "./chat-protocol.ts";
import { chatToCanonical } from "./chat-to-canonical.ts";
import { renderChatCompletion, streamChatCompletion } from "./chat-to-wire.ts";
import { openAIErrorEvent } from "./errors.ts";
import { chatFieldNames } from "./field-names.ts";

/**
 * POST …/chat/completions as a plain function of the parsed body: canonical request → generation
 * service → renderer. Dialects that are OpenAI's with other defaults call it with their own codec.
 */
export async function chatCompletion(body: ChatCompletionRequest, env: RouteEnv, codec: ChatCodec = OPENAI_CHAT_CODEC): Promise<RouteResult> {
  const { request, namespace, reasoningParam } = chatToCanonical(body, codec.samplingDefaults);
  const names = chatFieldNames(body, reasoningParam);
  const ctx = { ...env.ctx, namespace };
  const started = await env.service.start(ctx, request, env.signal).catch((err) => {
    throw withWireParam(err, names);
  });
  const meta = {
    id: newId("chatcmpl-"),
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    systemFingerprint: codec.systemFingerprint(),
    serviceTier: body.service_tier ? "default" : undefined,
    n: request.n,
  };
  const withLogprobs = request.logprobs !== undefined;
  if (!body.stream) return { kind: "json", body: await renderChatCompletion(meta, started.events, withLogprobs) };
  const includeUsage = codec.streamUsage === "always" || body.stream_options?.include_usage === true;
  return {
    kind: "sse",
    write: (sse) => streamChatCompletion(sse, meta, started.events, includeUsage, withLogprobs),
    errorEvent: (err) => openAIErrorEvent(err, names),
  };
}
