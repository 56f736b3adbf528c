import { z } from "zod";
import { badRequest, type FieldNamer, unsupportedField } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { MAX_MESSAGES } from "../openai/chat-protocol.ts";
import type { CreateResponseRequest, InputItem } from "../responses/protocol.ts";
import { respondWithBuilder, startWithTruncation } from "../responses/run.ts";
import type { Sealer } from "../responses/sealer.ts";
import { flatTools, responseToCanonical, toolNamespaces } from "../responses/to-canonical.ts";
import { ResponseBuilder, type ResponseEvent } from "../responses/to-wire.ts";
import { modelReasons, reasoningAccepted } from "./chat.ts";
import { formatObject, functionObject, jsonSchemaObject } from "./chat-protocol.ts";
import type { Routed } from "./endpoints.ts";
import { boundedRecord, jsonObject } from "../json-object.ts";
import { listOf } from "../list-of.ts";

/** Parameters Databricks refuses with a 400 whatever their value (even false or null). */
export const REFUSED_PARAMETERS: Record<string, string> = {
  background: "background processing is not supported",
  store: "stored responses are not supported",
  conversation: "the conversation API is not supported",
  service_tier: "the service tier is managed by the server",
};

const text = z.string();
const inputText = z.strictObject({ type: z.literal("input_text"), text });
const outputText = z.strictObject({ type: z.literal("output_text"), text, annotations: z.array(z.unknown()).optional(), logprobs: z.array(z.unknown()).optional() });
const inputImage = z.strictObject({ type: z.literal("input_image"), image_url: z.string().min(1), detail: z.string().optional() });
const inputFile = z.strictObject({ type: z.literal("input_file"), file_id: z.string().optional(), filename: z.string().optional(), file_data: z.string().optional() });
const block = z.discriminatedUnion("type", [inputText, outputText, inputImage, inputFile]);

const message = z.strictObject({
  type: z.literal("message"),
  id: z.string().optional(),
  status: z.string().optional(),
  role: z.enum(["user", "assistant"], { error: "input messages have role 'user' or 'assistant'; system text goes in 'instructions'" }),
  content: z.union([z.string(), listOf(block)]),
});
const jsonArgs = z.union([z.string(), jsonObject()]);
const functionCall = z.strictObject({
  type: z.literal("function_call"),
  id: z.string().min(1),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: jsonArgs,
  status: z.string().optional(),
});
const functionCallOutput = z.strictObject({ type: z.literal("function_call_output"), id: z.string().optional(), call_id: z.string().min(1), output: jsonArgs });
const customToolCall = z.strictObject({
  type: z.literal("custom_tool_call"),
  id: z.string().min(1),
  call_id: z.string().min(1),
  name: z.string().min(1),
  input: z.string(),
  status: z.enum(["completed", "in_progress"]).optional(),
});
const customToolCallOutput = z.strictObject({ type: z.literal("custom_tool_call_output"), id: z.string().optional(), call_id: z.string().min(1), output: z.string() });
const reasoningItem = z.strictObject({
  type: z.literal("reasoning"),
  id: z.string().optional(),
  summary: z.array(z.unknown()).optional(),
  content: z.array(z.unknown()).nullish(),
  encrypted_content: z.string().nullish(),
});
/** An item without a type is a message (as in OpenAI's input lists). */
const inputItem = z.preprocess(
  (v) => (v !== null && typeof v === "object" && !Array.isArray(v) && !("type" in v) ? { type: "message", ...v } : v),
  z.discriminatedUnion("type", [message, functionCall, functionCallOutput, customToolCall, customToolCallOutput, reasoningItem]),
);

const customFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("grammar"), definition: z.string().min(1), syntax: z.literal("lark", { error: "only syntax 'lark' is supported" }) }),
]);

const tool = z.object({ type: z.string() }).loose().pipe(
  z.discriminatedUnion("type", [
    z.strictObject({ type: z.literal("function"), function: functionObject }),
    z.strictObject({ type: z.literal("custom"), name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), description: z.string(), format: customFormat.optional() }),
    z.object({ type: z.enum(["mcp", "image_generation", "shell", "code_interpreter", "web_search", "web_search_preview", "file_search"]) }).loose(),
  ]),
);

