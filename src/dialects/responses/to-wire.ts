import { newId } from "../../core/ids.ts";
import { append } from "../../core/collect.ts";
import type { GenerationEvent, TokenLogprob, Usage } from "../../core/types.ts";
import { JsonStringStream } from "../../core/json-string-stream.ts";
import { logprobTokenName } from "../../core/logprob-token.ts";

/** Everything the response object echoes that does not come from generation. */
export interface ResponseSeed {
  id: string;
  createdAt: number;
  model: string;
  /** Request settings echoed as OpenAI echoes them (instructions, tools, tool_choice, text, …). */
  echo: Record<string, unknown>;
}

export interface BuilderOptions {
  /** Attach logprobs to output text (include: message.output_text.logprobs). */
  logprobs: boolean;
  /** Seals reasoning text for reasoning.encrypted_content, when the request includes it. */
  encrypt?: (reasoning: string) => string;
  /** Put the reasoning text into the item's summary too (reasoning.summary was asked for). */
  summary: boolean;
  /** Names of tools whose input is free text (custom tools). */
  customTools: ReadonlySet<string>;
  /** The namespace of each tool offered in one, by tool name: its call items name it. */
  namespaces?: ReadonlyMap<string, string>;
  /** Calls past this many are ignored, as OpenAI documents for max_tool_calls. */
  maxToolCalls?: number;
  /**
   * Custom tool call items carry a `status`, for dialects that document one: Databricks' is only
   * `in_progress` or `completed` ("if present"), so a call cut short (by the token budget, a failure)
   * has none rather than `incomplete`. OpenAI's CustomToolCall output item has no status at all.
   */
  customCallStatus?: boolean;
}

export type ResponseStatus = "queued" | "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";

/** One Responses stream event: its type and payload (sequence numbers are assigned on emission). */
export interface ResponseEvent {
  type: string;
  sequence_number: number;
  [key: string]: unknown;
}

type Item = Record<string, unknown> & { id: string; type: string };

interface OpenItem {
  index: number;
  item: Item;
  text: string;
  logprobs: TokenLogprob[];
  /** Custom tool inputs arrive as JSON; this decodes them as they come. */
  input?: JsonStringStream;
}

/**
 * Builds a Responses API response from canonical events, emitting OpenAI's stream events on the way.
 * The non-streamed body is this same builder drained, so it equals the last event's response.
 */
export class ResponseBuilder {
  status: ResponseStatus = "in_progress";
  private readonly output: Item[] = [];
  private readonly open = new Map<string, OpenItem>();
  private usage: Usage | undefined;
  private failure: { code: string; message: string } | null = null;
  private incomplete: { reason: string } | null = null;
  private completedAt: number | null = null;
  private sequence = 0;
  private calls = 0;
  /** Tool-call indices being ignored (past max_tool_calls). */
  private readonly ignored = new Set<number>();

  constructor(
    private readonly seed: ResponseSeed,
    private readonly opts: BuilderOptions,
    private readonly emit: (event: ResponseEvent) => void = () => {},
    /** Sequence numbers already used by events before this builder (a resumed stream). */
    startSequence = 0,
  ) {
    this.sequence = startSequence;
  }

  /** The sequence number the next event gets (an error event written outside the builder takes it). */
  get nextSequence(): number {
    return this.sequence;
  }

  private send(type: string, payload: Record<string, unknown>): void {
    this.emit({ type, sequence_number: this.sequence++, ...payload });
  }

  /**
   * The opening events: created, then `response.queued` for a background response that waits for
   * its run (as OpenAI's background streams begin) or `response.in_progress` for one that starts.
   */
  start(status: "queued" | "in_progress"): void {
    this.status = status;
    this.send("response.created", { response: this.snapshot() });
    this.send(status === "queued" ? "response.queued" : "response.in_progress", { response: this.snapshot() });
  }

  /** A queued response starts running. */
  running(): void {
    this.status = "in_progress";
    this.send("response.in_progress", { response: this.snapshot() });
  }

