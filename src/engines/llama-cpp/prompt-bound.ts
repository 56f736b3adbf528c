import type { LlamaModel } from "node-llama-cpp";
import { ApiError } from "../../core/errors.ts";
import type { PromptInput, ToolDefinition } from "../../core/types.ts";

/**
 * A cheap lower bound on a prompt's token count, so a prompt that can never fit the context is
 * refused before it is tokenized: tokenizing runs on the event loop, and a 16 MiB prompt would hold
 * every other request for seconds. No token spells more bytes than the longest vocabulary entry, so
 * a text of B bytes needs at least B / longest tokens.
 */
export class PromptBound {
  /** The most UTF-8 bytes any vocabulary entry is written with (at least its text's bytes). */
  private readonly longest: number;

  constructor(model: LlamaModel) {
    const vocab = (model.fileInfo.metadata.tokenizer?.ggml?.tokens ?? []) as readonly string[];
    let longest = 1;
    for (const piece of vocab) longest = Math.max(longest, Buffer.byteLength(piece, "utf8"));
    this.longest = vocab.length > 0 ? longest : Number.POSITIVE_INFINITY;
  }

  /**
   * The fewest tokens the prompt's own text can take (the template adds more). Tool definitions
   * count too: every template, and the generic description of tools a template does not document,
   * writes each tool's name, description and parameter schema into the prompt (Llama 3's indents
   * a schema four spaces a level, so a deep one grows many times over while rendering).
   */
  minimumTokens(prompt: PromptInput, tools?: readonly ToolDefinition[]): number {
    if (prompt.kind === "tokens") return prompt.tokens.length;
    if (!Number.isFinite(this.longest)) return 0;
    let bytes = 0;
    if (prompt.kind === "text") bytes = Buffer.byteLength(prompt.text, "utf8");
    else if (prompt.kind === "infill") bytes = Buffer.byteLength(prompt.prefix, "utf8") + Buffer.byteLength(prompt.suffix, "utf8");
    else
      for (const m of prompt.messages) {
        // Separately tokenized parts (each message) may each end in a partial token.
        bytes += Buffer.byteLength(m.content, "utf8");
        for (const c of m.toolCalls ?? []) bytes += Buffer.byteLength(c.arguments, "utf8");
      }
    for (const tool of prompt.kind === "chat" ? (tools ?? []) : []) {
      bytes += Buffer.byteLength(tool.name, "utf8") + Buffer.byteLength(tool.description ?? "", "utf8");
      bytes += Buffer.byteLength(JSON.stringify(tool.parameters ?? {}), "utf8");
    }
    return Math.floor(bytes / this.longest);
  }

  /** Refuses, before tokenizing, a prompt (with its tools) that cannot fit in `contextSize` tokens. */
  check(prompt: PromptInput, contextSize: number, tools?: readonly ToolDefinition[]): void {
    if (prompt.kind === "chat" && tools?.length) refuseSprawlingTools(tools);
    // One message that could never fit by itself is named (a Responses request's `instructions`
    // was refused as its `input`).
    if (prompt.kind === "chat" && this.minimumTokens(prompt) >= contextSize)
      prompt.messages.forEach((m, i) => {
        const least = Math.floor(Buffer.byteLength(m.content, "utf8") / this.longest);
        if (least >= contextSize)
          throw new ApiError(400, `This model's context is ${contextSize} tokens, but {field} alone is at least ${least} tokens.`, {
            field: `prompt.messages[${i}].content`,
            code: "context_length_exceeded",
          });
      });
    this.refuse(this.minimumTokens(prompt), contextSize);
    // Messages that fit with tools that do not: the tools are what is too long.
    if (prompt.kind === "chat" && tools?.length) this.refuse(this.minimumTokens(prompt, tools), contextSize, "tools");
  }

  /** Refuses, before tokenizing, a templated text of `bytes` UTF-8 bytes that cannot fit. */
  checkText(bytes: number, contextSize: number): void {
    this.refuse(Number.isFinite(this.longest) ? Math.floor(bytes / this.longest) : 0, contextSize);
  }

  private refuse(least: number, contextSize: number, field = "prompt"): void {
    if (least >= contextSize)
      throw new ApiError(
        400,
        `This model's context is ${contextSize} tokens, but the prompt${field === "tools" ? " with its tool definitions" : ""} is at least ${least} tokens.`,
        { field, code: "context_length_exceeded" },
      );
  }
}

/**
 * Tool schemas as the most spacious template writes them (Llama 3's `tojson(indent=4)`: every
 * value on a line of its own, four spaces a level) may take at most this many bytes. Rendering runs
 * on the event loop, and a 1 MiB schema nested 30 deep came out as 37 MB of prompt, holding every
 * request for seconds even where a long context would have let the count through.
 */
const MAX_RENDERED_TOOL_BYTES = 4 * 1024 * 1024;

/**
 * Objects and arrays a tool's parameters may nest. The sizes below are measured by recursion, and a
 * schema 3,000 properties deep (6,000 levels of JSON, 250 KB) ran the stack out: a 500 instead of a
 * refusal. Far deeper than any real schema (structured outputs stop at 512 schemas, 1,024 levels).
 */
const MAX_TOOL_SCHEMA_DEPTH = 1024;

