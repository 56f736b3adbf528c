import { withParts } from "../../core/content-parts.ts";
import { drawnSeed, samplerSeed } from "../../core/random.ts";
import { ApiError, badRequest, type FieldNamer, unsupportedField } from "../../core/errors.ts";
import type { ContentPart, GenerationRequest, Message, ToolCall, ToolChoice, ToolDefinition } from "../../core/types.ts";
import { enableThinking } from "../openai/chat-to-canonical.ts";
import { foreignFields } from "../openai/foreign-fields.ts";
import { isolationKey, normaliseStop } from "../openai/sampling-fields.ts";
import { refuseServiceFields, refuseVerbosity, serviceTierCode } from "../openai/service-fields.ts";
import { type RequestedFormat, structuredFormat } from "../openai/structured-fields.ts";
import { type CreateResponseRequest, INCLUDABLE, type InputItem } from "./protocol.ts";

/** Built-in tools Plinth cannot run; refused by name rather than silently dropped. */
const BUILT_IN_TOOLS = new Set([
  "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "file_search",
  "code_interpreter", "computer_use_preview", "computer_use", "image_generation", "mcp", "shell", "local_shell",
  "apply_patch",
]);

/** Thinking budgets per effort, the chat path's levels; `high`, `xhigh` and `max` leave it unbounded. */
const EFFORT_BUDGET = { minimal: 64, low: 512, medium: 2048, high: undefined, xhigh: undefined, max: undefined } as const;

export interface CanonicalResponse {
  request: GenerationRequest;
  namespace?: string;
  /** This request's field names: like `responsesFieldName`, and a message's parts by input position. */
  fieldName: FieldNamer;
}

/**
 * A Responses request, with its whole input already resolved (earlier responses, conversation
 * items and item references expanded into `items`), as a canonical chat request.
 */
export function responseToCanonical(body: CreateResponseRequest, items: InputItem[], ownFrom = 0): CanonicalResponse {
  refuseUnsupported(body);
  refuseUnansweredCalls(items);
  const origins: Array<number | undefined> = [];
  const earlier = body.previous_response_id ? "previous_response_id" : body.conversation ? "conversation" : "input";
  const messages = itemsToMessages(items, ownFrom, origins, earlier);
  // Instructions lead the prompt and are never carried over from an earlier response.
  if (body.instructions) {
    messages.unshift({ role: "system", content: body.instructions });
    origins.unshift(undefined);
  }
  if (messages.length === 0) throw badRequest("The request has no input; send 'input' or 'previous_response_id'.", "input");
  const foreign = foreignFields(body, "responses", body.max_output_tokens, body.repetition_penalty, "max_output_tokens", messages.at(-1)?.role);
  if (foreign.maxTokens === 0) throw badRequest("n_predict must be at least 1 on a response (or -1: no limit).", "n_predict");
  const format = answerFormat(body);
  const tools = toolsToCanonical(body);
  if (foreign.ignoreEos && (format || (tools.tools && tools.toolChoice !== "none")))
    throw badRequest("ignore_eos cannot be combined with tools or a structured answer: their grammars end the answer.", "ignore_eos");
  const { reasoning, reasoningParam } = reasoningControl(body, foreign.thinkingBudget, foreign.thinkingBudgetParam);
  const logprobs = body.include?.includes("message.output_text.logprobs") ? (body.top_logprobs ?? 0) : undefined;
  const request: GenerationRequest = {
    model: body.model,
    prompt: { kind: "chat", messages },
    sampling: {
      temperature: body.temperature ?? 1,
      topP: body.top_p ?? 1,
      topK: body.top_k == null || body.top_k < 0 ? 0 : body.top_k,
      minP: body.min_p ?? 0,
      seed: body.seed == null ? drawnSeed() : samplerSeed(body.seed),
      ...(body.seed == null ? { seedDrawn: true } : {}),
      frequencyPenalty: body.frequency_penalty ?? 0,
      presencePenalty: body.presence_penalty ?? 0,
      repetitionPenalty: foreign.repetitionPenalty ?? body.repetition_penalty ?? 1,
      logitBias: new Map(Object.entries(body.logit_bias ?? {}).map(([k, v]) => [Number(k), v])),
    },
    maxTokens: body.max_output_tokens ?? foreign.maxTokens,
    ...(foreign.ignoreEos ? { ignoreEos: true } : {}),
    stop: normaliseStop(body.stop),
    n: 1,
    // A background response's events are stored as they come and may be streamed from there.
    wholeAnswer: body.stream !== true && body.background !== true,
    cacheKey: body.prompt_cache_key ?? undefined,
    logprobs,
    ...tools,
    responseFormat: format?.format,
    ...(reasoning ? { reasoning } : {}),
  };
  const named = partFieldNamer(origins, body);
  // Errors about a budget, a format or thinking name the extension field that asked, where one did.
  const fieldName: FieldNamer = (field) => {
    if (field === "maxTokens" && body.max_output_tokens == null && body.n_predict != null) return "n_predict";
    if (field.startsWith("responseFormat") && format && format.param !== "text.format") return format.param;
    if (field === "reasoning" && reasoningParam) return reasoningParam;
    // Log probabilities asked for by `include` alone (no top_logprobs): that is the field sent.
    if (field === "logprobs" && body.top_logprobs == null) return "include";
    return named(field);
  };
  return { request, namespace: isolationKey(body.safety_identifier ?? body.user, body.cache_salt), fieldName };
}

