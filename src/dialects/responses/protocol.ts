import { z } from "zod";
import { byType } from "../zod-by-type.ts";
import { samplingFieldsSchema } from "../openai/sampling-fields.ts";
import { foreignFieldsSchema } from "../openai/foreign-fields.ts";
import { structuredFieldsSchema } from "../openai/structured-fields.ts";
import { serviceFieldsSchema } from "../openai/service-fields.ts";
import { MAX_MESSAGES, promptCacheBreakpoint } from "../openai/chat-protocol.ts";
import { metadataSchema } from "../openai/metadata.ts";
import { jsonObject } from "../json-object.ts";
import { functionParameters } from "../function-parameters.ts";
import { listOf } from "../list-of.ts";
import { once, queryInt } from "../query-once.ts";
import { MAX_PATH_SEGMENT } from "../../http/path-segments.ts";

/**
 * Wire schema of POST /v1/responses (OpenAI's Responses API). The route refuses top-level fields it
 * does not declare (unknown-fields.ts); fields OpenAI defines that Plinth cannot honour are declared
 * so they can be refused by name with a reason.
 */

/*
 * Input items and their parts are strict: each takes the fields OpenAI's schema gives it (and those
 * Plinth puts on the items it returns, so `response.output` goes back as the next `input`), and any
 * other key is a 400 naming it (`input[0].content[0].foo`), as OpenAI answers. A loose item stored
 * an unknown key and listed it back, and a field OpenAI defines that Plinth cannot honour (an
 * image's `file_id`, a call's `namespace`) is declared so that it is refused by name with a reason
 * (see to-canonical.ts), not dropped.
 */

const cacheBreakpoint = promptCacheBreakpoint.nullish();
const inputText = z.strictObject({ type: z.literal("input_text"), text: z.string(), prompt_cache_breakpoint: cacheBreakpoint });
// Where the fields of OpenAI's four annotation kinds are checked; Plinth writes none, but output
// text from elsewhere may carry them, and they are kept with the item as sent.
const annotation = byType(
  {
    file_citation: z.strictObject({ type: z.literal("file_citation"), file_id: z.string(), index: z.int(), filename: z.string() }),
    url_citation: z.strictObject({ type: z.literal("url_citation"), url: z.string(), start_index: z.int(), end_index: z.int(), title: z.string() }),
    container_file_citation: z.strictObject({
      type: z.literal("container_file_citation"),
      container_id: z.string(),
      file_id: z.string(),
      start_index: z.int(),
      end_index: z.int(),
      filename: z.string(),
    }),
    file_path: z.strictObject({ type: z.literal("file_path"), file_id: z.string(), index: z.int() }),
  },
  z.object({ type: z.enum(["file_citation", "url_citation", "container_file_citation", "file_path"]) }),
);
// OpenAI's LogProb, as an output_text part Plinth returns carries it (a -Infinity logprob reads null in JSON).
const topLogprob = z.strictObject({ token: z.string(), logprob: z.number().nullable(), bytes: listOf(z.int()).nullish() });
const logprob = topLogprob.extend({ top_logprobs: listOf(topLogprob).nullish() });
const outputText = z.strictObject({
  type: z.literal("output_text"),
  text: z.string(),
  annotations: listOf(annotation).nullish(),
  logprobs: listOf(logprob).nullish(),
});
const refusalPart = z.strictObject({ type: z.literal("refusal"), refusal: z.string() });
// Values are checked where the part is read (see inputImage); the keys here.
const inputImage = z.strictObject({
  type: z.literal("input_image"),
  image_url: z.string().nullish(),
  file_id: z.string().nullish(),
  detail: z.string().nullish(),
  prompt_cache_breakpoint: cacheBreakpoint,
});
// Refused as a whole by its type (see textOf); its keys are OpenAI's all the same.
const inputFile = z.strictObject({
  type: z.literal("input_file"),
  file_id: z.string().nullish(),
  filename: z.string().nullish(),
  file_data: z.string().nullish(),
  file_url: z.string().nullish(),
  detail: z.string().nullish(),
  prompt_cache_breakpoint: cacheBreakpoint,
});
/** Another type (`input_audio`): refused by its type where the part is read. */
const otherPart = z.object({ type: z.string() }).loose();
/** A part of a known type is checked as that type, so a malformed text part cannot pass as "other". */
const contentPart = byType({ input_text: inputText, output_text: outputText, refusal: refusalPart, input_image: inputImage, input_file: inputFile }, otherPart);
const outputPart = byType({ input_text: inputText, output_text: outputText, input_image: inputImage, input_file: inputFile }, otherPart);
const messageContent = z.union([z.string(), listOf(contentPart)]);