  push(ev: GenerationEvent): void {
    switch (ev.type) {
      case "part-start":
        return this.openPart(ev.part === "text" ? "message" : "reasoning");
      case "text":
      case "reasoning":
        return this.delta(ev.type === "text" ? "message" : "reasoning", ev.text, ev.logprobs);
      case "tool-call":
        return this.openCall(ev.index, ev.id, ev.name);
      case "tool-call-arguments":
        return this.callDelta(ev.index, ev.text);
      case "part-end":
        return this.closePart(ev.part === "text" ? "message" : ev.part === "reasoning" ? "reasoning" : `call:${ev.index}`, ev.incomplete ? "incomplete" : "completed");
      case "finish":
        if (ev.reason === "length") this.incomplete = { reason: "max_output_tokens" };
        else if (ev.reason === "content_filter") this.incomplete = { reason: "content_filter" };
        return;
      case "usage":
        this.usage = ev.usage;
        return;
    }
  }

  /** The run ended normally: completed, or incomplete when the token budget (or a content filter) cut it. */
  finish(): void {
    for (const key of [...this.open.keys()]) this.closePart(key, this.incomplete ? "incomplete" : "completed");
    this.status = this.incomplete ? "incomplete" : "completed";
    // OpenAI sets it only when the response completed (an incomplete one has null).
    if (!this.incomplete) this.completedAt = Math.floor(Date.now() / 1000);
    this.send(this.incomplete ? "response.incomplete" : "response.completed", { response: this.snapshot() });
  }

  /**
   * The run failed after it started: open items close as incomplete, an `error` event says what went
   * wrong, and `response.failed` ends the stream.
   */
  fail(code: string, message: string, param: string | null = null, spent?: Usage): void {
    for (const key of [...this.open.keys()]) this.closePart(key, "incomplete");
    this.send("error", { code, message, param });
    this.status = "failed";
    if (!this.usage && spent && spent.totalTokens > 0) this.usage = spent;
    this.failure = { code: responseErrorCode(code), message };
    this.send("response.failed", { response: this.snapshot() });
  }

  /**
   * The run was cancelled (background responses). OpenAI's stream has no event for it: the stream
   * simply ends, and the stored response says `cancelled`, with what it had used (`spent`).
   */
  cancel(spent?: Usage): void {
    for (const key of [...this.open.keys()]) this.closePart(key, "incomplete");
    this.status = "cancelled";
    if (!this.usage && spent) this.usage = spent;
  }

  /** The response object as it stands. */
  snapshot(): Record<string, unknown> {
    const u = this.usage;
    return {
      id: this.seed.id,
      object: "response",
      created_at: this.seed.createdAt,
      status: this.status,
      completed_at: this.completedAt,
      error: this.failure,
      incomplete_details: this.incomplete,
      model: this.seed.model,
      output: this.output.map((item) => structuredClone(item)),
      usage: u
        ? {
            input_tokens: u.promptTokens,
            // Every input token evaluated (not taken from the cache) stays in its sequence's cache for
            // the next request to reuse: that is what was written.
            input_tokens_details: { cached_tokens: u.cachedTokens, cache_write_tokens: Math.max(0, u.promptTokens - u.cachedTokens) },
            output_tokens: u.completionTokens,
            output_tokens_details: { reasoning_tokens: u.reasoningTokens },
            total_tokens: u.totalTokens,
          }
        : null,
      ...this.seed.echo,
    };
  }

  private openPart(kind: "message" | "reasoning"): void {
    const id = newId(kind === "message" ? "msg_" : "rs_");
    const item: Item =
      kind === "message"
        ? { id, type: "message", status: "in_progress", role: "assistant", content: [] }
        : { id, type: "reasoning", summary: [], content: [] };
    const open: OpenItem = { index: this.output.length, item, text: "", logprobs: [] };
    this.output.push(item);
    this.open.set(kind, open);
    this.send("response.output_item.added", { output_index: open.index, item: structuredClone(item) });
    const part = kind === "message" ? { type: "output_text", text: "", annotations: [], logprobs: [] } : { type: "reasoning_text", text: "" };
    (item.content as unknown[]).push(part);
    this.send("response.content_part.added", { item_id: id, output_index: open.index, content_index: 0, part: structuredClone(part) });
  }

