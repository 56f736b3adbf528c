// JSON Schema → GBNF (llama.cpp grammar) for schema-constrained generation.
//
// Contract: every string the grammar accepts is a JSON document that validates against the schema.
// A feature that cannot be enforced exactly throws UnsupportedSchemaError naming where it is; the
// grammar may be stricter than the schema (documented below) but never looser.
//
// Stricter than JSON Schema, by design:
// - Whitespace: at most `maxWhitespace` (default 2) blanks between tokens, none before or after the
//   document, so generation always ends right after the closing token.
// - Objects: declared properties come first, in declared order; additional properties (allowed
//   unless `additionalProperties: false`) follow them, with keys that are never a declared name
//   and are written without escape sequences.
// - A schema without `type` is narrowed to the types its keywords constrain (e.g. `properties` →
//   object); with no such keywords it allows any JSON value.
// - `pattern` must match the whole string (as if anchored), a subset of JSON Schema's search.
// - Numbers: integers stay within ±(2^53−1) and have no fraction or exponent; unbounded numbers
//   have at most 16 integer digits, 15 fraction digits and a 2-digit exponent (always finite);
//   bounded numbers have no exponent and at most 15 significant digits, so the decimal bounds
//   enforced here agree with the double comparisons a validator makes.
// - Strings: a `\u` escape never encodes a surrogate, so each grammar character is one code point
//   and minLength/maxLength are exact; pattern/format strings use one canonical spelling per
//   character.
// - `oneOf` is treated as `anyOf`: when two branches can match the same value the output may match
//   more than one of them. Give branches distinct types or distinct `const`s where that matters.
// - Enum values and consts are written in one spelling each (JSON.stringify).
// - `minProperties` with additional properties allowed: at most one additional property counts
//   towards the minimum (two generated keys could be equal, and JSON.parse keeps one).
//
// Refused (UnsupportedSchemaError): not, if/then/else, dependentRequired, dependentSchemas,
// dependencies, patternProperties, propertyNames, unevaluatedProperties, unevaluatedItems,
// contains, minContains, maxContains, $dynamicRef, $recursiveRef, multipleOf (except 1, which
// means integer), uniqueItems: true (unless maxItems ≤ 1), formats other than date, time,
// date-time, uuid, email and uri, pattern features outside the supported subset (see
// regex-to-gbnf.ts), pattern together with format, pattern or a fixed-shape format with length
// bounds it does not already imply (email and uri with maxLength use a bounded subset, see
// string-formats.ts), enum/const next to keywords other than type and simple string/number
// bounds, non-local or unresolvable $ref, left-recursive references, allOf that cannot be merged,
// the `false` schema where a value is required, unknown keywords (except annotations and `x-`
// extensions), and OpenAPI's `nullable: true`.
//
// `$ref` siblings are enforced too (2019-09+ semantics; valid under draft-07 as well), and keywords
// next to anyOf/oneOf apply to every branch (merged as allOf).

import { createHash } from "node:crypto";
import {
  alt,
  charClass,
  group,
  GrammarBuilder,
  JSON_RAW_CHARS,
  literal,
  seq,
  setHas,
  setMinus,
  cpSet,
} from "./gbnf.ts";
import { boundedNumber, type Bound } from "./numeric-ranges.ts";
import { compilePattern, PatternError } from "./regex-to-gbnf.ts";
import { formatGrammar, isSupportedFormat } from "./string-formats.ts";

export class UnsupportedSchemaError extends Error {
  /** Where in the schema, as dot-separated keys (e.g. `properties.address.pattern`); "" is the root. */
  readonly path: string;
  constructor(path: string, message: string) {
    super(`${path === "" ? "schema" : path}: ${message}`);
    this.name = "UnsupportedSchemaError";
    this.path = path;
  }
}

export type JsonSchemaToGbnfOptions = {
  /** Most whitespace characters between two tokens (default 2). */
  maxWhitespace?: number;
};

type Schema = Record<string, unknown>;

const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated",
  "readOnly", "writeOnly", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
  "contentEncoding", "contentMediaType", "contentSchema", "discriminator",
]);
const REFUSED = new Set([
  "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
  "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
  "$dynamicRef", "$recursiveRef",
]);
const STRING_KEYS = ["minLength", "maxLength", "pattern", "format"];
const NUMBER_KEYS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
const OBJECT_KEYS = ["properties", "required", "additionalProperties", "minProperties", "maxProperties"];
const ARRAY_KEYS = ["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"];
const STRUCTURAL = ["type", "enum", "const", "$ref", "$defs", "definitions", "allOf", "anyOf", "oneOf", "nullable"];
const KNOWN = new Set([...STRING_KEYS, ...NUMBER_KEYS, ...OBJECT_KEYS, ...ARRAY_KEYS, ...STRUCTURAL]);
const TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"] as const;
type TypeName = (typeof TYPES)[number];

