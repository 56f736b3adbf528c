/**
 * Stored items as OpenAI lists them (a response's input_items, a conversation's items). Items are
 * kept as the client sent them, where shorthands are legal (`content: "hi"`, no `status`); OpenAI's
 * item resources have neither: a message's content is always a list of parts, an `output_text` part
 * has `annotations` and `logprobs`, and messages and tool calls and outputs carry a `status`. The
 * reshaping happens on the way out, so items stored earlier list the same way.
 */

type Item = Record<string, unknown>;

/** Item types whose resource shape requires a status (an item that was sent is complete). */
const WITH_STATUS = new Set(["message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"]);

export function itemToWire<T extends Item>(item: T): T {
  const type = (item.type as string | undefined) ?? "message";
  const out: Item = { ...item, type };
  if (WITH_STATUS.has(type) && typeof out.status !== "string") out.status = "completed";
  if (type === "reasoning" && !Array.isArray(out.summary)) out.summary = [];
  if (type === "message") {
    const partType = out.role === "assistant" ? "output_text" : "input_text";
    const parts = typeof out.content === "string" ? [{ type: partType, text: out.content }] : ((out.content as Item[] | undefined) ?? []);
    out.content = parts.map((p) => (p.type === "output_text" ? { ...p, annotations: p.annotations ?? [], logprobs: p.logprobs ?? [] } : p));
  }
  return out as T;
}
