import { z } from "zod";
import { badRequest, unsupportedField, withWireParam } from "../../core/errors.ts";
import type { PromptExtras } from "../../core/engine.ts";
import type { PromptInput } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { type ChatCompletionRequest, chatCompletionRequest, chatMessage, messageList } from "./chat-protocol.ts";
import { chatToCanonical } from "./chat-to-canonical.ts";
import { chatFieldNames, tokenizeFieldNames } from "./field-names.ts";
import { templateSwitches } from "./foreign-fields.ts";
import { listOf } from "../list-of.ts";

/**
 * vLLM's and llama-server's tokenizer endpoints: what a prompt costs in tokens, rendered exactly as
 * generation would render it (chat messages through the model's template, with the tools and the
 * thinking switch a chat request would send).
 *
 * The body is vLLM's TokenizeCompletionRequest or TokenizeChatRequest. Every field is read: honoured,
 * taken at the value Plinth's rendering has anyway, or refused by name; a field neither defines is a
 * 400 too, since a count that silently left something out would be a wrong count.
 */
const chatShape = chatCompletionRequest.shape;
export const tokenizeRequest = z.strictObject({
  model: z.string().min(1),
  prompt: z.string().optional(),
  messages: messageList(chatMessage).optional(),
  add_special_tokens: z.boolean().nullish(),
  return_token_strs: z.boolean().nullish(),
  // Chat only, read as a chat request reads them, so the count is that request's prompt_tokens.
  tools: chatShape.tools,
  tool_choice: chatShape.tool_choice,
  parallel_tool_calls: chatShape.parallel_tool_calls,
  chat_template_kwargs: chatShape.chat_template_kwargs,
  // vLLM's template switches: only the values Plinth's rendering has are taken (see `refuse`).
  add_generation_prompt: z.boolean().nullish(),
  continue_final_message: z.boolean().nullish(),
  chat_template: z.unknown().optional(),
  mm_processor_kwargs: z.unknown().optional(),
  media_io_kwargs: z.unknown().optional(),
});
type TokenizeRequest = z.infer<typeof tokenizeRequest>;

export const detokenizeRequest = z.strictObject({
  model: z.string().min(1),
  // The service bounds the list by the model's context; this bounds what is parsed before that.
  tokens: listOf(z.int(), { max: 1_048_576 }),
});

const CHAT_ONLY = ["tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "chat_template", "mm_processor_kwargs", "media_io_kwargs"] as const;

/** vLLM's fields that ask for a rendering Plinth does not do. */
function refuse(body: TokenizeRequest): void {
  if (body.messages === undefined) {
    for (const field of CHAT_ONLY) if (body[field] != null) throw badRequest(`'${field}' applies to 'messages'; a 'prompt' is tokenized as sent.`, field);
    return;
  }
  // Plinth renders as a chat request does, and reads vLLM's switches as a chat request reads them.
  templateSwitches((body.messages.at(-1) as { role?: string } | undefined)?.role, body.add_generation_prompt, body.continue_final_message);
  if (body.add_special_tokens === true)
    throw unsupportedField("add_special_tokens", "is not supported with messages: the template places the special tokens");
  if (body.chat_template != null) throw unsupportedField("chat_template", "is not supported: the model's own template (or --chat-wrapper) renders the prompt");
  if (body.mm_processor_kwargs != null) throw unsupportedField("mm_processor_kwargs", "is not supported: the models here read text");
  if (body.media_io_kwargs != null) throw unsupportedField("media_io_kwargs", "is not supported: the models here read text");
}

export async function tokenize(body: TokenizeRequest, env: RouteEnv): Promise<RouteResult> {
  if ((body.prompt === undefined) === (body.messages === undefined))
    throw badRequest("Send exactly one of 'prompt' or 'messages'.", body.prompt === undefined ? "prompt" : "messages");
  refuse(body);
  let prompt: PromptInput;
  let extras: PromptExtras | undefined;
  let names = tokenizeFieldNames(body);
  if (body.messages !== undefined) {
    // The chat route's own conversion: messages, tools and thinking switch read exactly as there.
    const chat = chatToCanonical({
      model: body.model,
      messages: body.messages,
      tools: body.tools,
      tool_choice: body.tool_choice,
      parallel_tool_calls: body.parallel_tool_calls,
      chat_template_kwargs: body.chat_template_kwargs,
    } as ChatCompletionRequest);
    const { request } = chat;
    prompt = request.prompt;
    extras = { tools: request.tools, toolChoice: request.toolChoice, parallelToolCalls: request.parallelToolCalls, reasoning: request.reasoning };
    names = chatFieldNames({ tools: body.tools, messages: body.messages }, chat.reasoningParam);
  } else {
    prompt = { kind: "text", text: body.prompt! };
  }
  env.service.authorize(env.ctx, body.model);
  const addSpecial = body.messages !== undefined ? false : (body.add_special_tokens ?? true);
  const result = await env.service.tokenize(body.model, prompt, addSpecial, extras, body.return_token_strs === true, env.ctx.responseHeaders).catch((err) => {
    throw withWireParam(err, names);
  });
  if (body.return_token_strs === true && result.pieces === undefined)
    throw unsupportedField("return_token_strs", `is not available for '${body.model}': its vocabulary is not known here`);
  const { tokens, contextSize } = result;
  // token_strs is null unless asked for, as in vLLM's answer, whose clients read the key unguarded.
  return { kind: "json", body: { tokens, count: tokens.length, max_model_len: contextSize, token_strs: body.return_token_strs === true ? result.pieces : null } };
}

export async function detokenize(body: z.infer<typeof detokenizeRequest>, env: RouteEnv): Promise<RouteResult> {
  env.service.authorize(env.ctx, body.model);
  return { kind: "json", body: { prompt: await env.service.detokenize(body.model, body.tokens, env.ctx.responseHeaders) } };
}
