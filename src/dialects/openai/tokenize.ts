import { z } from "zod";
import { badRequest, withWireParam } from "../../core/errors.ts";
import type { PromptInput } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { chatMessage, messageList } from "./chat-protocol.ts";
import { toMessage } from "./chat-to-canonical.ts";
import { tokenizeFieldNames } from "./field-names.ts";

/**
 * vLLM's and llama-server's tokenizer endpoints: what a prompt costs in tokens, rendered exactly as
 * generation would render it (chat messages through the model's template).
 */
export const tokenizeRequest = z.object({
  model: z.string().min(1),
  prompt: z.string().optional(),
  messages: messageList(chatMessage).optional(),
  add_special_tokens: z.boolean().optional(),
});

export const detokenizeRequest = z.object({
  model: z.string().min(1),
  tokens: z.array(z.int()),
});

export async function tokenize(body: z.infer<typeof tokenizeRequest>, env: RouteEnv): Promise<RouteResult> {
  if ((body.prompt === undefined) === (body.messages === undefined))
    throw badRequest("Send exactly one of 'prompt' or 'messages'.", body.prompt === undefined ? "prompt" : "messages");
  const prompt: PromptInput =
    body.messages !== undefined ? { kind: "chat", messages: body.messages.map(toMessage) } : { kind: "text", text: body.prompt! };
  env.service.authorize(env.ctx, body.model);
  const { tokens, contextSize } = await env.service.tokenize(body.model, prompt, body.add_special_tokens ?? true).catch((err) => {
    throw withWireParam(err, tokenizeFieldNames(body));
  });
  return { kind: "json", body: { tokens, count: tokens.length, max_model_len: contextSize } };
}

export async function detokenize(body: z.infer<typeof detokenizeRequest>, env: RouteEnv): Promise<RouteResult> {
  env.service.authorize(env.ctx, body.model);
  return { kind: "json", body: { prompt: await env.service.detokenize(body.model, body.tokens) } };
}
