import { badRequest, unsupportedField } from "../../core/errors.ts";
import { SYSTEM_FINGERPRINT } from "../../core/ids.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { chatCompletion } from "../openai/chat.ts";
import type { ChatCodec } from "../openai/chat-codec.ts";
import type { ChatCompletionRequest, ChatMessage } from "../openai/chat-protocol.ts";
import { OPENAI_SAMPLING_DEFAULTS } from "../openai/sampling-fields.ts";
import type { ContentItem, DatabricksChatMessage, DatabricksChatRequest } from "./chat-protocol.ts";
import type { Routed } from "./endpoints.ts";
import { databricksStreamErrorBody } from "./errors.ts";

type Obj = Record<string, unknown>;

/** Whether the served model has a thinking section (reasoning_effort applies, usage counts reasoning). */
/**
 * Whether the model reasons: true, false, or undefined when not known here (a remote upstream's
 * model). Unknown lets the client's own reasoning fields through, but adds no default of ours.
 */
export function modelReasons(env: RouteEnv, model: string): boolean | undefined {
  return env.service.registry.get(model)?.engine?.describe().reasoning;
}

/**
 * Whether a reasoning field is accepted: when any model the request could have been routed to
 * reasons. On an A/B endpoint that pairs a reasoning model with one that does not, the same request
 * must not be a 400 on some draws only; the field then applies where the drawn model reasons.
 */
export function reasoningAccepted(env: RouteEnv, routed: Routed): boolean {
  return (routed.candidates ?? [routed.model]).some((model) => modelReasons(env, model) !== false);
}

/** Databricks' usage: one shape for every task; reasoning_tokens only for reasoning models. */
export function usageToDatabricks(u: Obj | null | undefined, reasons: boolean | undefined, completion = true): Obj | null {
  if (!u) return null;
  const details = u.completion_tokens_details as { reasoning_tokens?: number } | undefined;
  const reasoning = (u.reasoning_tokens as number | undefined) ?? details?.reasoning_tokens ?? 0;
  return {
    prompt_tokens: u.prompt_tokens,
    ...(completion ? { completion_tokens: u.completion_tokens } : {}),
    total_tokens: u.total_tokens,
    ...(reasons !== false ? { reasoning_tokens: reasoning } : {}),
  };
}

/**
 * A message's content items as OpenAI chat content: text when every item reads as text, else one
 * part per item (so positions stay the client's) with images passed on for the engine to accept or
 * refuse. What no engine here can read is refused by name.
 */
function itemsToContent(items: ContentItem[], i: number, role: string): string | ChatContentPart[] {
  const texts = itemsToText(items.map((item) => (item.type === "image_url" ? { type: "text" as const, text: "" } : item)), i, role);
  if (!items.some((item) => item.type === "image_url")) return texts.filter((t) => t !== null).join("\n");
  if (role !== "user") throw unsupportedField(`messages[${i}].content[${items.findIndex((x) => x.type === "image_url")}]`, "is an image; images belong in user messages");
  return items.map((item, j) =>
    item.type === "image_url" ? { type: "image_url", image_url: { url: item.image_url.url, ...(item.image_url.detail !== undefined ? { detail: item.image_url.detail } : {}) } } : { type: "text", text: texts[j] ?? "" },
  );
}

type ChatContentPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string; detail?: string } };

/** The Source fields a kind of document source does not take: text and base64 read media_type and data, content its content, url its url. */
const FOREIGN_SOURCE_FIELDS = {
  text: ["content", "url"],
  content: ["media_type", "data", "url"],
  base64: ["content", "url"],
  url: ["media_type", "data", "content"],
} as const;

