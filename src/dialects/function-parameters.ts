import { notAnObjectSchema } from "../core/object-schema.ts";
import { jsonObject } from "./json-object.ts";

// A function tool's `parameters`: the JSON Schema of the one JSON object a call's `arguments` is.
// OpenAI refuses any other schema ("schema must be a JSON Schema of 'type: \"object\"'"), and a
// schema of a bare value cannot work here either: the call layouts read the arguments back as an
// object (the generic `||call: name(...)` one finds their end by their braces), so `false` came
// back as arguments that were not JSON at all. Refused by its field in every dialect instead; what
// counts as an object schema is core/object-schema.ts's to say.

/** `parameters` of a function tool, in every dialect that declares them: an object schema (see above). */
export function functionParameters() {
  return jsonObject().check((ctx) => {
    const why = notAnObjectSchema(ctx.value);
    if (why) ctx.issues.push({ code: "custom", message: `${why}.`, input: ctx.value });
  });
}