const join = (path: string, key: string | number) => (path === "" ? String(key) : `${path}.${key}`);
const has = (obj: object, key: string) => Object.prototype.hasOwnProperty.call(obj, key);
const isObject = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);
const isAnnotation = (key: string) => ANNOTATIONS.has(key) || key.startsWith("x-");
/** Keys that constrain values (not annotations, not definitions containers). */
const constraining = (s: Schema) => Object.keys(s).filter((k) => !isAnnotation(k) && k !== "$defs" && k !== "definitions");

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => has(b, k) && deepEqual(a[k], b[k]));
  }
  return false;
}

function hintOf(path: string, suffix = ""): string {
  const parts = path.split(".").filter((p) => p !== "" && p !== "properties" && p !== "$defs" && p !== "definitions");
  const base = parts.slice(-2).join("-");
  return (base === "" ? "root" : base) + (suffix ? `-${suffix}` : "");
}

const opt = (expr: string) => `${group(expr)}?`;

class Converter {
  private readonly b = new GrammarBuilder();
  private readonly refNames = new Map<string, string>();
  private readonly ws: string;

  constructor(
    private readonly rootSchema: unknown,
    private readonly maxWhitespace: number,
  ) {
    this.ws = maxWhitespace === 0 ? "" : "ws";
  }

  convert(): string {
    if (this.maxWhitespace > 0) {
      this.b.shared("ws", () => (this.maxWhitespace === 1 ? "[ \\t\\n]?" : `[ \\t\\n]{0,${this.maxWhitespace}}`));
    }
    const expr = this.visit(this.rootSchema, "", new Set());
    this.b.shared("root", () => expr);
    return this.b.render();
  }

  // ---------------------------------------------------------------------------------------------
  // Dispatch
  // ---------------------------------------------------------------------------------------------

  /** An atomic GBNF item matching exactly the values of `schema`. `left`: references entered
   *  since the last consumed character (to refuse left recursion). */
  private visit(schema: unknown, path: string, left: ReadonlySet<string>): string {
    if (schema === true) return this.anyValue();
    if (schema === false) throw new UnsupportedSchemaError(path, "the schema `false` matches no value");
    if (!isObject(schema)) throw new UnsupportedSchemaError(path, "a schema must be an object or a boolean");
    this.checkKeywords(schema, path);
    const keys = constraining(schema);

    if (has(schema, "$ref")) {
      if (keys.length === 1) return this.ref(schema.$ref, join(path, "$ref"), left);
      // 2019-09+ applies the siblings too; draft-07 ignores them. Enforcing both is valid under either.
      const { $ref, ...rest } = schema;
      return this.visit({ allOf: [{ $ref }, rest] }, path, left);
    }
    if (has(schema, "allOf")) {
      const { merged, inlined } = this.mergeAllOf(schema, path, left);
      return this.visit(merged, path, new Set([...left, ...inlined]));
    }
    if (has(schema, "anyOf") || has(schema, "oneOf")) {
      if (has(schema, "anyOf") && has(schema, "oneOf")) throw new UnsupportedSchemaError(join(path, "oneOf"), "anyOf and oneOf together are not supported");
      const key = has(schema, "anyOf") ? "anyOf" : "oneOf";
      const branches = schema[key];
      if (!Array.isArray(branches) || branches.length === 0) throw new UnsupportedSchemaError(join(path, key), "must be a non-empty array");
      const rest: Schema = {};
      for (const k of keys) if (k !== key) rest[k] = schema[k];
      const exprs = branches.map((branch, i) => {
        const p = join(join(path, key), i);
        if (Object.keys(rest).length === 0) return this.visit(branch, p, left);
        // Sibling keywords apply to every branch.
        const seen = new Set(left);
        const { merged, inlined } = this.mergeParts([{ schema: rest, path }, ...this.partsOf(branch, p, seen)], path);
        return this.visit(merged, p, new Set([...seen, ...inlined]));
      });
      return this.b.atom(hintOf(path, key), alt(...exprs));
    }
    if (has(schema, "enum") || has(schema, "const")) return this.enumExpr(schema, path);

    const types = this.typesOf(schema, path);
    if (types === null) return this.anyValue();
    const exprs = types.map((t) => this.typeExpr(t, schema, path));
    return this.b.atom(hintOf(path), alt(...exprs));
  }

  private checkKeywords(s: Schema, path: string): void {
    for (const key of Object.keys(s)) {
      if (isAnnotation(key)) continue;
      if (REFUSED.has(key)) throw new UnsupportedSchemaError(join(path, key), `"${key}" is not supported`);
      if (key === "nullable" && s.nullable === true) {
        throw new UnsupportedSchemaError(join(path, key), `OpenAPI "nullable" is not JSON Schema; use type: [..., "null"]`);
      }
      if (!KNOWN.has(key)) throw new UnsupportedSchemaError(join(path, key), `unknown keyword "${key}"`);
    }
  }

