import type { CallIndex } from "../../grammar/compose.ts";
import { adoptXmlToolLayout } from "./xml-tool-calls.ts";
import type { ClientCallId } from "./chat-history.ts";
import { nemoCallId } from "./mistral-wrapper.ts";
import { adoptGemma4ToolLayout, toolResponsesOnTurn, wantsToolResponses } from "./gemma4-tool-calls.ts";
import { adoptLfm2ToolLayout } from "./python-tool-calls.ts";
import { escapeResultsAsJsonStrings, writesResultsAsJsonStrings } from "./json-results.ts";
import { type ChatHistoryItem, type ChatModelResponse, ChatWrapper, type ChatWrapperSettings, type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText, type Tokenizer } from "node-llama-cpp";

// Tool calling through a model's own template, for templates whose call layout node-llama-cpp
// cannot work out by itself.
//
// node-llama-cpp reads a template's call layout by rendering sample calls and comparing the text.
// When that fails (Hermes 2 Pro's and Hermes 3's tool-use templates, among others), it documents
// the tools in a system message of its own, with a call syntax of its own (`||call: name(...)`),
// and leaves the template's tool section empty: the model is told to call tools in a way it was
// never trained on. For a template of a known family, the layout is given here instead, and the
// wrapper is switched to its template path: the template then receives `tools` and the messages
// with `tool_calls` and `tool` turns, as llama.cpp's server and vLLM pass them, and writes them
// its own way.

/** A call layout, as node-llama-cpp's chat wrapper settings describe it. */
type FunctionsSettings = ChatWrapperSettings["functions"];

interface KnownLayout {
  /** Which family, for logs and tests. */
  name: string;
  /** Whether a template is of this family. */
  matches(template: string): boolean;
  functions: FunctionsSettings;
  /** A counter each call carries next to its name (which node-llama-cpp's settings cannot express). */
  index?: CallIndex;
  /**
   * Taken even where node-llama-cpp read a layout: what it reads from sample calls holds the
   * counter of its one sample as fixed text (Kimi K2's `:0<|tool_call_argument_begin|>`).
   */
  replacesRead?: boolean;
  /**
   * One call per turn: the template writes only a message's first call, and llama.cpp's server
   * reads at most one (GigaChat's), so a second would be lost from the history.
   */
  oneCall?: boolean;
}

/**
 * Hermes (NousResearch's tool-use templates, and the fine-tunes that copy them): each call is a JSON
 * object with `name` and `arguments` between <tool_call> tags, each result a `tool` turn between
 * <tool_response> tags; Qwen 2.5 and Qwen 3 write the same, and node-llama-cpp reads theirs.
 */
