import { type FieldNamer, snakeCasePath } from "../../core/errors.ts";
import type { ChatCompletionRequest } from "./chat-protocol.ts";
import type { CompletionRequest } from "./completions-protocol.ts";
import type { EmbeddingsRequest } from "./embeddings-protocol.ts";

/**
 * How the OpenAI dialect spells the canonical fields errors below it name (see core/errors.ts).
 * Each request kind has its own: a prompt is `messages` in chat and `prompt` in completions, and the
 * budget is whichever of `max_tokens` / `max_completion_tokens` the client sent.
 */

/** What of a chat body decides how a field is spelled: the budget's field and the kind of each tool and call. */
type ChatNamingBody = Pick<ChatCompletionRequest, "max_completion_tokens"> & {
  max_tokens?: number | null;
  n_predict?: number | null;
  tools?: ReadonlyArray<{ type?: string } | null> | null;
  messages?: unknown;
};

export function chatFieldNames(
  body: ChatNamingBody,
  reasoningParam?: string,
  formatParam?: string,
  budgetParam?: string,
): FieldNamer {
  return (field) => {
    if (field === "prompt") return "messages";
    // Canonical names whose snake_case spelling is no field of the request.
    if (field === "cacheKey") return "prompt_cache_key";
    if (field === "reasoning.budgetTokens") return budgetParam ?? reasoningParam ?? "reasoning.budget_tokens";
    if (field === "maxTokens") return budgetField(body);
    if (field === "reasoning") return reasoningParam ?? "reasoning_effort";
    // The schema or pattern is named by the field the client sent it in (guided_json, …).
    if (field === "responseFormat.schema" || field === "responseFormat.pattern") return formatParam ?? "response_format.json_schema.schema";
    if (field === "responseFormat") return formatParam === undefined || formatParam.startsWith("response_format") ? "response_format" : formatParam;
    // A custom tool's grammar (the canonical tool's free-text input).
    const grammar = /^tools\[(\d+)\]\.input$/.exec(field);
    if (grammar) return `tools[${grammar[1]}].custom.format.grammar.definition`;
    const tool = /^tools\[(\d+)\]\.(parameters|name|description)$/.exec(field);
    // A custom tool keeps its name and description under `custom`, a function tool under `function`.
    if (tool) return `tools[${tool[1]}].${body.tools?.[Number(tool[1])]?.type === "custom" ? "custom" : "function"}.${tool[2]}`;
    const message = /^prompt\.messages\[(\d+)\]\.(.*)$/.exec(field);
    if (message) return `messages[${message[1]}].${messageField(message[2], callKinds(body.messages, Number(message[1])))}`;
    return snakeCasePath(field);
  };
}

/** The field the request's token budget came in: OpenAI's two names, or llama-server's n_predict. */
export function budgetField(body: { max_completion_tokens?: number | null; max_tokens?: number | null; n_predict?: number | null }): string {
  if (body.max_completion_tokens != null) return "max_completion_tokens";
  if (body.max_tokens == null && body.n_predict != null) return "n_predict";
  return "max_tokens";
}

/** The `type` of each tool call of message `i` ("custom" or "function"), as the client sent them. */
function callKinds(messages: unknown, i: number): Array<string | undefined> {
  const calls = Array.isArray(messages) ? (messages[i] as { tool_calls?: unknown } | null)?.tool_calls : undefined;
  return Array.isArray(calls) ? calls.map((c) => (c as { type?: string } | null)?.type) : [];
}

function messageField(field: string, calls: Array<string | undefined>): string {
  const args = /^toolCalls\[(\d+)\]\.(arguments|name|id)$/.exec(field);
  if (args) {
    const at = `tool_calls[${args[1]}]`;
    if (args[2] === "id") return `${at}.id`;
    // A custom call's text is its `input`; the canonical call holds it as arguments.
    if (calls[Number(args[1])] === "custom") return `${at}.custom.${args[2] === "name" ? "name" : "input"}`;
    return `${at}.function.${args[2]}`;
  }
  const part = /^parts\[(\d+)\](.*)$/.exec(field);
  if (part) return `content[${part[1]}]${part[2]}`;
  return snakeCasePath(field);
}

/**
 * Completions batches: `batch[r].prompt.tokens[i]` is `prompt[r][i]`; a single prompt drops the `[r]`.
 * The core leaves `batch[0].` off a batch of one, but a token there still sits at `prompt[0][i]`
 * when the ids came as a list of lists (`[[1, 2]]`): `prompt[i]` named a place the request lacks.
 */
export function completionFieldNames(body: Pick<CompletionRequest, "prompt"> & { max_tokens?: number | null; n_predict?: number | null }): FieldNamer {
  const nested = Array.isArray(body.prompt) && Array.isArray(body.prompt[0]);
  return (field) => {
    const m = /^(?:batch\[(\d+)\]\.)?(.*)$/.exec(field)!;
    const at = m[1] === undefined ? "" : `[${m[1]}]`;
    const rest = m[2];
    if (rest === "prompt") return `prompt${at}`;
    if (rest === "maxTokens") return budgetField(body);
    if (rest === "prompt.suffix") return "suffix";
    const token = /^prompt\.tokens\[(\d+)\]$/.exec(rest);
    if (token) return `prompt${at || (nested ? "[0]" : "")}[${token[1]}]`;
    return snakeCasePath(rest);
  };
}

/** One input is `input`; several are `input[i]`; a token of one is `input[j]` or `input[i][j]`. */
export function embeddingFieldNames(body: Pick<EmbeddingsRequest, "input">): FieldNamer {
  const single = typeof body.input === "string" || (Array.isArray(body.input) && typeof body.input[0] === "number");
  return (field) => {
    const m = /^inputs\[(\d+)\](.*)$/.exec(field);
    if (m) return single ? `input${m[2]}` : `input[${m[1]}]${m[2]}`;
    return snakeCasePath(field);
  };
}

export function tokenizeFieldNames(body: { messages?: unknown }): FieldNamer {
  return (field) => {
    if (field === "prompt") return body.messages !== undefined ? "messages" : "prompt";
    const message = /^prompt\.messages\[(\d+)\]\.(.*)$/.exec(field);
    if (message) return `messages[${message[1]}].${messageField(message[2], callKinds(body.messages, Number(message[1])))}`;
    return snakeCasePath(field);
  };
}
