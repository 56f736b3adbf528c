import { type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import { switchToTemplatePath } from "./template-path.ts";

// Gemma 4's tool calls: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`, its own notation rather
// than JSON: keys bare, strings between `<|"|>` tokens (`<|"|>Paris<|"|>`, nothing escaped inside),
// nested objects `{k:v}`, arrays `[v,…]`, numbers, booleans and null as JSON writes them. Results go
// back as `<|tool_response>response:NAME{…}<tool_response|>` and tools are declared in the same
// notation (`declaration:NAME{description:…,parameters:{…}}`), all written by the template.
//
// node-llama-cpp cannot read this layout from the template's sample calls, so it documented the
// tools in its generic `||call: name(...)` syntax instead, which the model was never trained on.
// Here the template gets the tools, the calls (arguments as objects, which its format_argument
// macro writes) and the results, as llama.cpp's server passes them; calls are generated in the
// notation (grammar/gemma4-arguments.ts) and read back into JSON (Gemma4ArgumentsReader), as
// llama.cpp's gemma4 parser reads them.

/** The token that opens and closes a string. */
export const GEMMA4_QUOTE = '<|"|>';

/** Recognised as llama.cpp recognises the family: the template writes `'<|tool_call>call:'`. */
export function isGemma4Template(template: string): boolean {
  return template.includes("'<|tool_call>call:'");
}

const adopted = new WeakSet<JinjaTemplateChatWrapper>();

/** Whether a wrapper was given Gemma 4's layout (adoptGemma4ToolLayout). */
export function usesGemma4Layout(wrapper: unknown): boolean {
  return adopted.has(wrapper as JinjaTemplateChatWrapper);
}

/**
 * Switches a Jinja wrapper of a Gemma 4 template to its template path, arguments and results handed
 * over as they are. The settings say where a call opens and closes (as control tokens: the planner
 * then names them in grammars and reads them as text); node-llama-cpp never writes calls itself on
 * this path. Returns the call that undoes it, or undefined for a template of another family.
 */
export function adoptGemma4ToolLayout(wrapper: JinjaTemplateChatWrapper, template: string): (() => void) | undefined {
  if (!isGemma4Template(template)) return undefined;
  const undo = switchToTemplatePath(
    wrapper,
    {
      call: {
        optionalPrefixSpace: false,
        prefix: LlamaText(new SpecialTokensText("<|tool_call>call:")),
        // The name ends where the arguments' `{` begins (Gemma4ArgumentsReader reads it).
        paramsPrefix: "",
        suffix: LlamaText(new SpecialTokensText("<tool_call|>")),
        emptyCallParamsPlaceholder: {},
      },
      result: { prefix: "", suffix: "" },
      parallelism: {
        call: { sectionPrefix: "", betweenCalls: "", sectionSuffix: "" },
        result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
      },
    },
    "gemma4-tool-calls.ts",
  );
  adopted.add(wrapper);
  return () => {
    adopted.delete(wrapper);
    undo();
  };
}

/**
 * Reads one call's arguments, as generated (from their `{`), into the text of a JSON object,
 * incrementally: a string is streamed as a JSON string as it comes (held back only where the
 * closing `<|"|>` may be starting), a bare key becomes a quoted one, numbers, booleans, null and
 * punctuation pass as they are; whitespace between values is dropped. Done at the `}` that closes
 * the object. The output is compact, as llama.cpp's gemma4_to_json writes it.
 */
export class Gemma4ArgumentsReader {
  private readonly stack: Array<"{" | "["> = [];
  private inString = false;
  private wantKey = false;

  constructor(private readonly quote: string = GEMMA4_QUOTE) {}

  read(text: string): { json: string; used: number; done: boolean } {
    const q = this.quote;
    let json = "";
    let at = 0;
    while (at < text.length) {
      const rest = text.slice(at);
      if (this.inString) {
        const close = rest.indexOf(q);
        if (close === -1) {
          const keep = heldBack(rest, q);
          json += escaped(rest.slice(0, rest.length - keep));
          return { json, used: text.length - keep, done: false };
        }
        json += `${escaped(rest.slice(0, close))}"`;
        at += close + q.length;
        this.inString = false;
        continue;
      }
      if (this.wantKey) {
        const c = rest[0];
        if (/\s/.test(c)) {
          at += 1;
          continue;
        }
        if (c === "}") {
          this.wantKey = false;
          continue;
        }
        const colon = rest.indexOf(":");
        if (colon === -1) return { json, used: at, done: false };
        json += `${JSON.stringify(rest.slice(0, colon).trim())}:`;
        at += colon + 1;
        this.wantKey = false;
        continue;
      }
      if (rest.startsWith(q)) {
        json += '"';
        at += q.length;
        this.inString = true;
        continue;
      }
      if (q.startsWith(rest)) return { json, used: at, done: false };
      const c = rest[0];
      at += 1;
      if (/\s/.test(c)) continue;
      json += c;
      if (c === "{" || c === "[") {
        this.stack.push(c);
        this.wantKey = c === "{";
      } else if (c === "}" || c === "]") {
        this.stack.pop();
        if (this.stack.length === 0) return { json, used: at, done: true };
      } else if (c === ",") this.wantKey = this.stack.at(-1) === "{";
    }
    return { json, used: at, done: false };
  }
}

/** The length of the longest end of `text` that `tag` starts with (it may be the tag arriving). */
function heldBack(text: string, tag: string): number {
  for (let k = Math.min(text.length, tag.length - 1); k > 0; k--) if (tag.startsWith(text.slice(text.length - k))) return k;
  return 0;
}

/** A text as the inside of a JSON string. */
function escaped(text: string): string {
  return JSON.stringify(text).slice(1, -1);
}

/**
 * Whether a Gemma 4 template is of the earlier kind that reads results only from a `tool_responses`
 * list on the assistant message (the interleaved-thinking one): llama.cpp's server tells them by the
 * later template's `{#- OpenAI Chat Completions:` comment, and rewrites the messages for the others
 * (toolResponsesOnTurn).
 */
export function wantsToolResponses(template: string): boolean {
  return isGemma4Template(template) && !template.includes("{#- OpenAI Chat Completions:");
}

type Message = Record<string, unknown>;

/**
 * The messages as llama.cpp's server hands them to an earlier Gemma 4 template
 * (convert_tool_responses_gemma4): an assistant message with calls takes the `tool` messages after
 * it as `tool_responses` (`{name, response}`, the response parsed as JSON when it is JSON, named
 * after the call in the same place, else after the result's call id), and the assistant's answer
 * that follows them, when it has content and no calls, as its content.
 */
export function toolResponsesOnTurn(messages: readonly Message[], values: readonly unknown[] = []): Message[] {
  const out: Message[] = [];
  let i = 0;
  let k = 0;
  const hasContent = (m: Message) => (typeof m.content === "string" && m.content !== "") || (Array.isArray(m.content) && m.content.length > 0);
  const hasCalls = (m: Message) => Array.isArray(m.tool_calls) && m.tool_calls.length > 0;
  while (i < messages.length) {
    const msg = messages[i];
    if (msg?.role !== "assistant" || !hasCalls(msg)) {
      out.push(msg);
      i++;
      continue;
    }
    const calls = msg.tool_calls as Array<{ function?: { name?: unknown } }>;
    const responses: Message[] = [];
    i++;
    for (; i < messages.length && messages[i]?.role === "tool"; i++) {
      // node-llama-cpp hands the template a placeholder for each result's text, put back after
      // rendering, and insists on finding each placeholder in the text. A result that is JSON
      // (`values`, in order, undefined for a text) goes in as its value, its text left empty: its
      // placeholder then rides on the name, where it is put back as nothing.
      const result = messages[i];
      const value = values[k++];
      const response: unknown = value === undefined ? result.content : value;
      const name = typeof calls[responses.length]?.function?.name === "string" && calls[responses.length].function!.name !== "" ? calls[responses.length].function!.name : (result.tool_call_id ?? "");
      responses.push({ name: value === undefined ? name : `${String(name)}${String(result.content)}`, response });
    }
    const turn: Message = { role: "assistant", tool_calls: calls };
    if (responses.length > 0) turn.tool_responses = responses;
    const next = messages[i];
    if (next?.role === "assistant" && !hasCalls(next) && hasContent(next)) {
      turn.content = next.content;
      i++;
    }
    if (typeof msg.reasoning_content === "string") turn.reasoning_content = msg.reasoning_content;
    out.push(turn);
  }
  return out;
}