  private typesOf(s: Schema, path: string): TypeName[] | null {
    let types: TypeName[];
    if (has(s, "type")) {
      const raw = Array.isArray(s.type) ? s.type : [s.type];
      if (raw.length === 0) throw new UnsupportedSchemaError(join(path, "type"), "empty type list matches nothing");
      for (const t of raw) {
        if (!(TYPES as readonly unknown[]).includes(t)) throw new UnsupportedSchemaError(join(path, "type"), `unknown type ${JSON.stringify(t)}`);
      }
      types = [...new Set(raw as TypeName[])];
    } else {
      const uses = (keys: string[]) => keys.some((k) => has(s, k));
      types = [];
      if (uses(OBJECT_KEYS)) types.push("object");
      if (uses(ARRAY_KEYS)) types.push("array");
      if (uses(STRING_KEYS)) types.push("string");
      if (uses(NUMBER_KEYS)) types.push("number");
      if (types.length === 0) return null;
    }
    if (types.includes("number")) types = types.filter((t) => t !== "integer");
    return types;
  }

  private typeExpr(t: TypeName, s: Schema, path: string): string {
    switch (t) {
      case "null":
        return this.b.shared("null", () => '"null"');
      case "boolean":
        return this.b.shared("boolean", () => '"true" | "false"');
      case "string":
        return this.stringExpr(s, path);
      case "number":
      case "integer":
        return this.numberExpr(s, path, t === "integer");
      case "object":
        return this.objectExpr(s, path);
      case "array":
        return this.arrayExpr(s, path);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // References and allOf
  // ---------------------------------------------------------------------------------------------

  private resolve(ref: unknown, path: string): { target: unknown; targetPath: string; pointer: string } {
    if (typeof ref !== "string") throw new UnsupportedSchemaError(path, "$ref must be a string");
    if (!ref.startsWith("#")) throw new UnsupportedSchemaError(path, `only local references ("#/...") are supported, got ${JSON.stringify(ref)}`);
    const pointer = decodeURIComponent(ref.slice(1));
    if (pointer !== "" && !pointer.startsWith("/")) throw new UnsupportedSchemaError(path, `anchor references are not supported: ${ref}`);
    const tokens = pointer === "" ? [] : pointer.slice(1).split("/").map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
    let node: unknown = this.rootSchema;
    for (const t of tokens) {
      if (Array.isArray(node) && /^\d+$/.test(t) && Number(t) < node.length) node = node[Number(t)];
      else if (isObject(node) && Object.prototype.hasOwnProperty.call(node, t)) node = node[t];
      else throw new UnsupportedSchemaError(path, `unresolvable reference ${ref}`);
    }
    return { target: node, targetPath: tokens.join("."), pointer: "#" + pointer };
  }

  /** One rule per referenced definition, so recursive definitions work. */
  private ref(ref: unknown, path: string, left: ReadonlySet<string>): string {
    const { target, targetPath, pointer } = this.resolve(ref, path);
    if (left.has(pointer)) throw new UnsupportedSchemaError(path, `left-recursive reference ${pointer} (it can reach itself without consuming input)`);
    const known = this.refNames.get(pointer);
    if (known !== undefined) return known;
    const name = this.b.reserve(pointer === "#" ? "schema" : `ref-${hintOf(targetPath)}`);
    this.refNames.set(pointer, name);
    this.b.define(name, this.visit(target, targetPath, new Set([...left, pointer])));
    return name;
  }

  /** The schemas an allOf element stands for, with $ref and nested allOf flattened. */
  private partsOf(schema: unknown, path: string, inlined: Set<string>): Array<{ schema: Schema; path: string }> {
    if (schema === true) return [];
    if (schema === false) throw new UnsupportedSchemaError(path, "the schema `false` matches no value");
    if (!isObject(schema)) throw new UnsupportedSchemaError(path, "a schema must be an object or a boolean");
    this.checkKeywords(schema, path);
    const out: Array<{ schema: Schema; path: string }> = [];
    const { $ref, allOf, ...rest } = schema;
    if ($ref !== undefined) {
      const refPath = join(path, "$ref");
      const { target, targetPath, pointer } = this.resolve($ref, refPath);
      if (inlined.has(pointer)) throw new UnsupportedSchemaError(refPath, `recursive reference ${pointer} inside allOf`);
      inlined.add(pointer);
      out.push(...this.partsOf(target, targetPath, inlined));
    }
    if (allOf !== undefined) {
      if (!Array.isArray(allOf) || allOf.length === 0) throw new UnsupportedSchemaError(join(path, "allOf"), "must be a non-empty array");
      allOf.forEach((el, i) => out.push(...this.partsOf(el, join(join(path, "allOf"), i), inlined)));
    }
    out.push({ schema: rest, path });
    return out;
  }

  private mergeAllOf(schema: Schema, path: string, left: ReadonlySet<string>): { merged: Schema; inlined: Set<string> } {
    const inlined = new Set(left);
    const parts = this.partsOf(schema, path, inlined);
    const { merged } = this.mergeParts(parts, path);
    return { merged, inlined };
  }

  /** Merge schemas that must all hold into one, or refuse where that cannot be done exactly. */
  private mergeParts(parts: Array<{ schema: Schema; path: string }>, path: string): { merged: Schema; inlined: Set<string> } {
    const acc: Schema = {};
    const inlined = new Set<string>();
    const expanded: Array<{ schema: Schema; path: string }> = [];
    for (const part of parts) {
      if (has(part.schema, "$ref") || has(part.schema, "allOf")) expanded.push(...this.partsOf(part.schema, part.path, inlined));
      else expanded.push(part);
    }
    // additionalProperties of one part constrains the properties the other parts declare.
    const restricting = expanded.filter((p) => p.schema.additionalProperties !== undefined && p.schema.additionalProperties !== true);
    for (const r of restricting) {
      const declared = new Set(Object.keys(isObject(r.schema.properties) ? r.schema.properties : {}));
      for (const other of expanded) {
        if (other === r || !isObject(other.schema.properties)) continue;
        for (const name of Object.keys(other.schema.properties)) {
          if (!declared.has(name)) {
            throw new UnsupportedSchemaError(join(r.path, "additionalProperties"), `cannot merge allOf: property "${name}" is declared elsewhere but restricted here`);
          }
        }
      }
    }
    const addl: unknown[] = restricting.map((p) => p.schema.additionalProperties);
    for (const { schema, path: p } of expanded) {
      for (const [key, value] of Object.entries(schema)) {
        if (isAnnotation(key) || key === "$defs" || key === "definitions" || key === "additionalProperties") continue;
        if (!(has(acc, key))) {
          acc[key] = value;
          continue;
        }
        const prev = acc[key];
        const where = join(p, key);
        switch (key) {
          case "type": {
            const a = Array.isArray(prev) ? prev : [prev];
            const b = Array.isArray(value) ? value : [value];
            const both = a.filter((t) => b.includes(t) || (t === "integer" && b.includes("number")));
            for (const t of b) if (t === "integer" && a.includes("number") && !both.includes("integer")) both.push("integer");
            if (both.length === 0) throw new UnsupportedSchemaError(where, "allOf parts have no type in common");
            acc.type = both;
            break;
          }
          case "properties": {
            if (!isObject(prev) || !isObject(value)) throw new UnsupportedSchemaError(where, "properties must be an object");
            const merged: Schema = { ...prev };
            for (const [name, sub] of Object.entries(value)) {
              const v = has(prev, name) ? { allOf: [prev[name], sub] } : sub;
              Object.defineProperty(merged, name, { value: v, enumerable: true, writable: true, configurable: true });
            }
            acc.properties = merged;
            break;
          }
          case "required":
            if (!Array.isArray(prev) || !Array.isArray(value)) throw new UnsupportedSchemaError(where, "required must be an array");
            acc.required = [...new Set([...prev, ...value])];
            break;
          case "items":
            if (Array.isArray(prev) || Array.isArray(value)) throw new UnsupportedSchemaError(where, "cannot merge tuple-form items");
            acc.items = { allOf: [prev, value] };
            break;
          case "minLength": case "minItems": case "minProperties": case "minimum":
            acc[key] = Math.max(Number(prev), Number(value));
            break;
          case "maxLength": case "maxItems": case "maxProperties": case "maximum":
            acc[key] = Math.min(Number(prev), Number(value));
            break;
          case "exclusiveMinimum": case "exclusiveMaximum":
            if (typeof prev !== "number" || typeof value !== "number") throw new UnsupportedSchemaError(where, "cannot merge boolean exclusive bounds");
            acc[key] = key === "exclusiveMinimum" ? Math.max(prev, value) : Math.min(prev, value);
            break;
          case "enum":
            if (!Array.isArray(prev) || !Array.isArray(value)) throw new UnsupportedSchemaError(where, "enum must be an array");
            acc.enum = prev.filter((x) => value.some((y) => deepEqual(x, y)));
            break;
          case "anyOf": case "oneOf":
            throw new UnsupportedSchemaError(where, `cannot merge two ${key} in allOf`);
          default:
            if (!deepEqual(prev, value)) throw new UnsupportedSchemaError(where, `allOf parts disagree on "${key}"`);
        }
      }
    }
    if (addl.includes(false)) acc.additionalProperties = false;
    else if (addl.length === 1) acc.additionalProperties = addl[0];
    else if (addl.length > 1) acc.additionalProperties = { allOf: addl };
    if (has(acc, "anyOf") && has(acc, "oneOf")) throw new UnsupportedSchemaError(join(path, "allOf"), "cannot merge anyOf with oneOf");
    return { merged: acc, inlined };
  }

  // ---------------------------------------------------------------------------------------------
  // Shared rules
  // ---------------------------------------------------------------------------------------------

  private hex(): string {
    return this.b.shared("hex", () => "[0-9a-fA-F]");
  }

  /** One JSON string character: any raw character JSON allows, or an escape (no surrogates). */
  private char(): string {
    return this.b.shared("char", () => {
      const h = this.hex();
      const raw = charClass(JSON_RAW_CHARS);
      return `${raw} | "\\\\" (["\\\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] ${h}{3} | [dD] [0-7] ${h}{2}))`;
    });
  }

  private string(): string {
    return this.b.shared("string", () => `"\\"" ${this.char()}* "\\""`);
  }

  private sep(): string {
    return seq(this.ws, '","', this.ws);
  }

  private anyValue(): string {
    return this.b.shared("value", () => {
      const ws = this.ws;
      const sep = this.sep();
      const str = this.string();
      const member = this.b.shared("member", () => seq(str, ws, '":"', ws, "value"));
      this.b.shared("object", () => seq('"{"', ws, opt(seq(member, `(${seq(sep, member)})*`, ws)), '"}"'));
      this.b.shared("array", () => seq('"["', ws, opt(seq("value", `(${seq(sep, "value")})*`, ws)), '"]"'));
      return alt("object", "array", str, this.unboundedNumber(), this.typeExpr("boolean", {}, ""), this.typeExpr("null", {}, ""));
    });
  }

  private unboundedNumber(): string {
    return this.b.shared("number", () => `"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?`);
  }

  // ---------------------------------------------------------------------------------------------
  // Values
  // ---------------------------------------------------------------------------------------------

  private enumExpr(s: Schema, path: string): string {
    let values: unknown[];
    let where: string;
    if (has(s, "enum")) {
      where = join(path, "enum");
      if (!Array.isArray(s.enum) || s.enum.length === 0) throw new UnsupportedSchemaError(where, "enum must be a non-empty array");
      values = s.enum;
      if (has(s, "const")) values = values.filter((v) => deepEqual(v, s.const));
    } else {
      where = join(path, "const");
      values = [s.const];
    }
    const types = has(s, "type") ? this.typesOf(s, path) : null;
    const typeOk = (v: unknown): boolean => {
      if (types === null) return true;
      const t = v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "object" ? "object" : typeof v;
      if (t === "number") return types.includes("number") || (types.includes("integer") && Number.isInteger(v));
      return (types as string[]).includes(t);
    };
    values = values.filter(typeOk);
    // Other keywords next to enum/const: check each value against them.
    for (const key of constraining(s)) {
      if (["enum", "const", "type"].includes(key)) continue;
      const limit = s[key];
      const check = (v: unknown): boolean => {
        switch (key) {
          case "minLength": return typeof v !== "string" || [...v].length >= Number(limit);
          case "maxLength": return typeof v !== "string" || [...v].length <= Number(limit);
          case "pattern": return typeof v !== "string" || new RegExp(String(limit), "u").test(v);
          case "minimum": return typeof v !== "number" || v >= Number(limit);
          case "maximum": return typeof v !== "number" || v <= Number(limit);
          case "exclusiveMinimum": return typeof v !== "number" || typeof limit !== "number" || v > limit;
          case "exclusiveMaximum": return typeof v !== "number" || typeof limit !== "number" || v < limit;
          default: throw new UnsupportedSchemaError(join(path, key), `"${key}" next to enum/const is not supported`);
        }
      };
      if ((key === "exclusiveMinimum" || key === "exclusiveMaximum") && typeof limit === "boolean") {
        throw new UnsupportedSchemaError(join(path, key), `boolean "${key}" next to enum/const is not supported`);
      }
      values = values.filter(check);
    }
    if (values.length === 0) throw new UnsupportedSchemaError(where, "no value satisfies the schema");
    return this.b.atom(hintOf(path, "enum"), alt(...values.map((v) => literal(JSON.stringify(v)))));
  }

  private nonNegativeInt(s: Schema, key: string, path: string): number | undefined {
    const v = s[key];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new UnsupportedSchemaError(join(path, key), `${key} must be a non-negative integer`);
    return v;
  }

  private stringExpr(s: Schema, path: string): string {
    const minLength = this.nonNegativeInt(s, "minLength", path) ?? 0;
    const maxLength = this.nonNegativeInt(s, "maxLength", path);
    if (maxLength !== undefined && maxLength < minLength) throw new UnsupportedSchemaError(join(path, "maxLength"), "maxLength is below minLength");
    const quoted = (expr: string) => this.b.rule(hintOf(path, "string"), seq('"\\""', expr, '"\\""'));
    // A pattern or format fixes its own lengths; length bounds are fine only when they add nothing.
    const checkLengths = (what: string, min: number, max: number) => {
      if (minLength > min) throw new UnsupportedSchemaError(join(path, "minLength"), `minLength together with ${what} is not supported (it allows shorter strings)`);
      if (maxLength !== undefined && maxLength < max) throw new UnsupportedSchemaError(join(path, "maxLength"), `maxLength together with ${what} is not supported (it allows longer strings)`);
    };
    if (s.format !== undefined) {
      const where = join(path, "format");
      if (typeof s.format !== "string" || !isSupportedFormat(s.format)) {
        throw new UnsupportedSchemaError(where, `format ${JSON.stringify(s.format)} is not supported (supported: date, time, date-time, uuid, email, uri)`);
      }
      if (s.pattern !== undefined) throw new UnsupportedSchemaError(join(path, "pattern"), "pattern together with format is not supported");
      // email and uri have bounded variants; the other formats have fixed length ranges.
      const bounded = (s.format === "email" || s.format === "uri") && maxLength !== undefined;
      const f = formatGrammar(this.b, s.format, bounded ? maxLength : undefined);
      if (f === null) throw new UnsupportedSchemaError(join(path, "maxLength"), `maxLength ${maxLength} is too short for format ${s.format}`);
      checkLengths(`format ${s.format}`, f.minLength, f.maxLength);
      return quoted(f.expr);
    }
    if (s.pattern !== undefined) {
      const where = join(path, "pattern");
      if (typeof s.pattern !== "string") throw new UnsupportedSchemaError(where, "pattern must be a string");
      let compiled;
      try {
        compiled = compilePattern(this.b, s.pattern, hintOf(path, "pattern"));
      } catch (e) {
        if (e instanceof PatternError) throw new UnsupportedSchemaError(where, e.message);
        throw e;
      }
      checkLengths("pattern", compiled.minLength, compiled.maxLength);
      return quoted(compiled.expr);
    }
    if (minLength === 0 && maxLength === undefined) return this.string();
    return quoted(this.b.repeat(hintOf(path, "chars"), this.char(), minLength, maxLength));
  }

  private numberExpr(s: Schema, path: string, integer: boolean): string {
    const num = (key: string): number | undefined => {
      const v = s[key];
      if (v === undefined || typeof v === "boolean") return undefined;
      if (typeof v !== "number" || !Number.isFinite(v)) throw new UnsupportedSchemaError(join(path, key), `${key} must be a number`);
      return v;
    };
    if (s.multipleOf === 1) integer = true; // a number that is a multiple of 1 is an integer
    else if (s.multipleOf !== undefined) throw new UnsupportedSchemaError(join(path, "multipleOf"), "multipleOf is not supported (except 1)");
    for (const key of ["exclusiveMinimum", "exclusiveMaximum"]) {
      const v = s[key];
      if (typeof v === "boolean" && v && num(key === "exclusiveMinimum" ? "minimum" : "maximum") === undefined) {
        throw new UnsupportedSchemaError(join(path, key), `boolean ${key} needs ${key === "exclusiveMinimum" ? "minimum" : "maximum"}`);
      }
    }
    // Tightest lower and upper bound (draft-04 boolean exclusive flags included).
    const tighter = (a: Bound | undefined, b: Bound | undefined, lower: boolean): Bound | undefined => {
      if (!a) return b;
      if (!b) return a;
      if (a.value === b.value) return { value: a.value, strict: a.strict || b.strict };
      return (a.value > b.value) === lower ? a : b;
    };
    const min = num("minimum");
    const max = num("maximum");
    const exMin = num("exclusiveMinimum");
    const exMax = num("exclusiveMaximum");
    const lower = tighter(min === undefined ? undefined : { value: min, strict: s.exclusiveMinimum === true }, exMin === undefined ? undefined : { value: exMin, strict: true }, true);
    const upper = tighter(max === undefined ? undefined : { value: max, strict: s.exclusiveMaximum === true }, exMax === undefined ? undefined : { value: exMax, strict: true }, false);
    if (!lower && !upper) return integer ? this.b.shared("integer", () => boundedNumber(this.b, undefined, undefined, true)!) : this.unboundedNumber();
    const expr = boundedNumber(this.b, lower, upper, integer);
    if (expr === null) {
      const key = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"].find((k) => has(s, k))!;
      throw new UnsupportedSchemaError(join(path, key), `no ${integer ? "integer" : "number"} satisfies the bounds`);
    }
    return this.b.atom(hintOf(path, integer ? "int" : "num"), expr);
  }

  /** A JSON string key that is none of `names` (written without escapes). */
  private keyExcluding(names: string[]): string {
    if (names.length === 0) return this.string();
    type Trie = { terminal: boolean; children: Map<number, Trie> };
    const root: Trie = { terminal: false, children: new Map() };
    for (const name of names) {
      let node = root;
      let producible = true;
      for (const ch of name) {
        const cp = ch.codePointAt(0)!;
        if (!setHas(JSON_RAW_CHARS, cp)) {
          producible = false; // needs an escape, which additional keys never use
          break;
        }
        if (!node.children.has(cp)) node.children.set(cp, { terminal: false, children: new Map() });
        node = node.children.get(cp)!;
      }
      if (producible) node.terminal = true;
    }
    const keyChar = this.b.rule("key-char", charClass(JSON_RAW_CHARS));
    const build = (node: Trie): string => {
      const parts: string[] = [];
      if (!node.terminal) parts.push('""');
      const others = setMinus(JSON_RAW_CHARS, cpSet(...node.children.keys()));
      parts.push(seq(charClass(others), `${keyChar}*`));
      for (const [cp, child] of node.children) parts.push(seq(literal(String.fromCodePoint(cp)), build(child)));
      return this.b.rule("key-other", alt(...parts));
    };
    return this.b.rule("key-other", seq('"\\""', build(root), '"\\""'));
  }

  private objectExpr(s: Schema, path: string): string {
    const ws = this.ws;
    const sep = this.sep();
    const props = s.properties ?? {};
    if (!isObject(props)) throw new UnsupportedSchemaError(join(path, "properties"), "properties must be an object");
    const required = s.required ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== "string")) {
      throw new UnsupportedSchemaError(join(path, "required"), "required must be an array of strings");
    }
    const entries: Array<{ name: string; req: boolean; value: string }> = [];
    const excluded: string[] = [];
    for (const [name, sub] of Object.entries(props)) {
      excluded.push(name);
      const req = required.includes(name);
      const p = join(join(path, "properties"), name);
      if (sub === false) {
        if (req) throw new UnsupportedSchemaError(p, "a required property cannot have the schema `false`");
        continue;
      }
      entries.push({ name, req, value: this.visit(sub, p, new Set()) });
    }
    const addl = s.additionalProperties;
    let addlValue: string | null;
    if (addl === false) addlValue = null;
    else if (addl === undefined || addl === true) addlValue = this.anyValue();
    else addlValue = this.visit(addl, join(path, "additionalProperties"), new Set());
    for (const name of new Set(required as string[])) {
      if (has(props, name)) continue;
      if (addlValue === null) throw new UnsupportedSchemaError(join(path, "required"), `"${name}" is required but not declared, and additionalProperties is false`);
      excluded.push(name);
      entries.push({ name, req: true, value: addlValue });
    }
    const kvs = entries.map((e) => ({ req: e.req, kv: this.b.rule(hintOf(join(path, e.name), "kv"), seq(literal(JSON.stringify(e.name)), ws, '":"', ws, e.value)) }));
    const addlKv = addlValue === null ? null : this.b.rule(hintOf(path, "additional-kv"), seq(this.keyExcluding(excluded), ws, '":"', ws, addlValue));
    const n = kvs.length;
    const requiredCount = kvs.filter((k) => k.req).length;

    const minP = this.nonNegativeInt(s, "minProperties", path) ?? 0;
    const maxP = this.nonNegativeInt(s, "maxProperties", path);
    const counting = minP > requiredCount || (maxP !== undefined && (addlKv !== null || maxP < n));
    const hint = hintOf(path, "members");

    // body: the members of a non-empty object (null: no non-empty object is allowed).
    let body: string | null;
    let emptyAllowed: boolean;
    if (!counting) {
      const after = (i: number): string =>
        seq(...kvs.slice(i).map((k) => (k.req ? seq(sep, k.kv) : opt(seq(sep, k.kv)))), addlKv ? `(${seq(sep, addlKv)})*` : "");
      const first = (i: number): string | null => {
        if (i === n) return addlKv ? seq(addlKv, `(${seq(sep, addlKv)})*`) : null;
        const withIt = seq(kvs[i].kv, after(i + 1));
        if (kvs[i].req) return withIt;
        const rest = first(i + 1);
        return rest === null ? withIt : this.b.rule(hint, alt(withIt, rest));
      };
      body = first(0);
      emptyAllowed = requiredCount === 0;
    } else {
      // Same shape, tracking c = members emitted so far (clamped at minP when there is no max).
      const memo = new Map<string, string | null>();
      const after = (i: number, c: number): string | null => {
        if (maxP === undefined) c = Math.min(c, minP);
        const key = `${i}:${c}`;
        if (memo.has(key)) return memo.get(key)!;
        let result: string | null;
        if (i === n) {
          const kmin = Math.max(0, minP - c);
          const kmax = maxP === undefined ? undefined : maxP - c;
          if (kmax !== undefined && kmax < kmin) result = null;
          else if (addlKv === null) result = kmin === 0 ? "" : null;
          else if (kmin >= 2) result = null; // two additional keys could collide
          else result = kmax === 0 ? "" : this.b.repeat(`${hint}-more`, seq(sep, addlKv), kmin, kmax);
        } else {
          const rest = maxP === undefined || c + 1 <= maxP ? after(i + 1, c + 1) : null;
          const withIt = rest === null ? null : seq(sep, kvs[i].kv, rest);
          const without = kvs[i].req ? null : after(i + 1, c);
          const alts = [withIt, without].filter((x): x is string => x !== null);
          result = alts.length === 0 ? null : alts.length === 1 ? alts[0] : this.b.rule(hint, alt(...alts.map((a) => (a === "" ? '""' : a))));
        }
        memo.set(key, result);
        return result;
      };
      const first = (i: number): string | null => {
        if (i === n) {
          if (addlKv === null || minP >= 2 || (maxP !== undefined && maxP < 1)) return null;
          return seq(addlKv, this.b.repeat(`${hint}-more`, seq(sep, addlKv), 0, maxP === undefined ? undefined : maxP - 1));
        }
        const rest = maxP === undefined || maxP >= 1 ? after(i + 1, 1) : null;
        const withIt = rest === null ? null : seq(kvs[i].kv, rest);
        if (kvs[i].req) return withIt;
        const other = first(i + 1);
        if (withIt === null) return other;
        return other === null ? withIt : this.b.rule(hint, alt(withIt, other));
      };
      body = first(0);
      emptyAllowed = requiredCount === 0 && minP === 0;
      if (body === null && !emptyAllowed) {
        const key = s.minProperties !== undefined ? "minProperties" : "maxProperties";
        throw new UnsupportedSchemaError(join(path, key), `no object satisfies ${key} here${addlKv && minP > requiredCount + 1 ? " (at most one additional property counts towards minProperties)" : ""}`);
      }
    }
    const objHint = hintOf(path, "object");
    if (body === null) return this.b.rule(objHint, seq('"{"', ws, '"}"'));
    if (emptyAllowed) return this.b.rule(objHint, seq('"{"', ws, opt(seq(body, ws)), '"}"'));
    return this.b.rule(objHint, seq('"{"', ws, body, ws, '"}"'));
  }

