import type { JinjaTemplateChatWrapper } from "node-llama-cpp";
import type { XmlArgumentTags } from "../../grammar/xml-arguments.ts";
import type { ToolCallFormat } from "./tool-call-parser.ts";
import { switchToTemplatePath } from "./template-path.ts";

// Tool calls whose arguments are XML parameters rather than one JSON object: Qwen3-Coder's
//
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>
//
// (Qwen 3.5, Nemotron 3 Nano and StepFun 3.5 write the same), GLM 4.5–4.7's
// `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>` and MiniMax-M2's
// `<invoke name="NAME"><parameter name="KEY">VALUE</parameter>…</invoke>`, and DeepSeek V3.2's and
// V4's DSML markup (the same with a `string="true|false"` mark on each parameter), and MiniCPM5's
// `<function name="NAME"><param name="KEY">VALUE</param>…</function>`. A string value is written
// as it is, anything else as JSON.
//
// node-llama-cpp reads a call layout by rendering sample calls, so it can only find a layout with
// the arguments as one piece: for Qwen3-Coder it wraps them in one parameter, `params`, holding
// JSON (`<parameter=params>\n{"city": "Paris"}\n</parameter>`), a layout the model never saw. For
// these families the template gets the arguments as an object and writes each parameter itself
// (as llama.cpp's server passes them); calls are generated in the same layout, parameter by
// parameter (grammar/xml-arguments.ts), and read back into a JSON object (XmlArgumentsReader).

/** An XML argument layout: where calls open and close, and the tags around each parameter. */
export interface XmlToolLayout {
  /** Which family, for logs and tests. */
  name: string;
  matches(template: string): boolean;
  /** The call layout, with `paramsPrefix` ending the name and `suffix` following `tags.end`. */
  format: ToolCallFormat;
  tags: XmlArgumentTags;
}

/**
 * Qwen3-Coder (and Qwen 3.5, Nemotron 3 Nano, StepFun 3.5 Flash): recognised as llama.cpp
 * recognises it. Calls follow each other with a newline between them.
 */
const QWEN3_CODER: XmlToolLayout = {
  name: "qwen3-coder",
  matches: (t) => t.includes("<tool_call>") && t.includes("<function=") && t.includes("<parameter="),
  format: { sectionPrefix: "", prefix: "<tool_call>\n<function=", paramsPrefix: ">\n", suffix: "</tool_call>", betweenCalls: "\n", sectionSuffix: "" },
  tags: { keyOpen: "<parameter=", keyClose: ">\n", valueClose: "\n</parameter>\n", end: "</function>\n" },
};

/**
 * GLM 4.5 and 4.6: `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n…</tool_call>`
 * (the template's newlines are the ones Jinja's trim_blocks leaves), calls a newline apart. The
 * arguments end with the call itself, so the call has no suffix of its own.
 */
const GLM_4_6: XmlToolLayout = {
  name: "glm-4.6",
  matches: (t) => t.includes("[gMASK]") && t.includes("<tool_call>") && t.includes("</arg_key>\n<arg_value>"),
  format: { sectionPrefix: "", prefix: "<tool_call>", paramsPrefix: "\n", suffix: "", betweenCalls: "\n", sectionSuffix: "" },
  tags: { keyOpen: "<arg_key>", keyClose: "</arg_key>\n<arg_value>", valueClose: "</arg_value>\n", end: "</tool_call>" },
};

/**
 * GLM 4.7: the same tags with nothing between them, `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>…`:
 * the name ends where the first tag (or the call's end) begins.
 */
const GLM_4_7: XmlToolLayout = {
  name: "glm-4.7",
  matches: (t) => t.includes("[gMASK]") && t.includes("<tool_call>") && t.includes("</arg_key><arg_value>"),
  format: { sectionPrefix: "", prefix: "<tool_call>", paramsPrefix: "", suffix: "", betweenCalls: "", sectionSuffix: "" },
  tags: { keyOpen: "<arg_key>", keyClose: "</arg_key><arg_value>", valueClose: "</arg_value>", end: "</tool_call>" },
};

/**
 * MiniMax-M2: a turn's calls in one `<minimax:tool_call>` section,
 * `<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n…</invoke>\n` each.
 */
