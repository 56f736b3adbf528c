import { invalidField } from "../core/errors.ts";
import { GrammarConversionError, regexGrammar } from "./custom-tool-grammar.ts";
import { DEFAULT_MAX_LOAD_COST, estimateLoadCost } from "./load-cost.ts";
import { type CompiledSchema, SchemaLimitError, UnsupportedSchemaError } from "./json-schema-to-gbnf.ts";
import { type CompileControl, REQUEST_COMPILE_MS, RequestCompileDeadlineError, schemaCompiler } from "./schema-compiler.ts";

/**
 * The grammar of a JSON Schema, compiled on the schema compiler's worker thread (so a costly schema
 * never stalls other requests) within the converter's limits and a deadline; what it refuses is the
 * client's 400 naming `field`. Shared by the local engine (which enforces the grammar) and the remote
 * engine (which only checks that the schema is one Plinth would take, see remote/schema-check.ts).
 * A schema past the converter's limits or its deadline is refused whatever `strict` says; otherwise,
 * strict refuses what cannot be enforced exactly, and non-strict relaxes only the keywords that
 * cannot be (the rest of the schema still holds). `together`: the field a request-wide deadline
 * blames (all its tools, not the one compiling last).
 */
export async function schemaGrammar(schema: unknown, strict: boolean, field: string, control: CompileControl, together = field): Promise<CompiledSchema> {
  try {
    return await schemaCompiler.compile(schema, { strict }, control);
  } catch (err) {
    // Out of the request's time: the fault of all its schemas (its tools), not of the one compiling last.
    if (err instanceof RequestCompileDeadlineError) {
      throw invalidField(`{field} cannot be enforced in time: compiling this request's schemas took longer than the ${REQUEST_COMPILE_MS} ms one request may use.`, together);
    }
    if (err instanceof SchemaLimitError) throw invalidField(`{field} is too large to enforce: ${err.message}`, field);
    if (err instanceof UnsupportedSchemaError) throw invalidField(`{field} cannot be enforced: ${err.message}`, field, parametersCode(field));
    throw err;
  }
}

/**
 * OpenAI's code for a function's `parameters` it will not take ("Invalid schema for function …"):
 * `invalid_function_parameters`. A response format's schema has none there.
 */
export function parametersCode(field: string): string | null {
  return /^tools\[\d+\]\.parameters$/.test(field) ? "invalid_function_parameters" : null;
}

/** An answer the regex matches in full, bounded as a custom tool's regex is (custom-tool-grammar.ts). */
export function patternGrammar(pattern: string): string {
  let gbnf: string;
  try {
    gbnf = regexGrammar(pattern);
  } catch (err) {
    if (err instanceof GrammarConversionError) throw invalidField(`{field} cannot be enforced: ${err.message}`, "responseFormat.pattern");
    throw err;
  }
  if (estimateLoadCost(gbnf) > DEFAULT_MAX_LOAD_COST)
    throw invalidField("{field} is too large to enforce: its grammar would take the engine too long to load.", "responseFormat.pattern");
  return gbnf;
}
