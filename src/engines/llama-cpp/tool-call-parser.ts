import type { CallIndex } from "../../grammar/compose.ts";
import { type XmlArguments, XmlArgumentsReader } from "./xml-tool-calls.ts";

/** The text layout of a model's tool calls, as its chat template writes them. */
export interface ToolCallFormat {
  /** Opens a turn's group of calls, e.g. Mistral's `[TOOL_CALLS][`; often empty. */
  sectionPrefix: string;
  /** Opens a call and leads up to the function name, e.g. `<tool_call>\n{"name": "`. */
  prefix: string;
  /** Between the name and the arguments object, e.g. `", "arguments": `. */
  paramsPrefix: string;
  /** Closes a call, e.g. `}\n</tool_call>`. */
  suffix: string;
  /** Between two calls of one turn. */
  betweenCalls: string;
  /** Closes the group of calls, e.g. Mistral's `]`; often empty. */
  sectionSuffix: string;
  /**
   * Arguments written as XML parameters (xml-tool-calls.ts) rather than as a JSON object: read
   * back into the text of a JSON object. `paramsPrefix` may then be empty (the parameters' tags
   * then end the name).
   */
  xml?: XmlArguments;
  /** A counter written next to the name (Kimi K2's `NAME:0`): read past, not part of the name. */
  index?: CallIndex;
  /**
   * Arguments in a notation of their own (Gemma 4's `{key:<|"|>text<|"|>,…}`) rather than JSON:
   * the name ends where `nameEnd` begins (`paramsPrefix` is then empty), and a reader made for
   * each call turns the arguments, from there, into the text of a JSON object.
   */
  encoded?: { nameEnd: string; reader(): ArgumentsReader };
  /**
   * An id the model writes after the arguments (Mistral Nemo's `, "id": "` and 9 letters or digits,
   * before the suffix `"}`): read and given to the call, whose name and arguments are held back
   * until then (a streamed call's id comes with its name).
   */
  callId?: { prefix: string };
}

/** Reads a call's arguments from generated text: the JSON read, how much text was used, whether they ended. */
export interface ArgumentsReader {
  read(text: string): { json: string; used: number; done: boolean };
}

export type ToolCallEvent =
  | { type: "name"; index: number; name: string; id?: string }
  | { type: "arguments"; index: number; text: string }
  | { type: "done"; index: number };

/**
 * Reads tool calls back out of generated text, incrementally, after the call prefix. The grammar
 * has already forced the text into the format, so the parser only has to follow it: the name up
 * to the parameters prefix, a JSON object (tracked by nesting and strings), the suffix, then
 * possibly another call.
 */
export class ToolCallParser {
  private state: "name" | "args" | "id" | "suffix" | "between" | "closed" = "name";
  /** A call held back until its id is read (see ToolCallFormat.callId). */
  private held: { index: number; name: string; args: string } | null = null;
  private readonly ids = new Set<string>();
  private buffer = "";
  private index = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private started = false;
  private reader: ArgumentsReader | null = null;

  constructor(private readonly format: ToolCallFormat) {}

  private named = 0;

  /** Calls whose name has been read. */
  get callCount(): number {
    return this.named;
  }

