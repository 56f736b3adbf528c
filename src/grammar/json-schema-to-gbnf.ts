// JSON Schema → GBNF (llama.cpp grammar) for schema-constrained generation.
//
// Contract: every string the grammar accepts is a JSON document that validates against the schema.
// A feature that cannot be enforced exactly throws UnsupportedSchemaError naming where it is; the
// grammar may be stricter than the schema (documented below) but never looser.
//
// Entry points:
// - compileJsonSchema(schema, opts) → { gbnf, relaxed }: the grammar, and (with `strict: false`)
//   the keywords that were relaxed.
// - jsonSchemaToGbnf(schema, opts) → gbnf (the same, text only).
// - compileSchemaInWorker(schema, opts, { timeoutMs }) in schema-worker.ts: the same off the event
//   loop, with a deadline.
// - checkSchemaLimits(schema, limits): the size checks alone (they also run first in the above).
//
// Strict (the default, `strict: true`): anything that cannot be enforced exactly throws
// UnsupportedSchemaError. With `strict: false` an unenforceable keyword is relaxed alone — dropped,
// with the rest of the schema still enforced (a string with an unknown `format` stays a string with
// its length bounds; an unsupported `pattern` leaves the string's other keywords; `not`, `if`,
// `uniqueItems`, … are ignored) — and listed in `relaxed`, so the output is still
// JSON of the schema's shape rather than "any JSON object". The engine names the relaxed keywords
// in the response (llama-cpp/constraints.ts: x-plinth-schema-relaxed). Structural impossibilities
// (no value satisfies the schema, left recursion, allOf that cannot be merged, references whose
// values never end: finite.ts) throw in both modes.
//
// Limits (SchemaLimits; SchemaLimitError, a subclass of UnsupportedSchemaError with code "limit",
// never relaxed, meant as a 400 naming the path): schema size, nesting depth, node count, enum size
// and bytes are checked on the raw value without recursion before any other work; repetition
// counts (minLength, maxLength, minItems, maxItems, minProperties, maxProperties, `{n,m}` in
// patterns), pattern length and group nesting, reference chains, grammar rules and grammar size,
// and automaton states are checked where they arise, before the work that grows with them (the
// grammar's text also stops at the length whose parse alone would pass the load-cost bound). Every
// step is linear in what it produces (rule names are numbered per base; optional properties and
// prefix items are chains of rules), so a schema within the limits compiles in bounded time. A `pattern` next to an
// `enum` is checked with an automaton, never with a backtracking RegExp.
//
// Stricter than JSON Schema, by design:
// - Whitespace: at most `maxWhitespace` (default 2) blanks between tokens, none before or after the
//   document, so generation always ends right after the closing token.
// - Objects: declared properties come first, in declared order. Additional properties follow them
//   only where the schema asks for them explicitly (`additionalProperties: true` or a schema) or
//   declares no `properties` at all (a free-form object); with `properties` and no
//   `additionalProperties`, none are generated — as llama.cpp's own converter and xgrammar do —
//   since a model otherwise invents keys until max_tokens. (Required names that are not declared
//   are still allowed, with any value, and so are additional keys when minProperties needs them.)
//   Additional keys are never a declared name and are written without escape sequences.
// - A schema without `type` is narrowed to the types its keywords constrain (e.g. `properties` →
//   object); with no such keywords it allows any JSON value.
// - `pattern` must match the whole string (as if anchored), a subset of JSON Schema's search.
// - Numbers: integers stay within ±(2^53−1) unless their bounds lie past it, and have no fraction
//   or exponent; unbounded numbers have at most 16 integer digits, 15 fraction digits and a
//   2-digit exponent (always finite); bounded numbers have no exponent and at most 15 significant
//   digits unless their bounds lie past 10^15. Either way a validator comparing doubles and one
//   comparing the bound as written (Python's ints) both accept the answer (numeric-ranges.ts).
// - Strings: a `\u` escape never encodes a surrogate, so each grammar character is one code point
//   and minLength/maxLength are exact; pattern/format strings use one canonical spelling per
//   character.
// - `format` together with `pattern` (what zod emits for z.iso.datetime(), z.email(), z.uuid(), …):
//   the intersection of the two, built as an automaton (automaton.ts); zod's own format names that
//   its pattern defines (starts_with, cuid, nanoid, …) enforce the pattern. Length bounds that a
//   pattern or format does not already imply are intersected the same way; for email and uri with
//   a maxLength whose exact intersection is too large (zod's z.email().max(254)), the bounded
//   subset of the format (string-formats.ts) takes the format's place.
// - `oneOf` is generated as `anyOf`, which is exact only when no value can match two branches: that
//   is proven first (distinct types, const/enum values, or a required property with distinct
//   consts, as discriminated unions have); otherwise strict mode refuses the schema.
// - Enum values and consts are written in one spelling each (JSON.stringify).
// - `minProperties` with additional properties allowed: at most one additional property counts
//   towards the minimum (two generated keys could be equal, and JSON.parse keeps one); a minimum
//   that needs more is relaxed to that (strict: refused as not enforceable).
//
// Accepted because always true: `propertyNames` that every JSON key satisfies (`true`, `{}`,
// `{type: "string"}` as z.record(z.string(), X) emits), formats that do not constrain syntax
// (binary, password).
//
// Refused in strict mode (UnsupportedSchemaError): not, if/then/else, dependentRequired,
// dependentSchemas, dependencies, patternProperties, other propertyNames, unevaluatedProperties,
// unevaluatedItems, contains, minContains, maxContains, $dynamicRef, $recursiveRef, multipleOf
// whose automaton exceeds its bounds (multiple-of.ts; 1 means integer), uniqueItems: true (unless maxItems ≤ 1 or the items are a
// list of values, whose arrays are then generated in the list's order), formats other than
// those in string-formats.ts, pattern features outside the supported subset (see
// regex-to-gbnf.ts), intersections whose automaton exceeds its bounds, email/uri with length
// bounds their bounded subsets cannot meet (see string-formats.ts), enum/const next to keywords
// other than type and simple string/number bounds, non-local or unresolvable $ref, left-recursive
// references, allOf that cannot be merged, the `false` schema where a value is required, unknown
// keywords (except annotations and `x-` extensions), and OpenAPI's `nullable: true`.
//
// allOf parts with different `pattern`s: every pattern must match (intersected as automata, as
// format ∩ pattern ∩ lengths are).
//
// `$ref` siblings are enforced too (2019-09+ semantics; valid under draft-07 as well), and keywords
// next to anyOf/oneOf apply to every branch (merged as allOf).

import { createHash } from "node:crypto";
import {
  AutomatonLimitError,
  cachedDfa,
  DEFAULT_AUTOMATON_LIMITS,
  dfaLengthRange,
  dfaToGbnf,
  langMatcher,
  langOfRegex,
  withAutomatonBudget,
  type Lang,
} from "./automaton.ts";
import {
  alt,
  ALL_CHARS,
  charClass,
  group,
  GrammarBuilder,
  GrammarLimitError,
  JSON_RAW_CHARS,
  literal,
  literalAlternatives,
  seq,
  setHas,
  setMinus,
  cpSet,
} from "./gbnf.ts";
import { unfinishableRules } from "./finite.ts";
import { closestName } from "../core/closest-name.ts";
import { DEFAULT_MAX_LOAD_COST, grammarLoadCost, maxCharsWithin, parseGrammar, type ParsedGrammar } from "./load-cost.ts";
import { boundedNumber, boundsHoldAsDoubles, type Bound } from "./numeric-ranges.ts";
import { commonMultiple, isDecimalMultiple, multiplesDfa, plainChars } from "./multiple-of.ts";
import { emitRegex, hasLookahead, readsAmbiguously, parsePattern, PatternError, PatternLimitError, regexLengthRange, type RegexNode } from "./regex-to-gbnf.ts";
import {
  ANY_STRING_FORMATS,
  BOUNDED_FORMAT_MIN_LENGTH,
  boundedFormatRegex,
  FORMAT_REGEX,
  formatGrammar,
  isSupportedFormat,
  PATTERN_DEFINED_FORMATS,
} from "./string-formats.ts";

export class UnsupportedSchemaError extends Error {
  /** Where in the schema, as dot-separated keys (e.g. `properties.address.pattern`); "" is the root. */
  readonly path: string;
  /** "unsupported": cannot be enforced (relaxed with `strict: false`); "limit": beyond SchemaLimits. */
  readonly code: "unsupported" | "limit" = "unsupported";
  /** The message without the path. */
  readonly reason: string;
  constructor(path: string, message: string) {
    super(`${path === "" ? "schema" : shortPath(path)}: ${message}`);
    this.name = "UnsupportedSchemaError";
    this.path = path;
    this.reason = message;
  }
}

/**
 * A path as the message shows it: a deeply nested one (`anyOf.0.anyOf.0…`, hundreds of levels) keeps
 * its first and last keys around a count of those left out, so the message stays readable; `path`
 * keeps it whole.
 */
export function shortPath(path: string, head = 6, tail = 10): string {
  const keys = path.split(".");
  if (keys.length <= head + tail + 1) return path;
  return [...keys.slice(0, head), `…(${keys.length - head - tail} more keys)…`, ...keys.slice(-tail)].join(".");
}

/** The schema is beyond a SchemaLimits bound: refuse the request (400), never relax or fall back. */
export class SchemaLimitError extends UnsupportedSchemaError {
  override readonly code = "limit" as const;
  constructor(path: string, message: string) {
    super(path, message);
    this.name = "SchemaLimitError";
  }
}