  private delta(kind: "message" | "reasoning", text: string, logprobs: TokenLogprob[] | undefined): void {
    const open = this.open.get(kind);
    if (!open) return;
    open.text += text;
    if (logprobs) append(open.logprobs, logprobs);
    const part = (open.item.content as Array<Record<string, unknown>>)[0];
    part.text = open.text;
    if (kind === "message") {
      const lp = this.opts.logprobs && logprobs ? logprobs.map(eventLogprob) : [];
      if (this.opts.logprobs) part.logprobs = open.logprobs.map(logprobToWire);
      if (text || lp.length) this.send("response.output_text.delta", { item_id: open.item.id, output_index: open.index, content_index: 0, delta: text, logprobs: lp });
    } else if (text) {
      this.send("response.reasoning_text.delta", { item_id: open.item.id, output_index: open.index, content_index: 0, delta: text });
    }
  }

  private openCall(index: number, callId: string, name: string): void {
    if (this.opts.maxToolCalls !== undefined && this.calls >= this.opts.maxToolCalls) {
      this.ignored.add(index);
      return;
    }
    this.calls++;
    const custom = this.opts.customTools.has(name);
    const namespace = this.opts.namespaces?.get(name);
    const ns = namespace !== undefined ? { namespace } : {};
    const item: Item = custom
      ? { id: newId("ctc_"), type: "custom_tool_call", ...(this.opts.customCallStatus ? { status: "in_progress" } : {}), call_id: callId, name, ...ns, input: "" }
      : { id: newId("fc_"), type: "function_call", status: "in_progress", call_id: callId, name, ...ns, arguments: "" };
    const open: OpenItem = { index: this.output.length, item, text: "", logprobs: [], input: custom ? new JsonStringStream() : undefined };
    this.output.push(item);
    this.open.set(`call:${index}`, open);
    this.send("response.output_item.added", { output_index: open.index, item: structuredClone(item) });
  }

  private callDelta(index: number, text: string): void {
    if (this.ignored.has(index)) return;
    const open = this.open.get(`call:${index}`);
    if (!open) return;
    open.text += text;
    if (open.input) {
      const delta = open.input.push(text);
      open.item.input = (open.item.input as string) + delta;
      if (delta) this.send("response.custom_tool_call_input.delta", { item_id: open.item.id, output_index: open.index, delta });
    } else {
      open.item.arguments = open.text;
      this.send("response.function_call_arguments.delta", { item_id: open.item.id, output_index: open.index, delta: text });
    }
  }

  private closePart(key: string, status: "completed" | "incomplete"): void {
    const open = this.open.get(key);
    if (!open) return;
    this.open.delete(key);
    const { item, index } = open;
    const ids = { item_id: item.id, output_index: index };
    if (item.type === "message") {
      const part = (item.content as Array<Record<string, unknown>>)[0];
      this.send("response.output_text.done", { ...ids, content_index: 0, text: open.text, logprobs: this.opts.logprobs ? open.logprobs.map(eventLogprob) : [] });
      this.send("response.content_part.done", { ...ids, content_index: 0, part: structuredClone(part) });
      item.status = status;
    } else if (item.type === "reasoning") {
      const part = (item.content as Array<Record<string, unknown>>)[0];
      this.send("response.reasoning_text.done", { ...ids, content_index: 0, text: open.text });
      this.send("response.content_part.done", { ...ids, content_index: 0, part: structuredClone(part) });
      if (this.opts.summary && open.text) this.summarise(open);
      if (this.opts.encrypt) item.encrypted_content = this.opts.encrypt(open.text);
    } else if (item.type === "custom_tool_call") {
      item.input = JsonStringStream.decode(open.text);
      this.send("response.custom_tool_call_input.done", { ...ids, input: item.input });
      if (this.opts.customCallStatus) {
        if (status === "incomplete") delete item.status;
        else item.status = status;
      }
    } else {
      this.send("response.function_call_arguments.done", { ...ids, name: item.name, arguments: open.text });
      item.status = status;
    }
    this.send("response.output_item.done", { output_index: index, item: structuredClone(item) });
  }