/**
 * Why an id a client gives an item could not be the `{item_id}` of a conversation's item routes;
 * undefined when it can. Such an id is stored (with the response, in a conversation), and an item
 * stored under one could never be read or deleted alone: a segment longer than the router takes
 * (a 414), `.` and `..` (which URL resolution, in clients and proxies, takes as steps of the path,
 * percent-encoded or not), and whitespace and control characters (stripped or refused on the way).
 * (A lone surrogate, which no percent-encoding can write, is refused in any string of a body.)
 */
function unaddressableItemId(id: string): string | undefined {
  if (id === "." || id === "..") return `'${id}' cannot be an item id: URLs read it as a step of the path`;
  if (/[\s\p{Cc}]/u.test(id)) return "an item id cannot hold whitespace or control characters";
  const encoded = encodeURIComponent(id).length;
  if (encoded > MAX_PATH_SEGMENT)
    return `an item id must fit in a URL path segment: this one is ${encoded} characters percent-encoded, and the item routes take at most ${MAX_PATH_SEGMENT}`;
  return undefined;
}

/** A client-chosen item id, held to what the item routes can address (see unaddressableItemId). */
const itemId = z.string().check((ctx) => {
  const why = unaddressableItemId(ctx.value);
  if (why) ctx.issues.push({ code: "custom", message: why, input: ctx.value });
});

/** An item's status as OpenAI's items carry it (an item sent back keeps the one it was given). */
const itemStatus = z.enum(["in_progress", "completed", "incomplete"]);

/**
 * Part types by role, as OpenAI's schema has them: an assistant's (OutputMessage) are output_text
 * and refusal, the others' (InputMessage) input parts. A part in the wrong role was taken and
 * stored in a shape that fails OpenAI's own schema when listed.
 */
const ASSISTANT_PARTS = ["output_text", "refusal"];
const NOT_INPUT_PARTS = new Set(ASSISTANT_PARTS);

// EasyInputMessage, InputMessage and OutputMessage in one: a message as sent, or as returned.
const message = z
  .strictObject({
    type: z.literal("message").optional(),
    id: itemId.optional(),
    role: z.enum(["user", "assistant", "system", "developer"]),
    content: messageContent,
    status: itemStatus.optional(),
    // OpenAI's label of an assistant message (commentary or the final answer), which clients keep
    // and send back; the chat templates have no place for it, so it is checked and not rendered.
    phase: z.enum(["commentary", "final_answer"]).nullish(),
  })
  .superRefine((m, ctx) => {
    if (typeof m.content === "string") return;
    m.content.forEach((part, j) => {
      const wrong = m.role === "assistant" ? !ASSISTANT_PARTS.includes(part.type) : NOT_INPUT_PARTS.has(part.type);
      if (!wrong) return;
      const allowed = m.role === "assistant" ? "'output_text' or 'refusal'" : "'input_text', 'input_image' or 'input_file'";
      ctx.addIssue({ code: "custom", path: ["content", j, "type"], message: `${m.role === "assistant" ? "an" : "a"} ${m.role} message's parts are ${allowed}, not '${part.type}'` });
    });
  });

/**
 * OpenAI's fields of a tool call or output that say where it came from: a namespace of tools and a
 * program that made the call. Declared so that what Plinth cannot do is refused by name (see
 * refuseItemFields); a direct caller is what every call here is.
 */
const callOrigin = {
  namespace: z.string().nullish(),
  caller: z.strictObject({ type: z.enum(["direct", "program"]), caller_id: z.string().optional() }).nullish(),
};

const functionCall = z.strictObject({
  type: z.literal("function_call"),
  id: itemId.optional(),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
  status: itemStatus.optional(),
  ...callOrigin,
});

const functionCallOutput = z.strictObject({
  type: z.literal("function_call_output"),
  id: itemId.nullish(),
  call_id: z.string().min(1),
  output: z.union([z.string(), listOf(outputPart)]),
  status: itemStatus.nullish(),
  // The tool that produced the output: checked against the call it answers (see itemsToMessages).
  name: z.string().min(1).nullish(),
  ...callOrigin,
});

