import { literal } from "./gbnf.ts";
import { orderedMembers, prefixRules } from "./compose.ts";
import { compileJsonSchema, type Relaxation, SchemaLimitError, UnsupportedSchemaError } from "./json-schema-to-gbnf.ts";
import { rawStringGrammar } from "./xml-arguments.ts";

// The grammar of a tool call's arguments in Gemma 4's notation, from the tool's JSON Schema:
//
//   {city:<|"|>Paris<|"|>,days:3,opts:{a:[1,<|"|>x<|"|>],b:true}}
//
// keys bare and in the schema's property order (the required ones present), strings between
// `<|"|>` tokens with nothing escaped (so a string cannot hold that token's text), numbers,
// booleans and null as in JSON. No whitespace: the template writes none. The pieces that are the
// same as JSON's (numbers with their bounds, booleans, null) come from the JSON schema compiler;
// strings from the raw-string grammar of XML arguments (length, pattern, format, enum), which keeps
// the closing text out of them.

/** How the compiler writes the quote token and what its text is. */
export interface Gemma4GrammarOptions {
  /** The quote as GBNF: the token's reference (`<[id]>`) when it is one control token, else its text. */
  quote: string;
  /** The quote's text (`<|"|>`), which no string may contain. */
  quoteText: string;
  /** Refuse what cannot be enforced (true), or relax it and list it (false). */
  strict: boolean;
}

/** Most schema nodes one tool's arguments may have (each becomes a rule or more). */
const MAX_NODES = 2000;
/** Deepest nesting of values followed. */
const MAX_DEPTH = 32;

type Schema = Record<string, unknown>;

const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly", "$anchor", "contentEncoding", "contentMediaType",
]);
const HANDLED = new Set([
  "type", "enum", "const", "$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "nullable", "properties", "required", "additionalProperties",
  "items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
]);
const NUMBER_KEYS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
const STRING_KEYS = ["minLength", "maxLength", "pattern", "format"];
/** Keywords whose combination is the tighter bound. */
const LOWER_BOUNDS = new Set(["minItems", "minimum", "exclusiveMinimum"]);
const UPPER_BOUNDS = new Set(["maxItems", "maximum", "exclusiveMaximum"]);

const isObject = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);

/** allOf parts of string keywords (and annotations) only: left to the raw-string grammar, which folds them. */
function stringOnly(parts: unknown[]): boolean {
  return parts.every((p) => p === true || (isObject(p) && Object.keys(p).every((k) => STRING_KEYS.includes(k) || ANNOTATIONS.has(k))));
}

function hasStringParts(parts: unknown): boolean {
  return Array.isArray(parts) && parts.some((p) => isObject(p) && STRING_KEYS.some((k) => k in p));
}

/** The JSON type of a value, as `type` names it ("integer" for whole numbers). */
function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

/** A bare key the template can write and llama.cpp can read back: no `:`, braces or commas. */
function writableKey(key: string): boolean {
  return key.length > 0 && !/[:{}[\],\s]/.test(key) && !key.includes("<|");
}

/** Compiles one tool's parameters schema into the grammar of its arguments (`root` is the object). */
export function gemma4ArgumentsGrammar(schema: unknown, opts: Gemma4GrammarOptions): { gbnf: string; relaxed: Relaxation[] } {
  return new Gemma4Compiler(schema, opts).compile();
}

class Gemma4Compiler {
  private readonly rules: string[] = [];
  private readonly named = new Map<unknown, string>();
  private readonly relaxed: Relaxation[] = [];
  private count = 0;
  private nodes = 0;
  private anyUsed = false;

  constructor(
    private readonly root: unknown,
    private readonly opts: Gemma4GrammarOptions,
  ) {}

  compile(): { gbnf: string; relaxed: Relaxation[] } {
    const top = isObject(this.root) ? this.root : {};
    const body = this.object(top.type === undefined ? { ...top, type: "object" } : top, "", 0);
    const rules = [`root ::= ${body}`, ...this.rules];
    if (this.anyUsed) rules.push(...this.anyRules());
    // A keyword can be met twice (an allOf merged back into its schema, a string's own keywords
    // checked again by the raw-string grammar): listed once.
    const relaxed = this.relaxed.filter((r, i, all) => all.findIndex((x) => x.path === r.path) === i);
    return { gbnf: rules.join("\n"), relaxed };
  }

