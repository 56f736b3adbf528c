// Whether a JSON Schema is the schema of a JSON object: what a function tool's `parameters` must
// be. Shared by the dialects (which refuse any other schema by their own field name) and the engine
// (which compiles a typeless one as the object schema it stands for).
//
// What counts is what clients send for one: `type: "object"` (the openai SDK's zod helpers,
// pydantic, the AI SDK, LangChain), the same without `type` (a bare `properties` list, or `{}`: no
// arguments), a local `$ref` to such a schema, and `anyOf`/`oneOf`/`allOf` whose parts are each
// such a schema. Not: a `type` other than "object" (a list of types too, even with "object" in it:
// `null` is no arguments object either), an `enum`/`const` of other values, a `true` part (any
// value), or a part of the above that is one of these.

/** How deep `$ref`s and combinators are followed; past it the schema compiler has the last word. */
const MAX_DEPTH = 16;

type Schema = Record<string, unknown>;

const isPlainObject = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);

/** Why `schema` is not the schema of a JSON object (a phrase), or undefined when it is one. */
export function notAnObjectSchema(schema: unknown, root: unknown = schema, depth = 0, where = ""): string | undefined {
  // None at all is a function without arguments.
  if (schema === undefined || schema === null || depth > MAX_DEPTH) return undefined;
  if (!isPlainObject(schema)) return `${where ? `its ${where}` : "it"} is not a JSON Schema object`;
  const at = (key: string) => (where ? `${where}.${key}` : key);
  const type = schema.type;
  if (type !== undefined) {
    const types = Array.isArray(type) ? type : [type];
    const other = types.find((t) => t !== "object");
    if (types.length === 0 || other !== undefined)
      return `${where ? `its ${where} has` : "it has"} type ${JSON.stringify(type)}; a function's arguments are one JSON object, so its parameters must be a JSON Schema of type "object"`;
  }
  if ("const" in schema && !isPlainObject(schema.const)) return `${where ? `its ${where}` : "it"} allows only a 'const' that is not an object`;
  if (Array.isArray(schema.enum) && schema.enum.some((v) => !isPlainObject(v))) return `${where ? `its ${where}` : "it"} has an 'enum' of values that are not objects`;
  for (const key of ["anyOf", "oneOf", "allOf"] as const) {
    const parts = schema[key];
    if (!Array.isArray(parts)) continue;
    for (const [i, part] of parts.entries()) {
      // `true` (anything) and `false` (nothing) parts are the compiler's to judge; anything but an
      // object there would be a bare value again.
      if (part === true) return `its ${at(`${key}[${i}]`)} allows any value, not only an object`;
      if (!isPlainObject(part)) continue;
      const why = notAnObjectSchema(part, root, depth + 1, at(`${key}[${i}]`));
      if (why) return why;
    }
  }
  const target = typeof schema.$ref === "string" ? localTarget(schema.$ref, root) : undefined;
  if (target) return notAnObjectSchema(target, root, depth + 1, where ? `${where}.$ref` : `$ref '${schema.$ref}'`);
  return undefined;
}

/** The schema a local `$ref` (`#/$defs/X`, `#/definitions/X`, any `#/…` pointer) names, if any. */
function localTarget(ref: string, root: unknown): Schema | undefined {
  if (!ref.startsWith("#")) return undefined;
  let at: unknown = root;
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (!isPlainObject(at) || !Object.hasOwn(at, key)) return undefined;
    at = at[key];
  }
  return isPlainObject(at) ? at : undefined;
}

/** A function's parameters as the one JSON object its arguments are: a schema without `type` gets `type: "object"`. */
export function asObjectSchema(schema: unknown): unknown {
  if (schema === undefined || schema === null) return { type: "object", properties: {} };
  if (isPlainObject(schema) && schema.type === undefined) return { type: "object", ...schema };
  return schema;
}