/** Each content item as the text a model reads (null: nothing to read); what it cannot read is refused by name. */
function itemsToText(items: ContentItem[], i: number, role: string): Array<string | null> {
  const parts: Array<string | null> = [];
  items.forEach((item, j) => {
    const at = `messages[${i}].content[${j}]`;
    if ("cache_control" in item && item.cache_control !== undefined)
      throw unsupportedField(`${at}.cache_control`, "is accepted only by Databricks-hosted Claude models; this server caches prompts by itself");
    switch (item.type) {
      case "text":
        parts.push(item.text);
        return;
      case "reasoning":
        // Earlier turns' reasoning is not shown to the model again (as on every chat path here).
        if (role !== "assistant") throw badRequest(`${at}: reasoning content belongs to assistant messages.`, `${at}.type`);
        parts.push(null);
        return;
      case "document": {
        const s = item.source;
        // Source holds the fields of four source kinds; one that belongs to another kind would be
        // read by nothing here, so it is refused by name rather than dropped.
        for (const field of FOREIGN_SOURCE_FIELDS[s.type])
          if (s[field] !== undefined) throw badRequest(`${at}.source.${field} does not belong to a '${s.type}' source.`, `${at}.source.${field}`);
        if (item.citations?.enabled) throw unsupportedField(`${at}.citations`, "cannot be enabled: the served model does not cite documents");
        let text: string | undefined;
        if (s.type === "text") {
          if (s.data === undefined) throw badRequest(`${at}.source.data is required for a text source.`, `${at}.source.data`);
          if (s.media_type !== undefined && s.media_type !== "text/plain")
            throw badRequest(`${at}.source.media_type must be text/plain for a text source.`, `${at}.source.media_type`);
          text = s.data;
        } else if (s.type === "content") {
          // The items of a content source are TextContent and ImageContent, whose cache_control is
          // refused as it is on a message's own items (it was dropped here without a word).
          if (Array.isArray(s.content))
            s.content.forEach((c, k) => {
              if (c.cache_control !== undefined)
                throw unsupportedField(`${at}.source.content[${k}].cache_control`, "is accepted only by Databricks-hosted Claude models; this server caches prompts by itself");
            });
          if (typeof s.content === "string") text = s.content;
          else if (Array.isArray(s.content) && s.content.every((c) => c.type === "text")) text = s.content.map((c) => (c as { text: string }).text).join("\n");
          else if (s.content === undefined) throw badRequest(`${at}.source.content is required for a content source.`, `${at}.source.content`);
        }
        if (text === undefined)
          throw unsupportedField(`${at}.source`, `of type '${s.type}' needs a model that reads ${s.type === "url" || s.type === "base64" ? "PDF files" : "images"}; the served model reads text only`);
        parts.push([item.title, item.context, text].filter((x) => x).join("\n"));
        return;
      }
      case "image_url":
        throw new Error("images are handled by itemsToContent");
      case "file":
        if (item.file.url !== undefined && item.file.file_data === undefined)
          throw unsupportedField(`${at}.file.url`, "is supported only for Gemini models; send file_data");
        throw unsupportedField(at, "is a file; the served model reads text only");
    }
  });
  return parts;
}

