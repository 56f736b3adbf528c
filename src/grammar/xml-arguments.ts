import { ALL_CHARS, charClass, GrammarBuilder, literal, literalAlternatives, seq } from "./gbnf.ts";
import { AutomatonLimitError, cachedDfa, dfaLengthRange, dfaToGbnf, type Lang, langMatcher, langOfRegex, withAutomatonBudget } from "./automaton.ts";
import { prefixRules } from "./compose.ts";
import { isAnnotation, LIBRARY_FORMAT_PATTERNS, NON_STRING_KEYWORDS, type Relaxation, SchemaLimitError, UnsupportedSchemaError } from "./json-schema-to-gbnf.ts";
import { parsePattern, PatternError, PatternLimitError, type RegexNode } from "./regex-to-gbnf.ts";
import { ANY_STRING_FORMATS, BOUNDED_FORMAT_MIN_LENGTH, boundedFormatRegex, FORMAT_REGEX, PATTERN_DEFINED_FORMATS } from "./string-formats.ts";

// Grammars for tool-call arguments written as XML parameters rather than as one JSON object
// (Qwen3-Coder's `<parameter=city>\nParis\n</parameter>\n`, GLM's `<arg_key>city</arg_key>…`,
// MiniMax-M2's `<parameter name="city">Paris</parameter>`, DeepSeek V3.2's
// `<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>`): each property of the tool's schema is
// one parameter block, a string value written as raw text, any other value as JSON per its schema,
// as these families' templates write the calls of a conversation and as llama.cpp's server reads
// them back.

/** The tags around each parameter of a call. */
export interface XmlArgumentTags {
  /** Opens a parameter, up to its name: `<parameter=`. */
  keyOpen: string;
  /** Between the name and the value: `>\n`. */
  keyClose: string;
  /**
   * Between the name and a raw (string) value, where the layout tells the two kinds apart (DeepSeek
   * V3.2's `" string="true">` against `" string="false">`); `keyClose` when absent.
   */
  rawKeyClose?: string;
  /** Closes the value: `\n</parameter>\n`. A raw string value never contains it. */
  valueClose: string;
  /** Closes the arguments (after the last parameter): `</function>\n`. */
  end: string;
}

/** A parameter's value grammar (a whole grammar with its own `root`). */
export interface XmlParameterGrammar {
  name: string;
  required: boolean;
  gbnf: string;
  /** The value is written raw (a string), not as JSON. */
  raw?: boolean;
}

/** The grammar of one call's arguments: the parameters in the schema's order, the required ones present. */
export function xmlArgumentsGrammar(tags: XmlArgumentTags, params: readonly XmlParameterGrammar[]): string {
  const rules: string[] = [];
  const items = params.map((p, i) => {
    rules.push(prefixRules(p.gbnf, `p${i}-`));
    rules.push(`p${i} ::= ${literal(tags.keyOpen + p.name + (p.raw ? (tags.rawKeyClose ?? tags.keyClose) : tags.keyClose))} p${i}-root ${literal(tags.valueClose)}`);
    return p.required ? `p${i}` : `p${i}?`;
  });
  return [`root ::= ${seq(...items, literal(tags.end))}`, ...rules].join("\n");
}

/**
 * Whether a property's value is written raw (a string), as llama.cpp decides it: a schema of type
 * string, or of string constants only. Everything else is written (and read back) as JSON.
 */
export function isRawString(schema: unknown, root?: unknown): boolean {
  const s = resolveLocalRef(schema, root);
  if (!s || typeof s !== "object" || Array.isArray(s)) return false;
  const { type, enum: values, const: constant } = s as { type?: unknown; enum?: unknown; const?: unknown };
  if (type === "string" || (Array.isArray(type) && type.length === 1 && type[0] === "string")) return true;
  if (type !== undefined) return false;
  if (typeof constant === "string") return true;
  return Array.isArray(values) && values.length > 0 && values.every((v) => typeof v === "string");
}