/**
 * Canonical message positions differ from input positions (instructions lead, calls merge into
 * one assistant turn), so a part an engine refuses is named through the item it came from. Items
 * of an earlier response are not in this request: the field that brought them in is named.
 */
function partFieldNamer(origins: Array<number | undefined>, body: CreateResponseRequest): FieldNamer {
  const elsewhere = () => (body.previous_response_id ? "previous_response_id" : body.conversation ? "conversation" : "input");
  return (field) => {
    // A tool result's call id that answers no call: the function_call_output item's call_id.
    const t = /^prompt\.messages\[(\d+)\]\.toolCallId$/.exec(field);
    if (t) {
      const item = origins[Number(t[1])];
      return item === undefined ? elsewhere() : `input[${item}].call_id`;
    }
    // A message's text: the instructions lead the messages; an input item's content otherwise.
    const c = /^prompt\.messages\[(\d+)\]\.content$/.exec(field);
    if (c) {
      if (Number(c[1]) === 0 && body.instructions) return "instructions";
      const item = origins[Number(c[1])];
      if (item === undefined) return elsewhere();
      if (typeof body.input === "string") return "input";
      const type = (body.input?.[item] as { type?: string } | undefined)?.type;
      return `input[${item}].${type === "function_call_output" || type === "custom_tool_call_output" ? "output" : "content"}`;
    }
    const m = /^prompt\.messages\[(\d+)\]\.parts\[(\d+)\](.*)$/.exec(field);
    if (!m) return responsesFieldName(field);
    const item = origins[Number(m[1])];
    if (item === undefined) return elsewhere();
    return `input[${item}].content[${m[2]}]${m[3]}`;
  };
}

const CALL_KINDS = new Map([["function_call", "function call"], ["custom_tool_call", "custom tool call"]]);

/**
 * OpenAI refuses a conversation with a tool call that has no output anywhere in it (from the
 * earlier response, the conversation or this input), and so does Plinth: otherwise the model would
 * be prompted with a call that has no result. An output answers its call wherever it stands: a
 * previous response's calls are answered in the next request's input.
 */
function refuseUnansweredCalls(items: InputItem[]): void {
  const answered = new Set(items.filter((i) => i.type === "function_call_output" || i.type === "custom_tool_call_output").map(callId));
  const open = items.find((i) => CALL_KINDS.has(i.type ?? "") && !answered.has(callId(i)));
  if (open) throw badRequest(`No tool output found for ${CALL_KINDS.get(open.type!)} ${callId(open)}.`, "input");
}

const callId = (item: InputItem): string => (item as { call_id: string }).call_id;

