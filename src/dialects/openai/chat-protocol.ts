import { z } from "zod";
import { metadataSchema } from "./metadata.ts";
import { samplingFieldsSchema } from "./sampling-fields.ts";
import { serviceFieldsSchema } from "./service-fields.ts";
import { budgetSchema, foreignFieldsSchema, openRouterUsage } from "./foreign-fields.ts";
import { structuredFieldsSchema } from "./structured-fields.ts";
import { jsonObject } from "../json-object.ts";
import { functionParameters } from "../function-parameters.ts";
import { listOf } from "../list-of.ts";
import { byType } from "../zod-by-type.ts";
import { sdkFunctionEchoes, sdkMessageEchoes } from "../sdk-echo-fields.ts";

/**
 * Wire schema of POST /v1/chat/completions. The route refuses top-level fields this schema does not
 * declare (unknown-fields.ts), so every field OpenAI defines is declared, those Plinth cannot honour
 * too, so that the route can refuse them by name with a reason. Messages, their text and refusal
 * parts and an assistant's tool calls are strict too, as OpenAI's API answers: a key none of them
 * defines (`messages[0].foo`) is a 400 naming it, not dropped. What they take besides OpenAI's own
 * keys is what clients send back from an answer (see the assistant message).
 */

/**
 * OpenAI's explicit cache breakpoint on a content part: the prompt up to here is a prefix to reuse.
 * Taken as it is: the prompt cache keeps the prefixes it has seen and reuses the longest shared one
 * (that up to a breakpoint included) without being told where they end.
 */
export const promptCacheBreakpoint = z.strictObject({ mode: z.literal("explicit") });
// A text part's `text` and breakpoint, and a refusal part's `refusal`, are checked where they are
// read (chat-to-canonical.ts), with their own messages and codes; here only their keys are.
const textPart = z.strictObject({
  type: z.literal("text"),
  text: z.unknown().optional(),
  prompt_cache_breakpoint: z.unknown().optional(),
  cache_control: z.unknown().optional(),
});
/**
 * Anthropic's cache marker on a text part, which clients of OpenAI-compatible gateways (LiteLLM,
 * OpenRouter) send in chat bodies: `{type: "ephemeral", ttl?: "5m" | "1h"}`. Taken like OpenAI's
 * breakpoint: the prompt cache reuses the longest prefix it has seen without being told.
 */
export const cacheControl = z.strictObject({ type: z.literal("ephemeral"), ttl: z.enum(["5m", "1h"]).optional() });
const refusalPart = z.strictObject({ type: z.literal("refusal"), refusal: z.unknown().optional() });
/** Other parts are recognised so they can be refused (or, images, checked) with a clear message. */
const otherPart = z.object({ type: z.string() }).loose();
const contentParts = listOf(byType({ text: textPart, refusal: refusalPart }, otherPart), { min: 1 });
const content = z.union([z.string(), contentParts]);

/**
 * A participant's name, held to OpenAI's pattern for it: not empty, no whitespace and none of
 * `<`, `|`, `\`, `/`, `>`. OpenAI refuses any other with a 400 naming `messages[i].name`, and an
 * upstream engine the name is passed on to (an OpenAI-compatible server) may too, after the
 * request was admitted; here it is refused where it is read.
 */
const participantName = z
  .string()
  .regex(/^[^\s<|\\/>]+$/, "a name must be a non-empty string matching the pattern '^[^\\s<|\\\\/>]+$': no whitespace and none of < | \\ / >");

// `index` is the position a call had in a streamed answer's chunks: clients that build the message
// from the chunks keep it and send it back. It changes nothing here.
const functionCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.strictObject({ name: z.string().min(1), arguments: z.string(), ...sdkFunctionEchoes }),
  index: z.int().min(0).nullish(),
});
/** A call of a custom tool: its input is the free text the model wrote. */
const customCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal("custom"),
  custom: z.strictObject({ name: z.string().min(1), input: z.string() }),
  index: z.int().min(0).nullish(),
});
const toolCall = z.discriminatedUnion("type", [functionCall, customCall]);

/**
 * Keys that one role defines, taken as `null` on the others: a client that writes every message from
 * one class (a Java record, a struct) sends the keys a message does not use as null, which says
 * nothing. Any other value there is still a 400 naming it.
 */
const nullOnly = z.null().optional();
const otherRolesNulls = {
  tool_calls: nullOnly,
  tool_call_id: nullOnly,
  refusal: nullOnly,
  function_call: nullOnly,
  audio: nullOnly,
  reasoning_content: nullOnly,
  reasoning: nullOnly,
  annotations: nullOnly,
  prefix: nullOnly,
};
// A tool message has its own tool_call_id; the others, null, as on a system or user message.
const { tool_call_id: _toolsOwn, ...toolNulls } = otherRolesNulls;

