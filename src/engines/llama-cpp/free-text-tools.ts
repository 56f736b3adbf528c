import { invalidField } from "../../core/errors.ts";
import type { FreeTextInput, ToolDefinition } from "../../core/types.ts";
import { prefixRules } from "../../grammar/compose.ts";
import { customToolGrammar, GrammarConversionError } from "../../grammar/custom-tool-grammar.ts";
import { ANY_JSON_STRING_CONTENT, GbnfEscapeError, jsonStringGrammar } from "../../grammar/json-string-escape.ts";

/**
 * Tools whose input is free text (the Responses API's custom tools). Chat templates only know JSON
 * arguments, so such a tool is shown to the model as a function of one string, `input`, and the
 * call's arguments are held to `{"input": "…"}` with the string's content held to the tool's
 * grammar (its JSON-escaped form). The dialect decodes the string back into the raw input.
 */

const OPENING = '{"input": "';
const CLOSING = '"}';

/**
 * The parameters the template documents for a tool. An object schema without `properties` (`{}`,
 * `{"type": "object"}`: a function that takes no arguments) gets an empty `properties`, which
 * constrains nothing: templates such as Hermes' iterate `parameters.properties` and fail to render
 * without it.
 */
export function toolParams(tool: ToolDefinition): unknown {
  if (!tool.input) {
    const p = tool.parameters;
    if (p !== null && typeof p === "object" && !Array.isArray(p) && !("properties" in p)) return { ...p, properties: {} };
    return p;
  }
  return { type: "object", properties: { input: { type: "string" } }, required: ["input"], additionalProperties: false };
}

/** The description the template shows, with the input's grammar so the model knows the format. */
export function describeTool(tool: ToolDefinition): string | undefined {
  if (!tool.input || tool.input.syntax === "text") return tool.description;
  const format = `The input must follow this ${tool.input.syntax === "lark" ? "Lark grammar" : "regular expression"}:\n${tool.input.definition}`;
  return tool.description ? `${tool.description}\n\n${format}` : format;
}

/** The arguments grammar of a free-text tool; errors name the canonical field `tools[i].input`. */
export function freeTextArguments(input: FreeTextInput, i: number): string {
  let content: string;
  if (input.syntax === "text") content = `content ::= ${ANY_JSON_STRING_CONTENT}`;
  else {
    try {
      const plain = customToolGrammar({ type: "grammar", syntax: input.syntax, definition: input.definition });
      content = prefixRules(jsonStringGrammar(plain), "s-").replace(/^s-root ::=/m, "content ::=");
    } catch (err) {
      if (err instanceof GrammarConversionError || err instanceof GbnfEscapeError)
        throw invalidField(`{field} cannot be used: ${err.message}`, `tools[${i}].input`);
      throw err;
    }
  }
  return [`root ::= ${JSON.stringify(OPENING)} content ${JSON.stringify(CLOSING)}`, content].join("\n");
}