export const responsesRequest = z.strictObject({
  model: z.string().min(1),
  input: z.union([z.string(), listOf(inputItem, { min: 1, max: MAX_MESSAGES })]),
  instructions: z.string().nullish(),
  max_output_tokens: z.int().min(1, "max_output_tokens is null (no limit) or an integer > 0").nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullish(),
  text: z.strictObject({ format: z.union([formatObject, z.strictObject({ type: z.literal("json_schema"), json_schema: jsonSchemaObject })]).nullish() }).nullish(),
  reasoning: z.strictObject({ effort: z.enum(["low", "medium", "high"]).nullish(), encrypted_content: z.string().nullish() }).nullish(),
  tool_choice: z
    .union([
      z.enum(["none", "auto", "required"]),
      z.strictObject({ type: z.literal("function"), function: z.strictObject({ name: z.string().min(1) }) }),
      z.strictObject({ type: z.literal("custom"), name: z.string().min(1) }),
    ])
    .nullish(),
  tools: listOf(tool, { max: 128 }).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_tool_calls: z.int().min(1, "max_tool_calls is an integer > 0").nullish(),
  metadata: boundedRecord(z.string().max(64), z.string().max(512), 16, "metadata holds at most 16 pairs").nullish(),
  prompt_cache_key: z.string().nullish(),
  prompt_cache_retention: z.literal("24h", { error: "prompt_cache_retention takes '24h'" }).nullish(),
  safety_identifier: z.string().nullish(),
  user: z.string().nullish(),
  truncation: z.enum(["auto", "disabled"]).nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  include: listOf(z.string()).nullish(),
  prompt: z.unknown().optional(),
  // Declared so that the refusal below names them, whatever their value.
  background: z.unknown().optional(),
  store: z.unknown().optional(),
  conversation: z.unknown().optional(),
  service_tier: z.unknown().optional(),
});
export type DatabricksResponsesRequest = z.infer<typeof responsesRequest>;

/** Refuses Databricks' unsupported parameters by their presence alone. */
export function refuseResponsesParameters(raw: unknown): void {
  if (raw === null || typeof raw !== "object") return;
  for (const [key, why] of Object.entries(REFUSED_PARAMETERS)) if (key in raw) throw unsupportedField(key, `is not supported (${why}), whatever its value`);
}

type Obj = Record<string, unknown>;
const asText = (v: string | Obj) => (typeof v === "string" ? v : JSON.stringify(v));

/** Input items in the OpenAI Responses shape the shared codec reads. */
function toOpenAIItems(input: DatabricksResponsesRequest["input"], sealer: Sealer): InputItem[] {
  if (typeof input === "string") return [{ type: "message", role: "user", content: input }];
  return input.map((item, i): InputItem => {
    const at = `input[${i}]`;
    if (item.type === "message") {
      const m = item;
      const content =
        typeof m.content === "string"
          ? m.content
          : m.content.map((b, j) => {
              // Images go on as they came; whether the served model can read them is its engine's call.
              if (b.type === "input_image") return { type: b.type, image_url: b.image_url, ...(b.detail !== undefined ? { detail: b.detail } : {}) };
              if (b.type === "input_file") throw unsupportedField(`${at}.content[${j}]`, "is a file; the served model reads text only");
              return { type: b.type, text: b.text };
            });
      return { type: "message", role: m.role, content } as InputItem;
    }
    switch (item.type) {
      case "function_call":
        return { type: "function_call", id: item.id, call_id: item.call_id, name: item.name, arguments: asText(item.arguments) };
      case "function_call_output":
        return { type: "function_call_output", call_id: item.call_id, output: asText(item.output) };
      case "custom_tool_call":
        return { type: "custom_tool_call", id: item.id, call_id: item.call_id, name: item.name, input: item.input };
      case "custom_tool_call_output":
        return { type: "custom_tool_call_output", call_id: item.call_id, output: item.output };
      case "reasoning":
        if (item.encrypted_content) openSealed(sealer, item.encrypted_content, `${at}.encrypted_content`);
        return { type: "reasoning", summary: [] } as InputItem;
    }
  });
}

function openSealed(sealer: Sealer, sealed: string, param: string): void {
  try {
    sealer.open(sealed);
  } catch {
    throw badRequest(`${param} was not produced by this server, or was altered.`, param);
  }
}