const HERMES: KnownLayout = {
  name: "hermes",
  matches: (t) => t.includes("<tool_call>") && t.includes("</tool_call>") && t.includes("<tool_response>") && /\barguments\b/.test(t) && /\btools\b/.test(t),
  functions: {
    call: {
      optionalPrefixSpace: true,
      prefix: LlamaText('<tool_call>\n{"name": "'),
      paramsPrefix: LlamaText('", "arguments": '),
      suffix: LlamaText("}\n</tool_call>"),
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: LlamaText("<tool_response>\n"), suffix: LlamaText("\n</tool_response>") },
    parallelism: {
      call: { sectionPrefix: "", betweenCalls: "\n", sectionSuffix: "" },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
};

/** Calls one after another and results one after another, with nothing around or between them. */
const UNWRAPPED: NonNullable<ChatWrapperSettings["functions"]["parallelism"]> = {
  call: { sectionPrefix: "", betweenCalls: "", sectionSuffix: "" },
  result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
};

/**
 * Mistral's templates since their v11 tokenizer (Mistral Small 3.x, Devstral, Magistral): each call
 * is `[TOOL_CALLS]name[ARGS]{json}`, both markers control tokens, the next call opened by
 * `[TOOL_CALLS]` again and the turn ended by EOS, as llama.cpp's server and vLLM's Mistral parser
 * read them. (Mistral Small 3.2's template writes `[CALL_ID]id` before `[ARGS]` in the history, with
 * the 9-character ids node-llama-cpp gives calls; a model's own call is held to the shorter form
 * these servers expect of it.) Mistral Nemo's older `[TOOL_CALLS][{…}]` layout is node-llama-cpp's
 * Mistral wrapper's, whose template node-llama-cpp cannot run.
 */
const MISTRAL: KnownLayout = {
  name: "mistral",
  matches: (t) => t.includes("[TOOL_CALLS]") && t.includes("[ARGS]") && t.includes("[AVAILABLE_TOOLS]"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: LlamaText(new SpecialTokensText("[TOOL_CALLS]")),
      paramsPrefix: LlamaText(new SpecialTokensText("[ARGS]")),
      suffix: "",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: LlamaText(new SpecialTokensText("[TOOL_RESULTS]")), suffix: LlamaText(new SpecialTokensText("[/TOOL_RESULTS]")) },
    parallelism: UNWRAPPED,
  },
};

/**
 * IBM Granite 3.x: the calls of a turn are one JSON list after the `<|tool_call|>` control token,
 * each `{"name": …, "arguments": {…}}`; tools go in an `available_tools` turn, results in `tool`
 * turns. The template writes a finished turn's calls as nothing (only its content), as llama.cpp's
 * server renders it too.
 */
const GRANITE: KnownLayout = {
  name: "granite",
  matches: (t) => t.includes("<|tool_call|>") && t.includes("available_tools"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: '{"name": "',
      paramsPrefix: '", "arguments": ',
      suffix: "}",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: {
      call: { sectionPrefix: LlamaText(new SpecialTokensText("<|tool_call|>"), "["), betweenCalls: ", ", sectionSuffix: "]" },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
};

/**
 * DeepSeek R1 (and its distills): a turn's calls are one section between
 * `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`, each call
 * `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then its arguments in a ```json block and
 * `<｜tool▁call▁end｜>`, one per line, as llama.cpp's server reads them. (The distills' template
 * documents no tools; llama.cpp's server then shows the model none either.)
 */
const DEEPSEEK_R1: KnownLayout = {
  name: "deepseek-r1",
  matches: (t) => t.includes("<｜tool▁calls▁begin｜>") && t.includes("<｜tool▁call▁begin｜>") && t.includes("<｜tool▁sep｜>") && t.includes("```json"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: LlamaText(new SpecialTokensText("<｜tool▁call▁begin｜>function<｜tool▁sep｜>")),
      paramsPrefix: "\n```json\n",
      suffix: LlamaText("\n```", new SpecialTokensText("<｜tool▁call▁end｜>")),
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: LlamaText(new SpecialTokensText("<｜tool▁output▁begin｜>")), suffix: LlamaText(new SpecialTokensText("<｜tool▁output▁end｜>")) },
    parallelism: {
      call: { sectionPrefix: LlamaText(new SpecialTokensText("<｜tool▁calls▁begin｜>")), betweenCalls: "\n", sectionSuffix: LlamaText(new SpecialTokensText("<｜tool▁calls▁end｜>")) },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
};

/**
 * Cohere Command R+ (its tool_use template): `Action:` then a ```json block holding the turn's calls
 * as one list of `{"tool_name": …, "parameters": {…}}`, indented as the template writes answered
 * calls; results go back in `<results>` system turns, which the template writes.
 */
const COMMAND_R_PLUS: KnownLayout = {
  name: "command-r-plus",
  matches: (t) => t.includes("<|CHATBOT_TOKEN|>") && t.includes("Action:") && t.includes('"tool_name"') && t.includes('"parameters"') && !t.includes("<|START_ACTION|>"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: '    {\n        "tool_name": "',
      paramsPrefix: '",\n        "parameters": ',
      suffix: "\n    }",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "<results>\n", suffix: "</results>" },
    parallelism: {
      call: { sectionPrefix: "Action:\n```json\n[\n", betweenCalls: ",\n", sectionSuffix: "\n]```" },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
};

/**
 * Kimi K2 (Instruct, Thinking): a turn's calls are one section between
 * `<|tool_calls_section_begin|>` and `<|tool_calls_section_end|>`, each call
 * `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`, where
 * IDX counts calls (across the whole conversation in K2 Instruct's later template and K2 Thinking's,
 * within the turn in the first K2 template). The template computes it for answered calls; the model
 * writes its own, digits as llama.cpp's server allows, and the parser drops it from the name.
 */
const KIMI_K2: KnownLayout = {
  name: "kimi-k2",
  matches: (t) => t.includes("<|tool_calls_section_begin|>") && t.includes("<|tool_call_begin|>") && t.includes("<|tool_call_argument_begin|>") && t.includes("'functions.'"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: LlamaText(new SpecialTokensText("<|tool_call_begin|>functions.")),
      paramsPrefix: LlamaText(new SpecialTokensText("<|tool_call_argument_begin|>")),
      suffix: LlamaText(new SpecialTokensText("<|tool_call_end|>")),
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: {
      call: {
        sectionPrefix: LlamaText(new SpecialTokensText("<|tool_calls_section_begin|>")),
        betweenCalls: "",
        sectionSuffix: LlamaText(new SpecialTokensText("<|tool_calls_section_end|>")),
      },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
  index: { at: "afterName", separator: ":" },
  replacesRead: true,
};

/**
 * Cohere Command R7B: a turn's calls are one JSON list between the `<|START_ACTION|>` and
 * `<|END_ACTION|>` control tokens, one call a line,
 * `{"tool_call_id": "N", "tool_name": NAME, "parameters": {…}}`, where N counts the conversation's
 * calls (the template numbers answered calls itself, from the calls' order; results go back in
 * `<|START_TOOL_RESULT|>` system turns that name the same N). The model writes its own N, digits as
 * llama.cpp's server allows, and the parser drops it: the client's call ids are OpenAI's. A plan may
 * come first in `<|START_THINKING|>`…`<|END_THINKING|>`, an answer in
 * `<|START_RESPONSE|>`…`<|END_RESPONSE|>`, control tokens that decode to nothing. node-llama-cpp
 * reads a layout from the template, but with an empty plan and the first call's counter as fixed
 * text in its opening and the start of the results' turn in its close.
 */
const COMMAND_R7B: KnownLayout = {
  name: "command-r7b",
  matches: (t) => t.includes("<|START_ACTION|>") && t.includes("<|END_ACTION|>") && t.includes('"tool_call_id"') && t.includes("<|START_RESPONSE|>"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: '{"tool_call_id": "',
      paramsPrefix: '", "parameters": ',
      suffix: "}",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: {
      call: { sectionPrefix: LlamaText(new SpecialTokensText("<|START_ACTION|>"), "[\n    "), betweenCalls: ",\n    ", sectionSuffix: LlamaText("\n]", new SpecialTokensText("<|END_ACTION|>")) },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
  index: { at: "beforeName", separator: '", "tool_name": "' },
  replacesRead: true,
};

/**
 * Cohere2 MoE ("North" models): Command R7B's calls, counter included, as llama.cpp's server reads
 * them (an answer goes between `<|START_TEXT|>` and `<|END_TEXT|>` instead). node-llama-cpp read no
 * layout from this template: it got the generic one.
 */
const COHERE2_MOE: KnownLayout = {
  ...COMMAND_R7B,
  name: "cohere2-moe",
  matches: (t) => t.includes("<|START_ACTION|>") && t.includes("<|END_ACTION|>") && t.includes('"tool_call_id"') && t.includes("<|START_TEXT|>"),
};

/**
 * Apertus (swiss-ai): a turn's calls are one JSON list between the `<|tools_prefix|>` and
 * `<|tools_suffix|>` control tokens, each call an object keyed by the function's name,
 * `[{"NAME": {…}}, {"NAME": {…}}]`; the results follow in the same assistant turn as a plain list,
 * which the template writes. node-llama-cpp reads this layout from the template, but with that
 * list's opening `[` in the calls' close, so a call had to go on into its results.
 */
const APERTUS: KnownLayout = {
  name: "apertus",
  matches: (t) => t.includes("<|tools_prefix|>") && t.includes("<|tools_suffix|>"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: '{"',
      paramsPrefix: '": ',
      suffix: "}",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: {
      call: { sectionPrefix: LlamaText(new SpecialTokensText("<|tools_prefix|>"), "["), betweenCalls: ", ", sectionSuffix: LlamaText("]", new SpecialTokensText("<|tools_suffix|>")) },
      result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
    },
  },
  replacesRead: true,
};

/**
 * GigaChat 3 (ai-sage): a call is a turn of its own, under the `function call` role, after the
 * assistant's turn: `<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": …, "arguments": {…}}`,
 * one call per turn (the template writes only a message's first call, and llama.cpp's server reads
 * at most one); results come back as `function result` turns, which the template writes.
 */
const GIGACHAT_3: KnownLayout = {
  name: "gigachat-3",
  matches: (t) => t.includes("<|role_sep|>") && t.includes("<|message_sep|>") && t.includes("'function call'") && !t.includes("<|function_call|>"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: LlamaText(new SpecialTokensText("<|message_sep|>"), "\n\nfunction call", new SpecialTokensText("<|role_sep|>"), '\n{"name": "'),
      paramsPrefix: '", "arguments": ',
      suffix: "}",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: UNWRAPPED,
  },
  oneCall: true,
};

/**
 * GigaChat 3.1: the call stays in the assistant's turn, after its text, opened by the
 * `<|function_call|>` control token: `<|function_call|>{"name": …, "arguments": {…}}`, one call per
 * turn (the template writes only a message's first); results come back as `function result` turns.
 */
const GIGACHAT_3_1: KnownLayout = {
  name: "gigachat-3.1",
  matches: (t) => t.includes("<|role_sep|>") && t.includes("<|message_sep|>") && t.includes("<|function_call|>"),
  functions: {
    call: {
      optionalPrefixSpace: false,
      prefix: LlamaText(new SpecialTokensText("<|function_call|>"), '{"name": "'),
      paramsPrefix: '", "arguments": ',
      suffix: "}",
      emptyCallParamsPlaceholder: {},
    },
    result: { prefix: "", suffix: "" },
    parallelism: UNWRAPPED,
  },
  oneCall: true,
};

const LAYOUTS: readonly KnownLayout[] = [HERMES, MISTRAL, GRANITE, DEEPSEEK_R1, COMMAND_R_PLUS, KIMI_K2, COMMAND_R7B, COHERE2_MOE, APERTUS, GIGACHAT_3, GIGACHAT_3_1];

/** The call counter of the layout a wrapper was given (see KnownLayout.index). */
const indexes = new WeakMap<JinjaTemplateChatWrapper, CallIndex>();

/** Where the calls of a wrapper's layout carry a counter next to the name, if they do. */
export function callIndexOf(wrapper: unknown): CallIndex | undefined {
  return indexes.get(wrapper as JinjaTemplateChatWrapper);
}

/** The wrappers whose layout takes one call per turn (see KnownLayout.oneCall). */
const oneCallWrappers = new WeakSet<JinjaTemplateChatWrapper>();

/** Whether a wrapper's layout takes one call per turn, whatever parallel_tool_calls says. */
export function takesOneCall(wrapper: unknown): boolean {
  return oneCallWrappers.has(wrapper as JinjaTemplateChatWrapper);
}

/** The internals of node-llama-cpp's Jinja wrapper that its own layout detection would have set. */
interface JinjaToolInternals {
  _usingJinjaFunctionCallTemplate: boolean;
  _wrapFunctionParamsInsideMapKey?: string;
  _stringifyFunctionParams: boolean;
  _stringifyFunctionResult: boolean;
  _jinjaTemplate: { render(params: Record<string, unknown>): string };
  settings: ChatWrapperSettings;
}

/**
 * The messages as clients send them. node-llama-cpp leaves `content` out of an assistant message
 * that only calls tools; templates test it with `is not none` and trim it, which Python's Jinja (and
 * llama.cpp's) pass for a missing value and node-llama-cpp's Jinja engine refuses: such a message
 * gets empty content. And it names the function in each `tool` message, which OpenAI's clients do
 * not send and llama.cpp's server does not add: Kimi K2's template writes a tool turn's `name`, when
 * there is one, as the turn's role (`<|im_system|>get_weather` for llama.cpp's `<|im_system|>tool`).
 */
function withContent(params: Record<string, unknown>): Record<string, unknown> {
  const messages = params.messages;
  if (!Array.isArray(messages)) return params;
  const asSent = (m: Record<string, unknown>) => {
    if (!m || typeof m !== "object") return m;
    let out = m;
    if (out.content === undefined) out = { ...out, content: "" };
    if (out.role === "tool" && "name" in out) {
      const { name: _, ...rest } = out;
      out = rest;
    }
    return out;
  };
  return { ...params, messages: messages.map(asSent) };
}

/**
 * A tool whose description, or a parameter's, is missing written with empty ones: templates trim
 * and join them, which Python's Jinja does to a missing value as to "" and node-llama-cpp's Jinja
 * engine refuses. Only used when the tools as sent do not render.
 */
function withDescriptions(tool: unknown): unknown {
  const t = tool as { function?: { description?: unknown; parameters?: { properties?: Record<string, unknown> } } };
  if (!t?.function) return tool;
  const fn = t.function;
  const properties = fn.parameters?.properties;
  return {
    ...t,
    function: {
      ...fn,
      description: fn.description ?? "",
      ...(fn.parameters && properties && typeof properties === "object"
        ? {
            parameters: {
              ...fn.parameters,
              properties: Object.fromEntries(
                Object.entries(properties).map(([k, v]) => [k, v && typeof v === "object" && !Array.isArray(v) && (v as { description?: unknown }).description === undefined ? { ...v, description: "" } : v]),
              ),
            },
          }
        : {}),
    },
  };
}

/**
 * Gives `wrapper` the call layout of its template's family when node-llama-cpp found none, and
 * switches it to rendering tools through the template. Returns the call that undoes it, or
 * undefined when the wrapper already had a layout or the template is of no known family.
 */
function adoptKnownToolLayout(wrapper: JinjaTemplateChatWrapper, template: string): (() => void) | undefined {
  const layout = LAYOUTS.find((l) => l.matches(template));
  if (!layout || (wrapper.usingJinjaFunctionCallTemplate && !layout.replacesRead)) return undefined;
  const internals = wrapper as unknown as JinjaToolInternals;
  if (typeof internals._usingJinjaFunctionCallTemplate !== "boolean" || typeof internals.settings !== "object")
    throw new Error("node-llama-cpp's JinjaTemplateChatWrapper internals changed; tool-layouts.ts needs updating");
  const before = {
    settings: internals.settings,
    using: internals._usingJinjaFunctionCallTemplate,
    params: internals._stringifyFunctionParams,
    result: internals._stringifyFunctionResult,
  };
  internals.settings = { ...internals.settings, functions: layout.functions };
  internals._usingJinjaFunctionCallTemplate = true;
  // Arguments go to the template as objects (it writes them with tojson); results as the text the
  // client sent (see toChatHistory), which the template writes as it is.
  internals._stringifyFunctionParams = false;
  internals._stringifyFunctionResult = false;
  if (layout.index) indexes.set(wrapper, layout.index);
  if (layout.oneCall) oneCallWrappers.add(wrapper);
  return () => {
    oneCallWrappers.delete(wrapper);
    internals.settings = before.settings;
    internals._usingJinjaFunctionCallTemplate = before.using;
    internals._stringifyFunctionParams = before.params;
    internals._stringifyFunctionResult = before.result;
    indexes.delete(wrapper);
  };
}

/**
 * A model turn without the text written before each of its calls: llama.cpp's server keeps only an
 * answer after the results when it moves them onto the turn for an earlier Gemma 4 template
 * (convert_tool_responses_gemma4), so text that goes with calls never reaches the model. Left in,
 * the text's placeholder went missing from the template's rendering (toolResponsesOnTurn has no
 * place for it), and node-llama-cpp fell back to writing the calls itself, arguments as JSON.
 */
function withoutTextBeforeCalls(response: ChatModelResponse["response"]): ChatModelResponse["response"] {
  let lastCall = -1;
  response.forEach((r, i) => {
    if (typeof r === "object" && r.type === "functionCall") lastCall = i;
  });
  return response.filter((r, i) => typeof r !== "string" || i > lastCall);
}

/**
 * For a wrapper that hands tools, calls and results to its template (node-llama-cpp's template
 * path), renders each conversation as Python's Jinja would take it: a message that only calls
 * tools gets empty content, and tools whose descriptions are missing are written with empty ones
 * when the template cannot render them as sent. Without this, node-llama-cpp's Jinja engine
 * refused `'\n' + content` in Qwen 3's template for every answered call, and node-llama-cpp fell
 * back to writing calls and results into the assistant's text, unlike the template.
 */
function renderLikePythonJinja(wrapper: JinjaTemplateChatWrapper, template: string): void {
  if (!wrapper.usingJinjaFunctionCallTemplate) return;
  const internals = wrapper as unknown as JinjaToolInternals;
  const jinja = internals._jinjaTemplate;
  if (typeof jinja?.render !== "function") throw new Error("node-llama-cpp's JinjaTemplateChatWrapper internals changed; tool-layouts.ts needs updating");
  // An earlier Gemma 4 template reads results only from the assistant's turn, as llama.cpp's server
  // rewrites the messages for it.
  const onTurn = wantsToolResponses(template);
  let results: unknown[] = [];
  if (onTurn) {
    // The conversation's results that are JSON, in order, as values (undefined for a text): the
    // template sees a placeholder for each result's text, so these go to it as values and their
    // texts are left empty (see toolResponsesOnTurn).
    const generate = wrapper.generateContextState.bind(wrapper);
    wrapper.generateContextState = (options) => {
      const values: unknown[] = [];
      const chatHistory = options.chatHistory.map((item) => {
        if (item.type !== "model") return item;
        const response = withoutTextBeforeCalls(item.response).map((r) => {
          if (typeof r !== "object" || r.type !== "functionCall" || r.result === undefined) return r;
          const value = typeof r.result === "string" ? jsonValue(r.result) : undefined;
          values.push(value);
          return value === undefined ? r : { ...r, result: "" };
        });
        return { ...item, response };
      });
      results = values;
      try {
        return generate({ ...options, chatHistory });
      } finally {
        results = [];
      }
    };
  }
  // Which model turns of the conversation being rendered end with their calls' results, no answer.
  let endsInResults: boolean[] = [];
  // The client's ids of the conversation's calls, in order (see withClientCallIds).
  let callIds: Array<string | undefined> = [];
  // A template that leaves out the text of a turn that calls tools (Command R7B's, Cohere2's write
  // only the calls) gets the turns without it, as llama.cpp's server renders them: left in, its
  // placeholder was missing from the rendering, and node-llama-cpp fell back to writing calls and
  // results itself (the call's id was the function's name, the result escaped twice, no result turn).
  const dropsCallText = !onTurn && leavesOutTextOfCallTurns(jinja);
  const generateState = wrapper.generateContextState.bind(wrapper);
  wrapper.generateContextState = (options) => {
    const chatHistory = dropsCallText
      ? options.chatHistory.map((item) => (item.type === "model" ? { ...item, response: withoutTextBeforeCalls(item.response) } : item))
      : options.chatHistory;
    endsInResults = modelTurnsEndingInResults(chatHistory);
    callIds = chatHistory.flatMap((item) => (item.type === "model" ? item.response.filter((r) => typeof r === "object" && r.type === "functionCall").map((r) => (r as ClientCallId).plinthCallId) : []));
    try {
      return generateState({ ...options, chatHistory });
    } finally {
      endsInResults = [];
      callIds = [];
    }
  };
  const modelRole = (wrapper as unknown as { modelRoleName?: string }).modelRoleName ?? "assistant";
  const asServerPasses = (params: Record<string, unknown>) => {
    const out = withContent(params);
    return onTurn && Array.isArray(out.messages) ? { ...out, messages: toolResponsesOnTurn(out.messages as Array<Record<string, unknown>>, results) } : out;
  };
  const renderAsSent = (params: Record<string, unknown>): string => {
    try {
      return jinja.render(asServerPasses(params));
    } catch (err) {
      if (!Array.isArray(params.tools) || params.tools.length === 0) throw err;
      return jinja.render(asServerPasses({ ...params, tools: params.tools.map(withDescriptions) }));
    }
  };
  // Set once the template has refused clients' ids: every later conversation then goes straight to
  // ids of the template's shape, rather than rendering twice.
  let clientIdsRefused = false;
  const render = (params: Record<string, unknown>): string => {
    const withIds = clientIdsRefused ? undefined : withClientCallIds(params, callIds);
    if (withIds) {
      try {
        return renderCut(withIds);
      } catch {
        clientIdsRefused = true;
      }
    }
    // A template that takes only ids of its own shape (Mistral Small 3.2's nine letters or digits)
    // gets the client's ids where they have it and others mapped to it, as Mistral Nemo's
    // (mistral-wrapper.ts): node-llama-cpp's `fc_1_0000` stood for every id, even one the template
    // takes, once any client had sent one it refuses.
    const shaped = clientIdsRefused ? withClientCallIds(params, nineCharacterIds(callIds)) : undefined;
    if (shaped) {
      try {
        return renderCut(shaped);
      } catch {
        // node-llama-cpp's own ids, as before.
      }
    }
    return renderCut(params);
  };
  const renderCut = (params: Record<string, unknown>): string => {
    const cut = withoutEmptyAnswers(params.messages, endsInResults, modelRole);
    if (!cut) return renderAsSent(params);
    let text: string;
    try {
      text = renderAsSent({ ...params, messages: cut.messages });
    } catch {
      // A template that refuses a user message right after tool results (Mistral Small 3.2's, as
      // llama-server and Python's Jinja do) rendered with the empty answer in between: kept so.
      return renderAsSent(params);
    }
    // node-llama-cpp looks for every message's placeholder in the rendering: a left-out answer's
    // (it stands for no text) goes right before the next message's, where it is put back as nothing.
    for (const { id, before } of cut.moved) {
      const at = text.indexOf(before);
      if (at < 0) return renderAsSent(params);
      text = text.slice(0, at) + id + text.slice(at);
    }
    return text;
  };
  internals._jinjaTemplate = Object.create(jinja, { render: { value: render } });
  // A template that writes results with tojson (Command R7B's) gets them escaped (json-results.ts).
  if (!onTurn && writesResultsAsJsonStrings(render)) escapeResultsAsJsonStrings(wrapper);
  // Results reach the template as the text the client sent (see toChatHistory), as llama.cpp's
  // server passes them, whatever node-llama-cpp guessed from its samples about writing values out.
  internals._stringifyFunctionResult = false;
  // Arguments reach it as the client sent them too. node-llama-cpp wraps them in `{"params": …}`
  // when its probe with string arguments fails and one with such a map renders, which says nothing
  // about what the model was trained on (a Hermes template whose probe failed on the string's
  // missing `properties` then showed the model `"arguments": {"params": {"city": "Paris"}}`).
  internals._wrapFunctionParamsInsideMapKey = undefined;
}

/**
 * The messages with the client's call ids in place of node-llama-cpp's (`fc_1_0000`), in the calls
 * and in the results that answer them: a template that writes ids (Kimi K2's `## Return of …`)
 * then shows the model the ids the client sent, as llama.cpp's server does. Undefined when the ids
 * are not all known or the calls do not line up with them.
 */
function withClientCallIds(params: Record<string, unknown>, ids: ReadonlyArray<string | undefined>): Record<string, unknown> | undefined {
  const messages = params.messages;
  if (!Array.isArray(messages) || ids.length === 0 || ids.some((id) => id === undefined)) return undefined;
  const renamed = new Map<string, string>();
  let k = 0;
  const out = (messages as Array<Record<string, unknown>>).map((m) => {
    if (!Array.isArray(m?.tool_calls) || m.tool_calls.length === 0) return m;
    const calls = (m.tool_calls as Array<Record<string, unknown>>).map((c) => {
      const id = ids[k++];
      if (id === undefined || typeof c.id !== "string") return c;
      renamed.set(c.id, id);
      return { ...c, id };
    });
    return { ...m, tool_calls: calls };
  });
  if (k !== ids.length) return undefined;
  return {
    ...params,
    messages: out.map((m) => (m?.role === "tool" && typeof m.tool_call_id === "string" && renamed.has(m.tool_call_id) ? { ...m, tool_call_id: renamed.get(m.tool_call_id) } : m)),
  };
}

/** The ids mapped to 9 letters or digits, each different (see nemoCallId); undefined ones stay so. */
function nineCharacterIds(ids: ReadonlyArray<string | undefined>): Array<string | undefined> {
  const taken = new Set<string>();
  return ids.map((id) => {
    if (id === undefined) return undefined;
    const shaped = nemoCallId(id, taken);
    taken.add(shaped);
    return shaped;
  });
}

/** Whether a template writes nothing of the text an assistant message has beside its tool calls. */
function leavesOutTextOfCallTurns(jinja: { render(params: Record<string, unknown>): string }): boolean {
  const text = "Plinth probe: text beside a call";
  const call = { id: "call_1", type: "function", function: { name: "probe", arguments: {} } };
  const tools = [{ type: "function", function: { name: "probe", description: "Probe", parameters: { type: "object", properties: {} } } }];
  const messages = [
    { role: "user", content: "Hi" },
    { role: "assistant", content: text, tool_calls: [call] },
    { role: "tool", tool_call_id: "call_1", content: "ok" },
  ];
  try {
    return !jinja.render({ messages, tools, add_generation_prompt: true, bos_token: "", eos_token: "" }).includes(text);
  } catch {
    return false; // a template that cannot render this keeps node-llama-cpp's handling
  }
}

/**
 * For each model turn of a history (adjacent ones count as one, as node-llama-cpp joins them),
 * whether it ends with tool calls whose results have come back and no answer after them.
 */
function modelTurnsEndingInResults(history: readonly ChatHistoryItem[]): boolean[] {
  const out: boolean[] = [];
  let previousWasModel = false;
  for (const item of history) {
    if (item.type !== "model") {
      previousWasModel = false;
      continue;
    }
    const last = item.response.filter((r) => r !== "").at(-1);
    const ends = typeof last === "object" && last.type === "functionCall" && last.result !== undefined;
    if (previousWasModel) out[out.length - 1] = ends || (out[out.length - 1] && item.response.every((r) => r === ""));
    else out.push(ends);
    previousWasModel = true;
  }
  return out;
}

/**
 * The messages without the empty answer node-llama-cpp writes after a turn's tool results when a
 * user (or system) message comes next: the client sent no answer there, and the template wrote one
 * as an empty assistant turn (`<|im_start|>assistant\n<|im_end|>` in the middle of the conversation),
 * which llama.cpp's server and the template given the client's messages do not. The open turn at the
 * end keeps it: that is where the model answers. Undefined when there is nothing to leave out.
 */
function withoutEmptyAnswers(
  messages: unknown,
  endsInResults: readonly boolean[],
  modelRole: string,
): { messages: Array<Record<string, unknown>>; moved: Array<{ id: string; before: string }> } | undefined {
  if (!Array.isArray(messages) || !endsInResults.includes(true)) return undefined;
  const list = messages as Array<Record<string, unknown>>;
  const isTurnPart = (m: Record<string, unknown> | undefined) => m?.role === modelRole || m?.role === "tool";
  const drop = new Set<number>();
  const moved: Array<{ id: string; before: string }> = [];
  let turn = -1;
  for (let i = 0; i < list.length; i++) {
    if (!isTurnPart(list[i]) || isTurnPart(list[i - 1])) continue;
    turn++;
    let end = i;
    while (isTurnPart(list[end + 1])) end++;
    const last = list[end];
    const next = list[end + 1];
    const hasCalls = Array.isArray(last?.tool_calls) && last.tool_calls.length > 0;
    if (endsInResults[turn] && next && last.role === modelRole && !hasCalls && list[end - 1]?.role === "tool" && typeof last.content === "string" && typeof next.content === "string" && next.content !== "") {
      drop.add(end);
      moved.push({ id: last.content, before: next.content });
    }
    i = end;
  }
  return drop.size === 0 ? undefined : { messages: list.filter((_, i) => !drop.has(i)), moved };
}

/** A text's JSON value when it is JSON other than a string; undefined otherwise. */
function jsonValue(text: string): unknown {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "string" ? undefined : value;
  } catch {
    return undefined;
  }
}

/** The pieces of a call layout in the order a turn writes them (a name and arguments in between). */
const PIECES = ["sectionPrefix", "prefix", "name", "paramsPrefix", "arguments", "suffix", "sectionSuffix"] as const;
type Pieces = Record<(typeof PIECES)[number], string>;

function piecesOf(functions: FunctionsSettings): Pieces {
  const text = (t: unknown) => (t == null ? "" : LlamaText(t as never).toString());
  const call = functions.call;
  const parallel = functions.parallelism?.call;
  return {
    sectionPrefix: text(parallel?.sectionPrefix),
    prefix: text(call.prefix),
    name: "name",
    paramsPrefix: text(call.paramsPrefix),
    arguments: "{}",
    suffix: text(call.suffix),
    sectionSuffix: text(parallel?.sectionSuffix),
  };
}

/** The marker-like strings of a template (`<|…|>`, `<｜…｜>`, `[UPPER_CASE]`) that are one special token. */
function templateMarkers(template: string, tokenizer: Tokenizer): string[] {
  const found = new Set(template.match(/<\|[^|<>\s]{1,64}\|>|<｜[^｜\s]{1,64}｜>|\[[A-Z_/]{2,32}\]/g) ?? []);
  return [...found].filter((m) => tokenizer(m, true).length === 1);
}

/**
 * node-llama-cpp reads a template's call layout by comparing rendered texts character by character,
 * so markers that share their first characters can be cut in two: Kimi K2's section "prefix" came
 * out as `<|tool_calls_section_begin` and its call prefix as `|><|tool_call_begin|>functions.`
 * (DeepSeek V3.1's and Command R7B's likewise). Neither half is a token: the grammar then spells
 * them out character by character and no call the model writes is read back (a forced call came
 * back empty). Each cut inside one of the template's markers is moved to the marker's edge, the
 * layout's first piece made to start and its last to end at one. Returns the repaired pieces, or
 * undefined when nothing was cut.
 */
function mendCutMarkers(pieces: Pieces, markers: readonly string[]): Pieces | undefined {
  const out = { ...pieces };
  let mended = false;
  const order = PIECES.filter((k) => out[k] !== "");
  // A cut between two pieces: the tail of the marker goes back to the piece before.
  for (let i = 0; i + 1 < order.length; i++) {
    const [a, b] = [order[i], order[i + 1]];
    if (a === "name" || a === "arguments") continue;
    for (const m of markers) {
      const k = [...Array(m.length).keys()].slice(1).find((k) => out[a].endsWith(m.slice(0, k)) && out[b].startsWith(m.slice(k)));
      if (k === undefined || b === "name" || b === "arguments") continue;
      out[a] += m.slice(k);
      out[b] = out[b].slice(m.length - k);
      mended = true;
      break;
    }
  }
  const first = order[0];
  const last = order[order.length - 1];
  for (const m of markers) {
    for (let k = 1; k < m.length; k++) {
      if (first !== "name" && out[first].startsWith(m.slice(k)) && !out[first].startsWith(m)) {
        out[first] = m.slice(0, k) + out[first];
        mended = true;
      }
      if (last !== "arguments" && out[last].endsWith(m.slice(0, k)) && !out[last].endsWith(m)) {
        out[last] += m.slice(k);
        mended = true;
      }
    }
  }
  return mended ? out : undefined;
}

/**
 * Whether every boundary between two of the layout's own pieces falls between two tokens of their
 * joined text. Only those can cut a marker; where a piece meets the name or the arguments, the
 * tokenizer merging across is ordinary text: on Llama 3's real vocabulary the space that ends
 * `", "parameters": ` is one token with the arguments' `{` (`Ġ{`), and judging that boundary threw
 * away the layout node-llama-cpp had read right, for the generic `||call:` one.
 */
function tokenAligned(pieces: Pieces, tokenizer: Tokenizer): boolean {
  const parts = PIECES.map((k) => pieces[k]);
  const whole = parts.join("");
  const ends = new Set<number>([0]);
  let at = 0;
  for (const token of tokenizer(whole, true)) {
    at += LlamaText.fromTokens(tokenizer, [token]).toString().length;
    ends.add(at);
  }
  if (at !== whole.length) return true; // the text does not read back piece by piece: nothing to judge by
  const placeholder = (k: (typeof PIECES)[number]) => k === "name" || k === "arguments";
  const present = PIECES.filter((k) => pieces[k] !== "");
  let boundary = 0;
  return present.every((k, i) => {
    boundary += pieces[k].length;
    const next = present[i + 1];
    return next === undefined || placeholder(k) || placeholder(next) || ends.has(boundary);
  });
}

/**
 * Mends a layout node-llama-cpp read through a special token (see mendCutMarkers); one that still
 * cuts a token after that is dropped: the wrapper goes back to node-llama-cpp's generic layout (or
 * its family's layout below, for a template of a known family).
 */
function mendLayout(wrapper: JinjaTemplateChatWrapper, tokenizer: Tokenizer, template: string): void {
  if (!wrapper.usingJinjaFunctionCallTemplate) return;
  const internals = wrapper as unknown as JinjaToolInternals;
  const functions = internals.settings.functions;
  const mended = mendCutMarkers(piecesOf(functions), templateMarkers(template, tokenizer));
  if (mended && tokenAligned(mended, tokenizer)) {
    const special = (t: string) => LlamaText(new SpecialTokensText(t));
    const parallel = functions.parallelism;
    internals.settings = {
      ...internals.settings,
      functions: {
        ...functions,
        call: { ...functions.call, prefix: special(mended.prefix), paramsPrefix: special(mended.paramsPrefix), suffix: special(mended.suffix) },
        ...(parallel
          ? { parallelism: { ...parallel, call: { ...parallel.call, sectionPrefix: special(mended.sectionPrefix), sectionSuffix: special(mended.sectionSuffix) } } }
          : {}),
      },
    };
    return;
  }
  if (!mended && tokenAligned(piecesOf(functions), tokenizer)) return;
  internals.settings = { ...internals.settings, functions: ChatWrapper.defaultSettings.functions };
  internals._usingJinjaFunctionCallTemplate = false;
  internals._stringifyFunctionParams = false;
  internals._stringifyFunctionResult = false;
}

const prepared = new WeakSet<JinjaTemplateChatWrapper>();

/**
 * Sets a Jinja wrapper up to hand tools, calls and results to its template (once per wrapper): the
 * layout of the template's family when node-llama-cpp could not read one, kept only when `probe`
 * (a conversation with an answered call) then renders; and the rendering of renderLikePythonJinja.
 * Returns the family's name when a layout was given.
 */
export function prepareToolRendering(
  wrapper: JinjaTemplateChatWrapper,
  template: string,
  tokenizer: Tokenizer,
  probe: (w: JinjaTemplateChatWrapper) => void,
): string | undefined {
  if (prepared.has(wrapper)) return undefined;
  prepared.add(wrapper);
  mendLayout(wrapper, tokenizer, template);
  // Templates that write arguments as XML parameters (xml-tool-calls.ts) take theirs whatever
  // node-llama-cpp read.
  // So do Gemma 4, whose arguments are a notation of its own (gemma4-tool-calls.ts), and LFM2,
  // whose calls are Python calls (python-tool-calls.ts).
  const xml = adoptXmlToolLayout(wrapper, template);
  const gemma4 = xml ? undefined : adoptGemma4ToolLayout(wrapper, template);
  const lfm2 = xml || gemma4 ? undefined : adoptLfm2ToolLayout(wrapper, template);
  const undo = xml?.undo ?? gemma4 ?? lfm2 ?? adoptKnownToolLayout(wrapper, template);
  renderLikePythonJinja(wrapper, template);
  if (!undo) return undefined;
  try {
    probe(wrapper);
    return xml?.name ?? (gemma4 ? "gemma4" : lfm2 ? "lfm2" : LAYOUTS.find((l) => l.matches(template))?.name);
  } catch {
    undo();
    return undefined;
  }
}