/**
 * A `$ref` to the schema's own `#/$defs/…` or `#/definitions/…`, followed once, with the keywords
 * beside it kept: each one the definition lacks is added as is; one it has with another value
 * becomes an allOf part, which the raw-string grammar folds in (lengths tightened, both patterns
 * held), so that the tighter of the two holds rather than either alone.
 */
export function resolveLocalRef(schema: unknown, root: unknown): unknown {
  const ref = (schema as { $ref?: unknown } | null)?.$ref;
  if (typeof ref !== "string" || !root || typeof root !== "object") return schema;
  const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
  if (!m) return schema;
  const defs = (root as Record<string, unknown>)[m[1]] as Record<string, unknown> | undefined;
  const target = defs?.[decodeURIComponent(m[2]).replace(/~1/g, "/").replace(/~0/g, "~")];
  if (target === undefined) return schema;
  const siblings = Object.entries(schema as Record<string, unknown>).filter(([k]) => k !== "$ref" && !isAnnotation(k));
  if (siblings.length === 0 || target === false) return target;
  const merged: Record<string, unknown> = target && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  const clashing: Record<string, unknown> = {};
  for (const [k, v] of siblings) {
    if (!(k in merged)) merged[k] = v;
    else if (JSON.stringify(merged[k]) !== JSON.stringify(v)) clashing[k] = v;
  }
  if (Object.keys(clashing).length > 0) merged.allOf = [...(Array.isArray(merged.allOf) ? merged.allOf : []), clashing];
  return merged;
}

/** The regex of `text` itself, for the automaton. */
function textNode(text: string): RegexNode {
  return { kind: "seq", items: [...text].map((ch) => ({ kind: "set", set: [[ch.codePointAt(0)!, ch.codePointAt(0)!]] as const })) } as RegexNode;
}

const ANY: RegexNode = { kind: "rep", node: { kind: "set", set: ALL_CHARS }, min: 0, max: undefined } as RegexNode;

/**
 * The texts a raw value may be so that it and the closing tag after it read back as written: no
 * occurrence of the tag inside, and no ending that the tag would complete early (Qwen's value
 * `a\n</parameter>` followed by `\n</parameter>\n` would end at the first tag).
 */
export function closeFreeLang(close: string): Lang {
  const bad: Lang[] = [{ kind: "re", node: { kind: "seq", items: [ANY, textNode(close), ANY] } as RegexNode }];
  for (let k = 1; k < close.length; k++) {
    const head = close.slice(0, k);
    if ((head + close).indexOf(close) < k) bad.push({ kind: "re", node: { kind: "seq", items: [ANY, textNode(head)] } as RegexNode });
  }
  return { kind: "and", parts: bad.map((part): Lang => ({ kind: "not", part })) };
}

/** A raw string's keywords, with those of its allOf parts folded in. */
interface StringKeywords {
  minLength?: number;
  maxLength?: number;
  /** Every pattern must match; `at` is its path, for messages. */
  patterns: Array<{ text: string; at: string }>;
  format?: unknown;
  formatAt?: string;
}

/**
 * Folds the string keywords of `s` (and of its allOf parts, recursively) into `into`: lengths
 * tightened, patterns collected, one format. Annotations and keywords of other types (which JSON
 * Schema applies to their own type only) say nothing about a string; anything else (anyOf, not,
 * enum inside allOf, an unknown keyword) is handed to `relax`, as the JSON path treats it.
 */
