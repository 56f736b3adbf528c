import { withParts } from "../../core/content-parts.ts";
import { badRequest, unsupportedField } from "../../core/errors.ts";
import type { ContentPart, FreeTextInput, GenerationRequest, Message, ToolChoice, ToolDefinition } from "../../core/types.ts";
import type { ChatCompletionRequest, ChatMessage, ChatTool } from "./chat-protocol.ts";
import { cacheControl, promptCacheBreakpoint } from "./chat-protocol.ts";
import { refuseServiceFields, refuseVerbosity, serviceTierCode } from "./service-fields.ts";
import { budgetOrNone, foreignFields } from "./foreign-fields.ts";
import { streamUsage } from "./stream-usage.ts";
import { type RequestedFormat, structuredFormat } from "./structured-fields.ts";
import { refuseUnansweredToolCalls } from "./tool-answers.ts";
import { isolationKey, normaliseStop, OPENAI_SAMPLING_DEFAULTS, type SamplingDefaults, toSamplingParams } from "./sampling-fields.ts";

/** Fields whose capability has not landed yet; `null` (and a few neutral values) count as absent. */
const NOT_YET: Array<[keyof ChatCompletionRequest, string]> = [
  ["functions", "is deprecated; send tools instead"],
  ["function_call", "is deprecated; send tool_choice instead"],
  ["audio", "audio output is not supported by this server"],
  ["prediction", "predicted outputs are not supported by this server"],
  ["web_search_options", "web search is not supported by this server"],
];

export interface CanonicalChat {
  request: GenerationRequest;
  /** The isolation namespace the request's user fields and cache salt make. */
  namespace?: string;
  /** The field that asked for reasoning control, so an error about it names what the client sent. */
  reasoningParam?: string;
  /** The field that asked for a structured answer (response_format, guided_json, …), likewise. */
  formatParam?: string;
  /** The field the thinking budget came in (reasoning.budget_tokens, thinking_budget_tokens, …), likewise. */
  budgetParam?: string;
  /** vLLM's `include_reasoning: false`: the thinking is left out of the answer. */
  dropReasoning?: boolean;
}

