import { createHash } from "node:crypto";
import {
  type ChatModelFunctions,
  type ChatWrapper,
  type LlamaGrammar,
  type LlamaModel,
  LlamaText,
  SpecialToken,
  SpecialTokensText,
  type Token,
} from "node-llama-cpp";
import { invalidField } from "../../core/errors.ts";
import type { GenerationRequest, ToolDefinition } from "../../core/types.ts";
import { describeTool, freeTextArguments, toolParams } from "./free-text-tools.ts";
import { asObjectSchema, notAnObjectSchema } from "../../core/object-schema.ts";
import { orToolTrigger, toolCallGrammar, withHeader } from "../../grammar/compose.ts";
import { literal } from "../../grammar/gbnf.ts";
import { JSON_OBJECT_GBNF, SchemaLimitError, UnsupportedSchemaError } from "../../grammar/json-schema-to-gbnf.ts";
import { DEFAULT_MAX_LOAD_COST, estimateLoadCost } from "../../grammar/load-cost.ts";
import { type CompileControl, REQUEST_COMPILE_MS } from "../../grammar/schema-compiler.ts";
import { parametersCode, patternGrammar, schemaGrammar } from "../../grammar/schema-grammar.ts";
import type { ToolPlan } from "./decode-loop.ts";
import { callOpening, type ToolCallFormat } from "./tool-call-parser.ts";
import type { XmlToolLayout } from "./xml-tool-calls.ts";
import { callIndexOf, takesOneCall } from "./tool-layouts.ts";
import { GEMMA4_QUOTE, Gemma4ArgumentsReader } from "./gemma4-tool-calls.ts";
import { gemma4ArgumentsGrammar } from "../../grammar/gemma4-arguments.ts";
import { PythonArgumentsReader } from "./python-tool-calls.ts";
import { FaithfulMistralChatWrapper } from "./mistral-wrapper.ts";
import { type PythonArgumentGrammar, pythonArgumentsGrammar, pythonLiterals, writableKeyword } from "../../grammar/python-arguments.ts";

/** A call notation of its own, for the arguments of templates that write neither JSON nor XML parameters. */
export type ArgumentNotation = "gemma4" | "python";
import { isRawString, rawStringGrammar, resolveLocalRef, xmlArgumentsGrammar, type XmlParameterGrammar } from "../../grammar/xml-arguments.ts";

export interface Constraints {
  /** Functions to document in the prompt, through the model's template. */
  functions?: ChatModelFunctions;
  tools?: ToolPlan;
  contentGrammar?: LlamaGrammar;
  /**
   * Keywords of non-strict schemas that the grammar does not enforce (see relaxedHeader), by path:
   * the response format's as they are, a tool's prefixed with its name and a colon.
   */
  relaxed: string[];
}

/** The response header that names the keywords a non-strict schema's grammar left unenforced. */
export const RELAXED_HEADER = "x-plinth-schema-relaxed";

/** Most paths the header lists; the rest are counted. */
const RELAXED_HEADER_PATHS = 32;

/**
 * The header's value: the paths, comma-separated, with anything but visible ASCII (and "," and "%")
 * percent-encoded as UTF-8, so that any property name fits in a header.
 */
export function relaxedHeader(paths: readonly string[]): string {
  const encode = (p: string) => p.replace(/[^\x21-\x7e]|[,%]/gu, (c) => (c.length === 1 && c >= "\ud800" && c <= "\udfff" ? "%EF%BF%BD" : encodeURIComponent(c)));
  paths = [...new Set(paths)];
  const shown = paths.slice(0, RELAXED_HEADER_PATHS).map((p) => encode(p === "" ? "(root)" : p));
  if (paths.length > RELAXED_HEADER_PATHS) shown.push(`(${paths.length - RELAXED_HEADER_PATHS} more)`);
  return shown.join(", ");
}

/**
 * Turns a request's tools, tool_choice and response_format into what the decode loop enforces:
 * grammars (compiled once per distinct text and cached) and the model's tool-call layout, read from
 * its chat wrapper.
 */
export class ConstraintPlanner {
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();
  readonly format: ToolCallFormat;
  readonly trigger: string;

  /** Whether one turn can hold several calls (gpt-oss ends the turn with each call; GigaChat's templates write one). */
  private readonly severalCalls: boolean;

  /** Control tokens the call layout is written with, by their text (see literal). */
  private readonly markerTokens = new Map<string, Token>();

  /** Gemma 4's string quote as text (see gemma4Arguments). */
  private quote = GEMMA4_QUOTE;