/** The Databricks request as the OpenAI Responses request the shared codec runs. */
export function toOpenAIResponses(
  body: DatabricksResponsesRequest,
  routed: Routed,
  reasons: boolean | undefined,
  sealer: Sealer,
  anyReasons = reasons !== false,
): { openai: CreateResponseRequest; items: InputItem[] } {
  // null is the documented default (no template); only an actual template is refused.
  if (body.prompt != null) throw unsupportedField("prompt", "stored prompt templates are not supported by this server");
  if (body.stream_options != null && !body.stream) throw badRequest("stream_options may be set only when stream is true.", "stream_options");
  if (body.reasoning?.effort != null && !anyReasons)
    throw unsupportedField("reasoning.effort", `is accepted only by reasoning models; the model behind '${routed.entity}' does not reason`);
  if (body.reasoning?.encrypted_content) openSealed(sealer, body.reasoning.encrypted_content, "reasoning.encrypted_content");
  const tools = (body.tools ?? []).map((t, i) => {
    if (t.type === "function") {
      const f = (t as { function: z.infer<typeof functionObject> }).function;
      return { type: "function" as const, name: f.name, description: f.description, parameters: f.parameters ?? null, strict: f.strict ?? null };
    }
    if (t.type === "custom") {
      const c = t as { name: string; description: string; format?: z.infer<typeof customFormat> };
      return { type: "custom" as const, name: c.name, description: c.description, format: c.format ?? { type: "text" as const } };
    }
    const hosted = ["mcp", "image_generation", "shell"].includes(t.type);
    throw unsupportedField(
      `tools[${i}].type`,
      hosted ? `'${t.type}' is a hosted tool; this server runs function and custom tools only` : `'${t.type}' is not supported by Databricks`,
    );
  });
  const tc = body.tool_choice;
  const f = body.text?.format;
  const include = new Set(body.include ?? []);
  if (body.top_logprobs != null) include.add("message.output_text.logprobs");
  const openai = {
    model: routed.model,
    instructions: body.instructions,
    max_output_tokens: body.max_output_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    top_logprobs: body.top_logprobs,
    include: [...include],
    metadata: body.metadata,
    user: body.user,
    safety_identifier: body.safety_identifier,
    prompt_cache_key: body.prompt_cache_key,
    parallel_tool_calls: body.parallel_tool_calls,
    max_tool_calls: body.max_tool_calls,
    truncation: body.truncation,
    tools,
    tool_choice: tc == null || typeof tc === "string" ? tc : tc.type === "function" ? { type: "function", name: tc.function.name } : tc,
    text: f == null ? undefined : { format: f.type === "json_schema" ? { type: "json_schema", ...f.json_schema } : f },
    reasoning: reasons === false ? undefined : body.reasoning?.effort != null ? { effort: body.reasoning.effort } : reasons === true ? { effort: "medium" } : undefined,
    store: false,
    stream: body.stream,
  } as CreateResponseRequest;
  return { openai, items: toOpenAIItems(body.input, sealer) };
}

/** The Responses object in Databricks' field set: its usage shape, an error with a type, `store: false`. */
class DatabricksResponseBuilder extends ResponseBuilder {
  constructor(
    seed: ConstructorParameters<typeof ResponseBuilder>[0],
    opts: ConstructorParameters<typeof ResponseBuilder>[1],
    emit: ((e: ResponseEvent) => void) | undefined,
    private readonly shape: { reasons: boolean | undefined; usage: boolean },
  ) {
    super(seed, opts, emit);
  }

  override snapshot(): Record<string, unknown> {
    const s = super.snapshot();
    const u = s.usage as { input_tokens: number; output_tokens: number; total_tokens: number; output_tokens_details: { reasoning_tokens: number } } | null;
    const err = s.error as { code: string; message: string; param?: string | null } | null;
    const echo = (s as { databricks_echo?: Obj }).databricks_echo ?? {};
    return {
      id: s.id,
      object: "response",
      created_at: s.created_at,
      status: s.status,
      model: s.model,
      output: s.output,
      usage:
        u && this.shape.usage
          ? {
              prompt_tokens: u.input_tokens,
              completion_tokens: u.output_tokens,
              total_tokens: u.total_tokens,
              ...(this.shape.reasons !== false ? { reasoning_tokens: u.output_tokens_details.reasoning_tokens } : {}),
              // The same counts under the Responses API's own names: OpenAI clients on this path
              // (the AI SDK's responses model) require them.
              input_tokens: u.input_tokens,
              output_tokens: u.output_tokens,
            }
          : null,
      error: err ? { code: err.code, message: err.message, type: errorType(err.code), param: err.param ?? null } : null,
      incomplete_details: s.incomplete_details,
      ...echo,
    };
  }
}