// OpenAI's CustomToolCall and its output have no status, but Plinth's own have one where it lists
// them (see itemToWire) and the Databricks dialect's calls do: taken, so they can be sent back.
const customToolCall = z.strictObject({
  type: z.literal("custom_tool_call"),
  id: itemId.optional(),
  call_id: z.string().min(1),
  name: z.string().min(1),
  input: z.string(),
  status: itemStatus.optional(),
  ...callOrigin,
});

const customToolCallOutput = z.strictObject({
  type: z.literal("custom_tool_call_output"),
  id: itemId.optional(),
  call_id: z.string().min(1),
  output: z.union([z.string(), listOf(outputPart)]),
  status: itemStatus.optional(),
  caller: callOrigin.caller,
});

const reasoning = z.strictObject({
  type: z.literal("reasoning"),
  id: itemId.optional(),
  summary: listOf(z.strictObject({ type: z.literal("summary_text"), text: z.string() })).optional(),
  content: listOf(z.strictObject({ type: z.literal("reasoning_text"), text: z.string() })).nullish(),
  encrypted_content: z.string().nullish(),
  status: itemStatus.optional(),
});

const itemReference = z.strictObject({ type: z.literal("item_reference"), id: z.string().min(1) });

const itemTypes = {
  message,
  function_call: functionCall,
  function_call_output: functionCallOutput,
  custom_tool_call: customToolCall,
  custom_tool_call_output: customToolCallOutput,
  reasoning,
  item_reference: itemReference,
};

// OpenAI's ItemReference may leave its type out or send it null (`type?: "item_reference" | null`),
// as Open Responses' ItemReferenceParam does: an untyped item that is nothing but an id is one.
const untypedReference = z
  .strictObject({ type: z.null().optional(), id: z.string().min(1) })
  .transform((r) => ({ type: "item_reference" as const, id: r.id }));
const untypedMessage = z
  .object({ type: z.enum(Object.keys(itemTypes) as [keyof typeof itemTypes, ...Array<keyof typeof itemTypes>]).optional() })
  .loose()
  .pipe(message);
const isBareId = (value: unknown): boolean =>
  typeof value === "object" && value !== null && !Array.isArray(value) && "id" in value && !("role" in value) && !("content" in value) &&
  ((value as { type?: unknown }).type ?? null) === null;

// Told apart by type, so that an item's refusal names its own field (`input[0].role`); an item
// without a type is a message (or a reference, when it is only an id), and an unknown type is
// refused with the list of known ones.
export const inputItem = byType(
  itemTypes,
  z.unknown().transform((value, ctx): z.output<typeof untypedReference> | z.output<typeof untypedMessage> => {
    const parsed = (isBareId(value) ? untypedReference : untypedMessage).safeParse(value);
    if (parsed.success) return parsed.data;
    for (const issue of parsed.error.issues) ctx.addIssue({ ...issue } as Parameters<typeof ctx.addIssue>[0]);
    return z.NEVER;
  }),
);
export type InputItem = z.infer<typeof inputItem>;

/**
 * OpenAI's tool search and programmatic calling: declared so that what this server cannot do (a tool
 * loaded later by search, one called from a program) is refused by name (see toolsToCanonical).
 */
const toolLoading = {
  defer_loading: z.boolean().nullish(),
  allowed_callers: listOf(z.enum(["direct", "programmatic"])).nullish(),
};

const functionTool = z.strictObject({
  type: z.literal("function"),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "function names are 1 to 64 letters, digits, '_' or '-'"),
  description: z.string().nullish(),
  parameters: functionParameters().nullish(),
  // What the function's output (a function_call_output's string) holds, as JSON Schema: told to the
  // model with the function's description (see toolsToCanonical).
  output_schema: jsonObject().nullish(),
  strict: z.boolean().nullish(),
  ...toolLoading,
});

const customTool = z.strictObject({
  type: z.literal("custom"),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "tool names are 1 to 64 letters, digits, '_' or '-'"),
  description: z.string().nullish(),
  format: z
    .discriminatedUnion("type", [
      z.strictObject({ type: z.literal("text") }),
      z.strictObject({ type: z.literal("grammar"), syntax: z.enum(["lark", "regex"]), definition: z.string().min(1) }),
    ])
    .nullish(),
  ...toolLoading,
});

/** Built-in tools are recognised so the refusal can name the type. */
const otherTool = z.object({ type: z.string() }).loose();

