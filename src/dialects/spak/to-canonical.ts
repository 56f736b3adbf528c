import { badRequest } from "../../core/errors.ts";
import type { GenerationRequest, Message } from "../../core/types.ts";
import { isolationKey, normaliseStop, toSamplingParams } from "../openai/sampling-fields.ts";
import { refuseUnansweredToolCalls } from "../openai/tool-answers.ts";
import type { SpakChatRequest, SpakMessage } from "./protocol.ts";

/** The document's defaults: temperature 1, top_p 1. */
export const SPAK_SAMPLING_DEFAULTS = { temperature: 1, topP: 1 };

/** Thinking budgets: `high` bounds the thinking section; `max` leaves it bounded only by max_tokens and the context. */
export const THINKING_BUDGET = { high: 8192, max: undefined } as const;

export type Effort = "high" | "max";

/**
 * Coding agents the document names (Claude Code, OpenCode) and their close relatives, recognised by
 * their User-Agent. See `effectiveEffort`.
 */
const AGENT_USER_AGENT = /\b(claude-cli|claude-code|opencode|codex|aider|cline|kilo-code|roo-code)\b/i;

export interface RequestFacts {
  /** The HTTP User-Agent header, if any. */
  userAgent?: string;
  /** The served model has a thinking section to switch and bound; undefined: not known here. */
  modelThinks: boolean | undefined;
}

export interface CanonicalSpak {
  request: GenerationRequest;
  namespace?: string;
  /** Thinking mode as the client asked for it (the default is on). */
  thinking: boolean;
  effort: Effort;
}

/**
 * The effective reasoning effort: the one sent (low/medium → high, xhigh → max); when none is sent,
 * `max` for a complex agent request and `high` otherwise. A request is an agent request when its
 * User-Agent names a coding agent (Claude Code, OpenCode, …), or when it offers tools and its history
 * already holds a tool result (an agent loop under way).
 */
export function effectiveEffort(body: SpakChatRequest, userAgent: string | undefined): Effort {
  switch (body.reasoning_effort) {
    case "low":
    case "medium":
    case "high":
      return "high";
    case "xhigh":
    case "max":
      return "max";
  }
  return isAgentRequest(body, userAgent) ? "max" : "high";
}

export function isAgentRequest(body: SpakChatRequest, userAgent: string | undefined): boolean {
  if (userAgent && AGENT_USER_AGENT.test(userAgent)) return true;
  return (body.tools?.length ?? 0) > 0 && body.messages.some((m) => m.role === "tool");
}

/** The cap: `max_tokens`, or OpenAI's newer `max_completion_tokens` for it; two different caps are a 400. */
function completionCap(body: SpakChatRequest): number | undefined {
  const { max_tokens: cap, max_completion_tokens: alias } = body;
  if (cap != null && alias != null && cap !== alias)
    throw badRequest("max_tokens and max_completion_tokens set different caps; send max_tokens alone.", "max_completion_tokens");
  return cap ?? alias ?? undefined;
}

export function spakToCanonical(body: SpakChatRequest, facts: RequestFacts): CanonicalSpak {
  if (body.stream_options != null && body.stream !== true)
    throw badRequest("stream_options may only be set when stream is true.", "stream_options");
  if (body.top_logprobs != null && body.logprobs !== true)
    throw badRequest("top_logprobs needs logprobs set to true.", "top_logprobs");
  const thinking = (body.thinking?.type ?? "enabled") === "enabled";
  const effort = effectiveEffort(body, facts.userAgent);
  body.messages.forEach((m, i) => {
    if (m.role === "assistant" && m.prefix === true && i !== body.messages.length - 1)
      throw badRequest(`messages[${i}].prefix: only the last message, an assistant's, is a prefix to continue.`, `messages[${i}].prefix`);
  });
  const messages = body.messages.map(toMessage);
  refuseUnansweredToolCalls(messages);
  const request: GenerationRequest = {
    model: body.model,
    prompt: { kind: "chat", messages },
    // frequency_penalty and presence_penalty are deprecated by the vendor and have no effect.
    sampling: toSamplingParams({ temperature: body.temperature, top_p: body.top_p, seed: body.seed, logit_bias: body.logit_bias }, SPAK_SAMPLING_DEFAULTS),
    maxTokens: completionCap(body),
    stop: normaliseStop(body.stop),
    n: 1,
    wholeAnswer: body.stream !== true,
    cachePrompt: true,
    logprobs: body.logprobs ? (body.top_logprobs ?? 0) : undefined,
    ...tools(body),
    ...(body.response_format?.type === "json_object" ? { responseFormat: { type: "json_object" as const } } : {}),
    // A model without a thinking section is always in non-thinking mode: nothing to switch. One
    // whose thinking is not known here (a remote upstream's) gets only what the client asked for.
    ...(facts.modelThinks === true || (facts.modelThinks === undefined && (body.thinking != null || body.reasoning_effort != null))
      ? { reasoning: thinking ? { enabled: true, budgetTokens: THINKING_BUDGET[effort], effort: "high" as const, budgetFromEffort: true } : { enabled: false } }
      : {}),
  };
  const user = body.user_id ?? body.user;
  return { request, namespace: user ? isolationKey(user, null) : undefined, thinking, effort };
}

function tools(body: SpakChatRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const list = body.tools ?? [];
  const seen = new Set<string>();
  list.forEach((t, i) => {
    if (seen.has(t.function.name)) throw badRequest(`Two tools are named '${t.function.name}'.`, `tools[${i}].function.name`);
    seen.add(t.function.name);
  });
  const choice = body.tool_choice ?? undefined;
  if (list.length === 0) {
    // `none` is the default without tools, and `auto` (the model may call one of the tools) has
    // nothing to call, so it answers the same; asking for a call needs something to call. (Clients
    // with an agent's empty tool list send `auto` with `tools: []`.)
    if (choice !== undefined && choice !== "none" && choice !== "auto") throw badRequest("tool_choice needs tools to choose from.", "tool_choice");
    return {};
  }
  if (typeof choice === "object" && !seen.has(choice.function.name))
    throw badRequest(`tool_choice names '${choice.function.name}', which is not among the tools.`, "tool_choice");
  return {
    tools: list.map((t) => ({
      name: t.function.name,
      description: t.function.description,
      parameters: t.function.parameters ?? { type: "object", properties: {} },
      strict: t.function.strict === true,
    })),
    toolChoice: typeof choice === "object" ? { name: choice.function.name } : (choice ?? "auto"),
    parallelToolCalls: true,
  };
}

function toMessage(m: SpakMessage): Message {
  switch (m.role) {
    case "system":
      return { role: "system", content: m.content, name: m.name ?? undefined };
    case "user":
      return { role: "user", content: flatten(m.content), name: m.name ?? undefined };
    case "assistant":
      return {
        role: "assistant",
        content: m.content == null ? "" : flatten(m.content),
        name: m.name ?? undefined,
        toolCalls: m.tool_calls?.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
      };
    case "tool":
      return { role: "tool", content: flatten(m.content), toolCallId: m.tool_call_id };
  }
}

function flatten(content: string | Array<{ text: string }>): string {
  return typeof content === "string" ? content : content.map((p) => p.text).join("\n");
}