/** Refusals that need nothing but the body; checked before any stored state is read. */
export function refuseUnsupported(body: CreateResponseRequest): void {
  if (body.prompt != null) throw unsupportedField("prompt", "stored prompt templates are not supported by this server");
  if (body.stream_options != null && body.stream !== true) throw badRequest("stream_options is only allowed when stream is true.", "stream_options");
  // Any choice that demands a call (required, a named tool, allowed tools in required mode) cannot
  // be met when no call is allowed; offering no tools instead would drop the choice without a word.
  if (body.max_tool_calls === 0 && demandsCall(body.tool_choice))
    throw badRequest(`tool_choice ${describeChoice(body.tool_choice)} asks for a tool call, but max_tool_calls is 0.`, "tool_choice");
  if (body.context_management != null) throw unsupportedField("context_management", "is not supported: this server does not compact conversations");
  // vLLM's: the raw prompt and answer messages beside the output, and a harmony history given as messages.
  if (body.enable_response_messages) throw unsupportedField("enable_response_messages", "is not supported: the output items are the answer");
  if (body.previous_input_messages != null) throw unsupportedField("previous_input_messages", "is not supported; send earlier turns as input items or previous_response_id");
  refuseServiceFields(body);
  refuseVerbosity(body.text?.verbosity, "text.verbosity");
  if (body.background && body.store === false) throw badRequest("A background response must be stored; do not set store to false.", "background");
  if (body.previous_response_id && body.conversation) throw badRequest("Send either previous_response_id or conversation, not both.", "conversation");
  // One way of reasoning here; and input reasoning items are never rendered back to the model (see
  // itemsToMessages), in this turn or earlier ones, so only the model's own choice ("auto") holds.
  const mode = body.reasoning?.mode;
  if (mode != null && mode !== "standard") throw unsupportedField("reasoning.mode", `'${mode}' is not offered; this server reasons in the standard mode only`);
  const context = body.reasoning?.context;
  if (context != null && context !== "auto")
    throw unsupportedField("reasoning.context", `'${context}' cannot be honoured: reasoning items sent back are not rendered to the model here`);
  // 0 asks for nothing, and it is what every response echoes, so a client that sends back the fields
  // it was given is not refused; more alternatives without the logprobs included would go nowhere.
  if (body.top_logprobs && !body.include?.includes("message.output_text.logprobs"))
    throw badRequest("top_logprobs needs include: [\"message.output_text.logprobs\"].", "top_logprobs");
  if (body.service_tier != null && !["auto", "default"].includes(body.service_tier))
    throw badRequest(`service_tier '${body.service_tier}' is not offered; use 'auto' or 'default'.`, "service_tier", serviceTierCode(body.service_tier));
  for (const inc of body.include ?? []) {
    if (!INCLUDABLE.includes(inc)) throw unsupportedField("include", `'${inc}' cannot be included by this server (it offers ${INCLUDABLE.join(" and ")})`);
  }
}

/** Whether a tool_choice makes the model call a tool. */
function demandsCall(c: CreateResponseRequest["tool_choice"]): boolean {
  if (c == null || typeof c === "string") return c === "required";
  if (c.type === "allowed_tools") return (c as { mode?: string }).mode === "required";
  return c.type === "function" || c.type === "custom";
}

function describeChoice(c: CreateResponseRequest["tool_choice"]): string {
  if (typeof c === "string") return `'${c}'`;
  const named = (c as { name?: string }).name;
  return named ? `${c!.type} '${named}'` : `'${c!.type}' in required mode`;
}

/** `text.format`, or one of vLLM's structured-output fields (read as chat reads them); never two at once. */
function answerFormat(body: CreateResponseRequest): RequestedFormat | undefined {
  const own = responseFormat(body);
  const requested = own ? { format: own, param: "text.format" } : undefined;
  return structuredFormat(body, requested) ?? requested;
}

function responseFormat(body: CreateResponseRequest): GenerationRequest["responseFormat"] {
  const f = body.text?.format;
  if (f == null || f.type === "text") return undefined;
  if (f.type === "json_object") return { type: "json_object" };
  // Not strict unless asked, as in chat: the reference's TextResponseFormatJsonSchema.strict
  // defaults to false (unlike function tools' `strict`, which defaults to true in this API).
  return { type: "json_schema", schema: f.schema, strict: f.strict === true };
}

/**
 * `reasoning.effort` and the chat path's `reasoning.budget_tokens` / `max_tokens` / `enabled`, and
 * vLLM's `chat_template_kwargs.enable_thinking` and `thinking_token_budget` (or llama-server's
 * `reasoning_budget_tokens`, named by `budgetParam`; all read as chat reads them): whether the model
 * thinks, and for how long. The field that asked is returned for errors about it when it is not the
 * effort.
 */