export function chatToCanonical(body: ChatCompletionRequest, defaults: SamplingDefaults = OPENAI_SAMPLING_DEFAULTS): CanonicalChat {
  refuseUnsupported(body);
  // Two budgets that differ are a question, not an answer: which one the client meant is not for
  // the server to guess (the same rule as n_predict).
  if (body.max_tokens != null && body.max_completion_tokens != null && body.max_tokens !== body.max_completion_tokens)
    throw badRequest("max_tokens and max_completion_tokens disagree; send one of them.", "max_tokens");
  const budget = body.max_completion_tokens ?? body.max_tokens;
  const foreign = foreignFields(body, "chat", budget, body.repetition_penalty, body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens", body.messages.at(-1)?.role);
  const { reasoning, reasoningParam, budgetParam } = reasoningControl(body, foreign.thinkingBudget, foreign.thinkingBudgetParam);
  const messages = body.messages.map(toMessage);
  refuseUnansweredToolCalls(messages);
  const format = answerFormat(body);
  if (foreign.maxTokens === 0) throw badRequest("n_predict must be at least 1 on a chat request (or -1: no limit).", "n_predict");
  // With tool_choice "none" no tool is offered, so no call grammar has to end the answer.
  if (foreign.ignoreEos && (format || (body.tools?.length && body.tool_choice !== "none")))
    throw badRequest("ignore_eos cannot be combined with tools or a structured answer: their grammars end the answer.", "ignore_eos");
  const request: GenerationRequest = {
    model: body.model,
    prompt: { kind: "chat", messages },
    sampling: { ...toSamplingParams(body, defaults), ...(foreign.repetitionPenalty !== undefined ? { repetitionPenalty: foreign.repetitionPenalty } : {}) },
    maxTokens: budgetOrNone(budget) ?? foreign.maxTokens,
    ...(foreign.ignoreEos ? { ignoreEos: true } : {}),
    stop: normaliseStop(body.stop),
    n: body.n ?? 1,
    wholeAnswer: body.stream !== true,
    ...(streamUsage(body).continuous ? { runningUsage: true } : {}),
    ...(foreign.timings ? { timings: true } : {}),
    ...(foreign.promptProgress ? { promptProgress: true } : {}),
    cachePrompt: body.cache_prompt ?? true,
    cacheKey: body.prompt_cache_key ?? undefined,
    logprobs: body.logprobs ? (body.top_logprobs ?? 0) : undefined,
    ...toolsToCanonical(body),
    responseFormat: format?.format,
    ...(reasoning ? { reasoning } : {}),
  };
  return {
    request,
    namespace: isolationKey(body.safety_identifier ?? body.user, body.cache_salt),
    reasoningParam,
    formatParam: format?.param,
    ...(budgetParam ? { budgetParam } : {}),
    ...(foreign.dropReasoning ? { dropReasoning: true } : {}),
  };
}

/** What `response_format`, or one of the other servers' structured-output fields, asks of the answer. */
function answerFormat(body: ChatCompletionRequest): RequestedFormat | undefined {
  const own = responseFormat(body.response_format);
  return structuredFormat(body, own) ?? own;
}

function responseFormat(rf: ChatCompletionRequest["response_format"]): RequestedFormat | undefined {
  if (rf == null || rf.type === "text") return undefined;
  if (rf.type === "json_object") {
    if (rf.schema != null && rf.value != null) throw badRequest("response_format has both schema and value; send one of them.", "response_format.value");
    if (rf.schema != null) return { format: { type: "json_schema", schema: rf.schema, strict: true }, param: "response_format.schema" };
    if (rf.value != null) return { format: { type: "json_schema", schema: rf.value, strict: true }, param: "response_format.value" };
    return { format: { type: "json_object" }, param: "response_format" };
  }
  if (rf.type === "json") return { format: { type: "json_schema", schema: rf.value, strict: true }, param: "response_format.value" };
  if (rf.type === "regex") return { format: { type: "regex", pattern: rf.value }, param: "response_format.value" };
  // A schema-less json_schema is any JSON object, as with json_object.
  const format = { type: "json_schema" as const, schema: rf.json_schema.schema ?? { type: "object" }, strict: rf.json_schema.strict === true };
  return { format, param: "response_format.json_schema.schema" };
}

function toolsToCanonical(body: ChatCompletionRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const tools = body.tools ?? [];
  // Each tool's type by name: a choice names a tool of one type.
  const seen = new Map<string, "function" | "custom">();
  tools.forEach((t, i) => {
    const name = toolName(t);
    if (seen.has(name)) throw badRequest(`Two tools are named '${name}'.`, `tools[${i}].${t.type}.name`);
    seen.set(name, t.type);
  });
  const choice = body.tool_choice ?? undefined;
  if (choice !== undefined && tools.length === 0)
    throw badRequest("tool_choice needs tools to choose from.", "tool_choice");
  /** The named tool, checked to be among the tools and of the type the choice says. */
  const chosen = (c: { type: "function"; function: { name: string } } | { type: "custom"; custom: { name: string } }, at: string): string => {
    const name = c.type === "function" ? c.function.name : c.custom.name;
    if (!seen.has(name)) throw badRequest(`${at} names '${name}', which is not among the tools.`, at === "tool_choice" ? at : `${at}.${c.type}.name`);
    // A function and a custom tool are called differently (JSON arguments or free text): a choice of
    // the other type would force a call the client did not ask for.
    if (seen.get(name) !== c.type) throw badRequest(`${at} names the ${c.type} tool '${name}', but '${name}' is a ${seen.get(name)} tool.`, `${at}.type`);
    return name;
  };
  let canonical: ToolChoice = "auto";
  if (typeof choice === "string") canonical = choice;
  else if (choice?.type === "allowed_tools") {
    const allowed = choice.allowed_tools.tools.map((t, i) => chosen(t, `tool_choice.allowed_tools.tools[${i}]`));
    canonical = { allowed, required: choice.allowed_tools.mode === "required" };
  } else if (choice) canonical = { name: chosen(choice, "tool_choice") };
  if (tools.length === 0) return {};
  return {
    tools: tools.map((t): ToolDefinition => {
      if (t.type === "function")
        return {
          name: t.function.name,
          description: t.function.description,
          parameters: t.function.parameters ?? { type: "object", properties: {} },
          strict: t.function.strict === true,
        };
      const format = t.custom.format;
      const input: FreeTextInput = format?.type === "grammar" ? { syntax: format.grammar.syntax, definition: format.grammar.definition } : { syntax: "text" };
      return { name: t.custom.name, description: t.custom.description, parameters: undefined, strict: true, input };
    }),
    toolChoice: canonical,
    parallelToolCalls: body.parallel_tool_calls ?? true,
  };
}

function toolName(t: ChatTool): string {
  return t.type === "function" ? t.function.name : t.custom.name;
}

/** The names of a request's custom tools: their calls are answered as free text, not JSON arguments. */
export function customToolNames(body: Pick<ChatCompletionRequest, "tools">): ReadonlySet<string> {
  return new Set((body.tools ?? []).flatMap((t) => (t.type === "custom" ? [t.custom.name] : [])));
}

/** Default thinking budgets for effort levels; `high` leaves the model unbounded (within max_tokens). */
const EFFORT_BUDGET = { minimal: 64, low: 512, medium: 2048, high: undefined, xhigh: undefined, max: undefined } as const;

/**
 * vLLM's and SGLang's template switches: `enable_thinking` is the one passed on (as the thinking
 * switch llama-server sets); any other would render a prompt Plinth does not, so it is refused.
 */
export function enableThinking(kwargs: Record<string, unknown> | null | undefined): boolean | undefined {
  for (const key of Object.keys(kwargs ?? {})) {
    if (key !== "enable_thinking")
      throw unsupportedField(`chat_template_kwargs.${key}`, "is not a template switch this server passes on (only enable_thinking is)");
  }
  const on = kwargs?.enable_thinking;
  if (on != null && typeof on !== "boolean")
    throw badRequest("chat_template_kwargs.enable_thinking must be a boolean.", "chat_template_kwargs.enable_thinking");
  return on ?? undefined;
}

/**
 * The thinking switch, as vLLM and SGLang pass it (chat_template_kwargs.enable_thinking), as Qwen's
 * API takes it (enable_thinking) and as DeepSeek's, GLM's and Kimi's take it (thinking.type). Two
 * that disagree are a 400 naming the second.
 */
function thinkingSwitch(body: ChatCompletionRequest): boolean | undefined {
  const given: Array<[string, boolean]> = [];
  const kwargs = enableThinking(body.chat_template_kwargs);
  if (kwargs !== undefined) given.push(["chat_template_kwargs.enable_thinking", kwargs]);
  if (body.enable_thinking != null) given.push(["enable_thinking", body.enable_thinking]);
  if (body.thinking != null) given.push(["thinking.type", body.thinking.type === "enabled"]);
  const clash = given.find(([, on]) => on !== given[0][1]);
  if (clash) throw badRequest(`${given[0][0]} and ${clash[0]} disagree; send one of them.`, clash[0]);
  return given[0]?.[1];
}

/**
 * reasoning_effort, reasoning {effort, budget_tokens, max_tokens, enabled}, enable_thinking,
 * thinking {type, budget_tokens},
 * chat_template_kwargs.enable_thinking and vLLM's thinking_token_budget (or llama-server's
 * reasoning_budget_tokens, named by `budgetParam`) all steer one thing: whether the model thinks, and
 * for how long.
 */
function reasoningControl(
  body: ChatCompletionRequest,
  thinkingBudget?: number,
  budgetParam = "thinking_token_budget",
): { reasoning?: GenerationRequest["reasoning"]; reasoningParam?: string; budgetParam?: string } {
  const switched = thinkingSwitch(body);
  const effort = body.reasoning?.effort ?? body.reasoning_effort ?? undefined;
  const params: string[] = [];
  if (body.reasoning_effort != null) params.push("reasoning_effort");
  if (body.reasoning != null) params.push("reasoning");
  if (body.thinking != null) params.push("thinking");
  if (body.enable_thinking != null) params.push("enable_thinking");
  if (body.chat_template_kwargs?.enable_thinking != null) params.push("chat_template_kwargs.enable_thinking");
  if (thinkingBudget !== undefined) params.push(budgetParam);
  if (params.length === 0) return {};

  if (body.reasoning?.enabled != null && switched !== undefined && body.reasoning.enabled !== switched)
    throw badRequest("reasoning.enabled and the thinking switch (enable_thinking, thinking.type or chat_template_kwargs.enable_thinking) disagree; send one of them.", "reasoning.enabled");
  let enabled: boolean | undefined = body.reasoning?.enabled ?? switched;
  if (effort === "none" && enabled === true)
    throw badRequest("reasoning effort 'none' turns thinking off, and the thinking switch turns it on; send one of them.", params[0]);
  if (effort === "none") enabled = false;
  const reasoningBudget = body.reasoning?.budget_tokens ?? body.reasoning?.max_tokens;
  const thinkingObjectBudget = body.thinking?.budget_tokens;
  if (reasoningBudget !== undefined && thinkingObjectBudget !== undefined && reasoningBudget !== thinkingObjectBudget)
    throw badRequest("thinking.budget_tokens and reasoning's budget disagree; send one of them.", "thinking.budget_tokens");
  const own = reasoningBudget ?? thinkingObjectBudget;
  if (own !== undefined && thinkingBudget !== undefined && own !== thinkingBudget)
    throw badRequest(`${budgetParam} and reasoning's budget disagree; send one of them.`, budgetParam);
  const given = own ?? thinkingBudget;
  const budget = given ?? (effort && effort !== "none" ? EFFORT_BUDGET[effort] : undefined);
  if (enabled === false && budget !== undefined)
    throw badRequest("A thinking budget was given, but thinking is turned off.", thinkingBudget !== undefined ? budgetParam : params[0]);
  const fromEffort = effort !== undefined && effort !== "none" && enabled === undefined && given === undefined;
  return {
    reasoning: {
      enabled: enabled ?? (effort !== undefined ? true : undefined),
      budgetTokens: budget,
      effort: effort === "none" ? undefined : effort,
      ...(fromEffort ? { fromEffort } : {}),
    },
    reasoningParam: params[0],
    // Where the client's own budget came from (an effort's budget names the effort instead).
    budgetParam:
      body.reasoning?.budget_tokens != null
        ? "reasoning.budget_tokens"
        : body.reasoning?.max_tokens != null
          ? "reasoning.max_tokens"
          : thinkingObjectBudget !== undefined
            ? "thinking.budget_tokens"
            : thinkingBudget !== undefined
              ? budgetParam
              : undefined,
  };
}

function refuseUnsupported(body: ChatCompletionRequest): void {
  for (const [field, why] of NOT_YET) {
    if (body[field] != null) throw unsupportedField(field, why);
  }
  refuseVerbosity(body.verbosity, "verbosity");
  if (body.top_logprobs != null && !body.logprobs)
    throw badRequest("top_logprobs needs logprobs set to true.", "top_logprobs");
  if (body.modalities && body.modalities.some((m) => m !== "text"))
    throw unsupportedField("modalities", "only text output is supported");
  if (body.service_tier != null && !["auto", "default"].includes(body.service_tier))
    throw badRequest(`service_tier '${body.service_tier}' is not offered; use 'auto' or 'default'.`, "service_tier", serviceTierCode(body.service_tier));
  if (body.stream_options != null && !body.stream)
    throw badRequest("stream_options is only allowed when stream is true.", "stream_options");
  refuseServiceFields(body);
}

export function toMessage(m: ChatMessage, i: number, all: readonly ChatMessage[]): Message {
  switch (m.role) {
    case "system":
    case "developer":
      return { role: "system", content: flatten(m.content, i), name: m.name ?? undefined };
    case "user":
      return { role: "user", ...userContent(m.content, i), name: m.name ?? undefined };
    case "assistant":
      if (m.function_call != null) throw unsupportedField(`messages[${i}].function_call`, "is deprecated; send tool_calls instead");
      if (m.audio != null) throw unsupportedField(`messages[${i}].audio`, "is not supported by this server");
      if (m.prefix === true && i !== all.length - 1)
        throw badRequest(`messages[${i}].prefix: only the last message, an assistant's, is a prefix to continue.`, `messages[${i}].prefix`);
      return {
        role: "assistant",
        content: assistantText(m.content, m.refusal, i),
        name: m.name ?? undefined,
        // A custom tool's input travels as the one string argument the engine writes it in.
        toolCalls: m.tool_calls?.map((c) =>
          c.type === "function" ? { id: c.id, name: c.function.name, arguments: c.function.arguments } : { id: c.id, name: c.custom.name, arguments: JSON.stringify({ input: c.custom.input }) },
        ),
      };
    case "tool":
      return { role: "tool", content: flatten(m.content, i), toolCallId: m.tool_call_id };
    case "function":
      throw badRequest(`messages[${i}] uses the deprecated 'function' role; use 'tool' messages.`, `messages[${i}].role`);
  }
}

/**
 * What an earlier assistant turn said: its text and refusal parts (the reference allows both in an
 * assistant message), or, for a turn that only refused, its `refusal` field, so a client sending
 * back a refusal as it got it shows the model what it said.
 */
function assistantText(content: string | Array<{ type: string; text?: unknown; refusal?: unknown }> | null | undefined, refusal: string | null | undefined, i: number): string {
  const text =
    content == null
      ? ""
      : typeof content === "string"
        ? content
        : content
            .map((part, j) => {
              if (part.type !== "refusal") return textOf(part, i, j);
              if (typeof part.refusal !== "string")
                throw badRequest(`messages[${i}].content[${j}].refusal must be a string: a refusal part carries its text there.`, `messages[${i}].content[${j}].refusal`);
              return part.refusal;
            })
            .join("\n");
  return text === "" && refusal ? refusal : text;
}

/** Text parts are joined by newlines (as vLLM does); anything else (images, audio, files) is refused here. */
function flatten(content: string | Array<{ type: string; text?: unknown }>, i: number): string {
  if (typeof content === "string") return content;
  return content.map((part, j) => textOf(part, i, j)).join("\n");
}

function textOf(part: { type: string; text?: unknown }, i: number, j: number): string {
  if (part.type === "text" && typeof part.text !== "string")
    throw badRequest(
      part.text === undefined
        ? `messages[${i}].content[${j}].text is required: a text part carries its text as a string.`
        : `messages[${i}].content[${j}].text must be a string.`,
      `messages[${i}].content[${j}].text`,
      part.text === undefined ? "missing_required_parameter" : "invalid_type",
    );
  const breakpoint = (part as { prompt_cache_breakpoint?: unknown }).prompt_cache_breakpoint;
  if (part.type === "text" && breakpoint != null && !promptCacheBreakpoint.safeParse(breakpoint).success)
    throw badRequest(`messages[${i}].content[${j}].prompt_cache_breakpoint must be {"mode": "explicit"}.`, `messages[${i}].content[${j}].prompt_cache_breakpoint`, "invalid_value");
  const control = (part as { cache_control?: unknown }).cache_control;
  if (part.type === "text" && control != null && !cacheControl.safeParse(control).success)
    throw badRequest(`messages[${i}].content[${j}].cache_control must be {"type": "ephemeral"}, with an optional ttl of "5m" or "1h".`, `messages[${i}].content[${j}].cache_control`, "invalid_value");
  if (part.type === "image_url") throw badRequest(`messages[${i}].content[${j}] is an image; images belong in user messages.`, `messages[${i}].content[${j}]`);
  if (part.type !== "text")
    throw badRequest(`messages[${i}].content[${j}] has type '${part.type}'; only text and image_url parts are supported by this server.`, `messages[${i}].content[${j}].type`);
  return part.text as string;
}

/**
 * A user message may show images: they go into the canonical parts, and the engine decides
 * whether its model can read them (a remote upstream may; a local text model refuses by position).
 */
function userContent(content: string | Array<{ type: string; text?: unknown }>, i: number): Pick<Message, "content" | "parts"> {
  if (typeof content === "string") return { content };
  return withParts(content.map((part, j): ContentPart => (part.type === "image_url" ? imagePart(part, `messages[${i}].content[${j}]`) : { type: "text", text: textOf(part, i, j) })));
}

const DETAILS = ["auto", "low", "high"];

/** `{type: "image_url", image_url: {url, detail?}}`, checked field by field so nothing in it is lost. */
function imagePart(part: Record<string, unknown>, at: string): ContentPart {
  for (const key of Object.keys(part)) if (key !== "type" && key !== "image_url" && key !== "prompt_cache_breakpoint") throw unsupportedField(`${at}.${key}`, "is not a field of an image_url part");
  const breakpoint = part.prompt_cache_breakpoint;
  if (breakpoint != null && !promptCacheBreakpoint.safeParse(breakpoint).success)
    throw badRequest(`${at}.prompt_cache_breakpoint must be {"mode": "explicit"}.`, `${at}.prompt_cache_breakpoint`, "invalid_value");
  const image = part.image_url as Record<string, unknown> | undefined;
  if (image === null || typeof image !== "object" || Array.isArray(image))
    throw badRequest(`${at}.image_url must be an object with a url.`, `${at}.image_url`);
  for (const key of Object.keys(image)) if (key !== "url" && key !== "detail") throw unsupportedField(`${at}.image_url.${key}`, "is not a field of image_url");
  if (typeof image.url !== "string" || image.url === "") throw badRequest(`${at}.image_url.url must be a non-empty string (an https: or data: URL).`, `${at}.image_url.url`);
  if (image.detail !== undefined && !DETAILS.includes(image.detail as string))
    throw badRequest(`${at}.image_url.detail must be one of ${DETAILS.join(", ")}.`, `${at}.image_url.detail`, "invalid_value");
  return { type: "image", url: image.url, ...(image.detail !== undefined ? { detail: image.detail as "auto" | "low" | "high" } : {}) };
}
