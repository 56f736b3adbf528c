/**
 * Stored items as OpenAI lists them (a response's input_items, a conversation's items). Items are
 * kept as the client sent them, where shorthands are legal (`content: "hi"`, no `status`); OpenAI's
 * item resources have neither: a message's content is always a list of parts, an `output_text` part
 * has `annotations` and `logprobs`, and messages and tool calls and outputs carry a `status`. The
 * reshaping happens on the way out, so items stored earlier list the same way.
 */

import { unsupportedField } from "../../core/errors.ts";
import { INCLUDABLE, type IncludeQuery } from "./protocol.ts";
import type { Sealer } from "./sealer.ts";

type Item = Record<string, unknown>;

/**
 * What a read of stored items includes, as `include` asks: the logprobs of output text (kept when
 * the response that wrote it asked for them; none otherwise) and reasoning sealed as
 * `encrypted_content` (sealed now if it was stored without). Left out unless asked, as OpenAI leaves them.
 */
export interface ItemInclude {
  logprobs: boolean;
  seal?: (text: string) => string;
}

/** The query's `include`; a value this server cannot fill is a 400 naming it, as on a create. */
export function readInclude(q: IncludeQuery, sealer: Sealer): ItemInclude {
  const values = [q.include ?? [], q["include[]"] ?? []].flat();
  for (const inc of values)
    if (!INCLUDABLE.includes(inc)) {
      // The value is the client's: quoted short, so a long one does not come back whole in the error.
      const shown = inc.length > 80 ? `${inc.slice(0, 80)}…` : inc;
      throw unsupportedField("include", `'${shown}' cannot be included by this server (it offers ${INCLUDABLE.join(" and ")})`);
    }
  return {
    logprobs: values.includes("message.output_text.logprobs"),
    seal: values.includes("reasoning.encrypted_content") ? (text) => sealer.seal(text) : undefined,
  };
}

/** Item types whose resource shape requires a status (an item that was sent is complete). */
const WITH_STATUS = new Set(["message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"]);

export function itemToWire<T extends Item>(item: T, include: ItemInclude): T {
  const type = (item.type as string | undefined) ?? "message";
  const out: Item = { ...item, type };
  if (WITH_STATUS.has(type) && typeof out.status !== "string") out.status = "completed";
  if (type === "reasoning") {
    if (!Array.isArray(out.summary)) out.summary = [];
    if (!include.seal) delete out.encrypted_content;
    else sealReasoning(out, include.seal);
  }
  if (type === "message") {
    const partType = out.role === "assistant" ? "output_text" : "input_text";
    const parts = typeof out.content === "string" ? [{ type: partType, text: out.content }] : ((out.content as Item[] | undefined) ?? []);
    out.content = parts.map((p) =>
      p.type === "output_text" ? { ...p, annotations: p.annotations ?? [], logprobs: include.logprobs ? (p.logprobs ?? []) : [] } : p,
    );
  }
  return out as T;
}

/** Seals a reasoning item's text into `encrypted_content`, unless it already has one. */
function sealReasoning(item: Item, seal: (text: string) => string): void {
  if (typeof item.encrypted_content === "string" || !Array.isArray(item.content)) return;
  item.encrypted_content = seal((item.content as Item[]).map((p) => (typeof p.text === "string" ? p.text : "")).join(""));
}

/**
 * A stored response as a GET with `include` asks for it: what the create included stays, and what
 * the GET adds is filled in (reasoning sealed now; output text logprobs exist only where the create
 * computed them, so asking for them adds none).
 */
export function responseWithInclude(body: Item, include: ItemInclude): Item {
  if (!include.seal || !Array.isArray(body.output)) return body;
  const output = (body.output as Item[]).map((item) => {
    if (item.type !== "reasoning") return item;
    const out = { ...item };
    sealReasoning(out, include.seal!);
    return out;
  });
  return { ...body, output };
}

/**
 * A replayed stream event as a resumed stream with `include` asks for it: the finished reasoning
 * item an `output_item.done` carries, and the response object of the ending events, get what
 * responseWithInclude gives a retrieve. An item just added has no text to seal yet.
 */
export function eventWithInclude<E extends { type: string }>(event: E, include: ItemInclude): E {
  if (!include.seal) return event;
  const ev = event as unknown as Item;
  if (ev.type === "response.output_item.done" && (ev.item as Item | undefined)?.type === "reasoning") {
    const item = { ...(ev.item as Item) };
    sealReasoning(item, include.seal);
    return { ...ev, item } as unknown as E;
  }
  if (ev.response && typeof ev.response === "object") return { ...ev, response: responseWithInclude(ev.response as Item, include) } as unknown as E;
  return event;
}