  /** Plinth has no separate summariser: a requested summary is the reasoning text itself. */
  private summarise(open: OpenItem): void {
    const ids = { item_id: open.item.id, output_index: open.index, summary_index: 0 };
    this.send("response.reasoning_summary_part.added", { ...ids, part: { type: "summary_text", text: "" } });
    this.send("response.reasoning_summary_text.delta", { ...ids, delta: open.text });
    this.send("response.reasoning_summary_text.done", { ...ids, text: open.text });
    this.send("response.reasoning_summary_part.done", { ...ids, part: { type: "summary_text", text: open.text } });
    open.item.summary = [{ type: "summary_text", text: open.text }];
  }
}

/**
 * The output a response's stream events show, for a run that ended without its final object (its
 * server was killed): each item as `output_item.done` left it, or, for one the run never finished,
 * as `output_item.added` opened it with the parts and deltas after it (text, reasoning, call
 * arguments, a custom tool's input), closed as the builder closes a cut item (see `fail`):
 * `incomplete`, and its reasoning given as its summary where one was asked for. The deltas' log
 * probabilities have not the bytes a part's carry: a cut message keeps none.
 */
export function outputFromEvents(events: ReadonlyArray<Record<string, unknown>>, summary: boolean): Array<Record<string, unknown>> {
  const output: Item[] = [];
  const open = new Set<number>();
  for (const ev of events) {
    const at = ev.output_index;
    if (typeof at !== "number") continue;
    if (ev.type === "response.output_item.added" || ev.type === "response.output_item.done") {
      output[at] = structuredClone(ev.item) as Item;
      if (ev.type === "response.output_item.added") open.add(at);
      else open.delete(at);
      continue;
    }
    // Only an open item grows; a finished one is whole in its `done` event.
    const item = open.has(at) ? output[at] : undefined;
    if (!item) continue;
    const part = (item.content as Array<Record<string, unknown>> | undefined)?.[ev.content_index as number];
    switch (ev.type) {
      case "response.content_part.added":
        if (Array.isArray(item.content)) item.content[ev.content_index as number] = structuredClone(ev.part);
        break;
      case "response.output_text.delta":
      case "response.reasoning_text.delta":
        if (part) part.text = `${part.text as string}${ev.delta as string}`;
        break;
      case "response.function_call_arguments.delta":
        item.arguments = `${item.arguments as string}${ev.delta as string}`;
        break;
      case "response.custom_tool_call_input.delta":
        item.input = `${item.input as string}${ev.delta as string}`;
        break;
    }
  }
  for (const at of open) {
    const item = output[at];
    if (item.type === "message" || item.type === "function_call") item.status = "incomplete";
    const text = item.type === "reasoning" ? ((item.content as Array<{ text?: string }> | undefined)?.[0]?.text ?? "") : "";
    if (summary && text) item.summary = [{ type: "summary_text", text }];
  }
  return output.filter((item) => item !== undefined);
}

/**
 * The response object's `error.code` is one of OpenAI's fixed set (clients with typed enums reject
 * others), so Plinth's own codes (`queue_timeout`, `server_shutting_down`, `internal_error`, …) read
 * `server_error` there; the `error` event, whose code is free text, and the message keep the detail.
 */
const RESPONSE_ERROR_CODES = new Set(["server_error", "rate_limit_exceeded", "invalid_prompt"]);
function responseErrorCode(code: string): string {
  // Waiting past the queue timeout is the server being at capacity, not at fault: the code that says
  // to come back later (the error event before it keeps Plinth's own code).
  if (code === "queue_timeout") return "rate_limit_exceeded";
  return RESPONSE_ERROR_CODES.has(code) ? code : "server_error";
}

/** An output_text part's LogProb: token, logprob, bytes and top_logprobs, each alternative with bytes. */
function logprobToWire(e: TokenLogprob) {
  return {
    token: logprobTokenName(e),
    logprob: e.logprob ?? 0,
    bytes: e.bytes,
    top_logprobs: e.top.map((t) => ({ token: logprobTokenName(t), logprob: t.logprob, bytes: t.bytes })),
  };
}

/**
 * The output_text.delta and .done events' ResponseLogProb, which is leaner than the part's LogProb:
 * token, logprob and top_logprobs of {token, logprob}, no bytes (the final part keeps them).
 */
function eventLogprob(e: TokenLogprob) {
  return {
    token: logprobTokenName(e),
    logprob: e.logprob ?? 0,
    top_logprobs: e.top.map((t) => ({ token: logprobTokenName(t), logprob: t.logprob })),
  };
}
