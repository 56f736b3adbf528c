import { z } from "zod";
import { badRequest, unsupportedField } from "../../core/errors.ts";
import type { GenerationRequest } from "../../core/types.ts";
import { jsonObject } from "../json-object.ts";
import { listOf } from "../list-of.ts";

/**
 * The other servers' ways of asking for structured output in a chat or completions request, beside
 * OpenAI's `response_format`. Clients written for vLLM send `guided_json`, `guided_regex`,
 * `guided_choice` (older releases) or `structured_outputs` (newer ones); llama-server clients send
 * `json_schema` or a schema inside `response_format: {type: "json_object"}`; SGLang's send `regex`,
 * `ebnf` or `json_schema` (as a string there). Dropping any of them as
 * an unknown field would hand back unconstrained text to a client that asked for JSON, so each is
 * honoured, or refused by name where Plinth cannot enforce it (grammars in a foreign syntax).
 */

const schemaObject = jsonObject();

export const structuredFieldsSchema = {
  guided_json: z.union([schemaObject, z.string()]).nullish(),
  guided_regex: z.string().nullish(),
  guided_choice: listOf(z.string(), { min: 1 }).nullish(),
  /** vLLM's choice of its own grammar library: nothing to choose here. */
  guided_decoding_backend: z.string().nullish(),
  // Accepted by the schema only so that they can be refused by name.
  guided_grammar: z.unknown().optional(),
  guided_whitespace_pattern: z.unknown().optional(),
  grammar: z.unknown().optional(),
  structured_outputs: z
    .strictObject({
      json: z.union([schemaObject, z.string()]).nullish(),
      regex: z.string().nullish(),
      choice: listOf(z.string(), { min: 1 }).nullish(),
      json_object: z.boolean().nullish(),
      grammar: z.unknown().optional(),
      structural_tag: z.unknown().optional(),
      whitespace_pattern: z.unknown().optional(),
      disable_any_whitespace: z.boolean().nullish(),
      disable_additional_properties: z.boolean().nullish(),
    })
    .nullish(),
  /** llama-server's top-level JSON schema (SGLang sends it as JSON text). */
  json_schema: z.union([schemaObject, z.string()]).nullish(),
  /** SGLang's regex; its `ebnf` (a grammar in its own syntax) is accepted here only to be refused. */
  regex: z.string().nullish(),
  ebnf: z.unknown().optional(),
};

type StructuredFields = { [K in keyof typeof structuredFieldsSchema]?: z.infer<(typeof structuredFieldsSchema)[K]> };

export type AnswerFormat = NonNullable<GenerationRequest["responseFormat"]>;

/** An answer format and the request field that asked for it (errors about it name that field). */
export interface RequestedFormat {
  format: AnswerFormat;
  param: string;
}

/**
 * The format the extension fields ask for, if any. `fromResponseFormat` is what OpenAI's own field
 * asked for: two fields asking at once is a 400 naming the second, not a silent choice.
 */
export function structuredFormat(body: StructuredFields, fromResponseFormat?: RequestedFormat): RequestedFormat | undefined {
  if (body.guided_grammar != null) throw foreignGrammar("guided_grammar");
  if (!noGrammar(body.grammar)) throw foreignGrammar("grammar");
  if (body.ebnf != null) throw foreignGrammar("ebnf");
  if (body.guided_whitespace_pattern != null) throw unsupportedField("guided_whitespace_pattern", "is not supported: JSON answers follow the grammar's own whitespace");
  const so = body.structured_outputs;
  if (so?.grammar != null) throw foreignGrammar("structured_outputs.grammar");
  if (so?.structural_tag != null) throw unsupportedField("structured_outputs.structural_tag", "is not supported; use tools for calls inside an answer");
  if (so?.whitespace_pattern != null) throw unsupportedField("structured_outputs.whitespace_pattern", "is not supported: JSON answers follow the grammar's own whitespace");
  if (so?.disable_any_whitespace) throw unsupportedField("structured_outputs.disable_any_whitespace", "is not supported: JSON answers may hold the grammar's bounded whitespace");
  if (so?.disable_additional_properties)
    throw unsupportedField("structured_outputs.disable_additional_properties", "is not supported; say additionalProperties: false in the schema");
  const asked: RequestedFormat[] = fromResponseFormat ? [fromResponseFormat] : [];
  const add = (param: string, format: AnswerFormat | undefined) => {
    if (!format) return;
    if (asked.length > 0)
      throw badRequest(`${param} and ${asked[0].param} both constrain the answer; send only one of them.`, param);
    asked.push({ format, param });
  };
  add("guided_json", body.guided_json == null ? undefined : jsonSchema(body.guided_json, "guided_json"));
  add("guided_regex", body.guided_regex == null ? undefined : { type: "regex", pattern: body.guided_regex });
  add("regex", body.regex == null ? undefined : { type: "regex", pattern: body.regex });
  add("guided_choice", body.guided_choice == null ? undefined : choiceFormat(body.guided_choice));
  add("json_schema", body.json_schema == null ? undefined : jsonSchema(body.json_schema, "json_schema"));
  if (so) {
    add("structured_outputs.json", so.json == null ? undefined : jsonSchema(so.json, "structured_outputs.json"));
    add("structured_outputs.regex", so.regex == null ? undefined : { type: "regex", pattern: so.regex });
    add("structured_outputs.choice", so.choice == null ? undefined : choiceFormat(so.choice));
    add("structured_outputs.json_object", so.json_object ? { type: "json_object" } : undefined);
  }
  return asked[0] === fromResponseFormat ? undefined : asked[0];
}

/** A schema given as an object or as its JSON text (vLLM takes both); held strictly, as vLLM holds it. */
function jsonSchema(value: Record<string, unknown> | string, param: string): AnswerFormat {
  if (typeof value !== "string") return { type: "json_schema", schema: value, strict: true };
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw badRequest(`${param} is a string that is not JSON; send the schema as an object or as its JSON text.`, param);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw badRequest(`${param} must be a JSON schema object.`, param);
  return { type: "json_schema", schema: parsed, strict: true };
}

/** The answer is exactly one of the strings: a regex of their escaped alternatives. */
function choiceFormat(choices: string[]): AnswerFormat {
  return { type: "regex", pattern: choices.map(escapeRegex).join("|") };
}

function escapeRegex(text: string): string {
  return text.replace(/[\\^$.|?*+()[\]{}]/g, "\\$&");
}

/**
 * llama-server's `grammar` asks for nothing when absent, null or empty: its parser applies a grammar
 * only when the string is not empty, and its web UI sends `""` for "no grammar".
 */
export function noGrammar(value: unknown): boolean {
  return value == null || value === "";
}

function foreignGrammar(param: string) {
  return unsupportedField(
    param,
    "is not supported: grammars in another server's syntax cannot be checked or bounded here; use a JSON schema, a regex or a list of choices",
  );
}
