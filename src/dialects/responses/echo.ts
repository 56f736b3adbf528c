import type { CreateResponseRequest } from "./protocol.ts";

/**
 * The request settings a response object repeats, with OpenAI's defaults filled in, so a client
 * reading a stored response sees what it ran with.
 */
export function echoSettings(body: CreateResponseRequest, conversationId: string | undefined): Record<string, unknown> {
  return {
    instructions: body.instructions ?? null,
    tools: (body.tools ?? []).map((t) =>
      t.type === "function" ? { description: null, parameters: null, ...t, strict: (t as { strict?: boolean | null }).strict !== false } : t,
    ),
    tool_choice: body.tool_choice ?? "auto",
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    max_tool_calls: body.max_tool_calls ?? null,
    temperature: body.temperature ?? 1,
    top_p: body.top_p ?? 1,
    // Open Responses' ResponseResource requires both; the sampler's values (0 when not sent).
    presence_penalty: body.presence_penalty ?? 0,
    frequency_penalty: body.frequency_penalty ?? 0,
    top_logprobs: body.top_logprobs ?? 0,
    max_output_tokens: body.max_output_tokens ?? null,
    previous_response_id: body.previous_response_id ?? null,
    conversation: conversationId ? { id: conversationId } : null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? body.reasoning?.generate_summary ?? null },
    text: { format: echoFormat(body.text?.format), verbosity: body.text?.verbosity ?? "medium" },
    truncation: body.truncation ?? "disabled",
    metadata: body.metadata ?? {},
    store: body.store ?? true,
    background: body.background ?? false,
    // The tier that served it, as OpenAI reports it: "auto" resolves to "default", the only one here.
    service_tier: "default",
    user: body.user ?? null,
    safety_identifier: body.safety_identifier ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    prompt_cache_retention: body.prompt_cache_retention === "in-memory" ? "in_memory" : (body.prompt_cache_retention ?? null),
  };
}

type TextFormat = NonNullable<NonNullable<CreateResponseRequest["text"]>["format"]>;

/**
 * The output format as it was applied: a JSON schema's strictness (strict only when `strict: true`
 * was sent), as OpenAI's response repeats it. `description` only when one was sent: OpenAI's
 * published schema types it as a string, so a null would fail a client that validates against it.
 */
function echoFormat(format: TextFormat | null | undefined): Record<string, unknown> {
  if (format == null) return { type: "text" };
  if (format.type !== "json_schema") return format;
  const { type, description, ...rest } = format;
  return { type, ...(description != null ? { description } : {}), ...rest, strict: format.strict === true };
}