  private arrayExpr(s: Schema, path: string): string {
    const ws = this.ws;
    const sep = this.sep();
    let prefix: unknown[];
    let rest: unknown;
    let restPath: string;
    if (Array.isArray(s.items)) {
      // Draft 2019-09 and earlier: tuple-form items, then additionalItems.
      if (s.prefixItems !== undefined) throw new UnsupportedSchemaError(join(path, "prefixItems"), "prefixItems together with tuple-form items");
      prefix = s.items;
      rest = s.additionalItems ?? true;
      restPath = join(path, "additionalItems");
    } else {
      if (s.prefixItems !== undefined && !Array.isArray(s.prefixItems)) throw new UnsupportedSchemaError(join(path, "prefixItems"), "prefixItems must be an array");
      prefix = (s.prefixItems as unknown[] | undefined) ?? [];
      rest = s.items ?? true;
      restPath = join(path, "items");
    }
    const minItems = this.nonNegativeInt(s, "minItems", path) ?? 0;
    let maxItems = this.nonNegativeInt(s, "maxItems", path);
    if (s.uniqueItems === true && (maxItems === undefined || maxItems > 1)) {
      throw new UnsupportedSchemaError(join(path, "uniqueItems"), "uniqueItems is not supported (unless maxItems ≤ 1)");
    }
    // A `false` prefix item or rest schema caps the length.
    const falseAt = prefix.indexOf(false);
    if (falseAt >= 0) {
      prefix = prefix.slice(0, falseAt);
      rest = false;
    }
    if (rest === false) maxItems = Math.min(maxItems ?? prefix.length, prefix.length);
    if (maxItems !== undefined && minItems > maxItems) {
      throw new UnsupportedSchemaError(join(path, "minItems"), "no array satisfies minItems with the allowed length");
    }
    const k = maxItems === undefined ? prefix.length : Math.min(prefix.length, maxItems);
    const itemExprs = prefix.slice(0, k).map((p, i) => this.visit(p, join(join(path, Array.isArray(s.items) ? "items" : "prefixItems"), i), new Set()));
    const restExpr = rest === false || (maxItems !== undefined && maxItems <= k) ? null : this.visit(rest, restPath, new Set());
    const hint = hintOf(path, "arr");
    // cont(i): what may follow once i ≥ 1 items are written.
    const cont = (i: number): string => {
      if (i < k) {
        const step = seq(sep, itemExprs[i], cont(i + 1));
        return i >= minItems ? opt(step) : step;
      }
      if (restExpr === null) return "";
      const more = this.b.rule(`${hint}-more`, seq(sep, restExpr));
      return this.b.repeat(`${hint}-more`, more, Math.max(0, minItems - i), maxItems === undefined ? undefined : maxItems - i);
    };
    const first = k > 0 ? seq(itemExprs[0], cont(1)) : restExpr !== null ? seq(restExpr, cont(1)) : null;
    if (first === null) return this.b.rule(hint, seq('"["', ws, '"]"'));
    if (minItems >= 1) return this.b.rule(hint, seq('"["', ws, first, ws, '"]"'));
    return this.b.rule(hint, seq('"["', ws, opt(seq(first, ws)), '"]"'));
  }
}