/**
 * OpenAI's group of tools under one name (the Codex CLI sends each MCP server's tools, and its
 * sub-agent tools, in one): its tools are offered to the model as top-level ones, and a call of one
 * names the namespace beside the tool (see toolsToCanonical and the response's call items).
 */
const namespaceTool = z.strictObject({
  type: z.literal("namespace"),
  name: z.string().regex(/^[a-zA-Z0-9_.-]{1,64}$/, "namespace names are 1 to 64 letters, digits, '_', '.' or '-'"),
  description: z.string().nullish(),
  tools: listOf(byType({ function: functionTool, custom: customTool }, otherTool), { min: 1, max: 128 }),
});

// Told apart by type: a malformed function or custom tool is refused with its own field named, and
// cannot pass as a built-in one (it would have reached the model without its name checked).
export const tool = byType({ function: functionTool, custom: customTool, namespace: namespaceTool }, otherTool);

const toolChoice = byType(
  {
    function: z.strictObject({ type: z.literal("function"), name: z.string().min(1) }),
    custom: z.strictObject({ type: z.literal("custom"), name: z.string().min(1) }),
    // Strict to the key: a stray one was echoed back in the response's tool_choice.
    allowed_tools: z.strictObject({
      type: z.literal("allowed_tools"),
      mode: z.enum(["auto", "required"]),
      tools: listOf(
        byType(
          {
            function: z.strictObject({ type: z.literal("function"), name: z.string().min(1) }),
            custom: z.strictObject({ type: z.literal("custom"), name: z.string().min(1) }),
          },
          // A built-in tool (refused by name later, as it is not among the tools).
          z.object({ type: z.string() }).loose(),
        ),
        { min: 1 },
      ),
    }),
  },
  // A mode, or a built-in tool's type (refused by name later).
  z.union([z.enum(["none", "auto", "required"]), z.object({ type: z.string() }).loose()]),
);

// Strict, as `text`, `reasoning` and the tools: a misspelt key (`strcit`, `efort`) would otherwise
// be dropped without a word and change the answer.
const textFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "schema names are 1 to 64 letters, digits, '_' or '-'"),
    description: z.string().nullish(),
    schema: jsonObject(),
    strict: z.boolean().nullish(),
  }),
]);

export const EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const;

// OpenAI's metadata rule, the same for every object that carries it.
const metadata = metadataSchema;

export const createResponseRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), listOf(inputItem, { max: MAX_MESSAGES })]).optional(),
  instructions: z.string().nullish(),
  max_output_tokens: z.int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  // OpenAI takes 0 (only the most likely token is left), as SpAk does.
  top_p: z.number().min(0).max(1).nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  include: listOf(z.string()).nullish(),
  metadata: metadata.nullish(),
  user: z.string().nullish(),
  safety_identifier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().nullish(),
  // Labels of the client's own (the Codex CLI sends its thread and turn ids here on every turn):
  // nothing the answer depends on, so accepted as string pairs and neither stored nor echoed.
  client_metadata: z.record(z.string(), z.string()).nullish(),
  // vLLM's: requests share cached prompt state only under one salt (as on chat and completions).
  cache_salt: z.string().nullish(),
  ...serviceFieldsSchema,
  /** Accepted by the schema only so that it can be refused by name. */
  context_management: z.unknown().optional(),
  service_tier: z.string().nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_tool_calls: z.int().min(0).nullish(),
  truncation: z.enum(["auto", "disabled"]).nullish(),
  tools: listOf(tool, { max: 128 }).nullish(),
  tool_choice: toolChoice.nullish(),
  text: z.strictObject({ format: textFormat.nullish(), verbosity: z.enum(["low", "medium", "high"]).nullish() }).nullish(),
  reasoning: z
    .strictObject({
      effort: z.enum(EFFORTS).nullish(),
      summary: z.enum(["auto", "concise", "detailed"]).nullish(),
      generate_summary: z.enum(["auto", "concise", "detailed"]).nullish(),
      // The chat path's reasoning object (OpenRouter's), read the same way here, so that a budget
      // sent in it is honoured rather than dropped as an unknown key.
      budget_tokens: z.int().min(1).nullish(),
      max_tokens: z.int().min(1).nullish(),
      enabled: z.boolean().nullish(),
      // Declared so that what cannot be honoured is refused by name (see refuseUnsupported).
      mode: z.string().nullish(),
      context: z.enum(["auto", "current_turn", "all_turns"]).nullish(),
    })
    .nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().min(1).nullish(),
  // Strict: `{id, foo}` was taken (and looked up) as `{id}`.
  conversation: z.union([z.string().min(1), z.strictObject({ id: z.string().min(1) })]).nullish(),
  background: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.strictObject({ include_obfuscation: z.boolean().optional() }).nullish(),
  // Plinth extensions shared with the chat path (see the README).
  seed: samplingFieldsSchema.seed,
  logit_bias: samplingFieldsSchema.logit_bias,
  top_k: z.int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  // vLLM's Responses extensions, and the vLLM and llama-server fields chat reads (the same table,
  // see foreign-fields.ts): honoured, taken at their neutral value, or refused by name.
  stop: samplingFieldsSchema.stop,
  repetition_penalty: samplingFieldsSchema.repetition_penalty,
  // Chat's penalties, which vLLM's Responses request takes too.
  frequency_penalty: samplingFieldsSchema.frequency_penalty,
  presence_penalty: samplingFieldsSchema.presence_penalty,
  chat_template_kwargs: jsonObject().nullish(),
  ...structuredFieldsSchema,
  ...foreignFieldsSchema,
  enable_response_messages: z.boolean().nullish(),
  previous_input_messages: z.unknown().optional(),
  // Declared only so they can be refused by name.
  prompt: z.unknown().optional(),
});
export type CreateResponseRequest = z.infer<typeof createResponseRequest>;

