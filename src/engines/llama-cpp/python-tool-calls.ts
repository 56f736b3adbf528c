import { type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import { switchToTemplatePath } from "./template-path.ts";
import type { ArgumentsReader } from "./tool-call-parser.ts";

// Liquid's LFM2 and LFM2.5: a turn's calls are one Python-style list between markers,
//
//   <|tool_call_start|>[get_weather(city="Paris", days=3), get_time(zone="UTC")]<|tool_call_end|>
//
// with keyword arguments whose values are Python literals (llama.cpp's parser also takes JSON's
// true/false/null, which these models write too). The tools are listed as JSON in the system turn
// (between <|tool_list_start|> and <|tool_list_end|> in LFM2's template, after "List of tools: "
// in LFM2.5's) and results go back in `tool` turns, all written by the template. LFM2's and
// LFM2.5 Instruct's templates write only an answered call's content (llama.cpp's server renders it
// so too); LFM2.5-8B-A1B's writes the call itself, arguments as Python literals.
//
// node-llama-cpp cannot read this layout from sample calls (the first two templates write no calls;
// from the third it read `get_weather(params={…})`, one argument holding JSON, which the model was
// never taught). Here the template gets tools, calls (arguments as objects) and results as
// llama.cpp's server passes them; calls are generated as keyword arguments
// (grammar/python-arguments.ts) and read back into JSON (PythonArgumentsReader).

/** Recognised as llama.cpp recognises the family: LFM2's tool-list markers, or LFM2.5's plain "List of tools: [". */
export function isLfm2Template(template: string): boolean {
  const lfm2 = template.includes("<|tool_list_start|>") && template.includes("<|tool_list_end|>");
  return lfm2 || (template.includes("List of tools: [") && !template.includes("<|tool_list_start|>"));
}

const adopted = new WeakSet<JinjaTemplateChatWrapper>();

/** Whether a wrapper was given LFM2's layout (adoptLfm2ToolLayout). */
export function usesLfm2Layout(wrapper: unknown): boolean {
  return adopted.has(wrapper as JinjaTemplateChatWrapper);
}

/**
 * Switches a Jinja wrapper of an LFM2 template to its template path, arguments and results handed
 * over as they are. The settings say where the calls open and close (node-llama-cpp never writes
 * calls itself on this path): the list's `[` after the opening marker, each call `NAME(` … `)`,
 * `, ` between calls, `]` and the closing marker. Returns the call that undoes it, or undefined for
 * a template of another family.
 */
export function adoptLfm2ToolLayout(wrapper: JinjaTemplateChatWrapper, template: string): (() => void) | undefined {
  if (!isLfm2Template(template)) return undefined;
  const undo = switchToTemplatePath(
    wrapper,
    {
      call: { optionalPrefixSpace: false, prefix: "", paramsPrefix: "(", suffix: ")", emptyCallParamsPlaceholder: {} },
      result: { prefix: "", suffix: "" },
      parallelism: {
        call: {
          sectionPrefix: LlamaText(new SpecialTokensText("<|tool_call_start|>"), "["),
          betweenCalls: ", ",
          sectionSuffix: LlamaText("]", new SpecialTokensText("<|tool_call_end|>")),
        },
        result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
      },
    },
    "python-tool-calls.ts",
  );
  adopted.add(wrapper);
  return () => {
    adopted.delete(wrapper);
    undo();
  };
}

const PYTHON_WORDS: Record<string, string> = { True: "true", False: "false", None: "null" };

/**
 * Reads one call's keyword arguments, as generated (after its `(`), into the text of a JSON object,
 * incrementally, up to the `)` that closes them (left unread: it is the call's suffix). Each
 * `name=` becomes `"name": `; a value passes as the JSON it is, with Python's True, False and None
 * turned into JSON's and a single-quoted string into a double-quoted one; a string is passed on as
 * it comes. Only a word or an escape cut by the end of the text is held back.
 */
export class PythonArgumentsReader implements ArgumentsReader {
  private inValue = false;
  private count = 0;
  private depth = 0;
  private quote: '"' | "'" | null = null;

  read(text: string): { json: string; used: number; done: boolean } {
    let json = "";
    let at = 0;
    while (at < text.length) {
      const c = text[at];
      if (!this.inValue) {
        if (c === "," || /\s/.test(c)) {
          at += 1;
          continue;
        }
        if (c === ")") return { json: json + (this.count === 0 ? "{}" : "}"), used: at, done: true };
        const eq = text.indexOf("=", at);
        if (eq === -1) break;
        json += `${this.count === 0 ? "{" : ", "}${JSON.stringify(text.slice(at, eq).trim())}: `;
        this.count++;
        at = eq + 1;
        this.inValue = true;
        continue;
      }
      if (this.quote) {
        if (c === "\\") {
          if (at + 1 >= text.length) break;
          const next = text[at + 1];
          // JSON has no `\'`; a quote of the other kind needs escaping only in JSON.
          json += next === "'" ? "'" : `\\${next}`;
          at += 2;
          continue;
        }
        if (c === this.quote) {
          json += '"';
          this.quote = null;
        } else json += c === '"' ? '\\"' : c < " " ? JSON.stringify(c).slice(1, -1) : c;
        at += 1;
        continue;
      }
      if (c === '"' || c === "'") {
        json += '"';
        this.quote = c;
        at += 1;
        continue;
      }
      if (/[A-Za-z_]/.test(c)) {
        const word = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(at))![0];
        if (at + word.length >= text.length) break;
        json += PYTHON_WORDS[word] ?? word;
        at += word.length;
        continue;
      }
      if (this.depth === 0) {
        if (c === ")") return { json: json + "}", used: at, done: true };
        if (c === ",") {
          this.inValue = false;
          at += 1;
          continue;
        }
        if (/\s/.test(c)) {
          at += 1;
          continue;
        }
      }
      if (c === "[" || c === "{") this.depth++;
      else if (c === "]" || c === "}") this.depth--;
      json += c;
      at += 1;
    }
    return { json, used: at, done: false };
  }
}