  /** The same markers by token, with their text (for the decode loop). */
  readonly markers: ReadonlyMap<Token, string>;

  /**
   * `format` replaces the layout read from the wrapper (for layouts the wrapper cannot express as
   * text); `xml`, for templates that write arguments as XML parameters, gives the layout and how
   * the arguments are written; `notation`, for templates whose arguments are neither JSON nor XML,
   * which one: Gemma 4's own (gemma4-tool-calls.ts) or LFM2's Python keyword arguments
   * (python-tool-calls.ts).
   */
  constructor(
    private readonly model: LlamaModel,
    wrapper: ChatWrapper,
    format?: ToolCallFormat,
    private readonly xml?: XmlToolLayout,
    private readonly notation?: ArgumentNotation,
  ) {
    format ??= xml?.format;
    const call = wrapper.settings.functions.call;
    const parallel = wrapper.settings.functions.parallelism?.call;
    this.format = format ?? {
      sectionPrefix: parallel ? this.literal(parallel.sectionPrefix) : "",
      prefix: this.literal(call.prefix),
      paramsPrefix: this.literal(call.paramsPrefix),
      suffix: this.literal(call.suffix),
      betweenCalls: parallel ? this.literal(parallel.betweenCalls) : "",
      sectionSuffix: parallel ? this.literal(parallel.sectionSuffix) : "",
      // A counter next to the name (Kimi K2's), which the wrapper's settings cannot hold.
      ...(callIndexOf(wrapper) ? { index: callIndexOf(wrapper) } : {}),
      // Mistral Nemo's calls end with an id of 9 letters or digits, as llama.cpp's grammar has the
      // model write one; it becomes the call's id, which the template writes back as it is.
      ...(wrapper instanceof FaithfulMistralChatWrapper && wrapper.callIds ? { suffix: '"}', callId: { prefix: ', "id": "' } } : {}),
    };
    this.severalCalls = (format === undefined || xml !== undefined) && !takesOneCall(wrapper);
    if (notation === "gemma4") {
      // The quote token is a marker too (named in grammars, read as its text); the name ends at the
      // arguments' `{`.
      this.quote = this.literal(LlamaText(new SpecialTokensText(GEMMA4_QUOTE))) || GEMMA4_QUOTE;
      this.format = { ...this.format, encoded: { nameEnd: "{", reader: () => new Gemma4ArgumentsReader() } };
    }
    // The name ends at the `(` that opens the keyword arguments; the reader stops at their `)`.
    if (notation === "python") this.format = { ...this.format, encoded: { nameEnd: "(", reader: () => new PythonArgumentsReader() } };
    // A call is recognised by the leading marker of what opens it: the section marker when the
    // format has one (Mistral's "[TOOL_CALLS]"), else the call prefix's (e.g. "<tool_call>"). A
    // control token that opens it is the marker by itself: sampling it is the model's decision to
    // call, and the call grammar then writes the rest of the opening (Granite's "[" after its
    // <|tool_call|>), which the model, unconstrained until then, might not.
    const opening = callOpening(this.format);
    const cut = opening.slice(1).search(/[\n{]/);
    // Gemma 4's own vocabulary types `<|tool_call>` as a user-defined token, not a control one: it
    // still opens a call by itself, as llama.cpp's server's trigger word for the family is that token.
    const leadingMarker = [...this.markerTokens.keys()].find((m) => opening.startsWith(m)) ?? (notation === "gemma4" ? this.leadingToken(opening) : undefined);
    this.trigger = leadingMarker ?? (cut === -1 ? opening : opening.slice(0, cut + 1));
    this.markers = new Map([...this.markerTokens].map(([text, token]) => [token, text]));
  }

  /** The text of the one token `text` opens with, where that token is a user-defined one. */
  private leadingToken(text: string): string | undefined {
    const first = this.tokenize(text)[0];
    if (first === undefined || !this.model.getTokenAttributes(first).userDefined) return undefined;
    const spelled = this.model.detokenize([first], true);
    return spelled && text.startsWith(spelled) && spelled.length < text.length ? spelled : undefined;
  }

  /**
   * The markers that mean something only inside a call (all but the one that opens it): sampled
   * anywhere else, such a token is the control token it is, not text.
   */
  get innerMarkers(): ReadonlySet<Token> {
    return new Set([...this.markerTokens].filter(([text]) => text !== this.trigger).map(([, token]) => token));
  }

  /** Everything a call is opened with, as text: the section marker (if any) and the call prefix. */
  get opening(): string {
    return this.format.sectionPrefix + this.format.prefix;
  }

  /**
   * The literal text of a template fragment, up to the first token that ends the turn (EOS,
   * Llama's <|eom_id|>): generation stops there by itself. A control token on the way (Mistral's
   * [TOOL_CALLS] and [ARGS], Granite's <|tool_call|>) is kept as its text and remembered as a
   * marker: the decode loop then reads it as that text (a control token otherwise decodes to
   * nothing), and grammars name the token itself (see spell).
   */
  private literal(fragment: unknown): string {
    if (fragment == null) return "";
    let out = "";
    for (const part of LlamaText(fragment as never).values) {
      if (part instanceof SpecialToken) break;
      if (part instanceof SpecialTokensText) {
        const tokens = part.tokenize(this.model.tokenizer);
        if (tokens.length === 1 && this.model.isSpecialToken(tokens[0])) {
          if (this.model.isEogToken(tokens[0]) || !this.model.getTokenAttributes(tokens[0]).control) break;
          this.markerTokens.set(part.value, tokens[0]);
        } else if (tokens.length > 1) {
          // A piece that holds markers among its text (Kimi K2's `<|tool_call_begin|>functions.`):
          // each control token in it is a marker too, and the piece ends where the turn would.
          for (const token of tokens) {
            if (!this.model.isSpecialToken(token) || !this.model.getTokenAttributes(token).control) continue;
            const spelled = this.model.detokenize([token], true);
            const at = part.value.indexOf(spelled);
            if (this.model.isEogToken(token)) return out + (at === -1 ? part.value : part.value.slice(0, at));
            if (at !== -1) this.markerTokens.set(spelled, token);
          }
        }
        out += part.value;
      } else out += part;
    }
    return out;
  }

  /**
   * Text of the call layout as GBNF: its control-token markers as token references (`<[id]>`, which
   * llama.cpp's grammars match against the sampled token, not its spelling), the rest as literals.
   */
  private readonly spell = (text: string): string => {
    if (this.markerTokens.size === 0 || text === "") return literal(text);
    const names = [...this.markerTokens.keys()].sort((a, b) => b.length - a.length).map(escapeRegExp);
    const parts = text.split(new RegExp(`(${names.join("|")})`)).filter((p) => p !== "");
    return parts.map((p) => (this.markerTokens.has(p) ? `<[${this.markerTokens.get(p)}]>` : literal(p))).join(" ");
  };

  /** `header`: what the model writes before an answer it chose over a call (gpt-oss's final channel). */
  async plan(req: GenerationRequest, header?: string, signal?: AbortSignal): Promise<Constraints> {
    const out: Constraints = { relaxed: [] };
    // All of this request's schemas share one budget of compile time and the client's signal.
    const control: CompileControl = { leftMs: REQUEST_COMPILE_MS, signal };
    const useTools = req.tools && req.tools.length > 0 && req.toolChoice !== "none";
    if (useTools) {
      const choice = req.toolChoice;
      const named = typeof choice === "object" && "name" in choice ? choice.name : undefined;
      const allowed = typeof choice === "object" && "allowed" in choice ? new Set(choice.allowed) : undefined;
      const offered = req.tools!.filter((t) => (named === undefined || t.name === named) && (!allowed || allowed.has(t.name)));
      out.functions = Object.fromEntries(req.tools!.map((t) => [t.name, { description: describeTool(t), params: toolParams(t) as never }]));
      // One tool after another: the request then holds at most one place in the compiler's queue
      // (other requests' schemas take turns with its tools), and the tools' grammars, each within
      // bounds alone, must be within them together (one grammar is loaded), which is known to fail
      // as soon as the sum passes the bound, before the remaining tools cost anything.
      const args: Array<{ name: string; argsGbnf: string; loadCost: number; relaxed: string[]; raw?: Set<string> }> = [];
      let cost = 0;
      for (const t of offered) {
        const a = { name: t.name, ...(await this.argumentsGrammar(t, req.tools!.indexOf(t), control)) };
        args.push(a);
        cost += a.loadCost;
        if (cost > DEFAULT_MAX_LOAD_COST) {
          const first = args.length < offered.length ? `the first ${args.length} of them alone come to` : "they come to";
          throw invalidField(`{field} are too large to enforce together: their grammars would take the engine too long to load (${first} ${Math.round(cost / 1e6)} M units, the limit is ${Math.round(DEFAULT_MAX_LOAD_COST / 1e6)} M).`, "tools");
        }
      }
      for (const a of args) out.relaxed.push(...a.relaxed.map((p) => `${a.name}:${p}`));
      const parallel = this.severalCalls && req.parallelToolCalls !== false && named === undefined;
      const format = this.xml ? { ...this.format, xml: { tags: this.xml.tags, rawParams: new Map(args.map((a) => [a.name, a.raw ?? new Set<string>()])) } } : this.format;
      out.tools = {
        format,
        trigger: this.trigger,
        forced: choice === "required" || named !== undefined || (typeof choice === "object" && "required" in choice && choice.required),
        // Several tools make one grammar: a refusal names the tool only when it is the one offered.
        grammar: await this.compile(toolCallGrammar(args, this.format, parallel, this.spell), offered.length === 1 ? toolField(offered[0], req.tools!.indexOf(offered[0])) : "tools"),
        prefixTokens: this.tokenize(this.opening),
      };
    }
    if (req.responseFormat) {
      const content = await this.contentGrammar(req, control);
      let text = content.gbnf;
      out.relaxed.push(...content.relaxed);
      if (header && out.tools && !out.tools.forced) text = withHeader(text, header);
      if (out.tools && !out.tools.forced) text = orToolTrigger(text, this.trigger, this.spell);
      const rf = req.responseFormat;
      out.contentGrammar = await this.compile(text, rf.type === "json_schema" ? "responseFormat.schema" : rf.type === "regex" ? "responseFormat.pattern" : "responseFormat");
    }
    return out;
  }

  tokenize(text: string): Token[] {
    return LlamaText.fromJSON([{ type: "specialTokensText", value: text }]).tokenize(this.model.tokenizer);
  }

  private async argumentsGrammar(tool: ToolDefinition, i: number, control: CompileControl): Promise<{ argsGbnf: string; loadCost: number; relaxed: string[]; raw?: Set<string> }> {
    if (this.xml) return this.xmlArguments(tool, i, control);
    if (this.notation === "gemma4") return this.gemma4Arguments(tool, i);
    if (this.notation === "python") return this.pythonArguments(tool, i, control);
    if (tool.input) {
      const argsGbnf = freeTextArguments(tool.input, i);
      const loadCost = estimateLoadCost(argsGbnf);
      if (loadCost > DEFAULT_MAX_LOAD_COST) throw invalidField(`{field} is too large to enforce: its grammar would take the engine too long to load.`, `tools[${i}].input`);
      return { argsGbnf, loadCost, relaxed: [] };
    }
    // The arguments are one JSON object, whatever a typeless schema (`{}`, a bare `properties`)
    // leaves open: no call layout can read a bare value back (the generic `||call: name(...)` one
    // finds the arguments' end by their braces). The dialects refuse schemas of other types; one
    // that came some other way is refused here, by its field, rather than compiled.
    const why = notAnObjectSchema(tool.parameters);
    if (why) throw invalidField(`{field} must be a JSON Schema of type "object": ${why}.`, `tools[${i}].parameters`, "invalid_function_parameters");
    const { gbnf, loadCost, relaxed } = await schemaGrammar(asObjectSchema(tool.parameters), tool.strict, `tools[${i}].parameters`, control, "tools");
    return { argsGbnf: gbnf, loadCost, relaxed: relaxed.map((r) => r.path) };
  }

  /**
   * A call's arguments as XML parameters (grammar/xml-arguments.ts): a raw string value held to the
   * string keywords of its schema, any other value to its schema as JSON (compiled as a schema of
   * its own, with the tool's definitions), the parameters in the schema's order. A free-text tool's
   * input is its one raw parameter, `input`.
   */
  private async xmlArguments(tool: ToolDefinition, i: number, control: CompileControl): Promise<{ argsGbnf: string; loadCost: number; relaxed: string[]; raw: Set<string> }> {
    const tags = this.xml!.tags;
    const field = `tools[${i}].parameters`;
    const params: XmlParameterGrammar[] = [];
    const relaxed: string[] = [];
    const raw = new Set<string>();
    const rawGrammar = (schema: unknown, path: string, strict: boolean) => {
      try {
        const g = rawStringGrammar(schema, tags.valueClose, strict, path);
        relaxed.push(...g.relaxed.map((r) => r.path));
        return g.gbnf;
      } catch (err) {
        if (err instanceof SchemaLimitError) throw invalidField(`{field} is too large to enforce: ${err.message}`, field);
        if (err instanceof UnsupportedSchemaError) throw invalidField(`{field} cannot be enforced: ${err.message}`, field, parametersCode(field));
        throw err;
      }
    };
    if (tool.input) {
      if (tool.input.syntax !== "text") throw invalidField("{field} cannot be enforced for this model: its calls write arguments as XML parameters, and only free-text inputs (syntax \"text\") are supported there.", `tools[${i}].input`);
      params.push({ name: "input", required: true, gbnf: rawGrammar({ type: "string" }, "", false), raw: true });
      raw.add("input");
    } else {
      const schema = (tool.parameters ?? {}) as { properties?: Record<string, unknown>; required?: unknown; $defs?: unknown; definitions?: unknown };
      const properties = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
      const required = new Set(Array.isArray(schema.required) ? schema.required : []);
      for (const [name, propSchema] of Object.entries(properties)) {
        const path = `properties.${name}`;
        let gbnf: string;
        if (isRawString(propSchema, schema)) {
          gbnf = rawGrammar(resolveLocalRef(propSchema, schema), path, tool.strict);
          raw.add(name);
        } else {
          gbnf = await propertyGrammar(schema, propSchema, path, tool.strict, field, control, relaxed);
        }
        params.push({ name, required: required.has(name), gbnf, raw: raw.has(name) });
      }
    }
    const argsGbnf = xmlArgumentsGrammar(tags, params);
    const loadCost = estimateLoadCost(argsGbnf);
    if (loadCost > DEFAULT_MAX_LOAD_COST) throw invalidField("{field} is too large to enforce: its grammar would take the engine too long to load.", field);
    return { argsGbnf, loadCost, relaxed, raw };
  }

  /**
   * A call's arguments in Gemma 4's notation (grammar/gemma4-arguments.ts), compiled from the tool's
   * schema. A free-text tool's input is one string argument, `input`.
   */
  private gemma4Arguments(tool: ToolDefinition, i: number): { argsGbnf: string; loadCost: number; relaxed: string[] } {
    const field = tool.input ? `tools[${i}].input` : `tools[${i}].parameters`;
    let schema: unknown = tool.parameters;
    if (tool.input) {
      if (tool.input.syntax !== "text") throw invalidField("{field} cannot be enforced for this model: its calls write arguments in Gemma 4's notation, and only free-text inputs (syntax \"text\") are supported there.", field);
      schema = { type: "object", properties: { input: { type: "string" } }, required: ["input"] };
    } else {
      const why = notAnObjectSchema(tool.parameters);
      if (why) throw invalidField(`{field} must be a JSON Schema of type "object": ${why}.`, field, parametersCode(field));
    }
    let compiled: { gbnf: string; relaxed: Array<{ path: string }> };
    try {
      compiled = gemma4ArgumentsGrammar(schema ?? {}, { quote: this.spell(this.quote), quoteText: this.quote, strict: tool.strict });
    } catch (err) {
      if (err instanceof SchemaLimitError) throw invalidField(`{field} is too large to enforce: ${err.message}`, field);
      if (err instanceof UnsupportedSchemaError) throw invalidField(`{field} cannot be enforced: ${err.message}`, field, parametersCode(field));
      throw err;
    }
    const loadCost = estimateLoadCost(compiled.gbnf);
    if (loadCost > DEFAULT_MAX_LOAD_COST) throw invalidField("{field} is too large to enforce: its grammar would take the engine too long to load.", field);
    return { argsGbnf: compiled.gbnf, loadCost, relaxed: compiled.relaxed.map((r) => r.path) };
  }

  /**
   * A call's arguments as Python keyword arguments (grammar/python-arguments.ts), each property's
   * value compiled from its schema as JSON (with the tool's definitions), Python's True, False and
   * None allowed where the schema allows those values. A free-text tool's input is one string
   * argument, `input`. A property whose name cannot be a keyword is left out (refused if required).
   */
  private async pythonArguments(tool: ToolDefinition, i: number, control: CompileControl): Promise<{ argsGbnf: string; loadCost: number; relaxed: string[] }> {
    const field = tool.input ? `tools[${i}].input` : `tools[${i}].parameters`;
    let schema: { properties?: Record<string, unknown>; required?: unknown; $defs?: unknown; definitions?: unknown } = (tool.parameters ?? {}) as never;
    if (tool.input) {
      if (tool.input.syntax !== "text") throw invalidField("{field} cannot be enforced for this model: its calls write arguments as Python keyword arguments, and only free-text inputs (syntax \"text\") are supported there.", field);
      schema = { properties: { input: { type: "string" } }, required: ["input"] };
    } else {
      const why = notAnObjectSchema(tool.parameters);
      if (why) throw invalidField(`{field} must be a JSON Schema of type "object": ${why}.`, field, parametersCode(field));
    }
    const properties = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const relaxed: string[] = [];
    const args: PythonArgumentGrammar[] = [];
    for (const [name, propSchema] of Object.entries(properties)) {
      const path = `properties.${name}`;
      if (!writableKeyword(name)) {
        if (required.has(name) || tool.strict) throw invalidField(`{field} cannot be enforced: property ${JSON.stringify(name)} cannot be written as a Python keyword argument.`, field);
        relaxed.push(path);
        continue;
      }
      const gbnf = await propertyGrammar(schema, propSchema, path, tool.strict, field, control, relaxed);
      args.push({ name, required: required.has(name), gbnf, literals: pythonLiterals(propSchema, schema) });
    }
    const argsGbnf = pythonArgumentsGrammar(args);
    const loadCost = estimateLoadCost(argsGbnf);
    if (loadCost > DEFAULT_MAX_LOAD_COST) throw invalidField("{field} is too large to enforce: its grammar would take the engine too long to load.", field);
    return { argsGbnf, loadCost, relaxed };
  }

  private async contentGrammar(req: GenerationRequest, control: CompileControl): Promise<{ gbnf: string; relaxed: string[] }> {
    const rf = req.responseFormat!;
    if (rf.type === "json_object") return { gbnf: JSON_OBJECT_GBNF, relaxed: [] };
    if (rf.type === "regex") return { gbnf: patternGrammar(rf.pattern), relaxed: [] };
    const { gbnf, relaxed } = await schemaGrammar(rf.schema, rf.strict, "responseFormat.schema", control);
    return { gbnf, relaxed: relaxed.map((r) => r.path) };
  }

  /**
   * Compiled grammars, most recently used last; bounded so distinct schemas cannot grow memory.
   * `field`: where the grammar came from. The grammars here are built to be what llama.cpp parses,
   * but should one not be (its parser also has limits of its own, such as how deep groups nest,
   * that a schema could reach in a way not foreseen), the request is a 400 naming the field that
   * made it, not a 500: it is that input, not the server's state, that fails, and retrying it
   * fails the same way.
   */
  private compile(text: string, field: string): Promise<LlamaGrammar> {
    const key = createHash("sha256").update(text).digest("hex");
    let grammar = this.grammars.get(key);
    if (grammar) {
      this.grammars.delete(key);
      this.grammars.set(key, grammar);
      return grammar;
    }
    grammar = this.model.llama.createGrammar({ grammar: text }).catch((err: unknown) => {
      throw invalidField(`{field} cannot be enforced: the engine refused the grammar made of it (${err instanceof Error ? err.message : String(err)}).`, field);
    });
    this.grammars.set(key, grammar);
    grammar.catch(() => this.grammars.delete(key));
    while (this.grammars.size > GRAMMAR_CACHE_ENTRIES) this.grammars.delete(this.grammars.keys().next().value!);
    return grammar;
  }
}

/** Grammars kept compiled per model (a request whose grammar was evicted compiles it again). */
const GRAMMAR_CACHE_ENTRIES = 128;

/** The canonical field of a tool's definition: its parameters, or a free-text tool's input. */
function toolField(tool: ToolDefinition, i: number): string {
  return tool.input ? `tools[${i}].input` : `tools[${i}].parameters`;
}

/**
 * One property's value as JSON, compiled as a schema of its own with the tool's definitions (which
 * its references may name); its relaxed keywords are added to `relaxed` under `path`.
 */
async function propertyGrammar(toolSchema: { $defs?: unknown; definitions?: unknown }, propSchema: unknown, path: string, strict: boolean, field: string, control: CompileControl, relaxed: string[]): Promise<string> {
  const defs = { ...(toolSchema.$defs !== undefined ? { $defs: toolSchema.$defs } : {}), ...(toolSchema.definitions !== undefined ? { definitions: toolSchema.definitions } : {}) };
  const own = propSchema && typeof propSchema === "object" && !Array.isArray(propSchema) ? { ...defs, ...propSchema } : propSchema;
  const compiled = await schemaGrammar(own, strict, field, control, "tools");
  relaxed.push(...compiled.relaxed.map((r) => (r.path === "" ? path : `${path}.${r.path}`)));
  return compiled.gbnf;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