  push(text: string): ToolCallEvent[] {
    const events: ToolCallEvent[] = [];
    this.buffer += text;
    for (;;) {
      if (this.state === "closed") break;
      if (this.state === "name") {
        const xml = this.format.xml;
        const encoded = this.format.encoded;
        const at = encoded ? this.buffer.indexOf(encoded.nameEnd) : xml && this.format.paramsPrefix === "" ? this.buffer.indexOf("<") : this.buffer.indexOf(this.format.paramsPrefix);
        if (at === -1) break;
        const name = withoutIndex(this.buffer.slice(0, at).trim(), this.format.index);
        if (this.format.callId) this.held = { index: this.index, name, args: "" };
        else events.push({ type: "name", index: this.index, name });
        this.named++;
        this.buffer = this.buffer.slice(at + this.format.paramsPrefix.length);
        this.state = "args";
        this.depth = 0;
        this.started = false;
        if (xml) this.reader = new XmlArgumentsReader(xml.tags, xml.rawParams.get(name) ?? new Set());
        else if (encoded) this.reader = encoded.reader();
        continue;
      }
      if (this.state === "args" && this.reader) {
        const { json, used, done } = this.reader.read(this.buffer);
        if (json) this.argumentsText(events, json);
        this.buffer = this.buffer.slice(used);
        if (!done) break;
        this.reader = null;
        this.state = this.format.callId ? "id" : "suffix";
        continue;
      }
      if (this.state === "args") {
        let end = -1;
        for (let i = 0; i < this.buffer.length; i++) {
          const ch = this.buffer[i];
          if (this.inString) {
            if (this.escaped) this.escaped = false;
            else if (ch === "\\") this.escaped = true;
            else if (ch === '"') this.inString = false;
            continue;
          }
          if (ch === '"') this.inString = true;
          else if (ch === "{" || ch === "[") {
            this.depth++;
            this.started = true;
          } else if (ch === "}" || ch === "]") this.depth--;
          if (this.started && this.depth === 0) {
            end = i + 1;
            break;
          }
        }
        const take = end === -1 ? this.buffer.length : end;
        const args = this.buffer.slice(0, take);
        // Whitespace before the object opens is layout, not arguments.
        const visible = this.started || end !== -1 ? args : args.trimStart();
        if (visible) this.argumentsText(events, this.started ? args : visible);
        this.buffer = this.buffer.slice(take);
        if (end === -1) break;
        this.state = this.format.callId ? "id" : "suffix";
        continue;
      }
      if (this.state === "id") {
        const prefix = this.format.callId!.prefix;
        if (this.buffer.length < prefix.length + 9) break;
        const id = this.buffer.slice(prefix.length, prefix.length + 9);
        this.buffer = this.buffer.slice(prefix.length + 9);
        // An id the model wrote twice in one turn would leave the client two calls it cannot tell apart.
        const fresh = /^[A-Za-z0-9]{9}$/.test(id) && !this.ids.has(id);
        if (fresh) this.ids.add(id);
        this.release(events, fresh ? id : undefined);
        this.state = "suffix";
        continue;
      }
      if (this.state === "suffix") {
        if (this.buffer.length < this.format.suffix.length) break;
        this.buffer = this.buffer.slice(this.format.suffix.length);
        events.push({ type: "done", index: this.index });
        this.index++;
        this.state = "between";
        continue;
      }
      // between: either another call (separator and prefix) or the end of the group
      const next = this.format.betweenCalls + this.format.prefix;
      const end = this.format.sectionSuffix;
      if (this.buffer.startsWith(next)) {
        this.buffer = this.buffer.slice(next.length);
        this.state = "name";
        continue;
      }
      if (end !== "" && this.buffer.startsWith(end)) {
        this.buffer = this.buffer.slice(end.length);
        this.state = "closed";
      }
      break;
    }
    return events;
  }

  /** Generation is over: a call still held back for its id (cut short) is given without one. */
  flush(): ToolCallEvent[] {
    const events: ToolCallEvent[] = [];
    this.release(events, undefined);
    return events;
  }

  private argumentsText(events: ToolCallEvent[], text: string): void {
    if (this.held) this.held.args += text;
    else events.push({ type: "arguments", index: this.index, text });
  }

  private release(events: ToolCallEvent[], id: string | undefined): void {
    const held = this.held;
    if (!held) return;
    this.held = null;
    events.push({ type: "name", index: held.index, name: held.name, ...(id ? { id } : {}) });
    if (held.args) events.push({ type: "arguments", index: held.index, text: held.args });
  }
}

/** A call's name without the counter its layout writes next to it. */
function withoutIndex(name: string, index: CallIndex | undefined): string {
  if (!index) return name;
  if (index.at === "beforeName") {
    const digits = /^[0-9]*/.exec(name)![0];
    return name.slice(digits.length).startsWith(index.separator) ? name.slice(digits.length + index.separator.length) : name;
  }
  const digits = /[0-9]*$/.exec(name)![0];
  const head = name.slice(0, name.length - digits.length);
  return head.endsWith(index.separator) ? head.slice(0, head.length - index.separator.length) : name;
}

/**
 * The text that opens a call, as the model writes it in an answer: without the blank space a
 * template writes before it (Qwen 3's layout opens with "\n<tool_call>"). A model writes the marker
 * first when it calls at once, and the newlines after a closed thinking section are not the
 * answer's, so a trigger that began with the newline was never seen and the call stayed text.
 */
export function callOpening(format: Pick<ToolCallFormat, "sectionPrefix" | "prefix">): string {
  const opening = format.sectionPrefix + format.prefix;
  return opening.trimStart() || opening;
}