function reasoningControl(
  body: CreateResponseRequest,
  thinkingBudget?: number,
  budgetParam = "thinking_token_budget",
): { reasoning?: GenerationRequest["reasoning"]; reasoningParam?: string } {
  const effort = body.reasoning?.effort ?? undefined;
  const switched = enableThinking(body.chat_template_kwargs);
  const ownField = body.reasoning?.budget_tokens != null ? "reasoning.budget_tokens" : body.reasoning?.max_tokens != null ? "reasoning.max_tokens" : undefined;
  const own = body.reasoning?.budget_tokens ?? body.reasoning?.max_tokens ?? undefined;
  const asked = body.reasoning?.enabled ?? undefined;
  if (effort === undefined && switched === undefined && thinkingBudget === undefined && own === undefined && asked === undefined) return {};
  if (own !== undefined && thinkingBudget !== undefined && own !== thinkingBudget)
    throw badRequest(`${budgetParam} and reasoning's budget disagree; send one of them.`, budgetParam);
  if (effort !== undefined && switched !== undefined && switched !== (effort !== "none"))
    throw badRequest("chat_template_kwargs.enable_thinking and reasoning.effort disagree; send one of them.", "chat_template_kwargs.enable_thinking");
  if (asked !== undefined && ((effort !== undefined && asked !== (effort !== "none")) || (switched !== undefined && asked !== switched)))
    throw badRequest("reasoning.enabled disagrees with how thinking is otherwise switched; send one of them.", "reasoning.enabled");
  const enabled = effort !== undefined ? effort !== "none" : (asked ?? switched);
  const budget = own ?? thinkingBudget;
  const budgetField = thinkingBudget !== undefined ? budgetParam : ownField;
  if (enabled === false && budget !== undefined) throw badRequest("A thinking budget was given, but thinking is turned off.", budgetField!);
  const reasoningParam =
    effort !== undefined ? undefined : (budgetField ?? (asked !== undefined ? "reasoning.enabled" : "chat_template_kwargs.enable_thinking"));
  if (enabled === false) return { reasoning: { enabled: false }, reasoningParam };
  const fromEffort = effort !== undefined && switched === undefined && budget === undefined && asked === undefined;
  return {
    reasoning: {
      enabled: effort !== undefined ? true : enabled,
      budgetTokens: budget ?? (effort !== undefined ? EFFORT_BUDGET[effort as Exclude<typeof effort, "none">] : undefined),
      ...(effort !== undefined ? { effort: effort as Exclude<typeof effort, "none"> } : {}),
      ...(fromEffort ? { fromEffort } : {}),
    },
    reasoningParam,
  };
}

type RequestTool = NonNullable<CreateResponseRequest["tools"]>[number];

/**
 * A request's tools as the model is offered them: a namespace's tools in its place, each with the
 * path it was sent at (`tools[2].tools[0]`) and the namespace it belongs to.
 */
export function flatTools(tools: CreateResponseRequest["tools"]): Array<{ tool: RequestTool; at: string; namespace?: string }> {
  return (tools ?? []).flatMap((t, i) =>
    t.type === "namespace"
      ? (t as { name: string; tools: RequestTool[] }).tools.map((inner, j) => ({ tool: inner, at: `tools[${i}].tools[${j}]`, namespace: (t as { name: string }).name }))
      : [{ tool: t, at: `tools[${i}]` }],
  );
}

/** The namespace of each tool that is in one, by the tool's name: a call of it names the namespace. */
export function toolNamespaces(tools: CreateResponseRequest["tools"]): Map<string, string> {
  return new Map(flatTools(tools).flatMap(({ tool, namespace }) => (namespace ? [[(tool as { name: string }).name, namespace] as const] : [])));
}

