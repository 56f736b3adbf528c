import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { badRequest } from "../../core/errors.ts";
import type { ModelRegistry } from "../../core/registry.ts";
import type { PromptInput } from "../../core/types.ts";
import { chatMessage } from "./chat-protocol.ts";
import { toMessage } from "./chat-to-canonical.ts";

/**
 * vLLM's and llama-server's tokenizer endpoints: what a prompt costs in tokens, rendered exactly as
 * generation would render it (chat messages through the model's template).
 */
const tokenizeRequest = z.object({
  model: z.string().min(1),
  prompt: z.string().optional(),
  messages: z.array(chatMessage).min(1).optional(),
  add_special_tokens: z.boolean().optional(),
});

const detokenizeRequest = z.object({
  model: z.string().min(1),
  tokens: z.array(z.int()),
});

export function registerTokenizeRoutes(app: FastifyInstance, registry: ModelRegistry): void {
  app.post("/tokenize", async (request) => {
    const body = tokenizeRequest.parse(request.body);
    if ((body.prompt === undefined) === (body.messages === undefined))
      throw badRequest("Send exactly one of 'prompt' or 'messages'.", body.prompt === undefined ? "prompt" : "messages");
    const { engine } = registry.resolve(body.model);
    const prompt: PromptInput =
      body.messages !== undefined
        ? { kind: "chat", messages: body.messages.map(toMessage) }
        : { kind: "text", text: body.prompt! };
    const tokens = engine.tokenize(prompt, body.add_special_tokens ?? true);
    return { tokens, count: tokens.length, max_model_len: engine.describe().contextSize };
  });

  app.post("/detokenize", async (request) => {
    const body = detokenizeRequest.parse(request.body);
    const { engine } = registry.resolve(body.model);
    return { prompt: engine.detokenize(body.tokens) };
  });
}