function foldStringKeywords(s: Record<string, unknown>, at: string, top: boolean, into: StringKeywords, relax: (where: string, message: string) => void): void {
  for (const [key, v] of Object.entries(s)) {
    const where = at === "" ? key : `${at}.${key}`;
    if (isAnnotation(key) || NON_STRING_KEYWORDS.has(key) || key === "$defs" || key === "definitions" || key === "nullable") continue;
    if (top && (key === "enum" || key === "const")) continue;
    switch (key) {
      case "minLength":
      case "maxLength": {
        if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new UnsupportedSchemaError(where, `${key} must be a non-negative integer`);
        const prev = into[key];
        into[key] = prev === undefined ? v : key === "minLength" ? Math.max(prev, v) : Math.min(prev, v);
        break;
      }
      case "pattern":
        if (typeof v !== "string") throw new UnsupportedSchemaError(where, "pattern must be a string");
        into.patterns.push({ text: v, at: where });
        break;
      case "format":
        if (into.format !== undefined && into.format !== v) relax(where, `allOf parts disagree on "format"`);
        else [into.format, into.formatAt] = [v, where];
        break;
      case "type":
        if (v !== "string" && !(Array.isArray(v) && v.includes("string"))) throw new UnsupportedSchemaError(where, "no string satisfies it");
        break;
      case "allOf":
        if (!Array.isArray(v) || v.length === 0) throw new UnsupportedSchemaError(where, "must be a non-empty array");
        v.forEach((part: unknown, i) => {
          if (part === true) return;
          if (part === false) throw new UnsupportedSchemaError(`${where}.${i}`, "no value satisfies it");
          if (!part || typeof part !== "object" || Array.isArray(part)) throw new UnsupportedSchemaError(`${where}.${i}`, "must be a schema");
          foldStringKeywords(part as Record<string, unknown>, `${where}.${i}`, false, into, relax);
        });
        break;
      default:
        relax(where, `"${key}" is not supported on a parameter written as raw text`);
    }
  }
}

/**
 * The grammar of a raw string value: the text, never containing `close`, held to the schema's
 * string keywords where it can be (minLength, maxLength, pattern and format through an automaton;
 * enum and const values filtered by them), with allOf parts of string keywords folded in. With
 * `strict` off, what cannot be enforced is relaxed and listed, as the JSON schema compiler does;
 * with it on, refused.
 */