function toolsToCanonical(body: CreateResponseRequest): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const tools: ToolDefinition[] = [];
  // Each tool's type by name: a choice names a tool of one type.
  const seen = new Map<string, string>();
  flatTools(body.tools).forEach(({ tool: t, at }) => {
    if (t.type !== "function" && t.type !== "custom") {
      throw unsupportedField(`${at}.type`, BUILT_IN_TOOLS.has(t.type) ? `'${t.type}' is a built-in tool this server cannot run` : `'${t.type}' is not a tool type this server knows`);
    }
    const def = t as { type: "function" | "custom"; name: string; description?: string | null; defer_loading?: boolean | null; allowed_callers?: string[] | null };
    // Every tool is offered up front, to the model itself: no tool search loads one later, and no
    // program calls one.
    if (def.defer_loading) throw unsupportedField(`${at}.defer_loading`, "is not supported: this server has no tool search, every tool is offered up front");
    if (def.allowed_callers?.some((c) => c !== "direct"))
      throw unsupportedField(`${at}.allowed_callers`, "can only be ['direct']: this server has no programmatic tool calling");
    if (seen.has(def.name)) throw badRequest(`Two tools are named '${def.name}'.`, `${at}.name`);
    seen.set(def.name, t.type);
    if (t.type === "function") {
      const f = t as { parameters?: Record<string, unknown> | null; strict?: boolean | null; output_schema?: Record<string, unknown> | null };
      // The model reads a call's output as text: the schema of that text is told with the description,
      // the one place a chat template gives a function's prose.
      const returns = f.output_schema ? `The function's output is JSON matching this schema: ${JSON.stringify(f.output_schema)}` : undefined;
      const description = [def.description, returns].filter((d) => d).join("\n\n") || undefined;
      // In this API, strict defaults to true: arguments are held to the schema.
      tools.push({ name: def.name, description, parameters: f.parameters ?? { type: "object", properties: {} }, strict: f.strict !== false });
    } else {
      const format = (t as { format?: { type: string; syntax?: "lark" | "regex"; definition?: string } | null }).format;
      const input = format?.type === "grammar" ? { syntax: format.syntax!, definition: format.definition! } : { syntax: "text" as const };
      tools.push({ name: def.name, description: def.description ?? undefined, parameters: undefined, strict: true, input });
    }
  });
  const choice = toolChoice(body, seen);
  if (tools.length === 0) return {};
  let parallel = body.parallel_tool_calls ?? true;
  if (body.max_tool_calls === 1) parallel = false;
  return { tools, toolChoice: body.max_tool_calls === 0 ? "none" : choice, parallelToolCalls: parallel };
}

function toolChoice(body: CreateResponseRequest, names: Map<string, string>): ToolChoice {
  const c = body.tool_choice;
  if (c == null) return "auto";
  if (typeof c === "string") {
    // "auto" is the default a response reports with no tools, so a client that sends it back gets
    // what it had; only "required" asks for a call that cannot be made.
    if (c === "required" && names.size === 0) throw badRequest("tool_choice needs tools to choose from.", "tool_choice");
    return c;
  }
  if (c.type === "function" || c.type === "custom") {
    const name = (c as { name: string }).name;
    if (!names.has(name)) throw badRequest(`tool_choice names '${name}', which is not among the tools.`, "tool_choice");
    // A function and a custom tool are called differently (JSON arguments or free text): a choice of
    // the other type would force a call the client did not ask for.
    if (names.get(name) !== c.type) throw badRequest(`tool_choice names the ${c.type} tool '${name}', but '${name}' is a ${names.get(name)} tool.`, "tool_choice.type");
    return { name };
  }
  if (c.type === "allowed_tools") {
    const a = c as { mode: "auto" | "required"; tools: Array<{ type: string; name?: string }> };
    const allowed = a.tools.map((t, i) => {
      if (!t.name || !names.has(t.name)) throw badRequest(`tool_choice.tools[${i}] is not among the tools.`, `tool_choice.tools[${i}]`);
      if (names.get(t.name) !== t.type)
        throw badRequest(`tool_choice.tools[${i}] names the ${t.type} tool '${t.name}', but '${t.name}' is a ${names.get(t.name)} tool.`, `tool_choice.tools[${i}].type`);
      return t.name;
    });
    return { allowed, required: a.mode === "required" };
  }
  throw unsupportedField("tool_choice", `'${c.type}' cannot be chosen: this server runs function and custom tools only`);
}

/**
 * Input items as chat messages. Consecutive calls join the assistant turn before them; outputs
 * become tool messages; reasoning items are not re-rendered (the chat path does not render earlier
 * turns' reasoning either, so the prompt keeps the previous turn's prefix).
 */