const systemMessage = z.strictObject({ role: z.enum(["system", "developer"]), content, name: participantName.nullish(), ...otherRolesNulls });
const userMessage = z.strictObject({ role: z.literal("user"), content, name: participantName.nullish(), ...otherRolesNulls });
/**
 * An assistant turn: OpenAI's keys (`function_call` and `audio` are refused by name when not null),
 * and what clients send back from an answer they were given: `reasoning_content` and `reasoning`
 * (Plinth's answers carry both, as vLLM's, SGLang's and DeepSeek's do), `annotations` (OpenAI's
 * answers carry them), what the openai SDK's helpers add (`parsed`, a call's
 * `function.parsed_arguments`) and a call's `index`. None of them is read: earlier thinking is not
 * shown to the model again, and the others copy what the message holds.
 */
const assistantMessage = z.strictObject({
  tool_call_id: nullOnly,
  role: z.literal("assistant"),
  content: content.nullish(),
  name: participantName.nullish(),
  refusal: z.string().nullish(),
  tool_calls: listOf(toolCall).nullish(),
  function_call: z.unknown().optional(),
  audio: z.unknown().optional(),
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish(),
  annotations: listOf(z.unknown()).nullish(),
  parsed: sdkMessageEchoes.parsed,
  /**
   * DeepSeek's chat prefix completion (and Mistral's `prefix`): the last message, an assistant's,
   * is the start of the answer to continue. Plinth continues a trailing assistant message anyway,
   * so `true` there is taken; on an earlier message it is a 400 (chat-to-canonical.ts).
   */
  prefix: z.boolean().nullish(),
});
/**
 * A tool result. `name` (the called function's, which LangChain and LlamaIndex send) is taken and
 * not used: the call id already says which call the result answers.
 */
const toolMessage = z.strictObject({ ...toolNulls, role: z.literal("tool"), content, tool_call_id: z.string().min(1), name: participantName.nullish() });
const functionMessage = z.object({ role: z.literal("function") }).loose();

export const chatMessage = z.discriminatedUnion("role", [
  systemMessage,
  userMessage,
  assistantMessage,
  toolMessage,
  functionMessage,
]);
export type ChatMessage = z.infer<typeof chatMessage>;

/**
 * Most messages in one request. Each costs the event loop parsing, template rendering and (for
 * stored Responses) a row; 200,000 empty messages held it for 1.8 s. Far above any conversation a
 * context window holds.
 */
export const MAX_MESSAGES = 10_000;

// Strict, each of them: a key of its own is a misspelling or a format this server would not apply.
const responseFormats = [
  z.strictObject({ type: z.literal("text") }),
  // llama-server lets a json_object carry the schema the object must follow; text-generation-
  // inference calls that key `value`.
  z.strictObject({ type: z.literal("json_object"), schema: jsonObject().nullish(), value: jsonObject().nullish() }),
  z.strictObject({
    type: z.literal("json_schema"),
    // Strict: a misspelt `strict` would otherwise leave the schema unenforced without a word.
    json_schema: z.strictObject({
      name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "schema names are 1 to 64 letters, digits, '_' or '-'"),
      description: z.string().optional(),
      schema: jsonObject().optional(),
      strict: z.boolean().nullish(),
    }),
  }),
] as const;

/** OpenAI's three answer formats (dialects that copy `response_format` take these). */
export const openAiResponseFormat = z.discriminatedUnion("type", [...responseFormats]);

/** text-generation-inference's own two: a schema, or a regex the whole answer matches. */
const tgiResponseFormats = [z.strictObject({ type: z.literal("json"), value: jsonObject() }), z.strictObject({ type: z.literal("regex"), value: z.string() })] as const;

const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "tool names are 1 to 64 letters, digits, '_' or '-'");

// The objects inside a tool, a tool choice and stream_options are strict: a misspelt key in them
// (`strcit`, `include_usgae`) would otherwise be dropped without a word and change the answer.
const functionTool = z.strictObject({
  type: z.literal("function"),
  function: z.strictObject({
    name: toolName,
    description: z.string().optional(),
    parameters: functionParameters().optional(),
    strict: z.boolean().nullish(),
  }),
});

/** Function tools as Chat Completions declares them (dialects that copy the field share it). */
export const functionTools = listOf(functionTool, { max: 128 });

/**
 * OpenAI's custom tools on Chat Completions: the model's input to the tool is free text, any text or
 * held to a Lark grammar or a regular expression (as the Responses route's custom tools).
 */
const customTool = z.strictObject({
  type: z.literal("custom"),
  custom: z.strictObject({
    name: toolName,
    description: z.string().optional(),
    format: z
      .discriminatedUnion("type", [
        z.strictObject({ type: z.literal("text") }),
        z.strictObject({ type: z.literal("grammar"), grammar: z.strictObject({ definition: z.string(), syntax: z.enum(["lark", "regex"]) }) }),
      ])
      .optional(),
  }),
});

/** The tools of an OpenAI chat request: functions and custom tools. */
const chatTools = listOf(z.discriminatedUnion("type", [functionTool, customTool]), { max: 128 });
export type ChatTool = z.infer<typeof chatTools>[number];