export type SchemaLimits = {
  /** Most bytes of the schema written as JSON (estimated on the value, without serialising it). */
  maxSchemaBytes: number;
  /** Deepest nesting of JSON objects/arrays in the schema. */
  maxDepth: number;
  /** Most JSON values (objects, arrays, scalars) in the schema. */
  maxNodes: number;
  /** Most values in one enum. */
  maxEnumValues: number;
  /**
   * Most branches of one anyOf/oneOf that are more than values (those that are only values are an
   * enum). llama.cpp follows every branch still possible at each token, on the decode thread all
   * sequences share: 5,000 one-property objects slowed other requests' tokens by a second.
   */
  maxBranches: number;
  /** Most bytes of all enum and const values together. */
  maxEnumBytes: number;
  /** Largest repetition count: min/maxLength, min/maxItems, min/maxProperties, `{n,m}` in patterns. */
  maxRepeat: number;
  /** Longest `pattern`, in UTF-16 units. */
  maxPatternLength: number;
  /** Deepest group nesting in a `pattern`. */
  maxPatternDepth: number;
  /** Deepest chain of nested schemas being converted (references followed included). */
  maxVisitDepth: number;
  /** Most grammar rules. */
  maxRules: number;
  /** Most characters of grammar text. */
  maxGrammarChars: number;
  /** Most DFA states of one string's automaton (format ∩ pattern ∩ lengths). */
  maxAutomatonStates: number;
  /** Most work llama.cpp may spend loading the grammar (load-cost.ts units). */
  maxLoadCost: number;
};

export const DEFAULT_SCHEMA_LIMITS: Readonly<SchemaLimits> = {
  maxSchemaBytes: 1024 * 1024,
  maxDepth: 256,
  maxNodes: 100_000,
  maxEnumValues: 10_000,
  maxBranches: 1_000,
  maxEnumBytes: 512 * 1024,
  maxRepeat: 100_000,
  maxPatternLength: 10_000,
  maxPatternDepth: 64,
  maxVisitDepth: 512,
  maxRules: 50_000,
  maxGrammarChars: 8 * 1024 * 1024,
  maxAutomatonStates: DEFAULT_AUTOMATON_LIMITS.maxDfaStates,
  maxLoadCost: DEFAULT_MAX_LOAD_COST,
};

export type JsonSchemaToGbnfOptions = {
  /** Most whitespace characters between two tokens (default 2). */
  maxWhitespace?: number;
  /**
   * true (default): throw UnsupportedSchemaError for anything that cannot be enforced exactly.
   * false: relax only the keyword that cannot be enforced (see the file header).
   */
  strict?: boolean;
  /** Overrides of DEFAULT_SCHEMA_LIMITS. */
  limits?: Partial<SchemaLimits>;
};

/** A keyword that `strict: false` relaxed, and why. */
export type Relaxation = { path: string; message: string };

/** `loadCost`: what llama.cpp will spend loading the grammar (see load-cost.ts). */
export type CompiledSchema = { gbnf: string; relaxed: Relaxation[]; loadCost: number };

type Schema = Record<string, unknown>;

const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated",
  "readOnly", "writeOnly", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
  "contentEncoding", "contentMediaType", "contentSchema", "discriminator",
]);
const REFUSED = new Set([
  "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
  "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
  "$dynamicRef", "$recursiveRef",
  // Not JSON Schema, but a constraint where it comes from (Gemini's order of an object's properties).
  "propertyOrdering",
]);
const STRING_KEYS = ["minLength", "maxLength", "pattern", "format"];
const NUMBER_KEYS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
const OBJECT_KEYS = ["properties", "required", "additionalProperties", "minProperties", "maxProperties", "propertyNames"];
const ARRAY_KEYS = ["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"];
const STRUCTURAL = ["type", "enum", "const", "$ref", "$defs", "definitions", "allOf", "anyOf", "oneOf", "nullable"];
const KNOWN = new Set([...STRING_KEYS, ...NUMBER_KEYS, ...OBJECT_KEYS, ...ARRAY_KEYS, ...STRUCTURAL]);
/** Keywords of the other types, which say nothing about a string (xml-arguments.ts). */
export const NON_STRING_KEYWORDS: ReadonlySet<string> = new Set([...NUMBER_KEYS, ...OBJECT_KEYS, ...ARRAY_KEYS]);
const TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"] as const;
type TypeName = (typeof TYPES)[number];

/**
 * Patterns that libraries emit next to a format and that every string of our grammar for that
 * format matches (checked by sampling in test/unit/schema-fixtures.test.ts): with one of these, the
 * format grammar alone is enforced.
 */
export const LIBRARY_FORMAT_PATTERNS: Readonly<Record<string, readonly string[]>> = {
  // zod 4: z.iso.duration()
  duration: ["^P(?:(\\d+W)|(?!.*W)(?=\\d|T\\d)(\\d+Y)?(\\d+M)?(\\d+D)?(T(?=\\d)(\\d+H)?(\\d+M)?(\\d+([.,]\\d+)?S)?)?)$"],
};

/**
 * `pattern` values that allOf merging made out of several patterns that must all match (zod's
 * startsWith + endsWith: `allOf: [{pattern: "^pre.*"}, {pattern: ".*suf$"}]`). Only arrays made
 * here count: a `pattern` array in a request is still refused.
 */
const MERGED_PATTERNS = new WeakSet<readonly string[]>();

/** The patterns a schema's `pattern` stands for (several after an allOf merge). */
function patternsOf(s: Schema, where: string): readonly string[] {
  const p = s.pattern;
  if (p === undefined) return [];
  if (typeof p === "string") return [p];
  if (Array.isArray(p) && MERGED_PATTERNS.has(p)) return p;
  throw new UnsupportedSchemaError(where, "pattern must be a string");
}

/** Keywords that may sit next to enum/const and say nothing more about the values. */
const ANNOTATION_LIKE_NEXT_TO_ENUM = new Set(["propertyNames"]);

const join = (path: string, key: string | number) => (path === "" ? String(key) : `${path}.${key}`);
const has = (obj: object, key: string) => Object.prototype.hasOwnProperty.call(obj, key);
const isObject = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);
export const isAnnotation = (key: string) => ANNOTATIONS.has(key) || key.startsWith("x-") || isCustomKeyword(key);

/**
 * A keyword no JSON Schema draft defines (zod's `.meta({units: "kg"})`, pydantic's
 * `json_schema_extra`, `errorMessage`, `enumNames`, draft 4's `id`): an annotation, as the
 * specification reads unknown keywords, so it constrains nothing and is passed over. One within two
 * edits of a keyword Plinth knows (`maxLenght`, `requried`) is taken for a misspelling of it and
 * refused by name (checkKeywords): passed over, the constraint it meant would silently go.
 */
function isCustomKeyword(key: string): boolean {
  return !KNOWN.has(key) && !REFUSED.has(key) && misspelledKeyword(key) === undefined;
}

const customKeywordCache = new Map<string, string | undefined>();

/** The known keyword `key` is within two edits of (compared without case), if any. */
function misspelledKeyword(key: string): string | undefined {
  if (customKeywordCache.has(key)) return customKeywordCache.get(key);
  // Short keys say too little to be taken for another (`id` is not a misspelled `if`).
  const guess = key.length < 4 ? undefined : closestName(key, [...KNOWN, ...REFUSED]);
  if (customKeywordCache.size < 1024) customKeywordCache.set(key, guess);
  return guess;
}
/** Keys that constrain values (not annotations, not definitions containers). */
const constraining = (s: Schema) => Object.keys(s).filter((k) => !isAnnotation(k) && k !== "$defs" && k !== "definitions");

/** The index of the one plain `{$ref}` in an allOf whose other parts only annotate, else -1. */
function soleReference(allOf: unknown): number {
  if (!Array.isArray(allOf)) return -1;
  let found = -1;
  for (let i = 0; i < allOf.length; i++) {
    const part: unknown = allOf[i];
    if (part === true || (isObject(part) && constraining(part).length === 0)) continue;
    if (found >= 0 || !isObject(part) || typeof part.$ref !== "string" || constraining(part).length !== 1) return -1;
    found = i;
  }
  return found;
}

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

/** A JSON value's type, for the trivially-true checks. */
const isTrivialPropertyNames = (v: unknown): boolean => {
  if (v === true) return true;
  if (!isObject(v)) return false;
  return constraining(v).every((k) => k === "type" && (v.type === "string" || (Array.isArray(v.type) && v.type.includes("string"))));
};

class Converter {
  private readonly b: GrammarBuilder;
  private readonly refNames = new Map<string, string>();
  /** The other way: each reference rule's pointer and schema path. */
  private readonly refTargets = new Map<string, { pointer: string; targetPath: string }>();
  private readonly ws: string;
  readonly relaxed: Relaxation[] = [];
  /** The grammar as llama.cpp will build it, parsed once for the finiteness check and the load cost. */
  parsed: ParsedGrammar | undefined;
  private readonly relaxedKeys = new Set<string>();
  /** Rules of schemas that inline a reference, by their text (inliningRule). */
  private readonly inliningRules = new Map<string, string>();
  /** How often each reference was inlined by a merge, and where first (for the depth refusal). */
  private readonly inlineCounts = new Map<string, number>();
  private readonly inlinedAt = new Map<string, string>();
  private depth = 0;

  constructor(
    private readonly rootSchema: unknown,
    private readonly maxWhitespace: number,
    private readonly strict: boolean,
    private readonly limits: SchemaLimits,
  ) {
    this.ws = maxWhitespace === 0 ? "" : "ws";
    // The text is bounded by the load-cost bound too (its parse alone costs a bound per character),
    // so a grammar too costly to load is refused while it grows, not once it is all built.
    const loadChars = maxCharsWithin(limits.maxLoadCost);
    this.b = new GrammarBuilder(
      { maxRules: limits.maxRules, maxGrammarChars: Math.min(limits.maxGrammarChars, loadChars) },
      loadChars < limits.maxGrammarChars ? `its grammar would take the engine too long to load (more than ${loadChars} characters to parse, past the load limit of ${Math.round(limits.maxLoadCost / 1e6)} M units)` : undefined,
    );
  }