export function itemsToMessages(items: InputItem[], ownFrom = 0, origins: Array<number | undefined> = [], earlier = "input"): Message[] {
  const out: Message[] = [];
  const lastAssistant = (): Message => {
    const last = out.at(-1);
    if (last?.role === "assistant") return last;
    const m: Message = { role: "assistant", content: "" };
    out.push(m);
    return m;
  };
  // Each call's tool by call id, for an output that names the tool it came from.
  const callNames = new Map<string, string>();
  items.forEach((item, i) => {
    const type = "type" in item && item.type ? item.type : "message";
    if (i >= ownFrom) refuseItemFields(item, `input[${i - ownFrom}]`);
    switch (type) {
      case "message": {
        const m = item as Extract<InputItem, { role: string }>;
        const role = m.role === "developer" ? "system" : m.role;
        // Positions are the client's only for this request's own items; earlier ones are its history.
        if (i < ownFrom) {
          origins[out.length] = undefined;
          out.push({ role, ...earlierContent(item, () => messageContent(role, m.content, `item '${m.id}' content`), earlier) });
          return;
        }
        origins[out.length] = i - ownFrom;
        out.push({ role, ...messageContent(role, m.content, `input[${i - ownFrom}].content`) });
        return;
      }
      case "function_call":
      case "custom_tool_call": {
        const c = item as { call_id: string; name: string; arguments?: string; input?: string };
        const call: ToolCall = { id: c.call_id, name: c.name, arguments: type === "function_call" ? c.arguments! : JSON.stringify({ input: c.input }) };
        callNames.set(c.call_id, c.name);
        const a = lastAssistant();
        a.toolCalls = [...(a.toolCalls ?? []), call];
        return;
      }
      case "function_call_output":
      case "custom_tool_call_output": {
        const o = item as { call_id: string; output: string | Array<{ type: string; text?: unknown }>; name?: string | null };
        origins[out.length] = i >= ownFrom ? i - ownFrom : undefined;
        // The template takes the tool's name from the call; an output that names another tool
        // answers a call it does not belong to.
        const called = callNames.get(o.call_id);
        // A result answers a call made before it; one that answers none is refused here, by the
        // item it is (the engine's refusal counted canonical messages, which no field of the
        // request is numbered by, and a remote model's upstream got it as sent).
        if (called === undefined) throw strayOutput(item, i, ownFrom, o.call_id, earlier);
        if (i >= ownFrom && o.name != null && called !== o.name)
          throw badRequest(`input[${i - ownFrom}] names the tool '${o.name}', but its call ${o.call_id} is to '${called}'.`, `input[${i - ownFrom}].name`);
        const output = (at: string) => (typeof o.output === "string" ? o.output : flattenContent(o.output, at, IN_TOOL_OUTPUT));
        const content = i >= ownFrom ? output(`input[${i - ownFrom}].output`) : earlierContent(item, () => output(`item '${String((item as { id?: unknown }).id)}' output`), earlier);
        out.push({ role: "tool", content, toolCallId: o.call_id });
        return;
      }
      case "reasoning":
        return;
      case "item_reference":
        throw badRequest(`input[${i}] references item '${(item as { id: string }).id}', which is not stored here.`, `input[${i}].id`);
    }
  });
  return out;
}

type WirePart = { type: string; text?: unknown; refusal?: unknown };

/**
 * Why an image part cannot be where it is. OpenAI takes images in a function call's output too, but
 * a tool result reaches the model as text here (as Chat Completions' tool messages, which an
 * upstream is sent, hold text only).
 */
const IN_MESSAGE = "images belong in user messages";
const IN_TOOL_OUTPUT = "a function call's output reaches the model as text on this server, so it can hold text parts only (send the image in a user message)";

function flattenContent(content: string | WirePart[], param: string, imageRefusal = IN_MESSAGE): string {
  if (typeof content === "string") return content;
  return content.map((part, j) => textOf(part, `${param}[${j}]`, imageRefusal)).join("\n");
}

function textOf(part: WirePart, at: string, imageRefusal: string): string {
  if ((part.type === "input_text" || part.type === "output_text") && typeof part.text === "string") return part.text;
  if (part.type === "refusal" && typeof part.refusal === "string") return part.refusal;
  if (part.type === "input_image") throw badRequest(`${at} is an image; ${imageRefusal}.`, at);
  throw badRequest(`${at} has type '${part.type}'; this server takes text and input_image parts only.`, `${at}.type`);
}

/** A message's content: a user message's text and images, any other role's text. */
function messageContent(role: string, content: string | WirePart[], at: string): Pick<Message, "content" | "parts"> {
  return role === "user" ? userContent(content, at) : { content: flattenContent(content, at) };
}

/**
 * An earlier item (of the conversation or the response continued) that cannot be used: it is not
 * this request's input, so its refusal names the item by id and the field that brought it in
 * (stored before its parts were checked on the way in, as conversations' items once were).
 */
function earlierContent<T>(item: { id?: unknown }, read: () => T, param: string): T {
  try {
    return read();
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 400) throw err;
    throw badRequest(`The item '${String(item.id)}' of ${historyName(param)} cannot be used: ${err.message}`, param, err.code);
  }
}