/** Databricks' message rules, then the message as OpenAI's chat route takes it. */
function toOpenAIMessage(m: DatabricksChatMessage, i: number, all: DatabricksChatMessage[]): ChatMessage {
  if (m.role === "system") {
    if (i !== 0) throw badRequest(`messages[${i}]: a system message may only be the first message.`, `messages[${i}].role`);
  }
  if (m.role !== "tool" && m.tool_call_id != null && m.tool_call_id !== "")
    throw badRequest(`messages[${i}].tool_call_id must be empty for a '${m.role}' message.`, `messages[${i}].tool_call_id`);
  if (m.tool_calls && m.role !== "assistant") throw badRequest(`messages[${i}].tool_calls belongs to assistant messages.`, `messages[${i}].tool_calls`);
  // With tool_calls there is no content. What this dialect itself answers with a call (a reasoning
  // model's reasoning parts) and what clients echo back for a call turn (LangChain's "") are not
  // content in that sense, so the standard tool loop — send the answer back as it came — works.
  if (m.tool_calls && m.content != null && !callTurnContent(m.content))
    throw badRequest(`messages[${i}] has tool_calls, so its content must not be specified (other than its reasoning).`, `messages[${i}].content`);
  const given = m.tool_calls && m.content === "" ? undefined : m.content;
  const content = given == null ? undefined : typeof given === "string" ? given : itemsToContent(given, i, m.role);
  switch (m.role) {
    case "system":
    case "user":
      if (content === undefined) throw badRequest(`messages[${i}].content is required.`, `messages[${i}].content`);
      return { role: m.role, content, ...(m.name ? { name: m.name } : {}) };
    case "assistant":
      if (content === undefined && !m.tool_calls) throw badRequest(`messages[${i}].content is required without tool_calls.`, `messages[${i}].content`);
      return {
        role: "assistant",
        // A call turn's reasoning parts leave no text.
        content: m.tool_calls && content === "" ? null : (content ?? null),
        ...(m.name ? { name: m.name } : {}),
        ...(m.tool_calls
          ? {
              tool_calls: m.tool_calls.map((c, j) => {
                if (c.cache_control !== undefined)
                  throw unsupportedField(`messages[${i}].tool_calls[${j}].cache_control`, "is accepted only by Databricks-hosted Claude models");
                const args = c.function.arguments;
                return { id: c.id, type: "function" as const, function: { name: c.function.name, arguments: typeof args === "string" ? args : JSON.stringify(args) } };
              }),
            }
          : {}),
      };
    case "tool": {
      if (!m.tool_call_id) throw badRequest(`messages[${i}].tool_call_id is required on a tool message.`, `messages[${i}].tool_call_id`);
      const known = all.slice(0, i).some((p) => p.tool_calls?.some((c) => c.id === m.tool_call_id));
      if (!known) throw badRequest(`messages[${i}].tool_call_id '${m.tool_call_id}' answers no earlier tool call.`, `messages[${i}].tool_call_id`);
      return { role: "tool", content: content ?? "", tool_call_id: m.tool_call_id };
    }
  }
}

/** Content that may stand beside tool_calls: nothing ("") or only reasoning parts. */
function callTurnContent(content: string | ContentItem[]): boolean {
  return typeof content === "string" ? content === "" : content.every((item) => item.type === "reasoning");
}

/** The Databricks request as the OpenAI chat request it runs as, against the routed model. */
export function toOpenAIChat(body: DatabricksChatRequest, routed: Routed, reasons: boolean | undefined, anyReasons = reasons !== false): ChatCompletionRequest {
  const systems = body.messages.filter((m) => m.role === "system").length;
  if (systems > 1) throw badRequest("Only one system message is allowed, as the first message.", "messages");
  if ((body.n ?? 1) > 1 && routed.endpoint.kind === "pay-per-token")
    throw badRequest("n > 1 is available only on provisioned-throughput endpoints; this is a pay-per-token endpoint.", "n");
  if (body.stream_options != null && !body.stream) throw badRequest("stream_options may be set only when stream is true.", "stream_options");
  if (body.top_logprobs != null && !body.logprobs) throw badRequest("top_logprobs needs logprobs set to true.", "top_logprobs");
  // `auto` with no tools has nothing to call and answers as `none` does; `required` or a named tool needs one.
  if (body.tool_choice != null && body.tool_choice !== "none" && body.tool_choice !== "auto" && !(body.tools?.length))
    throw badRequest("tool_choice needs tools to choose from.", "tool_choice");
  if (body.reasoning_effort != null && !anyReasons)
    throw unsupportedField("reasoning_effort", `is accepted only by reasoning models; the model behind '${routed.entity}' does not reason`);
  body.tools?.forEach((t, i) => {
    if (t.cache_control !== undefined) throw unsupportedField(`tools[${i}].cache_control`, "is accepted only by Databricks-hosted Claude models");
  });
  const rf = body.response_format;
  return {
    model: routed.model,
    messages: body.messages.map((m, i) => toOpenAIMessage(m, i, body.messages)),
    stream: body.stream,
    max_tokens: body.max_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    stop: body.stop,
    n: body.n,
    tools: body.tools?.map((t) => ({ type: "function" as const, function: { ...t.function, parameters: t.function.parameters } })),
    // Without tools there is nothing to choose: "none" is what that already means (001-67).
    tool_choice: body.tools?.length ? (body.tool_choice ?? "auto") : undefined,
    response_format: rf == null ? rf : rf.type === "json_schema" ? { type: "json_schema", json_schema: rf.json_schema } : rf,
    logprobs: body.logprobs,
    top_logprobs: body.top_logprobs,
    // Databricks' default effort is medium, on the models that take one.
    // (A drawn model that does not reason, on an endpoint where another does: no effort to set.)
    reasoning_effort: reasons === false ? undefined : (body.reasoning_effort ?? (reasons === true ? "medium" : undefined)),
  } as ChatCompletionRequest;
}