  private join(path: string, key: string): string {
    return path === "" ? key : `${path}.${key}`;
  }

  private relax(path: string, message: string): void {
    if (this.opts.strict) throw new UnsupportedSchemaError(path, message);
    this.relaxed.push({ path, message });
  }

  private rule(body: string): string {
    const name = `g${this.count++}`;
    this.rules.push(`${name} ::= ${body}`);
    return name;
  }

  /** A local `$ref` (`#`, `#/$defs/…`, `#/definitions/…`) followed, or undefined. */
  private resolve(ref: string, path: string): unknown {
    if (ref === "#") return this.root;
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
    const defs = m && isObject(this.root) ? (this.root as Schema)[m[1]] : undefined;
    const target = m && isObject(defs) ? defs[decodeURIComponent(m[2]).replace(/~1/g, "/").replace(/~0/g, "~")] : undefined;
    if (target === undefined) throw new UnsupportedSchemaError(this.join(path, "$ref"), `only local references to $defs or definitions can be followed (${ref})`);
    return target;
  }

  /** The GBNF of a value the schema allows (a rule name or a small expression). */
  private value(schema: unknown, path: string, depth: number): string {
    if (++this.nodes > MAX_NODES) throw new SchemaLimitError(path, `more than ${MAX_NODES} schema nodes`);
    if (depth > MAX_DEPTH) throw new SchemaLimitError(path, `nested deeper than ${MAX_DEPTH}`);
    if (schema === true || (isObject(schema) && Object.keys(schema).every((k) => ANNOTATIONS.has(k)))) return this.any();
    if (!isObject(schema)) throw new UnsupportedSchemaError(path, "no value satisfies the schema");
    // A referenced schema is one rule, named before its body is built (it may refer to itself).
    if (typeof schema.$ref === "string") {
      const target = this.resolve(schema.$ref, path);
      const rest = Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "$ref" && !ANNOTATIONS.has(k)));
      if (Object.keys(rest).length > 0) return this.value({ ...(isObject(target) ? target : {}), ...rest }, path, depth + 1);
      const known = this.named.get(target);
      if (known) return known;
      const name = `g${this.count++}`;
      this.named.set(target, name);
      this.rules.push(`${name} ::= ${this.value(target, path, depth + 1)}`);
      return name;
    }
    for (const key of Object.keys(schema)) if (!HANDLED.has(key) && !ANNOTATIONS.has(key)) this.relax(this.join(path, key), `${key} cannot be enforced in Gemma 4's call notation`);
    if (Array.isArray(schema.allOf) && !stringOnly(schema.allOf)) {
      // Parts merged into one schema. Each part's string keywords stay a part of their own, which
      // the raw-string grammar folds in (lengths tightened, every pattern held), at its index so
      // that messages name it; the other keywords are combined (see combine).
      const { allOf, ...rest } = schema;
      let merged: Schema = rest;
      const strings: unknown[] = [];
      (allOf as unknown[]).forEach((part, i) => {
        const p = isObject(part) && typeof part.$ref === "string" ? this.resolve(part.$ref, path) : part;
        if (!isObject(p)) return void strings.push(true);
        const own = Object.fromEntries(Object.entries(p).filter(([k]) => STRING_KEYS.includes(k)));
        strings.push(Object.keys(own).length > 0 ? own : true);
        merged = this.combine(merged, Object.fromEntries(Object.entries(p).filter(([k]) => !STRING_KEYS.includes(k))), this.join(path, `allOf.${i}`));
      });
      const nested = Array.isArray(merged.allOf) ? (merged.allOf as unknown[]) : [];
      return this.value({ ...merged, allOf: [...strings, ...nested] }, path, depth + 1);
    }
    const union = Array.isArray(schema.anyOf) ? "anyOf" : Array.isArray(schema.oneOf) ? "oneOf" : undefined;
    if (union) {
      // Each branch held to the keywords beside it too (oneOf as anyOf: which one matched is not
      // enforced): the two as allOf parts, combined as allOf combines them, since a branch's keyword
      // written over the one beside it ({maxLength: 2, anyOf: [{maxLength: 9}]}) would loosen it.
      const { anyOf: _a, oneOf: _o, ...rest } = schema;
      const beside = Object.keys(rest).some((k) => !ANNOTATIONS.has(k));
      const branches: string[] = [];
      let firstRefusal: unknown;
      (schema[union] as unknown[]).forEach((b, i) => {
        const branch = isObject(b) && typeof b.$ref === "string" ? this.resolve(b.$ref, path) : b;
        const held = isObject(branch) && beside ? { ...rest, allOf: [...(Array.isArray(rest.allOf) ? rest.allOf : []), branch] } : isObject(branch) ? { ...rest, ...branch } : branch;
        try {
          branches.push(this.value(held, this.join(path, `${union}[${i}]`), depth + 1));
        } catch (e) {
          // A branch no value of which the keywords beside it allow is no alternative; only when
          // every branch is such is the schema refused.
          if (!(e instanceof UnsupportedSchemaError) || !/no value/.test(e.message)) throw e;
          firstRefusal ??= e;
        }
      });
      if (branches.length === 0) throw firstRefusal;
      return this.rule(branches.join(" | "));
    }
    if ("const" in schema || Array.isArray(schema.enum)) return this.constantsOf(schema, path);
    let types: string[] = Array.isArray(schema.type) ? (schema.type as string[]) : typeof schema.type === "string" ? [schema.type] : [];
    if (types.length === 0) {
      if (isObject(schema.properties) || "additionalProperties" in schema) types = ["object"];
      else if ("items" in schema || "minItems" in schema || "maxItems" in schema) types = ["array"];
      else if (STRING_KEYS.some((k) => k in schema) || hasStringParts(schema.allOf)) types = ["string"];
      else if (NUMBER_KEYS.some((k) => k in schema)) types = ["number"];
      else return this.any();
    }
    if (schema.nullable === true && !types.includes("null")) types = [...types, "null"];
    const alternatives = types.map((t) => this.typed(schema, t, path, depth));
    return alternatives.length === 1 ? alternatives[0] : this.rule(alternatives.join(" | "));
  }

  private typed(schema: Schema, type: string, path: string, depth: number): string {
    switch (type) {
      case "string":
        return this.string(schema, path);
      case "integer":
      case "number": {
        const own = Object.fromEntries(Object.entries(schema).filter(([k]) => NUMBER_KEYS.includes(k)));
        const compiled = compileJsonSchema({ type, ...own }, { strict: this.opts.strict });
        this.relaxed.push(...compiled.relaxed.map((r) => ({ ...r, path: r.path === "" ? path : this.join(path, r.path) })));
        const prefix = `n${this.count++}-`;
        this.rules.push(prefixRules(compiled.gbnf, prefix));
        return `${prefix}root`;
      }
      case "boolean":
        return '("true" | "false")';
      case "null":
        return '"null"';
      case "object":
        return this.object(schema, path, depth);
      case "array":
        return this.array(schema, path, depth);
      default:
        throw new UnsupportedSchemaError(this.join(path, "type"), `unknown type ${JSON.stringify(type)}`);
    }
  }

  /** A string between quote tokens, held to the schema's string keywords. */
  private string(schema: Schema, path: string): string {
    const g = rawStringGrammar(schema, this.opts.quoteText, this.opts.strict, path);
    this.relaxed.push(...g.relaxed);
    const prefix = `s${this.count++}-`;
    this.rules.push(prefixRules(g.gbnf, prefix));
    return this.rule(`${this.opts.quote} ${prefix}root ${this.opts.quote}`);
  }

  /**
   * `part`'s keywords added to `into`: properties joined (one declared by both held to both),
   * required lists joined, types intersected, bounds tightened, items held to both; any other
   * keyword the two give differently cannot be combined here and is relaxed (or refused when
   * strict) rather than letting the later part silently replace the earlier.
   */
  private combine(into: Schema, part: Schema, at: string): Schema {
    const out: Schema = { ...into };
    for (const [key, v] of Object.entries(part)) {
      const cur = out[key];
      if (cur === undefined || ANNOTATIONS.has(key)) out[key] = v;
      else if (key === "properties" && isObject(cur) && isObject(v)) {
        const props: Schema = { ...cur };
        for (const [name, sub] of Object.entries(v)) props[name] = name in cur ? { allOf: [cur[name], sub] } : sub;
        out[key] = props;
      } else if (key === "required" && Array.isArray(cur) && Array.isArray(v)) out[key] = [...cur, ...v];
      else if (key === "allOf" && Array.isArray(cur) && Array.isArray(v)) out[key] = [...cur, ...v];
      else if (key === "items" && !Array.isArray(cur) && !Array.isArray(v)) out[key] = { allOf: [cur, v] };
      else if (key === "type") {
        const list = (t: unknown) => (Array.isArray(t) ? (t as string[]) : [t as string]);
        const [a, b] = [list(cur), list(v)];
        const both = a.filter((t) => b.includes(t) || (t === "integer" && b.includes("number"))).concat(a.includes("number") && b.includes("integer") ? ["integer"] : []);
        if (both.length === 0) throw new UnsupportedSchemaError(this.join(at, "type"), "no value has a type every allOf part allows");
        out[key] = [...new Set(both)];
      } else if (LOWER_BOUNDS.has(key) && typeof cur === "number" && typeof v === "number") out[key] = Math.max(cur, v);
      else if (UPPER_BOUNDS.has(key) && typeof cur === "number" && typeof v === "number") out[key] = Math.min(cur, v);
      else if (JSON.stringify(cur) !== JSON.stringify(v)) {
        this.relax(this.join(at, key), `allOf parts with different "${key}" cannot be combined in Gemma 4's call notation`);
        out[key] = v;
      }
    }
    return out;
  }

  /**
   * enum or const, each value held to the keywords beside it, as the JSON path holds them: of the
   * type; a string to the string keywords (through the raw-string grammar, which filters the values
   * by the same automaton it builds); a number to its bounds.
   */
  private constantsOf(schema: Schema, path: string): string {
    const key = "const" in schema ? "const" : "enum";
    let values = key === "const" ? [schema.const] : (schema.enum as unknown[]);
    // Both given: the const must be one of the enum's values too (compared as JSON, as values are).
    if (key === "const" && Array.isArray(schema.enum) && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(schema.const))) values = [];
    const types = Array.isArray(schema.type) ? (schema.type as string[]) : typeof schema.type === "string" ? [schema.type] : undefined;
    if (types) {
      const allowed = schema.nullable === true ? [...types, "null"] : types;
      values = values.filter((v) => allowed.includes(typeOf(v)) || (typeOf(v) === "integer" && allowed.includes("number")));
    }
    const num = (k: string) => (typeof schema[k] === "number" ? (schema[k] as number) : undefined);
    const [min, max, xmin, xmax, step] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"].map(num);
    values = values.filter(
      (v) =>
        typeof v !== "number" ||
        ((min === undefined || v >= min) && (max === undefined || v <= max) && (xmin === undefined || v > xmin) && (xmax === undefined || v < xmax) && (step === undefined || step <= 0 || Math.abs(v / step - Math.round(v / step)) < 1e-9)),
    );
    const strings = values.filter((v): v is string => typeof v === "string");
    const others = values.filter((v) => typeof v !== "string");
    const keywords = Object.fromEntries(Object.entries(schema).filter(([k]) => STRING_KEYS.includes(k) || k === "allOf"));
    if (strings.length === 0 || Object.keys(keywords).length === 0) {
      if (values.length === 0) throw new UnsupportedSchemaError(this.join(path, key), "no value satisfies the schema");
      return this.constants(values, path);
    }
    let text: string | undefined;
    try {
      text = this.string({ ...keywords, [key]: key === "const" ? strings[0] : strings }, path);
    } catch (e) {
      // Strings the keywords leave none of: the other values may still do.
      if (!(e instanceof UnsupportedSchemaError) || others.length === 0 || !/no value/.test(e.message)) throw e;
    }
    if (others.length === 0) return text!;
    const rest = this.constants(others, path);
    return text === undefined ? rest : this.rule(`${text} | ${rest}`);
  }

  /** Constant values (enum, const), each written as the template's format_argument writes it. */
  private constants(values: unknown[], path: string): string {
    const written = values.map((v) => this.written(v, path)).filter((w): w is string => w !== undefined);
    if (written.length === 0) throw new UnsupportedSchemaError(path, "no value of the enum can be written in Gemma 4's call notation");
    return this.rule(written.join(" | "));
  }

  private written(v: unknown, path: string): string | undefined {
    if (typeof v === "string") return v.includes(this.opts.quoteText) ? undefined : `${this.opts.quote} ${literal(v)} ${this.opts.quote}`;
    if (v === null || typeof v === "boolean" || typeof v === "number") return literal(JSON.stringify(v));
    if (Array.isArray(v)) {
      const items = v.map((x) => this.written(x, path));
      if (items.some((x) => x === undefined)) return undefined;
      return `"[" ${items.length ? items.join(' "," ') : ""} "]"`.replace('"[" "]"', '"[]"');
    }
    if (isObject(v)) {
      // The template writes a mapping's keys sorted (dictsort).
      const entries = Object.keys(v).sort().map((k) => (writableKey(k) ? [k, this.written(v[k], path)] : [k, undefined]));
      if (entries.some(([, x]) => x === undefined)) return undefined;
      return `"{" ${entries.map(([k, x]) => `${literal(`${k}:`)} ${x}`).join(' "," ')} "}"`;
    }
    return undefined;
  }

  /** `{key:value,…}`: the declared properties in order, the required ones present, commas between. */
  private object(schema: Schema, path: string, depth: number): string {
    const properties = isObject(schema.properties) ? schema.properties : {};
    const required = new Set(Array.isArray(schema.required) ? (schema.required as unknown[]) : []);
    const entries = Object.entries(properties).filter(([key]) => {
      if (writableKey(key)) return true;
      const where = this.join(path, `properties.${key}`);
      if (required.has(key)) throw new UnsupportedSchemaError(where, "a required property whose name cannot be written bare in Gemma 4's call notation");
      this.relax(where, "a property whose name cannot be written bare in Gemma 4's call notation (left out)");
      return false;
    });
    for (const key of required) if (typeof key === "string" && !(key in properties)) this.relax(this.join(path, "required"), `required property ${JSON.stringify(key)} is not declared`);
    if (entries.length === 0) {
      // An object with nothing declared: any keys and values, unless nothing more is allowed.
      return schema.additionalProperties === false || Object.keys(properties).length > 0 ? '"{}"' : this.anyDict();
    }
    const members = entries.map(([key, sub]) => ({
      expr: this.rule(`${literal(`${key}:`)} ${this.value(sub, this.join(path, `properties.${key}`), depth + 1)}`),
      required: required.has(key),
    }));
    const list = orderedMembers(members, ",", (body) => this.rule(body));
    return this.rule(`"{" ${list} "}"`);
  }

  /** `[v,…]`, items per `items`, as many as minItems/maxItems allow. */
  private array(schema: Schema, path: string, depth: number): string {
    const item = Array.isArray(schema.items) ? (this.relax(this.join(path, "items"), "a list of item schemas cannot be enforced"), this.any()) : "items" in schema ? this.value(schema.items, this.join(path, "items"), depth + 1) : this.any();
    const count = (key: string): number | undefined => {
      const v = schema[key];
      if (v === undefined) return undefined;
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new UnsupportedSchemaError(this.join(path, key), `${key} must be a non-negative integer`);
      return v;
    };
    const min = count("minItems") ?? 0;
    const max = count("maxItems");
    if (max !== undefined && max < min) throw new UnsupportedSchemaError(this.join(path, "maxItems"), "maxItems is below minItems");
    if (max === 0) return '"[]"';
    const more = `("," ${item})`;
    const rest = max === undefined ? `${more}{${Math.max(min - 1, 0)},}` : `${more}{${Math.max(min - 1, 0)},${max - 1}}`;
    const list = `${item} ${rest}`;
    return this.rule(min === 0 ? `"[" (${list})? "]"` : `"[" ${list} "]"`);
  }

  private any(): string {
    this.anyUsed = true;
    return "gany-value";
  }

  private anyDict(): string {
    this.anyUsed = true;
    return "gany-dict";
  }

  /** Any value in the notation, as llama.cpp reads one (keys: names without the notation's punctuation). */
  private anyRules(): string[] {
    const str = rawStringGrammar({ type: "string" }, this.opts.quoteText, false, "");
    return [
      "gany-value ::= gany-string | gany-dict | gany-array | gany-number | \"true\" | \"false\" | \"null\"",
      `gany-string ::= ${this.opts.quote} gany-s-root ${this.opts.quote}`,
      prefixRules(str.gbnf, "gany-s-"),
      'gany-dict ::= "{" ( gany-kv ( "," gany-kv )* )? "}"',
      'gany-kv ::= [A-Za-z_$] [A-Za-z0-9_$.-]{0,63} ":" gany-value',
      'gany-array ::= "[" ( gany-value ( "," gany-value )* )? "]"',
      'gany-number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?',
    ];
  }
}