const MINIMAX_M2: XmlToolLayout = {
  name: "minimax-m2",
  matches: (t) => t.includes("<minimax:tool_call>") && t.includes('<invoke name="') && t.includes('<parameter name="'),
  format: { sectionPrefix: "<minimax:tool_call>\n", prefix: '<invoke name="', paramsPrefix: '">\n', suffix: "", betweenCalls: "", sectionSuffix: "</minimax:tool_call>" },
  tags: { keyOpen: '<parameter name="', keyClose: '">', valueClose: "</parameter>\n", end: "</invoke>\n" },
};

/**
 * DeepSeek V3.2's DSML markup (`｜DSML｜` is text, not a token): a turn's calls in one
 * `<｜DSML｜function_calls>` block, each `<｜DSML｜invoke name="NAME">\n` then its parameters as
 * `<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>\n` (`string="false"` and
 * JSON for values that are not strings) and `</｜DSML｜invoke>\n`. Recognised as llama.cpp
 * recognises it (the template names `dsml_token`); llama.cpp's parser reads the same layout.
 */
const dsml = (block: string): Pick<XmlToolLayout, "format" | "tags"> => ({
  format: { sectionPrefix: `<｜DSML｜${block}>\n`, prefix: '<｜DSML｜invoke name="', paramsPrefix: '">\n', suffix: "", betweenCalls: "", sectionSuffix: `</｜DSML｜${block}>` },
  tags: { keyOpen: '<｜DSML｜parameter name="', keyClose: '" string="false">', rawKeyClose: '" string="true">', valueClose: "</｜DSML｜parameter>\n", end: "</｜DSML｜invoke>\n" },
});
const isDsml = (t: string) => t.includes("dsml_token") && t.includes("DSML");
const DEEPSEEK_V3_2: XmlToolLayout = { name: "deepseek-v3.2", matches: (t) => isDsml(t) && t.includes("function_calls"), ...dsml("function_calls") };
/** DeepSeek V4: V3.2's markup, the block named `tool_calls`. */
const DEEPSEEK_V4: XmlToolLayout = { name: "deepseek-v4", matches: (t) => isDsml(t) && !t.includes("function_calls") && t.includes("tool_calls"), ...dsml("tool_calls") };

/**
 * MiniCPM5: `<function name="NAME"><param name="KEY">VALUE</param>…</function>`, calls a newline
 * apart, no section around them. Recognised as llama.cpp recognises it (its template's "Tool usage
 * guidelines"). The template wraps a string holding `<`, `&` or a newline in `<![CDATA[…]]>`;
 * calls are generated with raw values that never hold `</param>`, which llama.cpp reads the same.
 */
const MINICPM5: XmlToolLayout = {
  name: "minicpm5",
  matches: (t) => t.includes("Tool usage guidelines:") && t.includes('<function name=\"') && t.includes('<param name=\"'),
  format: { sectionPrefix: "", prefix: '<function name="', paramsPrefix: '">', suffix: "", betweenCalls: "\n", sectionSuffix: "" },
  tags: { keyOpen: '<param name="', keyClose: '">', valueClose: "</param>", end: "</function>" },
};

// (Seed-OSS writes Qwen3-Coder's tags inside <seed:tool_call>, but node-llama-cpp renders it with
// its own Seed wrapper rather than the template, so no layout here would be used.)
const LAYOUTS: readonly XmlToolLayout[] = [QWEN3_CODER, GLM_4_6, GLM_4_7, MINIMAX_M2, DEEPSEEK_V3_2, DEEPSEEK_V4, MINICPM5];

/** The XML layout of a template's family, if it is one. */
export function xmlLayoutOf(template: string): XmlToolLayout | undefined {
  return LAYOUTS.find((l) => l.matches(template));
}

const adopted = new WeakMap<JinjaTemplateChatWrapper, XmlToolLayout>();

/** The XML layout a wrapper was given (adoptXmlToolLayout). */
export function xmlLayoutOfWrapper(wrapper: unknown): XmlToolLayout | undefined {
  return adopted.get(wrapper as JinjaTemplateChatWrapper);
}

/**
 * Switches a Jinja wrapper whose template writes XML arguments to its template path, with the
 * arguments handed over as the object they are (whatever layout node-llama-cpp read). Returns the
 * family and the call that undoes it, or undefined for a template of no XML family.
 */