  convert(): string {
    try {
      if (this.maxWhitespace > 0) {
        this.b.shared("ws", () => (this.maxWhitespace === 1 ? "[ \\t\\n]?" : `[ \\t\\n]{0,${this.maxWhitespace}}`));
      }
      const expr = this.visit(this.rootSchema, "", new Set());
      this.b.shared("root", () => expr);
      const gbnf = this.b.render();
      this.parsed = parseGrammar(gbnf);
      this.checkFinite(this.parsed);
      return gbnf;
    } catch (e) {
      if (e instanceof GrammarLimitError) throw new SchemaLimitError("", e.message);
      if (e instanceof RangeError && /call stack/i.test(e.message)) throw new SchemaLimitError("", "the schema is nested too deeply");
      throw e;
    }
  }

  /**
   * Refuses a grammar with a rule the model could enter and never leave: references whose values
   * each require another (a required property, a minItems ≥ 1 array) without a way to end.
   * Structural, so refused whatever `strict` says.
   */
  private checkFinite(grammar: ParsedGrammar): void {
    const stuck = unfinishableRules(grammar);
    if (stuck.length === 0) return;
    const ref = stuck.map((name) => this.refTargets.get(name)).find((t) => t !== undefined);
    const cycle = ref ? `every value of ${ref.pointer} contains another one, without end` : "its values never end";
    if (stuck.includes("root")) throw new UnsupportedSchemaError("", `no value satisfies the schema: ${cycle}`);
    throw new UnsupportedSchemaError(ref?.targetPath ?? "", `no finite value satisfies it (${cycle}), so an answer that used it could never finish`);
  }

  /** Strict: refuse. Otherwise: note that the keyword at `path` is not enforced, and go on. */
  private relax(path: string, message: string): void {
    if (this.strict) throw new UnsupportedSchemaError(path, message);
    const key = `${path}\u0000${message}`;
    if (this.relaxedKeys.has(key)) return;
    this.relaxedKeys.add(key);
    this.relaxed.push({ path, message });
  }

  // ---------------------------------------------------------------------------------------------
  // Dispatch
  // ---------------------------------------------------------------------------------------------

  /** An atomic GBNF item matching exactly the values of `schema`. `left`: references entered
   *  since the last consumed character (to refuse left recursion). */
  private visit(schema: unknown, path: string, left: ReadonlySet<string>): string {
    if (++this.depth > this.limits.maxVisitDepth) {
      // Mostly a definition merged into itself at every level (allOf, or keywords beside a $ref,
      // whose merged text grows so no one rule can stand for it): name it, where it was first inlined.
      const [pointer, first] = [...this.inlinedAt].find(([p]) => (this.inlineCounts.get(p) ?? 0) >= 16) ?? [];
      if (pointer !== undefined) throw new UnsupportedSchemaError(first!, `recursive reference ${pointer} is merged with the keywords beside it (allOf, or siblings of $ref) at every level, so its expansion never ends; put those keywords inside the definition`);
      throw new SchemaLimitError(path, `schemas nest (through references too) more than ${this.limits.maxVisitDepth} deep`);
    }
    try {
      return this.visitInner(schema, path, left);
    } finally {
      this.depth--;
    }
  }