/** An answer's text and reasoning as Databricks' content: a string, or reasoning and text items. */
function contentOf(message: Obj): unknown {
  const reasoning = message.reasoning_content as string | undefined;
  if (reasoning === undefined) return message.content;
  return [
    { type: "reasoning", summary: [{ type: "summary_text", text: reasoning }] },
    ...(message.content != null ? [{ type: "text", text: message.content }] : []),
  ];
}

function messageToDatabricks(m: Obj): Obj {
  const out: Obj = { role: m.role ?? "assistant", content: contentOf(m) };
  if (m.tool_calls) out.tool_calls = m.tool_calls;
  return out;
}

function deltaToDatabricks(d: Obj): Obj {
  const out: Obj = {};
  if (d.role !== undefined) out.role = d.role;
  if (d.reasoning_content !== undefined) out.content = [{ type: "reasoning", summary: [{ type: "summary_text", text: d.reasoning_content }] }];
  else if (d.content !== undefined) out.content = d.content;
  if (d.tool_calls !== undefined) out.tool_calls = d.tool_calls;
  return out;
}

/** A choice's logprobs as Databricks' reference has them: the content list, no `refusal`. */
function logprobsToDatabricks(l: unknown): unknown {
  return l !== null && typeof l === "object" ? { content: (l as Obj).content ?? null } : l;
}

/** OpenAI's chat route configured with Databricks' shapes: no fingerprint, one usage shape, the entity as model. */
export function databricksChatCodec(routed: Routed, reasons: boolean | undefined, logprobs: boolean): ChatCodec {
  return {
    dialect: "databricks",
    samplingDefaults: OPENAI_SAMPLING_DEFAULTS,
    streamUsage: "always",
    usageOnFinishChunk: true,
    systemFingerprint: () => SYSTEM_FINGERPRINT,
    completionToWire: (c) => ({
      id: c.id,
      object: "chat.completion",
      created: c.created,
      model: routed.entity,
      choices: (c.choices as Obj[]).map((ch) => ({
        index: ch.index,
        message: messageToDatabricks(ch.message as Obj),
        finish_reason: ch.finish_reason,
        ...(logprobs ? { logprobs: logprobsToDatabricks(ch.logprobs) } : {}),
      })),
      usage: usageToDatabricks(c.usage as Obj, reasons),
    }),
    chunkToWire: (c) => ({
      id: c.id,
      object: "chat.completion.chunk",
      created: c.created,
      model: routed.entity,
      choices: (c.choices as Obj[]).map((ch) => ({
        index: ch.index,
        delta: deltaToDatabricks(ch.delta as Obj),
        finish_reason: ch.finish_reason,
        ...(logprobs ? { logprobs: logprobsToDatabricks(ch.logprobs) } : {}),
      })),
      ...(c.usage ? { usage: usageToDatabricks(c.usage as Obj, reasons) } : {}),
    }),
    streamError: (err, _meta, names) => [databricksStreamErrorBody(err, names)],
  };
}

/** A chat request on a routed endpoint. */
export function databricksChat(body: DatabricksChatRequest, env: RouteEnv, routed: Routed): Promise<RouteResult> {
  const reasons = modelReasons(env, routed.model);
  const openai = toOpenAIChat(body, routed, reasons, reasoningAccepted(env, routed));
  return chatCompletion(openai, env, databricksChatCodec(routed, reasons, body.logprobs === true));
}
