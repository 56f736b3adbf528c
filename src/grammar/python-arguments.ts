import { literal } from "./gbnf.ts";
import { orderedMembers, prefixRules } from "./compose.ts";
import { resolveLocalRef } from "./xml-arguments.ts";

// Grammars for tool-call arguments written as Python keyword arguments (Liquid's LFM2 and LFM2.5:
// `get_weather(city="Paris", days=3, metric=True)`), from the tool's JSON Schema: each property a
// `name=value` pair, in the schema's order, the required ones present, `, ` between them.
//
// A value is the JSON its schema allows (compiled by the JSON schema compiler, one grammar per
// property, as XML parameters' non-string values are): a JSON string is a Python string literal,
// a JSON number a Python number, and llama.cpp's LFM2 parser reads JSON objects, lists and the
// JSON spellings true/false/null anywhere. Python's own True, False and None are allowed besides,
// where the schema allows that value at the top of an argument: that is how the family's template
// writes an answered call's booleans and nulls, so how the model was taught to. (Lists the
// template writes in Python's notation, `['a', True]`; the grammar keeps nested values JSON.)

/** One argument: its name, whether the schema requires it, and its value's grammar (a whole grammar with its own `root`). */
export interface PythonArgumentGrammar {
  name: string;
  required: boolean;
  gbnf: string;
  /** Python's spellings the value may also take (`"True"`, `"False"`, `"None"`), see pythonLiterals. */
  literals: readonly string[];
}

/** A name the template writes as a keyword and the reader can tell from its value: no `=`, brackets, quotes, commas or spaces. */
export function writableKeyword(name: string): boolean {
  return name.length > 0 && !/[=()[\]{},'"\s]/.test(name);
}

/**
 * The grammar of one call's arguments after its `(`, up to (not including) the `)` that closes them.
 */
export function pythonArgumentsGrammar(args: readonly PythonArgumentGrammar[]): string {
  const rules: string[] = [];
  let count = 0;
  const rule = (body: string) => {
    const name = `k${count++}`;
    rules.push(`${name} ::= ${body}`);
    return name;
  };
  const members = args.map((a, i) => {
    rules.push(prefixRules(a.gbnf, `p${i}-`));
    const value = [`p${i}-root`, ...a.literals.map((l) => literal(l))].join(" | ");
    return { expr: rule(`${literal(`${a.name}=`)} ( ${value} )`), required: a.required };
  });
  return [`root ::= ${orderedMembers(members, ", ", rule)}`, ...rules].join("\n");
}

const PYTHON: ReadonlyMap<unknown, string> = new Map<unknown, string>([
  [true, "True"],
  [false, "False"],
  [null, "None"],
]);

/**
 * Which of Python's True, False and None a property's schema allows as its value, from its type,
 * enum, const, nullable and anyOf/oneOf branches (local references followed): an unconstrained
 * schema allows all three. (A value only some of allOf's parts allow is left to JSON's spelling.)
 */
export function pythonLiterals(schema: unknown, root: unknown, depth = 0): string[] {
  const out = new Set<string>();
  const s = resolveLocalRef(schema, root);
  if (s === true) return [...PYTHON.values()];
  if (!s || typeof s !== "object" || Array.isArray(s) || depth > 16) return [];
  const o = s as Record<string, unknown>;
  if ("const" in o) return PYTHON.has(o.const) ? [PYTHON.get(o.const)!] : [];
  if (Array.isArray(o.enum)) return o.enum.filter((v) => PYTHON.has(v)).map((v) => PYTHON.get(v)!);
  const branches = Array.isArray(o.anyOf) ? o.anyOf : Array.isArray(o.oneOf) ? o.oneOf : undefined;
  if (branches) {
    for (const b of branches) for (const l of pythonLiterals(b, root, depth + 1)) out.add(l);
    return [...PYTHON.values()].filter((l) => out.has(l));
  }
  if (Array.isArray(o.allOf)) return [];
  const types = Array.isArray(o.type) ? o.type : typeof o.type === "string" ? [o.type] : undefined;
  if (types === undefined) {
    // Keywords of one kind only (properties, items, minLength, …) leave the type to them.
    const typed = ["properties", "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
    if (typed.some((k) => k in o)) return o.nullable === true ? ["None"] : [];
    return [...PYTHON.values()];
  }
  if (types.includes("boolean")) out.add("True").add("False");
  if (types.includes("null") || o.nullable === true) out.add("None");
  return [...PYTHON.values()].filter((l) => out.has(l));
}
