import type { ChatHistoryItem, ChatModelFunctionCall, ChatModelResponse } from "node-llama-cpp";
import { invalidField } from "../../core/errors.ts";
import type { Message } from "../../core/types.ts";

/**
 * Canonical messages → node-llama-cpp chat history, so the model's own chat wrapper renders them.
 *
 * Tool results are folded into the assistant turn that made the call (that is how the wrappers
 * render them); a trailing assistant message is left open so the model continues it (prefill).
 */
export function toChatHistory(messages: Message[], options: { rawResults?: boolean } = {}): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  const openCalls = new Map<string, ChatModelFunctionCall>();

  messages.forEach((m, i) => {
    switch (m.role) {
      case "system":
        history.push({ type: "system", text: m.content });
        return;
      case "user":
        history.push({ type: "user", text: m.content });
        return;
      case "assistant": {
        // An answer that follows the results of its turn's tool calls goes on in that turn: the
        // wrappers write call, results and answer as one exchange, and a new turn here became an
        // empty assistant message in the template's rendering.
        const previous = history.at(-1);
        const continuing = previous?.type === "model" && answersToolResults(previous.response);
        const response: ChatModelResponse["response"] = continuing ? previous.response : [];
        if (m.content) response.push(m.content);
        (m.toolCalls ?? []).forEach((call, k) => {
          // Two calls of one turn under one id: a result could answer only one of them, and the
          // other's would be lost from the prompt without a word.
          if ((m.toolCalls ?? []).findIndex((c) => c.id === call.id) !== k)
            throw invalidField(`{field} is '${call.id}', the id of an earlier call in the same message.`, `prompt.messages[${i}].toolCalls[${k}].id`);
          const item: ChatModelFunctionCall & ClientCallId = {
            type: "functionCall",
            plinthCallId: call.id,
            name: call.name,
            // Arguments are a string on the wire, and not always JSON (a call cut short by a token
            // budget, a model's slip) yet still part of the conversation: kept as text then. An
            // empty string is a call without arguments (clients send it for a function that takes
            // none, and vLLM renders it as `{}`): as text, templates wrote `"arguments": }`.
            params: call.arguments.trim() === "" ? {} : parseOrKeep(call.arguments),
            result: undefined,
            startsNewChunk: k === 0,
          };
          openCalls.set(call.id, item);
          response.push(item);
        });
        if (!continuing) history.push({ type: "model", response });
        return;
      }
      case "tool": {
        const call = m.toolCallId ? openCalls.get(m.toolCallId) : undefined;
        if (!call) {
          throw invalidField(
            // Named by the field alone: `i` counts canonical messages, which a dialect may number
            // differently from its request (instructions first, calls merged into one turn).
            `A tool result's call id ({field}) matches no earlier assistant tool call.`,
            `prompt.messages[${i}].toolCallId`,
          );
        }
        // A wrapper that writes results itself serialises them as JSON; a result that already is
        // JSON goes in as its value, so it is not rendered as a quoted string. One that hands them
        // to the template as `tool` messages (`rawResults`) passes the text as the client sent it,
        // as llama.cpp's server does (a value there broke node-llama-cpp's rendering, which then
        // fell back to writing the calls into the assistant's text).
        call.result = options.rawResults ? m.content : parseOrKeep(m.content);
        return;
      }
    }
  });

  // A model turn left last is continued: either a client's prefill or a turn awaiting its tool results.
  if (history.at(-1)?.type !== "model") history.push({ type: "model", response: [] });
  return history;
}

/**
 * The id the client gave a call, kept on node-llama-cpp's call item (which has none: it numbers
 * calls itself, `fc_1_0000`), for templates that write call ids (tool-layouts.ts). An own property,
 * so it survives the copies node-llama-cpp and Plinth make of history items.
 */
export interface ClientCallId {
  plinthCallId?: string;
}

/** A model turn that ends with tool calls whose results have all come back. */
function answersToolResults(response: ChatModelResponse["response"]): boolean {
  const last = response.at(-1);
  return typeof last === "object" && last.type === "functionCall" && last.result !== undefined;
}

/**
 * JSON text as its value, when writing the value out again gives the same JSON (whitespace aside);
 * otherwise the text itself. The wrappers write values out again, and a value JavaScript cannot
 * hold as sent (an id past 2^53, `1.50`, a key twice, `1e400`, keys that JavaScript reorders) would
 * reach the model changed: a tool result's order id, a price.
 */
function parseOrKeep(text: string): unknown {
  // The value is written out again by recursion (JSON.stringify here, the template's own writer
  // later), which a tool result or call arguments nested 5,000 deep ran out of stack: a 500. So
  // deep, the text is what the model reads.
  if (nestsDeeperThan(text, MAX_VALUE_DEPTH)) return text;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return text;
  }
  return JSON.stringify(value) === withoutJsonWhitespace(text) ? value : text;
}

/** Objects and arrays a call's arguments or a tool result may nest and still go in as a value. */
const MAX_VALUE_DEPTH = 256;

/** Whether JSON text opens more than `limit` objects and arrays within each other (strings skipped). */
function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/** JSON text without the whitespace between its tokens (strings kept as they are). */
function withoutJsonWhitespace(text: string): string {
  let out = "";
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      out += c;
      if (c === "\\") out += text[++i] ?? "";
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
      out += c;
    } else if (c !== " " && c !== "\n" && c !== "\r" && c !== "\t") out += c;
  }
  return out;
}