/**
 * POST /v1/responses/input_tokens: OpenAI's TokenCountsBody, the fields that shape the prompt and
 * nothing else. A create's other fields (`stream`, `max_output_tokens`, `store`, `temperature`, …)
 * ask for what a count does not do, and were taken without a word; they are refused by name now.
 */
export const inputTokensRequest = createResponseRequest
  .pick({
    model: true,
    input: true,
    previous_response_id: true,
    tools: true,
    text: true,
    reasoning: true,
    truncation: true,
    instructions: true,
    conversation: true,
    tool_choice: true,
    parallel_tool_calls: true,
  })
  .extend({
    // OpenAI's style preset, a field of the count's body only: declared so that it can be refused by name.
    personality: z.unknown().optional(),
  });
export type InputTokensRequest = z.infer<typeof inputTokensRequest>;

// Once (`include=a`), repeated (`include=a&include=b`), or as the openai SDK writes a list (`include[]=a`).
const includeParam = z.union([z.string(), listOf(z.string())]).optional();

/**
 * GET /v1/responses/{id}: `stream=true` resumes a background stream after `starting_after`.
 * `include_obfuscation` pads the delta events as on create; `include` adds to the stored response,
 * or to the items and responses a resumed stream replays; anything else is refused.
 */
export const retrieveQuery = z.strictObject({
  // What to add to the stored response (see responseWithInclude): the openai SDK's retrieve sends it.
  include: includeParam,
  "include[]": includeParam,
  stream: z.enum(["true", "false"]).optional(),
  starting_after: z.string().optional(),
  include_obfuscation: z.enum(["true", "false"]).optional(),
  // The namespace the response was stored in (see queryNamespace).
  user: z.string().optional(),
  safety_identifier: z.string().optional(),
});

/**
 * What `include` can ask for, on a create and on the item reads: logprobs of output text and sealed
 * reasoning. OpenAI's other values are for hosted tools and input images, which Plinth has not got.
 */
export const INCLUDABLE = ["message.output_text.logprobs", "reasoning.encrypted_content"];

/**
 * The query of a read of stored items: what to include in them (see readInclude). Strict, as the
 * other queries: a key it does not know (`include[0]=…`, a misspelt `limt`) was dropped and the read
 * answered without it.
 */
export const includeQuery = z.strictObject({
  include: includeParam,
  "include[]": includeParam,
  // Accepted as on a retrieve (see retrieveQuery).
  user: z.string().optional(),
  safety_identifier: z.string().optional(),
});
export type IncludeQuery = z.infer<typeof includeQuery>;

/** A page of stored items: the cursor, and what to include in them. */
export const listQuery = includeQuery.extend({
  after: once(z.string()).optional(),
  limit: once(queryInt(1, 100)).optional(),
  order: once(z.enum(["asc", "desc"])).optional(),
});
export type ListQuery = z.infer<typeof listQuery>;