  private visitInner(schema: unknown, path: string, left: ReadonlySet<string>): string {
    if (schema === true) return this.anyValue();
    if (schema === false) throw new UnsupportedSchemaError(path, "the schema `false` matches no value");
    if (!isObject(schema)) throw new UnsupportedSchemaError(path, "a schema must be an object or a boolean");
    this.checkKeywords(schema, path);
    const keys = constraining(schema);

    if (has(schema, "$ref")) {
      if (keys.length === 1) return this.ref(schema.$ref, join(path, "$ref"), left);
      // 2019-09+ applies the siblings too; draft-07 ignores them. Enforcing both is valid under either.
      const { $ref, ...rest } = schema;
      return this.inliningRule(schema, path, left, (inner) => this.visit({ allOf: [{ $ref }, rest] }, path, inner));
    }
    if (has(schema, "allOf")) {
      // pydantic v1 writes a field that refers to a model and has a title or description as
      // {title, allOf: [{$ref}]}. Merging would inline the model, and a recursive one without end
      // (refused as nested too deep); as the reference itself it keeps its one rule.
      const sole = keys.length === 1 ? soleReference(schema.allOf) : -1;
      if (sole >= 0) return this.visit((schema.allOf as unknown[])[sole], join(join(path, "allOf"), sole), left);
      const build = (inner: ReadonlySet<string>) => {
        const { merged, inlined } = this.mergeAllOf(schema, path, inner);
        return this.visit(merged, path, new Set([...inner, ...inlined]));
      };
      const refers = Array.isArray(schema.allOf) && schema.allOf.some((part) => isObject(part) && has(part, "$ref"));
      return refers ? this.inliningRule(schema, path, left, build) : build(left);
    }
    if (has(schema, "anyOf") || has(schema, "oneOf")) {
      if (has(schema, "anyOf") && has(schema, "oneOf")) throw new UnsupportedSchemaError(join(path, "oneOf"), "anyOf and oneOf together are not supported");
      const key = has(schema, "anyOf") ? "anyOf" : "oneOf";
      const branches = schema[key];
      if (!Array.isArray(branches) || branches.length === 0) throw new UnsupportedSchemaError(join(path, key), "must be a non-empty array");
      const rest: Schema = {};
      for (const k of keys) if (k !== key) rest[k] = schema[k];
      if (key === "oneOf") this.checkExclusive(branches, join(path, key));
      // Branches that are only values (`{"const": …}`, `{"enum": […]}`, annotations aside) are one
      // enum of all their values, so that they share prefixes too.
      const values = Object.keys(rest).length === 0 ? valuesOnly(branches) : undefined;
      if (values) return this.enumExpr({ enum: values }, join(path, key));
      if (branches.length > this.limits.maxBranches)
        throw new SchemaLimitError(join(path, key), `${key} has ${branches.length} branches (limit ${this.limits.maxBranches})`);
      const build = (left: ReadonlySet<string>) => {
        const exprs = branches.map((branch, i) => {
          const p = join(join(path, key), i);
          if (Object.keys(rest).length === 0) return this.visit(branch, p, left);
          // Sibling keywords apply to every branch.
          const seen = new Set(left);
          const { merged, inlined } = this.mergeParts([{ schema: rest, path }, ...this.partsOf(branch, p, seen)], path);
          return this.visit(merged, p, new Set([...seen, ...inlined]));
        });
        return this.b.atom(hintOf(path, key), alt(...exprs));
      };
      // Siblings merged into a branch that refers to a definition inline it (see inliningRule).
      const refers = Object.keys(rest).length > 0 && branches.some((b) => isObject(b) && has(b, "$ref"));
      return refers ? this.inliningRule(schema, path, left, build) : build(left);
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
      if (REFUSED.has(key)) this.relax(join(path, key), `"${key}" is not supported`);
      else if (key === "propertyNames" && !isTrivialPropertyNames(s.propertyNames)) this.relax(join(path, key), `"propertyNames" is supported only when every string satisfies it`);
      else if (key === "nullable" && s.nullable === true) {
        this.relax(join(path, key), `OpenAPI "nullable" is not JSON Schema; use type: [..., "null"]`);
      } else if (!KNOWN.has(key)) {
        const meant = misspelledKeyword(key);
        this.relax(join(path, key), `unknown keyword "${key}"${meant ? ` (did you mean "${meant}"?)` : ""}`);
      }
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
    let pointer: string;
    try {
      pointer = decodeURIComponent(ref.slice(1));
    } catch {
      throw new UnsupportedSchemaError(path, `malformed percent-encoding in reference ${JSON.stringify(ref.slice(0, 200))}`);
    }
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

  /**
   * One rule per schema that inlines a reference with keywords beside it (`{$ref: A, maxProperties:
   * 1}`, or an allOf with a `$ref` part), keyed by its text: references are absolute, so the same
   * text is the same schema wherever it stands. A definition that holds such a schema inside itself
   * (A's `next: {$ref: A, maxProperties: 1}`) then meets the rule being defined and refers to it,
   * where inlining would repeat itself without end.
   */
  private inliningRule(schema: Schema, path: string, left: ReadonlySet<string>, build: (left: ReadonlySet<string>) => string): string {
    const key = `inline:${JSON.stringify(schema)}`;
    if (left.has(key)) throw new UnsupportedSchemaError(path, "left-recursive reference (the schema can reach itself without consuming input)");
    const known = this.inliningRules.get(key);
    if (known !== undefined) return known;
    const name = this.b.reserve(`ref-${hintOf(path)}`);
    this.inliningRules.set(key, name);
    this.b.define(name, build(new Set([...left, key])));
    return name;
  }

  /** One rule per referenced definition, so recursive definitions work. */
  private ref(ref: unknown, path: string, left: ReadonlySet<string>): string {
    let resolved;
    try {
      resolved = this.resolve(ref, path);
    } catch (e) {
      if (!(e instanceof UnsupportedSchemaError) || this.strict) throw e;
      this.relax(path, e.reason);
      return this.anyValue();
    }
    const { target, targetPath, pointer } = resolved;
    if (left.has(pointer)) throw new UnsupportedSchemaError(path, `left-recursive reference ${pointer} (it can reach itself without consuming input)`);
    const known = this.refNames.get(pointer);
    if (known !== undefined) return known;
    const name = this.b.reserve(pointer === "#" ? "schema" : `ref-${hintOf(targetPath)}`);
    this.refNames.set(pointer, name);
    this.refTargets.set(name, { pointer, targetPath });
    this.b.define(name, this.visit(target, targetPath, new Set([...left, pointer])));
    return name;
  }

  /**
   * A grammar can let a value through one branch or another, not require that exactly one branch
   * matches it. So `oneOf` is generated as `anyOf`, which is the same thing only when no value can
   * match two branches. That is checked here, conservatively: two branches are disjoint when their
   * JSON types cannot meet, when their const/enum values have none in common, when both require
   * a property whose const/enum values have none in common (the discriminated unions pydantic and
   * zod emit), or when one admits only closed objects without a key the other's objects must have.
   * Otherwise strict mode refuses the schema and relaxed mode reports the keyword.
   */
  private checkExclusive(branches: unknown[], path: string): void {
    const facts = branches.map((b) => this.branchFacts(b, path));
    const overlap = (i: number, j: number) =>
      this.relax(path, `branches ${i} and ${j} can match the same value, and only one may; give them distinct types, or a required property with distinct const values`);
    // The shapes long unions take are checked in one pass: every branch a list of values (an
    // annotated enum), or every branch an object tagged by the same required property.
    if (facts.every((f) => f.values)) {
      const owner = new Map<string, number>();
      for (const [i, f] of facts.entries())
        for (const v of f.values!) {
          const key = valueKey(v);
          const j = owner.get(key);
          if (j !== undefined && j !== i) return overlap(j, i);
          owner.set(key, i);
        }
      return;
    }
    const tag = [...(facts[0].tags?.keys() ?? [])].find((k) => facts.every((f) => f.tags?.has(k)));
    if (tag !== undefined) {
      const owner = new Map<string, number>();
      for (const [i, f] of facts.entries())
        for (const v of f.tags!.get(tag)!) {
          const key = valueKey(v);
          const j = owner.get(key);
          if (j !== undefined && j !== i) return overlap(j, i);
          owner.set(key, i);
        }
      return;
    }
    // Otherwise pairwise, which a few branches (distinct types, a handful of shapes) afford.
    if (facts.length > 64) return this.relax(path, `${facts.length} branches that are not all tagged or all values are too many to prove apart`);
    for (let i = 0; i < facts.length; i++) for (let j = i + 1; j < facts.length; j++) if (!disjointFacts(facts[i], facts[j])) return overlap(i, j);
  }

  /** What a oneOf branch says about its values, for checkExclusive ($ref followed, a few levels). */
  private branchFacts(schema: unknown, path: string, depth = 0): BranchFacts {
    const target = this.followRef(schema, path, depth);
    if (!isObject(target)) return {};
    const facts: BranchFacts = {};
    const values = constValues(target);
    if (values) facts.values = values;
    const t = target.type;
    const types = typeof t === "string" ? [t] : Array.isArray(t) ? t.filter((x): x is string => typeof x === "string") : undefined;
    facts.types = types ? new Set(types.map((x) => (x === "integer" ? "number" : x))) : values ? new Set(values.map(jsonType)) : undefined;
    const props = isObject(target.properties) ? target.properties : undefined;
    const required = Array.isArray(target.required) ? target.required.filter((k): k is string => typeof k === "string") : [];
    // A required property constrains objects only: a branch that also admits null (or any other
    // type) can meet another there, whatever its tag says.
    const objectsOnly = facts.types === undefined ? !values : facts.types.size === 1 && facts.types.has("object");
    if (props && depth < 4 && objectsOnly) {
      for (const k of required) {
        const v = constValues(this.followRef(props[k], path, depth + 1));
        if (v) (facts.tags ??= new Map()).set(k, v);
      }
    }
    if (objectsOnly) {
      facts.required = new Set(required);
      // A closed object (no other keys, none by pattern) has only its declared, not-false keys.
      if (target.additionalProperties === false && target.patternProperties === undefined)
        facts.allowed = new Set(Object.entries(props ?? {}).filter(([, sub]) => sub !== false).map(([k]) => k));
    }
    return facts;
  }

  /** `schema`, or what its (sibling-free) `$ref` points to, followed a few times. */
  private followRef(schema: unknown, path: string, depth: number): unknown {
    let at = schema;
    for (let hops = 0; hops < 8 && isObject(at) && typeof at.$ref === "string" && Object.keys(at).length === 1 && depth < 8; hops++) {
      try {
        at = this.resolve(at.$ref, path).target;
      } catch {
        return undefined;
      }
    }
    return at;
  }

  /**
   * The schemas an allOf element stands for, with $ref and nested allOf flattened. `inlined`
   * gathers every reference expanded; `enclosing` holds those being expanded around this one (and
   * those entered before, without consuming input): only a reference back to one of them is
   * recursion. The same reference met again beside itself (`allOf: [{$ref: B}, {$ref: B}]`, or B
   * reached through two parts) adds nothing, since allOf of a schema with itself is that schema,
   * so it is expanded once: a diamond of references is no cycle, and it stays linear.
   */
  private partsOf(schema: unknown, path: string, inlined: Set<string>, enclosing: ReadonlySet<string> = new Set(inlined)): Array<{ schema: Schema; path: string }> {
    if (schema === true) return [];
    if (schema === false) throw new UnsupportedSchemaError(path, "the schema `false` matches no value");
    if (!isObject(schema)) throw new UnsupportedSchemaError(path, "a schema must be an object or a boolean");
    this.checkKeywords(schema, path);
    const out: Array<{ schema: Schema; path: string }> = [];
    const { $ref, allOf, ...rest } = schema;
    if ($ref !== undefined) {
      const refPath = join(path, "$ref");
      const { target, targetPath, pointer } = this.resolve($ref, refPath);
      if (enclosing.has(pointer)) throw new UnsupportedSchemaError(refPath, `recursive reference ${pointer} inside allOf`);
      if (!inlined.has(pointer)) {
        inlined.add(pointer);
        this.inlineCounts.set(pointer, (this.inlineCounts.get(pointer) ?? 0) + 1);
        if (!this.inlinedAt.has(pointer)) this.inlinedAt.set(pointer, refPath);
        out.push(...this.partsOf(target, targetPath, inlined, new Set([...enclosing, pointer])));
      }
    }
    if (allOf !== undefined) {
      if (!Array.isArray(allOf) || allOf.length === 0) throw new UnsupportedSchemaError(join(path, "allOf"), "must be a non-empty array");
      allOf.forEach((el, i) => out.push(...this.partsOf(el, join(join(path, "allOf"), i), inlined, enclosing)));
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
    mergeArrayPositions(expanded, acc);
    for (const { schema, path: p } of expanded) {
      for (const [key, value] of Object.entries(schema)) {
        if (isAnnotation(key) || key === "$defs" || key === "definitions" || key === "additionalProperties") continue;
        if (key === "items" || key === "prefixItems") continue;
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
          case "minLength": case "minItems": case "minProperties": case "minimum":
            acc[key] = Math.max(Number(prev), Number(value));
            break;
          case "maxLength": case "maxItems": case "maxProperties": case "maximum":
            acc[key] = Math.min(Number(prev), Number(value));
            break;
          case "multipleOf": {
            // Both: the multiples of their least common multiple.
            const ok = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v > 0;
            if (!ok(prev) || !ok(value)) throw new UnsupportedSchemaError(where, "multipleOf must be a number greater than 0");
            const both = commonMultiple(prev, value);
            if (both === undefined) throw new UnsupportedSchemaError(where, `multipleOf ${prev} and ${value} have no common multiple that is a number`);
            acc.multipleOf = both;
            break;
          }
          case "exclusiveMinimum": case "exclusiveMaximum":
            if (typeof prev !== "number" || typeof value !== "number") throw new UnsupportedSchemaError(where, "cannot merge boolean exclusive bounds");
            acc[key] = key === "exclusiveMinimum" ? Math.max(prev, value) : Math.min(prev, value);
            break;
          case "enum":
            if (!Array.isArray(prev) || !Array.isArray(value)) throw new UnsupportedSchemaError(where, "enum must be an array");
            acc.enum = prev.filter((x) => value.some((y) => deepEqual(x, y)));
            break;
          case "pattern": {
            // Both must match: kept as a list, intersected as automata (stringGrammar).
            const all = [...new Set([...patternsOf(acc, where), ...patternsOf(schema, where)])];
            if (all.length === 1) acc.pattern = all[0];
            else {
              MERGED_PATTERNS.add(all);
              acc.pattern = all;
            }
            break;
          }
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
          case "pattern": return typeof v !== "string" || patternsOf(s, join(path, key)).every((p) => this.patternMatcher(p, join(path, key))(v));
          case "minimum": return typeof v !== "number" || v >= Number(limit);
          case "maximum": return typeof v !== "number" || v <= Number(limit);
          case "exclusiveMinimum": return typeof v !== "number" || typeof limit !== "number" || v > limit;
          case "exclusiveMaximum": return typeof v !== "number" || typeof limit !== "number" || v < limit;
          case "multipleOf": return typeof v !== "number" || isDecimalMultiple(v, Number(limit));
          default: throw new Error("unreachable");
        }
      };
      if (ANNOTATION_LIKE_NEXT_TO_ENUM.has(key) || (key === "format" && typeof limit === "string" && ANY_STRING_FORMATS.has(limit))) continue;
      if (key === "multipleOf" && (typeof limit !== "number" || !Number.isFinite(limit) || limit <= 0)) {
        throw new UnsupportedSchemaError(join(path, key), "multipleOf must be a number greater than 0");
      }
      if (!["minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"].includes(key)) {
        this.relax(join(path, key), `"${key}" next to enum/const is not supported`);
        continue;
      }
      if ((key === "exclusiveMinimum" || key === "exclusiveMaximum") && typeof limit === "boolean") {
        this.relax(join(path, key), `boolean "${key}" next to enum/const is not supported`);
        continue;
      }
      values = values.filter(check);
    }
    if (values.length === 0) throw new UnsupportedSchemaError(where, "no value satisfies the schema");
    // Shared prefixes factored out (see literalAlternatives): what each step costs llama.cpp grows
    // with the alternatives still open, not with the enum's size.
    const hint = hintOf(path, "enum");
    return this.b.atom(hint, literalAlternatives(values.map((v) => JSON.stringify(v)), (expr) => this.b.rule(hint, expr)));
  }

  private nonNegativeInt(s: Schema, key: string, path: string): number | undefined {
    const v = s[key];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new UnsupportedSchemaError(join(path, key), `${key} must be a non-negative integer`);
    if (v > this.limits.maxRepeat) throw new SchemaLimitError(join(path, key), `${key} ${v} is above the limit of ${this.limits.maxRepeat}`);
    return v;
  }

  private readonly matchers = new Map<string, (text: string) => boolean>();

  /**
   * A linear-time matcher for a pattern, as JSON Schema reads it (a search): enum values are written
   * as given, so one that contains a match is valid and must not be filtered out.
   */
  private patternMatcher(pattern: unknown, where: string): (text: string) => boolean {
    if (typeof pattern !== "string") throw new UnsupportedSchemaError(where, "pattern must be a string");
    let m = this.matchers.get(pattern);
    if (m === undefined) {
      const node = this.parsePatternAt(pattern, where, true);
      if (node === null) return () => true; // relaxed
      try {
        m = langMatcher(langOfRegex(node), this.automatonLimits());
      } catch (e) {
        if (!(e instanceof AutomatonLimitError)) throw e;
        this.relax(where, e.message);
        return () => true;
      }
      this.matchers.set(pattern, m);
    }
    return m;
  }

  private automatonLimits() {
    return { maxNfaStates: DEFAULT_AUTOMATON_LIMITS.maxNfaStates, maxDfaStates: this.limits.maxAutomatonStates };
  }

  /** The parsed pattern; null when it is unsupported and relaxed. */
  private parsePatternAt(pattern: string, where: string, search = false): RegexNode | null {
    try {
      return parsePattern(pattern, { maxPatternLength: this.limits.maxPatternLength, maxGroupDepth: this.limits.maxPatternDepth, maxRepeat: this.limits.maxRepeat }, search);
    } catch (e) {
      if (e instanceof PatternLimitError) throw new SchemaLimitError(where, e.message);
      if (e instanceof PatternError) {
        this.relax(where, e.message);
        return null;
      }
      throw e;
    }
  }

  /**
   * A string schema's grammar. A pattern that parsed but cannot be emitted (a character class that
   * matches nothing, say) is the schema's fault: a 400 naming it, not a server error.
   */
  private stringExpr(s: Schema, path: string): string {
    try {
      return this.stringGrammar(s, path);
    } catch (e) {
      if (e instanceof PatternError) throw new UnsupportedSchemaError(join(path, "pattern"), e.message);
      throw e;
    }
  }

  private stringGrammar(s: Schema, path: string): string {
    const minLength = this.nonNegativeInt(s, "minLength", path) ?? 0;
    let maxLength = this.nonNegativeInt(s, "maxLength", path);
    if (maxLength !== undefined && maxLength < minLength) throw new UnsupportedSchemaError(join(path, "maxLength"), "maxLength is below minLength");
    const quoted = (expr: string) => this.b.rule(hintOf(path, "string"), seq('"\\""', expr, '"\\""'));
    const hint = hintOf(path, "pattern");

    // The patterns, parsed (none, one, or several that allOf merged; relaxed ones left out).
    const patterns: RegexNode[] = [];
    const patternTexts: string[] = [];
    for (const text of patternsOf(s, join(path, "pattern"))) {
      // A library's own pattern for the format, which the format grammar implies (tested): the
      // format alone is enforced (zod's iso.duration pattern has lookaheads inside).
      if (typeof s.format === "string" && LIBRARY_FORMAT_PATTERNS[s.format]?.includes(text)) continue;
      const node = this.parsePatternAt(text, join(path, "pattern"));
      if (node !== null) {
        patterns.push(node);
        patternTexts.push(text);
      }
    }
    // The one pattern, for the cheap paths below (several are intersected as automata).
    const pattern = patterns.length === 1 ? patterns[0] : null;
    // The format, when it constrains anything beyond the pattern.
    let format: string | null = null;
    if (s.format !== undefined) {
      const where = join(path, "format");
      if (typeof s.format !== "string") this.relax(where, "format must be a string");
      else if (ANY_STRING_FORMATS.has(s.format)) format = null;
      else if (PATTERN_DEFINED_FORMATS.has(s.format) && s.pattern !== undefined) format = null; // the pattern is its definition
      else if (!Object.prototype.hasOwnProperty.call(FORMAT_REGEX, s.format)) {
        this.relax(where, `format ${JSON.stringify(s.format)} is not supported (supported: ${Object.keys(FORMAT_REGEX).join(", ")}, ${[...ANY_STRING_FORMATS].join(", ")})`);
      } else format = s.format;
    }

    if (patterns.length === 0 && format === null) {
      if (minLength === 0 && maxLength === undefined) return this.string();
      return quoted(this.b.repeat(hintOf(path, "chars"), this.char(), minLength, maxLength));
    }
    const lengthsAddNothing = (min: number, max: number) => minLength <= min && (maxLength === undefined || maxLength >= max);

    // Cheap paths first: one format with its hand-written grammar, or one plain pattern.
    if (patterns.length === 0 && format !== null && isSupportedFormat(format)) {
      const bounded = (format === "email" || format === "uri") && maxLength !== undefined;
      const f = formatGrammar(this.b, format, bounded ? maxLength : undefined);
      if (f === null) {
        this.relax(join(path, "maxLength"), `maxLength ${maxLength} is too short for format ${format}`);
        return this.stringExpr({ ...s, maxLength: undefined }, path);
      }
      if (lengthsAddNothing(f.minLength, f.maxLength)) return quoted(f.expr);
      if (bounded) {
        this.relax(join(path, f.minLength < minLength ? "minLength" : "maxLength"), `length bounds together with format ${format} are not supported beyond its bounded subset`);
        return quoted(f.expr);
      }
    }
    // (A pattern whose grammar would read a text many ways at once takes the automaton below.)
    if (pattern !== null && format === null && !hasLookahead(pattern) && !readsAmbiguously(pattern)) {
      const [lo, hi] = regexLengthRange(pattern);
      if (lengthsAddNothing(lo, hi)) return quoted(emitRegex(this.b, pattern, hint));
      // A single repeated class (^[a-z]+$, ^\d{3,}$): fold the bounds into the count.
      const body = pattern.kind === "seq" && pattern.items.length === 1 ? pattern.items[0] : pattern;
      if (body.kind === "rep" && body.node.kind === "set") {
        const min = Math.max(body.min, minLength);
        const max = body.max === undefined ? maxLength : maxLength === undefined ? body.max : Math.min(body.max, maxLength);
        // Bounds the full match cannot meet may still hold for a search (`\d{3}` with minLength 5
        // allows "12345"): the automaton below decides.
        if (max === undefined || max >= min) return quoted(emitRegex(this.b, { kind: "rep", node: body.node, min, max }, hint));
      }
    }

    // Everything else: the intersection, as an automaton.
    const parts: Array<{ lang: Lang; key: string }> = [];
    if (format !== null) parts.push({ lang: { kind: "re", node: parsePattern(FORMAT_REGEX[format]) }, key: "format" });
    for (const p of patterns) parts.push({ lang: langOfRegex(p), key: "pattern" });
    const lengths = (min: number, max: number | undefined) =>
      ({ lang: { kind: "re", node: { kind: "rep", node: { kind: "set", set: ALL_CHARS }, min, max } }, key: max !== undefined ? "maxLength" : "minLength" }) as const;
    if (minLength > 0 || maxLength !== undefined) parts.push(lengths(minLength, maxLength));
    // Email or uri with a maxLength and a pattern (zod's z.email().max(n) emits its own email
    // pattern): the exact product of the format, the pattern and a length counter passes the
    // automaton's bound at a few dozen characters. The bounded subset the format alone uses with a
    // maxLength (string-formats.ts) is small, implies the maxLength, and its intersection with the
    // pattern stays small: every string of it is still an email/uri of at most maxLength.
    let bounded = false;
    const boundFormat = (): boolean => {
      if (bounded || maxLength === undefined || (format !== "email" && format !== "uri")) return false;
      const re = boundedFormatRegex(format, maxLength);
      if (re === null) return false;
      bounded = true;
      parts[0] = { lang: { kind: "re", node: parsePattern(re) }, key: "format" };
      if (parts[parts.length - 1].key.endsWith("Length")) parts.pop();
      if (minLength > BOUNDED_FORMAT_MIN_LENGTH) parts.push(lengths(minLength, undefined));
      return true;
    };
    // A length bound far above what the other parts need multiplies the automaton by itself:
    // refuse it before building (the product would pass maxAutomatonStates anyway).
    if (parts.length > 1 && maxLength !== undefined && maxLength > this.limits.maxAutomatonStates / 4 && !boundFormat()) {
      const others = parts.slice(0, -1).map((p) => (p.lang.kind === "re" ? regexLengthRange(p.lang.node)[1] : Infinity));
      if (others.some((m) => m > maxLength!)) {
        const dropped = parts.pop()!;
        this.relax(join(path, dropped.key), `${dropped.key} ${maxLength} together with ${parts.map((p) => p.key).join(" and ")} needs too large an automaton`);
        maxLength = undefined;
      } else if (minLength === 0) parts.pop(); // implied by the other parts
    }
    // Each pattern is first read as a full match (the strings it gives are the pattern's own, not
    // padded with arbitrary text); when that leaves nothing, as JSON Schema reads it, a search
    // (`[A-Z]` and `[0-9]` with minLength 8, zod's password rules, match no single full string).
    let searching = false;
    for (;;) {
      try {
        const key = JSON.stringify([format, bounded, s.pattern, minLength, maxLength, parts.map((p) => p.key), searching]);
        const dfa = cachedDfa(key, () => (parts.length === 1 ? parts[0].lang : { kind: "and", parts: parts.map((p) => p.lang) }), this.automatonLimits());
        if (dfaLengthRange(dfa) === null) {
          if (!searching && parts.some((p) => p.key === "pattern")) {
            searching = true;
            let i = 0;
            for (const p of parts) if (p.key === "pattern") p.lang = langOfRegex(this.parsePatternAt(patternTexts[i++], join(path, "pattern"), true)!);
            continue;
          }
          const keys = parts.map((p) => p.key);
          throw new UnsupportedSchemaError(join(path, keys[keys.length - 1]), keys.length === 1 ? `no string satisfies ${keys[0]}` : `no string satisfies ${keys.join(" and ")} together`);
        }
        return quoted(dfaToGbnf(this.b, dfa, hint)!);
      } catch (e) {
        if (!(e instanceof AutomatonLimitError)) throw e;
        if (boundFormat()) continue;
        // Too large to intersect exactly: relax the last constraint (lengths, then the format).
        const dropped = parts.pop()!;
        const others = parts.map((p) => p.key).join(" and ");
        this.relax(join(path, dropped.key), others === "" ? e.message : `${dropped.key} together with ${others}: ${e.message}`);
        if (parts.length === 0) return this.string();
        if (dropped.key.endsWith("Length")) maxLength = undefined;
      }
    }
  }

  private numberExpr(s: Schema, path: string, integer: boolean): string {
    const num = (key: string): number | undefined => {
      const v = s[key];
      if (v === undefined || typeof v === "boolean") return undefined;
      if (typeof v !== "number" || !Number.isFinite(v)) throw new UnsupportedSchemaError(join(path, key), `${key} must be a number`);
      return v;
    };
    const step = s.multipleOf;
    if (step !== undefined && (typeof step !== "number" || !Number.isFinite(step) || step <= 0)) {
      throw new UnsupportedSchemaError(join(path, "multipleOf"), "multipleOf must be a number greater than 0");
    }
    if (step === 1) integer = true; // a number that is a multiple of 1 is an integer
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
    if (typeof step === "number" && step !== 1) {
      const kind = integer ? "integer" : "number";
      try {
        const dfa = multiplesDfa(step, lower, upper, integer, this.limits.maxAutomatonStates);
        if (dfa === null) throw new UnsupportedSchemaError(join(path, "multipleOf"), `no ${kind} that is a multiple of ${step} satisfies the bounds`);
        return this.b.atom(hintOf(path, integer ? "int" : "num"), dfaToGbnf(this.b, dfa, hintOf(path, "multiple"), plainChars)!);
      } catch (e) {
        if (!(e instanceof AutomatonLimitError)) throw e;
        this.relax(join(path, "multipleOf"), e.message); // non-strict: the bounds alone
      }
    }
    if (!lower && !upper) return integer ? this.b.shared("integer", () => boundedNumber(this.b, undefined, undefined, true)!) : this.unboundedNumber();
    const expr = boundedNumber(this.b, lower, upper, integer);
    if (expr === null) {
      const key = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"].find((k) => has(s, k))!;
      const kind = integer ? "integer" : "number";
      throw new UnsupportedSchemaError(
        join(path, key),
        boundsHoldAsDoubles(lower, upper, integer)
          ? `no ${kind} is certain to satisfy the bounds: they arrive as doubles, and past 2^53 (or 15 significant digits) a double stands for every number that rounds to it, so the bounds must leave room for one more double between them`
          : `no ${kind} satisfies the bounds`,
      );
    }
    return this.b.atom(hintOf(path, integer ? "int" : "num"), expr);
  }

  /** A JSON string key that is none of `names` (written without escapes). */
  private keyExcluding(names: string[]): string {
    if (names.length === 0) return this.string();
    type Trie = { terminal: boolean; children: Map<number, Trie>; expr?: string };
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
    // Post-order without recursion (a name may be very long).
    const order: Trie[] = [];
    const stack: Trie[] = [root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      order.push(node);
      for (const child of node.children.values()) stack.push(child);
    }
    for (let i = order.length - 1; i >= 0; i--) {
      const node = order[i];
      const parts: string[] = [];
      if (!node.terminal) parts.push('""');
      const others = setMinus(JSON_RAW_CHARS, cpSet(...node.children.keys()));
      parts.push(seq(charClass(others), `${keyChar}*`));
      for (const [cp, child] of node.children) parts.push(seq(literal(String.fromCodePoint(cp)), child.expr!));
      node.expr = this.b.rule("key-other", alt(...parts));
      for (const child of node.children.values()) child.expr = undefined;
    }
    return this.b.rule("key-other", seq('"\\""', root.expr!, '"\\""'));
  }

  private objectExpr(s: Schema, path: string): string {
    const ws = this.ws;
    const sep = this.sep();
    const props = s.properties ?? {};
    if (!isObject(props)) throw new UnsupportedSchemaError(join(path, "properties"), "properties must be an object");
    const requiredList = s.required ?? [];
    if (!Array.isArray(requiredList) || requiredList.some((r) => typeof r !== "string")) {
      throw new UnsupportedSchemaError(join(path, "required"), "required must be an array of strings");
    }
    const required = new Set(requiredList as string[]);
    const entries: Array<{ name: string; req: boolean; value: string }> = [];
    const excluded: string[] = [];
    for (const [name, sub] of Object.entries(props)) {
      excluded.push(name);
      const req = required.has(name);
      const p = join(join(path, "properties"), name);
      if (sub === false) {
        if (req) throw new UnsupportedSchemaError(p, "a required property cannot have the schema `false`");
        continue;
      }
      entries.push({ name, req, value: this.visit(sub, p, new Set()) });
    }
    let minP = this.nonNegativeInt(s, "minProperties", path) ?? 0;
    const maxP = this.nonNegativeInt(s, "maxProperties", path);
    const addl = s.additionalProperties;
    // The value of a property the schema does not declare (null: none is allowed).
    let addlValue: string | null;
    if (addl === false) addlValue = null;
    else if (addl === undefined || addl === true) addlValue = this.anyValue();
    else addlValue = this.visit(addl, join(path, "additionalProperties"), new Set());
    for (const name of required) {
      if (has(props, name)) continue;
      if (addlValue === null) throw new UnsupportedSchemaError(join(path, "required"), `"${name}" is required but not declared, and additionalProperties is false`);
      excluded.push(name);
      entries.push({ name, req: true, value: addlValue });
    }
    // Absent additionalProperties next to `properties`: generate no other keys (see the header),
    // unless minProperties needs more members than there are names.
    const generateAdditional = addlValue !== null && (addl !== undefined || !has(s, "properties") || minP > entries.length);
    const kvs = entries.map((e) => ({ req: e.req, kv: this.b.rule(hintOf(join(path, e.name), "kv"), seq(literal(JSON.stringify(e.name)), ws, '":"', ws, e.value)) }));
    const addlKv = !generateAdditional ? null : this.b.rule(hintOf(path, "additional-kv"), seq(this.keyExcluding(excluded), ws, '":"', ws, addlValue!));
    const n = kvs.length;
    const requiredCount = kvs.filter((k) => k.req).length;
    // At most one additional property counts towards minProperties (see the header): an object
    // that needs more of them (pydantic's Dict[str, int] with min_length=2) exists, but the grammar
    // cannot keep their keys apart. Not enforced past that (strict: refused), rather than called
    // unsatisfiable.
    if (addlKv !== null && minP > n + 1 && (maxP === undefined || maxP >= minP)) {
      this.relax(join(path, "minProperties"), `minProperties ${minP} needs ${minP - n} properties besides the declared ones, and only one of them can be enforced (two generated keys could be equal)`);
      minP = n + 1;
    }

    const counting = minP > requiredCount || (maxP !== undefined && (addlKv !== null || maxP < n));
    const hint = hintOf(path, "members");
    const named = (body: string): string => (body === "" || body === '""' ? "" : this.b.atom(hint, body));

    // body: the members of a non-empty object (null: no non-empty object is allowed). Built from
    // the last property backwards as a chain of rules, so its size is linear in the properties.
    let body: string | null;
    let emptyAllowed: boolean;
    if (!counting) {
      // tail: what may follow once a member is written, from property i on.
      let tail = addlKv ? `(${seq(sep, addlKv)})*` : "";
      // first: the members when none is written before property i.
      let first: string | null = addlKv ? seq(addlKv, tail) : null;
      // Whether a required property is still to come (from property i on).
      let mustFollow = false;
      for (let i = n - 1; i >= 0; i--) {
        const withIt = named(seq(kvs[i].kv, tail));
        first = kvs[i].req || first === null ? withIt : this.b.rule(hint, alt(withIt, first));
        mustFollow ||= kvs[i].req;
        // A separator then first(i), rather than "property i or nothing, then tail(i + 1)": a rule
        // that may start with the next one costs llama.cpp a walk down the whole chain when it
        // loads the grammar (load-cost.ts), and this way only `first` chains.
        tail = named(mustFollow ? seq(sep, first) : opt(seq(sep, first)));
      }
      body = first;
      emptyAllowed = requiredCount === 0;
    } else {
      // Same shape, tracking c = members written so far (clamped at minP when there is no max).
      const cMax = maxP ?? minP;
      if ((n + 1) * (cMax + 1) > this.limits.maxRules) {
        throw new SchemaLimitError(join(path, maxP !== undefined ? "maxProperties" : "minProperties"), `${n} properties with ${maxP !== undefined ? `maxProperties ${maxP}` : `minProperties ${minP}`} need more than ${this.limits.maxRules} rules`);
      }
      const clamp = (c: number) => (maxP === undefined ? Math.min(c, minP) : c);
      // after[c]: what may follow from property i on, once c members are written.
      const atEnd = (c: number): string | null => {
        const kmin = Math.max(0, minP - c);
        const kmax = maxP === undefined ? undefined : maxP - c;
        if (kmax !== undefined && kmax < kmin) return null;
        if (addlKv === null) return kmin === 0 ? "" : null;
        if (kmin >= 2) return null; // two additional keys could collide
        return kmax === 0 ? "" : this.b.repeat(`${hint}-more`, seq(sep, addlKv), kmin, kmax);
      };
      let after: Array<string | null> = [];
      for (let c = 0; c <= cMax; c++) after.push(atEnd(c));
      let first: string | null;
      if (addlKv === null || minP >= 2 || (maxP !== undefined && maxP < 1)) first = null;
      else first = seq(addlKv, this.b.repeat(`${hint}-more`, seq(sep, addlKv), 0, maxP === undefined ? undefined : maxP - 1));
      for (let i = n - 1; i >= 0; i--) {
        // first(i) uses after(i + 1, 1), the table before this step.
        const rest1 = maxP === undefined || maxP >= 1 ? after[clamp(1)] : null;
        const withFirst = rest1 === null ? null : seq(kvs[i].kv, rest1);
        if (kvs[i].req) first = withFirst;
        else if (withFirst !== null) first = first === null ? withFirst : this.b.rule(hint, alt(withFirst, first));
        const next: Array<string | null> = [];
        for (let c = 0; c <= cMax; c++) {
          const rest = maxP === undefined || c + 1 <= maxP ? after[clamp(c + 1)] : null;
          const withIt = rest === null ? null : seq(sep, kvs[i].kv, rest);
          const without = kvs[i].req ? null : after[c];
          const alts = [withIt, without].filter((x): x is string => x !== null);
          next.push(alts.length === 0 ? null : alts.length === 1 ? named(alts[0]) : this.b.rule(hint, alt(...alts.map((a) => (a === "" ? '""' : a)))));
        }
        after = next;
      }
      body = first;
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

  /**
   * uniqueItems over items that are a list of values (`{enum: [...]}`, `{const: …}`, z.enum()):
   * each value at most once, in the enum's order — a subset of the unique arrays (any order would
   * need a rule per subset). Undefined when the items are not such a list, or when counting the
   * items against minItems/maxItems would take too many rules.
   */
  private uniqueValuesArray(items: unknown, itemsPath: string, minItems: number, maxItems: number | undefined, path: string): string | undefined {
    const target = this.followRef(items, itemsPath, 0);
    if (!isObject(target) || !constraining(target).every((k) => k === "enum" || k === "const" || k === "type")) return undefined;
    let values = constValues(target);
    if (!values) return undefined;
    if (has(target, "type")) {
      const types = Array.isArray(target.type) ? target.type : [target.type];
      values = values.filter((v) => types.includes(jsonType(v)) || (types.includes("integer") && Number.isInteger(v)));
    }
    const seen = new Set<string>();
    values = values.filter((v) => !seen.has(valueKey(v)) && seen.add(valueKey(v)));
    const k = values.length;
    const max = Math.min(maxItems ?? k, k);
    if (minItems > max) throw new UnsupportedSchemaError(join(path, "minItems"), `no array of distinct values has ${minItems} items: the items allow only ${k} distinct value${k === 1 ? "" : "s"}`);
    // With room for every value, only "reached minItems yet" (and "none yet") matter: counts clamp.
    const clamp = (c: number) => (max === k ? Math.min(c, Math.max(minItems, 1)) : c);
    if (k * (clamp(max) + 1) > 4096) return undefined;
    const hint = hintOf(path, "unique");
    const sep = this.sep();
    const lits = values.map((v) => literal(JSON.stringify(v)));
    // state(i, c): the rest of the array once c values are written, choosing from value i on; with
    // c = 0 at least one value is still to be written. Null: no way to finish.
    const memo = new Map<string, string | null>();
    const state = (i: number, c: number): string | null => {
      const key = `${i}:${c}`;
      if (memo.has(key)) return memo.get(key)!;
      let out: string | null;
      if (i === k) out = c > 0 && c >= minItems ? '""' : null;
      else {
        const take = c < max ? state(i + 1, clamp(c + 1)) : null;
        const alts = [take === null ? null : seq(c === 0 ? "" : sep, lits[i], take === '""' ? "" : take), state(i + 1, c)].filter((x): x is string => x !== null);
        out = alts.length === 0 ? null : this.b.rule(hint, alt(...alts));
      }
      memo.set(key, out);
      return out;
    };
    const body = state(0, 0);
    const ws = this.ws;
    if (body === null) return this.b.rule(hint, seq('"["', ws, '"]"'));
    return this.b.rule(hint, minItems === 0 ? seq('"["', ws, opt(seq(body, ws)), '"]"') : seq('"["', ws, body, ws, '"]"'));
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
      const unique = prefix.length === 0 && s.additionalItems === undefined ? this.uniqueValuesArray(rest, restPath, minItems, maxItems, path) : undefined;
      if (unique !== undefined) return unique;
      this.relax(join(path, "uniqueItems"), "uniqueItems is supported only for items that are a list of values (enum/const), or with maxItems ≤ 1");
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
    // tail: what may follow once i ≥ 1 items are written. Past the prefix items, the rest schema's
    // items, counted against what minItems and maxItems leave.
    const restFrom = (i: number): string => {
      if (restExpr === null) return "";
      const more = this.b.rule(`${hint}-more`, seq(sep, restExpr));
      return this.b.repeat(`${hint}-more`, more, Math.max(0, minItems - i), maxItems === undefined ? undefined : maxItems - i);
    };
    let tail = restFrom(Math.max(k, 1));
    // Then the prefix items from the last one backwards, as a chain of rules: item i's rule is the
    // separator, the item and the name of what follows it (optional once minItems is met). Writing
    // what follows inside item i's own group instead nested the groups as deep as there are items,
    // which llama.cpp's grammar parser refuses from about 1,000 (a 500 on 1,000 optional items), and
    // made the text, and the time to build it, grow with the square of the items (20,000 required
    // items held the compile worker for 5 s). A chain is linear and never nests; the rule each item
    // ends on is its last element, so llama.cpp's stacks do not grow along it either.
    for (let i = k - 1; i >= 1; i--) {
      const step = this.b.rule(`${hint}-item`, seq(sep, itemExprs[i], tail));
      tail = i >= minItems ? opt(step) : step;
    }
    const first = k > 0 ? seq(itemExprs[0], tail) : restExpr !== null ? seq(restExpr, tail) : null;
    if (first === null) return this.b.rule(hint, seq('"["', ws, '"]"'));
    if (minItems >= 1) return this.b.rule(hint, seq('"["', ws, first, ws, '"]"'));
    return this.b.rule(hint, seq('"["', ws, opt(seq(first, ws)), '"]"'));
  }
}

/** Keywords a value-only branch may carry beside const/enum without saying more about the value. */
const VALUE_BRANCH_ANNOTATIONS = new Set(["title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"]);

/** All values of anyOf/oneOf branches that are each just `const` or `enum`; undefined if any is more. */
function valuesOnly(branches: unknown[]): unknown[] | undefined {
  const values: unknown[] = [];
  for (const b of branches) {
    if (typeof b !== "object" || b === null || Array.isArray(b)) return undefined;
    const keys = Object.keys(b);
    const own = b as Record<string, unknown>;
    if (!keys.every((k) => k === "const" || k === "enum" || VALUE_BRANCH_ANNOTATIONS.has(k))) return undefined;
    if (Object.hasOwn(own, "const") && Object.hasOwn(own, "enum")) return undefined;
    if (Object.hasOwn(own, "const")) values.push(own.const);
    else if (Array.isArray(own.enum) && own.enum.length > 0) values.push(...own.enum);
    else return undefined;
  }
  return values;
}

/** What checkExclusive knows of a oneOf branch. */
interface BranchFacts {
  /** JSON types it admits ("integer" counted as "number"); undefined: any. */
  types?: Set<string>;
  /** The only values it admits (const/enum). */
  values?: unknown[];
  /** Required properties limited to const/enum values. */
  tags?: Map<string, unknown[]>;
  /** Set when it admits objects only: the properties every value has. */
  required?: Set<string>;
  /** Set when it admits only objects with no keys but these (additionalProperties: false). */
  allowed?: Set<string>;
}

function disjointFacts(a: BranchFacts, b: BranchFacts): boolean {
  if (a.types && b.types && ![...a.types].some((t) => b.types!.has(t))) return true;
  // Objects that must have a key the other branch's closed objects cannot have (zod's z.xor of
  // strict objects with different keys).
  const excludes = (closed: BranchFacts, other: BranchFacts) => closed.allowed !== undefined && [...(other.required ?? [])].some((k) => !closed.allowed!.has(k));
  if (excludes(a, b) || excludes(b, a)) return true;
  if (a.values && b.values && !sharesValue(a.values, b.values)) return true;
  for (const [k, va] of a.tags ?? []) {
    const vb = b.tags?.get(k);
    if (vb && !sharesValue(va, vb)) return true;
  }
  return false;
}

function constValues(schema: unknown): unknown[] | undefined {
  if (!isObject(schema)) return undefined;
  if (has(schema, "const")) return [schema.const];
  if (Array.isArray(schema.enum)) return schema.enum;
  return undefined;
}

function sharesValue(a: unknown[], b: unknown[]): boolean {
  const keys = new Set(a.map(valueKey));
  return b.some((v) => keys.has(valueKey(v)));
}

/** A JSON value's identity: equal values (objects in any key order) have equal keys. */
function valueKey(v: unknown): string {
  try {
    return stableStringify(v, new Set());
  } catch {
    return JSON.stringify(v) ?? "null";
  }
}

function jsonType(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v === "object" ? "object" : typeof v === "bigint" ? "number" : typeof v;
}

function resolveLimits(opts: JsonSchemaToGbnfOptions): SchemaLimits {
  const limits = { ...DEFAULT_SCHEMA_LIMITS, ...(opts.limits ?? {}) };
  for (const [k, v] of Object.entries(limits)) {
    if (typeof v !== "number" || !(v >= 0)) throw new RangeError(`limits.${k} must be a non-negative number`);
  }
  return limits;
}

/**
 * Checks the size bounds of a schema value (bytes, depth, node count, enum size) without
 * recursion and without serialising it, so that it is safe on any parsed JSON. Throws
 * SchemaLimitError naming the path of the first excess.
 */
export function checkSchemaLimits(schema: unknown, limitsOverride: Partial<SchemaLimits> = {}): void {
  const limits = { ...DEFAULT_SCHEMA_LIMITS, ...limitsOverride };
  let bytes = 0;
  let nodes = 0;
  let enumBytes = 0;
  // Each entry: a value, its path (built lazily from the parent), its depth, and whether it lies
  // inside an enum/const (whose bytes count towards maxEnumBytes).
  type Item = { value: unknown; parent: Item | null; key: string | number | null; depth: number; inEnum: boolean };
  const pathOf = (item: Item): string => {
    const keys: Array<string | number> = [];
    for (let it: Item | null = item; it !== null && it.key !== null; it = it.parent) keys.push(it.key);
    return keys.reverse().map(String).join(".");
  };
  const onPath = new Set<object>();
  const stack: Item[] = [{ value: schema, parent: null, key: null, depth: 0, inEnum: false }];
  while (stack.length > 0) {
    const item = stack.pop()!;
    const v = item.value;
    if (++nodes > limits.maxNodes) throw new SchemaLimitError(pathOf(item), `the schema has more than ${limits.maxNodes} values`);
    // JSON has no Infinity or NaN; a literal past float range (1e309) parses to one. Refused here,
    // before the cache key is made, since JSON.stringify would write it as null and let it pass as
    // (or be refused as) whatever an earlier request with a null there compiled to.
    if (typeof v === "number" && !Number.isFinite(v)) throw new SchemaLimitError(pathOf(item), `${v} is not a finite number (a literal beyond the float range)`);
    let size: number;
    if (typeof v === "string") size = v.length + 2;
    else if (typeof v === "number" || typeof v === "boolean") size = String(v).length;
    else if (v === null || v === undefined) size = 4;
    else size = 2;
    bytes += size;
    if (item.inEnum) enumBytes += size;
    if (bytes > limits.maxSchemaBytes) throw new SchemaLimitError(pathOf(item), `the schema is larger than ${limits.maxSchemaBytes} bytes`);
    if (enumBytes > limits.maxEnumBytes) throw new SchemaLimitError(pathOf(item), `enum and const values are larger than ${limits.maxEnumBytes} bytes`);
    if (typeof v !== "object" || v === null) continue;
    if (item.depth >= limits.maxDepth) throw new SchemaLimitError(pathOf(item), `the schema nests more than ${limits.maxDepth} levels deep`);
    if (onPath.has(v)) throw new SchemaLimitError(pathOf(item), "the schema contains a cycle");
    // (A shared sub-object is walked once per occurrence, which the node bound keeps finite.)
    // Every value waiting on the stack is a node to come: a list or object that cannot fit is
    // refused by its own path before its members are stacked (1.9M members took ~0.1 s each time).
    const members = Array.isArray(v) ? v.length : Object.keys(v).length;
    if (nodes + stack.length + members > limits.maxNodes) throw new SchemaLimitError(pathOf(item), `the schema has more than ${limits.maxNodes} values`);
    if (Array.isArray(v)) {
      if (item.key === "enum" && !item.inEnum && v.length > limits.maxEnumValues) {
        throw new SchemaLimitError(pathOf(item), `enum has ${v.length} values (limit ${limits.maxEnumValues})`);
      }
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], parent: item, key: i, depth: item.depth + 1, inEnum: item.inEnum || item.key === "enum" });
    } else {
      const entries = Object.keys(v);
      for (let i = entries.length - 1; i >= 0; i--) {
        const k = entries[i];
        bytes += k.length + 3;
        if (item.inEnum) enumBytes += k.length + 3;
        stack.push({ value: (v as Record<string, unknown>)[k], parent: item, key: k, depth: item.depth + 1, inEnum: item.inEnum || k === "const" });
      }
    }
  }
}

/**
 * The GBNF for the JSON Schema `schema` (root rule `root`) and, with `strict: false`, the keywords
 * that were relaxed. Throws UnsupportedSchemaError for what cannot be enforced (strict) or cannot
 * be generated at all, and SchemaLimitError (code "limit") beyond the limits.
 */
export function compileJsonSchema(schema: unknown, opts: JsonSchemaToGbnfOptions = {}): CompiledSchema {
  const maxWhitespace = opts.maxWhitespace ?? 2;
  if (!Number.isInteger(maxWhitespace) || maxWhitespace < 0 || maxWhitespace > 100) throw new RangeError("maxWhitespace must be an integer in [0, 100]");
  const limits = resolveLimits(opts);
  checkSchemaLimits(schema, limits);
  const converter = new Converter(schema, maxWhitespace, opts.strict ?? true, limits);
  const gbnf = withAutomatonBudget(() => converter.convert());
  // llama.cpp loads a grammar on the JavaScript thread, for every request that uses it.
  const loadCost = grammarLoadCost(gbnf, converter.parsed);
  if (loadCost > limits.maxLoadCost) {
    throw new SchemaLimitError("", `its grammar would take the engine too long to load (${Math.round(loadCost / 1e6)} M units, the limit is ${Math.round(limits.maxLoadCost / 1e6)} M); long runs of optional properties cost the most`);
  }
  return { gbnf, relaxed: converter.relaxed, loadCost };
}

/**
 * GBNF for the JSON Schema `schema`, with root rule `root`. Strict by default: throws
 * UnsupportedSchemaError for any feature it cannot enforce exactly (see compileJsonSchema).
 */
export function jsonSchemaToGbnf(schema: unknown, opts: JsonSchemaToGbnfOptions = {}): string {
  return compileJsonSchema(schema, opts).gbnf;
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
  checkSchemaLimits(schema, opts?.limits); // stableStringify recurses: bound the depth first
  const text =
    stableStringify(schema, new Set()) +
    (opts ? `|ws=${opts.maxWhitespace ?? 2}|strict=${opts.strict ?? true}|limits=${stableStringify(opts.limits ?? {}, new Set())}` : "");
  return createHash("sha256").update(text).digest("hex");
}

/**
 * Whether values of some JSON type can satisfy every one of these schemas' `type`s ("integer" is a
 * "number"). No type in common makes an array position no element can take, which ends the array
 * there rather than refuse the schema (`[]` still satisfies it).
 */
function typesMeet(schemas: unknown[]): boolean {
  let common: Set<string> | undefined;
  for (const x of schemas) {
    if (!isObject(x) || x.type === undefined) continue;
    const own = (Array.isArray(x.type) ? x.type : [x.type]).filter((t): t is string => typeof t === "string");
    const widened = new Set(own.flatMap((t) => (t === "number" ? ["number", "integer"] : [t])));
    common = common === undefined ? widened : new Set([...common].filter((t) => widened.has(t)));
  }
  return common === undefined || common.size > 0;
}

/**
 * The element schemas of parts that must all hold, merged position by position. A part's `items`
 * holds for every element past its own `prefixItems` (all of them when it has none), so a part's
 * `items` beside another's `prefixItems` constrains that prefix too: merged key by key, the first
 * part's `items` would hold only past the other's prefix, and answers broke it (a string where
 * every element had to be an integer). Position j of the merge must satisfy each part's schema for
 * j; past the longest prefix, every part's `items`. A position no element may take (`false`) ends
 * the array there.
 */
function mergeArrayPositions(parts: ReadonlyArray<{ schema: Schema; path: string }>, acc: Schema): void {
  const shaped = parts.filter((p) => p.schema.items !== undefined || p.schema.prefixItems !== undefined);
  if (shaped.length === 0) return;
  for (const p of shaped) {
    if (Array.isArray(p.schema.items)) throw new UnsupportedSchemaError(join(p.path, "items"), "cannot merge tuple-form items");
    if (p.schema.prefixItems !== undefined && !Array.isArray(p.schema.prefixItems)) throw new UnsupportedSchemaError(join(p.path, "prefixItems"), "must be an array");
  }
  if (shaped.length === 1) {
    const only = shaped[0].schema;
    if (only.prefixItems !== undefined) acc.prefixItems = only.prefixItems;
    if (only.items !== undefined) acc.items = only.items;
    return;
  }
  const all = (schemas: unknown[]): unknown => {
    const kept = schemas.filter((x) => x !== true && !(isObject(x) && Object.keys(x).length === 0));
    if (kept.some((x) => x === false) || !typesMeet(kept)) return false;
    return kept.length === 0 ? {} : kept.length === 1 ? kept[0] : { allOf: kept };
  };
  const longest = Math.max(0, ...shaped.map((p) => (Array.isArray(p.schema.prefixItems) ? p.schema.prefixItems.length : 0)));
  const prefix: unknown[] = [];
  let closed = false;
  for (let j = 0; j < longest; j++) {
    const at = all(
      shaped.map((p) => {
        const own = Array.isArray(p.schema.prefixItems) ? p.schema.prefixItems : [];
        return j < own.length ? own[j] : (p.schema.items ?? true);
      }),
    );
    if (at === false) {
      closed = true;
      break;
    }
    prefix.push(at);
  }
  const rest = closed ? false : all(shaped.map((p) => p.schema.items ?? true));
  if (prefix.length > 0) acc.prefixItems = prefix;
  if (rest === false) acc.items = false;
  else if (!(isObject(rest) && Object.keys(rest).length === 0)) acc.items = rest;
}