/** What the field that brought in a request's earlier items holds, in words. */
function historyName(param: string): string {
  return param === "conversation" ? "the conversation" : param === "previous_response_id" ? "the response continued" : "this request's history";
}

/**
 * A tool result whose call_id names no call before it: an item of this request's input, by its
 * position, or one of the history it continues (whose call item was deleted from the conversation,
 * say), by its id and the field that brought it in.
 */
function strayOutput(item: { id?: unknown }, i: number, ownFrom: number, callId: string, earlier: string): ApiError {
  const what = `a tool result whose call_id '${callId}' matches no earlier tool call`;
  if (i >= ownFrom) return badRequest(`input[${i - ownFrom}] is ${what}.`, `input[${i - ownFrom}].call_id`);
  return badRequest(`The item '${String(item.id)}' of ${historyName(earlier)} is ${what}: the item of its call is not there.`, earlier);
}

/**
 * OpenAI's fields of an item that Plinth cannot honour, refused by name: a call in a namespace of
 * tools (no such tools here) or made by a program (no programmatic calling here).
 */
function refuseItemFields(item: object, at: string): void {
  // A call's `namespace` (its tool's, as the response named it) is taken: the model knows the tool by
  // its own name, as it was offered.
  const { caller } = item as { caller?: { type?: unknown } | null };
  if (caller != null && caller.type !== "direct")
    throw unsupportedField(`${at}.caller`, "can only be {\"type\": \"direct\"}: this server has no programmatic tool calling");
}

/**
 * Checks an item's content parts as a request's input would be checked, for items stored to be
 * used later (a conversation's): a part that the next turn would refuse is refused now, by `at`.
 */
export function checkItemContent(item: Record<string, unknown>, at: string): void {
  const type = item.type ?? "message";
  refuseItemFields(item, at);
  if (type === "message" && (typeof item.content === "string" || Array.isArray(item.content)))
    messageContent(item.role as string, item.content as string | WirePart[], `${at}.content`);
  if ((type === "function_call_output" || type === "custom_tool_call_output") && Array.isArray(item.output))
    flattenContent(item.output as WirePart[], `${at}.output`, IN_TOOL_OUTPUT);
}

/** A user message's text and images; whether the model can read the images is the engine's call. */
function userContent(content: string | WirePart[], param: string): Pick<Message, "content" | "parts"> {
  if (typeof content === "string") return { content };
  return withParts(content.map((part, j): ContentPart => (part.type === "input_image" ? inputImage(part, `${param}[${j}]`) : { type: "text", text: textOf(part, `${param}[${j}]`, IN_MESSAGE) })));
}

const DETAILS = ["auto", "low", "high"];

/**
 * `{type: "input_image", image_url, detail}` (its keys are checked by the schema; a cache breakpoint
 * is taken as on a text part); a file_id would need a Files API this server lacks.
 */
function inputImage(part: Record<string, unknown>, at: string): ContentPart {
  if (part.file_id != null) throw unsupportedField(`${at}.file_id`, "needs a Files API, which this server does not have; send image_url");
  if (typeof part.image_url !== "string" || part.image_url === "")
    throw badRequest(`${at}.image_url must be a non-empty string (an https: or data: URL).`, `${at}.image_url`);
  if (part.detail != null && !DETAILS.includes(part.detail as string)) throw badRequest(`${at}.detail must be one of ${DETAILS.join(", ")}.`, `${at}.detail`, "invalid_value");
  return { type: "image", url: part.image_url, ...(part.detail != null ? { detail: part.detail as "auto" | "low" | "high" } : {}) };
}

/** Field names of this dialect for canonical fields (see core/errors.ts). */
export function responsesFieldName(field: string): string | null {
  if (field === "prompt") return "input";
  if (field === "maxTokens") return "max_output_tokens";
  if (field === "reasoning") return "reasoning.effort";
  if (field === "responseFormat.schema") return "text.format.schema";
  if (field === "responseFormat") return "text.format";
  if (field === "logprobs") return "top_logprobs";
  if (field === "cacheKey") return "prompt_cache_key";
  const tool = /^tools\[(\d+)\]\.(parameters|input)$/.exec(field);
  if (tool) return tool[2] === "parameters" ? `tools[${tool[1]}].parameters` : `tools[${tool[1]}].format.definition`;
  // Message positions differ from item positions once calls are merged; name the input as a whole.
  if (field.startsWith("prompt.messages")) return "input";
  return field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
