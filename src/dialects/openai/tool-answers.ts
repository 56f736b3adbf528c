import { ApiError, badRequest } from "../../core/errors.ts";
import type { Message } from "../../core/types.ts";

/**
 * OpenAI refuses a conversation that leaves a tool call unanswered, and so does Plinth: otherwise the
 * model would be prompted with a call that has no result. The calls of an assistant message must all
 * be answered by the tool messages that directly follow it. The check runs in the dialect, so a
 * remote engine's upstream never sees such a conversation either.
 *
 * `messages` are canonical but positioned as on the wire (one canonical message per wire message),
 * so errors name `messages[i]` as the client sent it.
 *
 * An assistant message that ends the list is a prefill the model continues (see
 * engines/llama-cpp/chat-history.ts), so its calls may still be open.
 */
export function refuseUnansweredToolCalls(messages: Message[]): void {
  let turn: OpenTurn | undefined;
  messages.forEach((m, i) => {
    if (m.role === "tool") {
      // A result answers a call of the assistant message right before its run of tool messages: one
      // for a call made before a later user message (answered already, or not) answers nothing.
      if (m.toolCallId === undefined || !turn?.ids.has(m.toolCallId)) throw strayResult(i);
      turn.open.delete(m.toolCallId);
      return;
    }
    if (turn && turn.open.size > 0) throw unanswered(turn.open, `messages[${i}].role`);
    turn = m.role === "assistant" && m.toolCalls?.length ? openTurn(m, i) : undefined;
  });
  // Some answers but not all, then the end: not a prefill, since the assistant message is not last.
  if (turn && turn.open.size > 0 && turn.at !== messages.length - 1) throw unanswered(turn.open, `messages[${turn.at}].tool_calls`);
}

interface OpenTurn {
  /** Position of the assistant message that made the calls. */
  at: number;
  /** Its call ids. */
  ids: Set<string>;
  /** Those no tool message has answered yet. */
  open: Set<string>;
}

function openTurn(m: Message, at: number): OpenTurn {
  const ids = (m.toolCalls ?? []).map((c) => c.id);
  return { at, ids: new Set(ids), open: new Set(ids) };
}

/** OpenAI's wording, so clients that match on it recognise the refusal. */
function unanswered(open: Set<string>, param: string): ApiError {
  return badRequest(
    `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...open].join(", ")}`,
    param,
  );
}

/** A tool result that answers no call of the assistant message before it, raised before any engine. */
function strayResult(i: number): ApiError {
  return badRequest(
    `Message ${i} is a tool result whose messages[${i}].tool_call_id does not match a tool call of the assistant message before it.`,
    `messages[${i}].tool_call_id`,
  );
}
