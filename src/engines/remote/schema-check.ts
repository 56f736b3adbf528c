import type { GenerationRequest } from "../../core/types.ts";
import { asObjectSchema, notAnObjectSchema } from "../../core/object-schema.ts";
import { type CompileControl, REQUEST_COMPILE_MS } from "../../grammar/schema-compiler.ts";
import { patternGrammar, schemaGrammar } from "../../grammar/schema-grammar.ts";

/**
 * Refuses, before anything is sent upstream, the schemas and patterns a local model would refuse
 * because they are wrong rather than merely beyond Plinth's grammar compiler: no value satisfies
 * them (minLength above maxLength), a reference that is left-recursive or never ends, or a size past
 * Plinth's limits. An upstream given one of these may not refuse it: llama-server compiled an
 * impossible string schema until it ran out of memory and crashed, taking every request on it down.
 *
 * Every schema (the answer format's, each tool's parameters) is compiled as non-strict whatever the
 * client's `strict` says: non-strict relaxes a keyword the compiler cannot express (a `format` it
 * does not know, `not`, a lookbehind in a pattern) and still throws for the faults above, so a
 * request an upstream such as vLLM would enforce exactly is not refused for Plinth's own gaps. The
 * grammar made here is not sent (the upstream builds its own); the compiler's cache keeps the cost to
 * once per schema.
 *
 * A regex answer format is checked only for llama-server, which takes it as the GBNF grammar Plinth
 * makes of it (llama-server.ts); other upstreams read the pattern in their own regex dialect.
 */
export async function refuseInvalidSchemas(req: GenerationRequest, llamaServer: boolean, signal?: AbortSignal): Promise<void> {
  const rf = req.responseFormat;
  if (rf?.type === "regex" && llamaServer) patternGrammar(rf.pattern);
  // One budget of compile time for the whole request, as a local model's request has.
  const control: CompileControl = { leftMs: REQUEST_COMPILE_MS, signal };
  if (rf?.type === "json_schema") await schemaGrammar(rf.schema, false, "responseFormat.schema", control);
  for (const [i, tool] of (req.tools ?? []).entries()) {
    // Free-text tools are refused for remote models elsewhere; parameters that are not an object
    // schema are the dialects' to refuse (they are not compiled as one).
    if (tool.input || notAnObjectSchema(tool.parameters)) continue;
    await schemaGrammar(asObjectSchema(tool.parameters), false, `tools[${i}].parameters`, control, "tools");
  }
}