/**
 * GBNF for the JSON Schema `schema`, with root rule `root`. Throws UnsupportedSchemaError for any
 * feature it cannot enforce exactly.
 */
export function jsonSchemaToGbnf(schema: unknown, opts: JsonSchemaToGbnfOptions = {}): string {
  const maxWhitespace = opts.maxWhitespace ?? 2;
  if (!Number.isInteger(maxWhitespace) || maxWhitespace < 0 || maxWhitespace > 100) throw new RangeError("maxWhitespace must be an integer in [0, 100]");
  return new Converter(schema, maxWhitespace).convert();
}

/** Any JSON object (OpenAI's `response_format: {type: "json_object"}`), with bounded whitespace. */
export const JSON_OBJECT_GBNF: string = jsonSchemaToGbnf({ type: "object" });

function stableStringify(value: unknown, seen: Set<object>): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (seen.has(value)) throw new TypeError("schema contains a cycle");
  seen.add(value);
  let out: string;
  if (Array.isArray(value)) out = `[${value.map((v) => stableStringify(v, seen)).join(",")}]`;
  else {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
    out = `{${keys.map((k) => `${JSON.stringify(k)}:${stableStringify(obj[k], seen)}`).join(",")}}`;
  }
  seen.delete(value);
  return out;
}

/**
 * A stable key for caching compiled grammars: SHA-256 of the schema with object keys sorted (and
 * of the options, when given, since they change the grammar).
 */
export function schemaCacheKey(schema: unknown, opts?: JsonSchemaToGbnfOptions): string {
  const text = stableStringify(schema, new Set()) + (opts ? `|ws=${opts.maxWhitespace ?? 2}` : "");
  return createHash("sha256").update(text).digest("hex");
}
