/**
 * Turns a GBNF grammar over plain text into the grammar of the same text written inside a JSON
 * string: every character the grammar allows is replaced by its JSON spelling (`"` → `\"`,
 * `\` → `\\`, control characters → `\n`, `\t`, … or `\u00XX`), one spelling per character. Rule
 * structure is untouched, so the result accepts exactly the JSON-escaped members of the original
 * language.
 *
 * Used for free-text tool inputs held to a grammar: a chat template writes tool calls as JSON, so the
 * model writes the input as the string value `{"input": "…"}`, and decoding that string gives text
 * the original grammar accepts.
 */

const SHORT_ESCAPES: Record<number, string> = { 0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r", 0x22: '\\"', 0x5c: "\\\\" };

/** Characters that cannot appear as themselves in a JSON string. */
const isSpecial = (cp: number) => cp < 0x20 || cp === 0x22 || cp === 0x5c;

const SPECIALS: number[] = [...Array.from({ length: 0x20 }, (_, i) => i), 0x22, 0x5c];

/** The JSON spelling of one special character. */
function jsonEscape(cp: number): string {
  return SHORT_ESCAPES[cp] ?? `\\u${cp.toString(16).padStart(4, "0")}`;
}

/** A GBNF literal for a text. */
function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += `\\${ch}`;
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${cp.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/** A character inside a GBNF class, escaped where the class syntax needs it. */
function classChar(cp: number): string {
  const ch = String.fromCodePoint(cp);
  if (ch === "]" || ch === "\\" || ch === "^" || ch === "-" || ch === "[") return `\\${ch}`;
  if (cp < 0x20 || cp === 0x7f) return `\\x${cp.toString(16).padStart(2, "0")}`;
  return ch;
}

type Range = [number, number];

export class GbnfEscapeError extends Error {}

/** Reads one (possibly escaped) character of a literal or class at `i`; returns it and the next index. */
function readChar(src: string, i: number): [number, number] {
  if (src[i] !== "\\") {
    const cp = src.codePointAt(i)!;
    return [cp, i + (cp > 0xffff ? 2 : 1)];
  }
  const e = src[i + 1];
  const simple: Record<string, number> = { n: 0x0a, t: 0x09, r: 0x0d, '"': 0x22, "\\": 0x5c, "]": 0x5d, "[": 0x5b, "-": 0x2d, "^": 0x5e };
  if (e in simple) return [simple[e], i + 2];
  const width = e === "x" ? 2 : e === "u" ? 4 : e === "U" ? 8 : 0;
  if (width === 0) throw new GbnfEscapeError(`unknown escape \\${e} in grammar`);
  const hex = src.slice(i + 2, i + 2 + width);
  if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== width) throw new GbnfEscapeError(`bad escape \\${e}${hex} in grammar`);
  return [parseInt(hex, 16), i + 2 + width];
}

/** Alternatives that spell each special character of `cps` the JSON way. */
function escapedAlternatives(cps: number[]): string[] {
  return cps.map((cp) => gbnfLiteral(jsonEscape(cp)));
}

function rangesToClass(ranges: Range[], negated: boolean): string {
  return `[${negated ? "^" : ""}${ranges.map(([a, b]) => (a === b ? classChar(a) : `${classChar(a)}-${classChar(b)}`)).join("")}]`;
}

/** The specials `ranges` cover. */
function specialsIn(ranges: Range[]): number[] {
  return SPECIALS.filter((cp) => ranges.some(([a, b]) => cp >= a && cp <= b));
}

/** `ranges` with the special characters cut out. */
function withoutSpecials(ranges: Range[]): Range[] {
  const out: Range[] = [];
  for (const [a, b] of ranges) {
    let start = a;
    for (let cp = a; cp <= Math.min(b, 0x5c); cp++) {
      if (isSpecial(cp)) {
        if (cp > start) out.push([start, cp - 1]);
        start = cp + 1;
      }
    }
    if (start <= b) out.push([start, b]);
  }
  return out;
}

function group(alternatives: string[]): string {
  if (alternatives.length === 0) throw new GbnfEscapeError("a character class that allows no character");
  return alternatives.length === 1 ? alternatives[0] : `( ${alternatives.join(" | ")} )`;
}

/** Rewrites every literal, character class and `.` of `gbnf` into its JSON-string spelling. */
export function jsonStringGrammar(gbnf: string): string {
  let out = "";
  let i = 0;
  while (i < gbnf.length) {
    const ch = gbnf[i];
    if (ch === "#") {
      const end = gbnf.indexOf("\n", i);
      i = end === -1 ? gbnf.length : end;
      continue;
    }
    if (ch === '"') {
      let j = i + 1;
      let text = "";
      while (j < gbnf.length && gbnf[j] !== '"') {
        const [cp, next] = readChar(gbnf, j);
        text += String.fromCodePoint(cp);
        j = next;
      }
      if (j >= gbnf.length) throw new GbnfEscapeError("unterminated literal in grammar");
      let escaped = "";
      for (const c of text) escaped += isSpecial(c.codePointAt(0)!) ? jsonEscape(c.codePointAt(0)!) : c;
      out += gbnfLiteral(escaped);
      i = j + 1;
      continue;
    }
    if (ch === "[") {
      let j = i + 1;
      const negated = gbnf[j] === "^";
      if (negated) j++;
      const ranges: Range[] = [];
      while (j < gbnf.length && gbnf[j] !== "]") {
        const [a, afterA] = readChar(gbnf, j);
        j = afterA;
        if (gbnf[j] === "-" && gbnf[j + 1] !== "]") {
          const [b, afterB] = readChar(gbnf, j + 1);
          ranges.push([a, b]);
          j = afterB;
        } else ranges.push([a, a]);
      }
      if (j >= gbnf.length) throw new GbnfEscapeError("unterminated character class in grammar");
      out += negated ? negatedClass(ranges) : positiveClass(ranges);
      i = j + 1;
      continue;
    }
    if (ch === ".") {
      out += negatedClass([]);
      i++;
      continue;
    }
    out += ch;
    i++;
  }
  return out;
}

function positiveClass(ranges: Range[]): string {
  const safe = withoutSpecials(ranges);
  return group([...(safe.length ? [rangesToClass(safe, false)] : []), ...escapedAlternatives(specialsIn(ranges))]);
}

function negatedClass(ranges: Range[]): string {
  // Any character outside `ranges`: the plain ones as a negated class that also excludes every
  // special, and the specials outside `ranges` by their escapes.
  const excluded: Range[] = [...ranges, [0x00, 0x1f], [0x22, 0x22], [0x5c, 0x5c]];
  const allowedSpecials = SPECIALS.filter((cp) => !ranges.some(([a, b]) => cp >= a && cp <= b));
  return group([rangesToClass(excluded, true), ...escapedAlternatives(allowedSpecials)]);
}

/** Any JSON string content (one spelling per character is not required here: any valid escape). */
export const ANY_JSON_STRING_CONTENT = `( [^"\\\\\\x00-\\x1f] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] ) )*`;