const namedToolChoice = z.strictObject({ type: z.literal("function"), function: z.strictObject({ name: z.string().min(1) }) });
const namedCustomChoice = z.strictObject({ type: z.literal("custom"), custom: z.strictObject({ name: z.string().min(1) }) });
export const toolChoice = z.union([z.enum(["none", "auto", "required"]), namedToolChoice]);

/**
 * OpenAI's `allowed_tools` choice on Chat Completions: the model may call only the listed tools of
 * the request's (`required`: it must call one of them). The full list stays in the prompt, so it
 * is the same prompt, and the same cached prefix, whichever subset a turn allows.
 */
const allowedToolsChoice = z.strictObject({
  type: z.literal("allowed_tools"),
  allowed_tools: z.strictObject({
    mode: z.enum(["auto", "required"]),
    tools: listOf(z.discriminatedUnion("type", [namedToolChoice, namedCustomChoice]), { min: 1 }),
  }),
});

/**
 * Chat Completions' tool_choice: a mode, one named function or custom tool, or allowed_tools (told
 * apart by `type`). A named choice without `type` (`{"function": {"name": …}}`) is a function's, as
 * vLLM (whose `type` defaults to "function") and text-generation-inference read it, and as
 * @huggingface/inference's typed tool_choice (TGI's schema) writes it.
 */
const chatToolChoice = z.preprocess(
  (v) => (v !== null && typeof v === "object" && !Array.isArray(v) && !("type" in v) && "function" in v ? { type: "function", ...v } : v),
  z.union([z.enum(["none", "auto", "required"]), z.discriminatedUnion("type", [namedToolChoice, namedCustomChoice, allowedToolsChoice])]),
);

/**
 * A `messages` list of `message`: one at least, MAX_MESSAGES at most. Every dialect built on chat
 * (Konan, SpAk, Databricks) takes its list through this, so none renders a template over more
 * messages than this one refuses first.
 */
export function messageList<T extends z.ZodType>(message: T) {
  return listOf(message, { min: 1, minMessage: "messages must contain at least one message", max: MAX_MESSAGES });
}

export const chatCompletionRequest = z.object({
  model: z.string().min(1),
  messages: messageList(chatMessage),
  stream: z.boolean().nullish(),
  stream_options: z
    .strictObject({ include_usage: z.boolean().optional(), continuous_usage_stats: z.boolean().optional(), include_obfuscation: z.boolean().optional() })
    .nullish(),
  // OpenRouter's usage accounting switch: `include: true` puts usage into a stream's last chunk, as
  // stream_options.include_usage does (an answer in one piece always has it).
  usage: openRouterUsage,
  max_tokens: budgetSchema(1).nullish(),
  max_completion_tokens: budgetSchema(1).nullish(),
  ...samplingFieldsSchema,
  ...serviceFieldsSchema,
  ...structuredFieldsSchema,
  ...foreignFieldsSchema,
  // vLLM's chat echo (the last message repeated in the answer): read by foreignFields.
  echo: z.unknown().optional(),
  user: z.string().nullish(),
  safety_identifier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().nullish(),
  // vLLM's and llama-server's prompt-cache extensions.
  cache_salt: z.string().nullish(),
  cache_prompt: z.boolean().nullish(),
  service_tier: z.string().nullish(),
  store: z.boolean().nullish(),
  metadata: metadataSchema.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  tools: chatTools.nullish(),
  tool_choice: chatToolChoice.nullish(),
  response_format: z.discriminatedUnion("type", [...responseFormats, ...tgiResponseFormats]).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  reasoning_effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).nullish(),
  // OpenRouter's and others' reasoning object. Strict: a key of another server's spelling (SGLang's
  // `enable`) or a misspelling was dropped, and the model thought when told not to.
  reasoning: z
    .strictObject({
      effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).optional(),
      budget_tokens: z.int().min(1).optional(),
      max_tokens: z.int().min(1).optional(),
      enabled: z.boolean().optional(),
      // OpenRouter's: think, but leave the thinking out of the answer (vLLM's include_reasoning: false).
      exclude: z.boolean().optional(),
    })
    .nullish(),
  // vLLM's and SGLang's way to pass template switches; enable_thinking is the one Plinth honours.
  chat_template_kwargs: jsonObject().nullish(),
  // The same switch as Qwen's own API takes it (top level), and the `thinking` object of DeepSeek's,
  // GLM's and Kimi's APIs (Anthropic's too, with its budget).
  enable_thinking: z.boolean().nullish(),
  thinking: z
    .strictObject({ type: z.enum(["enabled", "disabled"]), budget_tokens: z.int().min(1).optional() })
    .nullish(),
  // OpenAI offers two ("text", "audio"); a longer list can only repeat them.
  modalities: listOf(z.string(), { max: 4 }).nullish(),
  // Accepted by the schema only so that they can be refused by name.
  functions: z.unknown().optional(),
  function_call: z.unknown().optional(),
  audio: z.unknown().optional(),
  prediction: z.unknown().optional(),
  web_search_options: z.unknown().optional(),
  verbosity: z.unknown().optional(),
});
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequest>;
