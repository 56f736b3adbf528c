import { z } from "zod";
import { messageList } from "../openai/chat-protocol.ts";
import { jsonObject } from "../json-object.ts";
import { boundedStop } from "../stop-field.ts";
import { functionParameters } from "../function-parameters.ts";
import { sdkFunctionEchoes, sdkMessageEchoes } from "../sdk-echo-fields.ts";
import { listOf } from "../list-of.ts";

/**
 * Wire schema of a Databricks chat request (POST /serving-endpoints/{name}/invocations with
 * `messages`, or /serving-endpoints/chat/completions). Strict: a field the reference does not define
 * is refused by name instead of being dropped.
 */

const cacheControl = z.unknown().optional();

const citation = z.strictObject({
  type: z.literal("char_location"),
  cited_text: z.string().optional(),
  document_index: z.int().optional(),
  document_title: z.string().optional(),
  start_char_index: z.int().optional(),
  end_char_index: z.int().optional(),
});

export const textContent = z.strictObject({ type: z.literal("text"), text: z.string(), citations: listOf(citation).optional(), cache_control: cacheControl });
const imageContent = z.strictObject({
  type: z.literal("image_url"),
  image_url: z.strictObject({ url: z.string().min(1), detail: z.string().optional() }),
  cache_control: cacheControl,
});
const reasoningContent = z.strictObject({
  type: z.literal("reasoning"),
  summary: listOf(
    z.discriminatedUnion("type", [
      z.strictObject({ type: z.literal("summary_text"), text: z.string(), signature: z.string().optional() }),
      z.strictObject({ type: z.literal("summary_encrypted_text"), data: z.string() }),
    ]),
  ).optional(),
  cache_control: cacheControl,
});
const documentContent = z.strictObject({
  type: z.literal("document"),
  title: z.string().optional(),
  context: z.string().optional(),
  source: z.strictObject({
    type: z.enum(["base64", "text", "content", "url"]),
    media_type: z.string().optional(),
    data: z.string().optional(),
    content: z.union([z.string(), listOf(z.union([textContent, imageContent]))]).optional(),
    url: z.string().optional(),
  }),
  citations: z.strictObject({ enabled: z.boolean() }).optional(),
});
const fileContent = z.strictObject({
  type: z.literal("file"),
  file: z.strictObject({ filename: z.string().optional(), file_data: z.string().optional(), url: z.string().optional() }),
});

export const contentItem = z.discriminatedUnion("type", [textContent, imageContent, reasoningContent, documentContent, fileContent]);
export type ContentItem = z.infer<typeof contentItem>;

const toolCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.strictObject({ name: z.string().min(1), arguments: z.union([z.string(), jsonObject()]), ...sdkFunctionEchoes }),
  cache_control: cacheControl,
});

export const chatMessage = z.strictObject({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: z.union([z.string(), listOf(contentItem, { min: 1 })]).nullish(),
  tool_calls: listOf(toolCall, { min: 1 }).nullish(),
  tool_call_id: z.string().nullish(),
  // Not in the reference's ChatMessage, but OpenAI clients and agent frameworks send it: a
  // participant's name for system, user and assistant messages; on a tool message it repeats the
  // called function, which the call id already names, and is not used.
  name: z.string().nullish(),
  ...sdkMessageEchoes,
});
export type DatabricksChatMessage = z.infer<typeof chatMessage>;

/** FunctionObject, shared by Chat and Responses: `description` is required, `properties` ≤ 15 keys. */
export const functionObject = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "function names are 1 to 64 letters, digits, '_' or '-'"),
  description: z.string({ error: (i) => (i.input === undefined ? "description is required for every function" : undefined) }),
  parameters: functionParameters()
    .refine((p) => p.properties == null || typeof p.properties !== "object" || Object.keys(p.properties as object).length <= 15, {
      message: "parameters.properties is limited to 15 keys",
      path: ["properties"],
    })
    .optional(),
  strict: z.boolean().nullish(),
});

export const jsonSchemaObject = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "schema names are 1 to 64 letters, digits, '_' or '-'"),
  description: z.string().optional(),
  schema: jsonObject(),
  strict: z.boolean().nullish(),
});

export const formatObject = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({ type: z.literal("json_schema"), json_schema: jsonSchemaObject }),
]);

/**
 * Not in Databricks' reference, but OpenAI clients streaming through these paths send it (the AI
 * SDK always, LangChain by default). Usage rides this dialect's last chunk whatever it says.
 */
export const streamOptions = z.strictObject({ include_usage: z.boolean().nullish() }).nullish();

export const samplingFields = {
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.int().min(1, "top_k is null (no limit) or an integer > 0").nullish(),
  stop: boundedStop.nullish(),
  n: z.int().min(1).max(128).nullish(),
  max_tokens: z.int().min(1, "max_tokens is null (no limit) or an integer > 0").nullish(),
};

export const chatRequest = z.strictObject({
  /** Absent on /invocations (the endpoint chooses); names the endpoint on /serving-endpoints/chat/completions. */
  model: z.string().min(1).optional(),
  messages: messageList(chatMessage),
  stream: z.boolean().nullish(),
  stream_options: streamOptions,
  ...samplingFields,
  tools: listOf(
    z.object({ type: z.string() }).loose().superRefine((t, ctx) => {
      if (t.type !== "function") ctx.addIssue({ code: "custom", message: `tool type '${t.type}' is not supported in chat; only 'function' is`, path: ["type"] });
    }).pipe(z.strictObject({ type: z.literal("function"), function: functionObject, cache_control: cacheControl })),
    { max: 32, maxMessage: "tools holds at most 32 functions" },
  ).nullish(),
  tool_choice: z
    .union([z.enum(["none", "auto", "required"]), z.strictObject({ type: z.literal("function"), function: z.strictObject({ name: z.string().min(1) }) })])
    .nullish(),
  response_format: formatObject.nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  reasoning_effort: z.enum(["low", "medium", "high"]).nullish(),
});
export type DatabricksChatRequest = z.infer<typeof chatRequest>;