export function adoptXmlToolLayout(wrapper: JinjaTemplateChatWrapper, template: string): { name: string; undo: () => void } | undefined {
  const layout = xmlLayoutOf(template);
  if (!layout) return undefined;
  const f = layout.format;
  // node-llama-cpp's own rendering of calls (outside the template) is never used on this path; the
  // settings still say where calls open, which the prompt's open turn and the call trigger read.
  const undo = switchToTemplatePath(
    wrapper,
    {
      call: { optionalPrefixSpace: false, prefix: f.sectionPrefix + f.prefix, paramsPrefix: f.paramsPrefix, suffix: layout.tags.end + f.suffix + f.sectionSuffix, emptyCallParamsPlaceholder: {} },
      result: { prefix: "", suffix: "" },
      parallelism: {
        call: { sectionPrefix: "", betweenCalls: f.betweenCalls, sectionSuffix: "" },
        result: { sectionPrefix: "", betweenResults: "", sectionSuffix: "" },
      },
    },
    "xml-tool-calls.ts",
  );
  adopted.set(wrapper, layout);
  return {
    name: layout.name,
    undo: () => {
      adopted.delete(wrapper);
      undo();
    },
  };
}

/** What the call parser needs to read one request's XML arguments. */
export interface XmlArguments {
  tags: XmlArgumentTags;
  /** The parameters written raw (strings), by tool. */
  rawParams: ReadonlyMap<string, ReadonlySet<string>>;
}

/**
 * Reads one call's XML parameters, as generated, into the text of a JSON object, incrementally: a
 * raw string value is streamed as a JSON string as it comes (held back only where the closing tag
 * may be starting), any other value is passed on once closed, as the JSON it is or, when it is not
 * JSON, as a string (as llama.cpp reads it).
 */
export class XmlArgumentsReader {
  private state: "between" | "key" | "raw" | "json" = "between";
  private count = 0;

  constructor(
    private readonly tags: XmlArgumentTags,
    private readonly raw: ReadonlySet<string>,
  ) {}

  /** Reads from `text`: the JSON text read, how much of `text` was used, and whether the arguments ended. */
  read(text: string): { json: string; used: number; done: boolean } {
    const { keyOpen, keyClose, valueClose, end } = this.tags;
    let json = "";
    let at = 0;
    for (;;) {
      const rest = text.slice(at);
      if (this.state === "between") {
        if (rest.startsWith(end)) {
          json += this.count === 0 ? "{}" : "}";
          return { json, used: at + end.length, done: true };
        }
        if (rest.startsWith(keyOpen)) {
          at += keyOpen.length;
          this.state = "key";
          continue;
        }
        // Not yet telling (or, past the grammar, stray text: skipped a character at a time).
        if (end.startsWith(rest) || keyOpen.startsWith(rest)) return { json, used: at, done: false };
        at += 1;
        continue;
      }
      if (this.state === "key") {
        // The name ends at the first of the closes the layout has (DeepSeek's two tell string
        // values from the others; which one the value is, is the schema's to say, as llama.cpp reads it).
        const closes = [keyClose, this.tags.rawKeyClose ?? keyClose].map((c) => ({ c, at: rest.indexOf(c) })).filter((x) => x.at !== -1);
        if (closes.length === 0) return { json, used: at, done: false };
        const { c: closeTag, at: close } = closes.reduce((a, b) => (b.at < a.at ? b : a));
        const name = rest.slice(0, close).trim();
        json += `${this.count === 0 ? "{" : ", "}${JSON.stringify(name)}: `;
        this.count++;
        at += close + closeTag.length;
        if (this.raw.has(name)) {
          json += '"';
          this.state = "raw";
        } else this.state = "json";
        continue;
      }
      const close = rest.indexOf(valueClose);
      if (this.state === "raw") {
        if (close === -1) {
          const keep = heldBack(rest, valueClose);
          json += escaped(rest.slice(0, rest.length - keep));
          return { json, used: text.length - keep, done: false };
        }
        json += `${escaped(rest.slice(0, close))}"`;
      } else {
        if (close === -1) return { json, used: at, done: false };
        json += jsonOrString(rest.slice(0, close));
      }
      at += close + valueClose.length;
      this.state = "between";
    }
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

/** A value as JSON: itself when it is JSON, else as a string. */
function jsonOrString(text: string): string {
  const trimmed = text.trim();
  try {
    JSON.parse(trimmed);
    return trimmed;
  } catch {
    return JSON.stringify(text);
  }
}