function refuseSprawlingTools(tools: readonly ToolDefinition[]): void {
  let budget = MAX_RENDERED_TOOL_BYTES;
  let typeScriptBudget = MAX_RENDERED_TOOL_BYTES;
  tools.forEach((tool, i) => {
    if (nestsDeeperThan(tool.parameters, MAX_TOOL_SCHEMA_DEPTH))
      throw new ApiError(400, `{field} nests objects and arrays more than ${MAX_TOOL_SCHEMA_DEPTH} levels deep; send a flatter schema.`, {
        field: `tools[${i}].parameters`,
        code: "invalid_value",
      });
    budget -= Buffer.byteLength(tool.description ?? "", "utf8");
    budget = spaciousSize(tool.parameters, 2, budget);
    typeScriptBudget -= Buffer.byteLength(tool.description ?? "", "utf8") + typeScriptSize(tool.parameters, typeScriptBudget);
    // Named by the tool whose schema went past the budget.
    if (budget < 0 || typeScriptBudget < 0)
      throw new ApiError(
        400,
        `The tool definitions would take more than ${MAX_RENDERED_TOOL_BYTES / 1024 / 1024} MiB written out as templates write them (${budget < 0 ? "indented JSON" : "TypeScript types, where an array of a fixed or minimum count repeats its item's type"}), {field} bringing them there; send smaller parameter schemas.`,
        { field: `tools[${i}].parameters`, code: "invalid_value" },
      );
  });
}

/** Whether `value` nests objects and arrays more than `limit` levels deep (walked without recursion). */
function nestsDeeperThan(value: unknown, limit: number): boolean {
  if (value === null || typeof value !== "object") return false;
  const stack: Array<[object, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (depth > limit) return true;
    // Only objects and arrays are stacked: a list of 1.9M strings took ~0.1 s to stack one by one.
    for (const child of Array.isArray(v) ? v : Object.values(v)) if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
  }
  return false;
}

/** How many times node-llama-cpp's TypeScript description writes an array's item type at most. */
const TYPE_REPETITION = 10;

/**
 * About how many bytes `schema` takes as node-llama-cpp's TypeScript description of functions (what
 * a template that does not write tools itself gets), or more than `cap`. That description writes an
 * array of a fixed count, or of a minimum count under 10, as a tuple: its item type once per item
 * (up to 10, and once more for the rest), so nested arrays multiply. A 600-byte schema of such
 * arrays 8 deep came to 350 MB of prompt, holding every request for 8 s; indented JSON of it is
 * small. Each subschema is costed once and multiplied, so this takes time linear in the schema.
 */
function typeScriptSize(schema: unknown, cap: number): number {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) return 8;
  const s = schema as Record<string, unknown>;
  let size = 16 + Buffer.byteLength(typeof s.description === "string" ? s.description : "", "utf8");
  const add = (n: number) => {
    size += n;
    return size > cap;
  };
  const sub = (v: unknown) => typeScriptSize(v, cap - size);
  for (const key of ["$defs", "definitions", "properties"]) {
    const map = s[key];
    if (map === null || typeof map !== "object" || Array.isArray(map)) continue;
    for (const [name, v] of Object.entries(map)) if (add(Buffer.byteLength(name, "utf8") + 40 + sub(v))) return size;
  }
  for (const key of ["anyOf", "oneOf", "allOf"]) {
    const list = s[key];
    if (Array.isArray(list)) for (const v of list) if (add(3 + sub(v))) return size;
  }
  if (add(sub(s.additionalProperties))) return size;
  for (const key of ["enum", "const"]) if (s[key] !== undefined && add(Buffer.byteLength(JSON.stringify(s[key]) ?? "", "utf8"))) return size;
  const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const minItems = count(s.minItems);
  const maxItems = count(s.maxItems);
  const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
  for (const v of prefix) if (add(2 + sub(v))) return size;
  if (s.items !== undefined) {
    // Copies of the item type: tuple slots up to TYPE_REPETITION past the prefix, and the rest.
    const fill = minItems === undefined ? 0 : Math.max(0, Math.min(minItems, prefix.length + TYPE_REPETITION) - prefix.length);
    const copies = prefix.length === 0 && minItems !== undefined && minItems === maxItems && minItems < TYPE_REPETITION ? minItems : fill + 1;
    if (add(copies * (4 + sub(s.items)))) return size;
  }
  return size;
}

/** What is left of `budget` after `value` written as indented JSON at `depth` (stops early once spent). */
function spaciousSize(value: unknown, depth: number, budget: number): number {
  if (budget < 0) return budget;
  if (value === null || typeof value !== "object") return budget - (typeof value === "string" ? Buffer.byteLength(value, "utf8") + 2 : String(value).length);
  // Walked in place (no list of entries made first): a list of 1.9M strings stops at the budget.
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      budget = spaciousSize(value[i], depth + 1, budget - 4 * depth - 2);
      if (budget < 0) return budget;
    }
  } else {
    for (const key of Object.keys(value)) {
      budget = spaciousSize((value as Record<string, unknown>)[key], depth + 1, budget - 4 * depth - 2 - Buffer.byteLength(key, "utf8") - 4);
      if (budget < 0) return budget;
    }
  }
  return budget - 4 * depth - 2;
}