/**
 * The failed response's error type, from its code (one of the Responses API's: see to-wire.ts). A
 * queue timeout reads `rate_limit_exceeded` there, the server at capacity: calling it an
 * `invalid_request_error` told the client its request was at fault and not worth sending again.
 */
function errorType(code: string): string {
  if (code === "rate_limit_exceeded") return "rate_limit_error";
  return code === "server_error" ? "server_error" : "invalid_request_error";
}

/** A Responses request on a routed endpoint. */
export async function databricksResponses(body: DatabricksResponsesRequest, env: RouteEnv, routed: Routed, sealer: Sealer): Promise<RouteResult> {
  const reasons = modelReasons(env, routed.model);
  const { openai, items } = toOpenAIResponses(body, routed, reasons, sealer, reasoningAccepted(env, routed));
  const { request, fieldName } = responseToCanonical(openai, items);
  const echo = {
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    temperature: body.temperature ?? 1,
    top_p: body.top_p ?? 1,
    tools: body.tools ?? [],
    tool_choice: body.tool_choice ?? "auto",
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    store: false,
    metadata: body.metadata ?? {},
    reasoning: { effort: reasons === false ? null : (body.reasoning?.effort ?? (reasons === true ? "medium" : null)) },
  };
  const include = new Set(openai.include ?? []);
  const streamed = body.stream === true;
  const builderFor = (emit?: (e: ResponseEvent) => void) =>
    new DatabricksResponseBuilder(
      { id: newId("resp_"), createdAt: Math.floor(Date.now() / 1000), model: routed.entity, echo: { databricks_echo: echo } },
      {
        logprobs: include.has("message.output_text.logprobs"),
        encrypt: include.has("reasoning.encrypted_content") ? (t) => sealer.seal(t) : undefined,
        summary: false,
        customTools: new Set(flatTools(openai.tools).filter(({ tool }) => tool.type === "custom").map(({ tool }) => (tool as { name: string }).name)),
        namespaces: toolNamespaces(openai.tools),
        maxToolCalls: body.max_tool_calls ?? undefined,
        customCallStatus: true,
      },
      emit,
      // Usage is in the stream only with stream_options.include_usage; a JSON answer always has it.
      { reasons, usage: !streamed || body.stream_options?.include_usage === true },
    );
  const started = await startWithTruncation(env.service, { ...env.ctx }, request, env.signal, body.truncation === "auto", databricksNames(body, fieldName));
  return respondWithBuilder(streamed, builderFor, started.events, env.signal, undefined, started.spent, { requestId: env.ctx.requestId });
}

/**
 * Field names as this request spelled them. The OpenAI Responses names the shared code produces put
 * a schema's settings right under `text.format` and a function's under `tools[i]`; Databricks nests
 * them in `text.format.json_schema` and `tools[i].function` (custom tools stay flat).
 */
function databricksNames(body: DatabricksResponsesRequest, openaiName: FieldNamer): FieldNamer {
  return (field) => {
    const name = openaiName(field);
    if (name === null) return name;
    const format = /^text\.format\.(name|schema|strict|description)\b(.*)$/.exec(name);
    if (format) return `text.format.json_schema.${format[1]}${format[2]}`;
    const tool = /^tools\[(\d+)\]\.(name|description|parameters|strict)\b(.*)$/.exec(name);
    if (tool && body.tools?.[Number(tool[1])]?.type === "function") return `tools[${tool[1]}].function.${tool[2]}${tool[3]}`;
    if (/^tool_choice\.name$/.test(name) && typeof body.tool_choice === "object" && body.tool_choice?.type === "function") return "tool_choice.function.name";
    return name;
  };
}