export function rawStringGrammar(schema: unknown, close: string, strict: boolean, path: string): { gbnf: string; relaxed: Relaxation[] } {
  const s = (schema && typeof schema === "object" ? schema : {}) as Record<string, unknown>;
  const relaxed: Relaxation[] = [];
  const join = (key: string) => (path === "" ? key : `${path}.${key}`);
  const relax = (where: string, message: string) => {
    if (strict) throw new UnsupportedSchemaError(where, message);
    relaxed.push({ path: where, message });
  };
  const k: StringKeywords = { patterns: [] };
  foldStringKeywords(s, path, true, k, relax);
  const format = k.format;
  // Each part with the path of the keyword it stands for (named when it is relaxed or refused).
  const parts: Array<{ lang: Lang; key: string; at: string; text?: string }> = [];
  const [min, max] = [k.minLength ?? 0, k.maxLength];
  if (max !== undefined && max < min) throw new UnsupportedSchemaError(join("maxLength"), "maxLength is below minLength");
  const lengths = (lo: number, hi: number | undefined): Lang => ({ kind: "re", node: { kind: "rep", node: { kind: "set", set: ALL_CHARS }, min: lo, max: hi } as RegexNode });
  if (min > 0 || max !== undefined) {
    const key = max !== undefined ? "maxLength" : "minLength";
    parts.push({ key, at: join(key), lang: lengths(min, max) });
  }
  // Each pattern as a full match first (values are the pattern's own text, not padded), and as the
  // search JSON Schema makes of it where that leaves nothing (`[A-Z]` with minLength 8).
  const patternLang = (text: string, search: boolean): Lang => langOfRegex(parsePattern(text, undefined, search));
  for (const { text, at } of k.patterns) {
    // A library's own pattern for the format (zod's iso.duration, with lookaheads inside) is
    // implied by the format's grammar, which alone is enforced, as in the JSON path.
    if (typeof format === "string" && LIBRARY_FORMAT_PATTERNS[format]?.includes(text)) continue;
    try {
      parts.push({ key: "pattern", at, text, lang: patternLang(text, false) });
    } catch (e) {
      if (e instanceof PatternLimitError) throw new SchemaLimitError(at, e.message);
      if (!(e instanceof PatternError)) throw e;
      relax(at, e.message);
    }
  }
  // The format holds beside the pattern (a date matching "^2" is still a date); formats that say
  // nothing, or that zod defines by the pattern it emits with them, add no part.
  if (format !== undefined) {
    const at = k.formatAt!;
    if (typeof format !== "string") relax(at, "format must be a string");
    else if (ANY_STRING_FORMATS.has(format) || (PATTERN_DEFINED_FORMATS.has(format) && k.patterns.length > 0)) {
      // nothing beyond the pattern
    } else if (!Object.prototype.hasOwnProperty.call(FORMAT_REGEX, format)) relax(at, `format ${JSON.stringify(format)} is not supported`);
    else parts.push({ key: "format", at, lang: { kind: "re", node: parsePattern(FORMAT_REGEX[format]) } });
  }
  const constants = typeof s.const === "string" ? [s.const] : Array.isArray(s.enum) ? s.enum.filter((v): v is string => typeof v === "string") : undefined;
  if (constants) {
    const where = join(s.const !== undefined ? "const" : "enum");
    let allowed = constants.filter((v) => !(v + close).slice(0, -1).includes(close));
    if (allowed.length === 0) throw new UnsupportedSchemaError(where, "no value can be written as a parameter");
    // The values are written as given, so each is held to the other keywords as a whole value (a
    // pattern as the search JSON Schema makes of it), as the JSON path does.
    for (const part of parts) {
      try {
        const matches = langMatcher(part.text !== undefined ? patternLang(part.text, true) : part.lang);
        allowed = allowed.filter((v) => matches(v));
      } catch (e) {
        if (!(e instanceof AutomatonLimitError)) throw e;
        relax(part.at, e.message);
      }
      if (allowed.length === 0) throw new UnsupportedSchemaError(part.at, `no value of ${where.slice(where.lastIndexOf(".") + 1)} satisfies it`);
    }
    const b = new GrammarBuilder();
    b.define("root", literalAlternatives(allowed, (expr) => b.rule("value", expr)));
    return { gbnf: b.render(), relaxed };
  }
  // Email or uri with a maxLength: the exact product of the format and a length counter passes the
  // automaton's bound at a few dozen characters. The bounded subset the JSON path uses there
  // (string-formats.ts) implies the maxLength and stays small: every string of it is still an
  // email/uri of at most maxLength.
  let bounded = false;
  const boundFormat = (): boolean => {
    const at = parts.findIndex((p) => p.key === "format");
    if (bounded || at < 0 || max === undefined || (format !== "email" && format !== "uri")) return false;
    const re = boundedFormatRegex(format, max);
    if (re === null) return false;
    bounded = true;
    parts[at] = { ...parts[at], lang: { kind: "re", node: parsePattern(re) } };
    const len = parts.findIndex((p) => p.key.endsWith("Length"));
    if (len >= 0 && min > BOUNDED_FORMAT_MIN_LENGTH) parts[len] = { key: "minLength", at: join("minLength"), lang: lengths(min, undefined) };
    else if (len >= 0) parts.splice(len, 1);
    return true;
  };
  let searching = false;
  return withAutomatonBudget(() => {
    for (;;) {
      const b = new GrammarBuilder();
      try {
        const key = JSON.stringify(["xml-raw", close, min, max, parts.map((p) => [p.key, p.text]), format, bounded, searching]);
        const dfa = cachedDfa(key, () => ({ kind: "and", parts: [closeFreeLang(close), ...parts.map((p) => p.lang)] }));
        if (dfaLengthRange(dfa) === null) {
          if (!searching && parts.some((p) => p.text !== undefined)) {
            searching = true;
            for (const p of parts) if (p.text !== undefined) p.lang = patternLang(p.text, true);
            continue;
          }
          throw new UnsupportedSchemaError(parts.at(-1)?.at ?? join("type"), "no string satisfies the schema and can be written as a parameter");
        }
        b.define("root", dfaToGbnf(b, dfa, "raw", (_, set) => charClass(set))!);
        return { gbnf: b.render(), relaxed };
      } catch (e) {
        if (!(e instanceof AutomatonLimitError) || parts.length === 0) throw e;
        if (boundFormat()) continue;
        const dropped = parts.pop()!;
        relax(dropped.at, e.message);
      }
    }
  });
}
