// JSON Schema `format` values the grammar enforces, as GBNF for the string content (all ASCII that
// JSON allows raw, so the encoded and decoded forms are the same).
//
// - date:       RFC 3339 full-date; days checked per month, 02-29 only in leap years.
// - time:       RFC 3339 full-time: HH:MM:SS[.fraction] then "Z" or ±HH:MM (hour 00-23, minute and
//               second 00-59, so no leap second, 1-9 fraction digits).
// - date-time:  date "T" time.
// - uuid:       8-4-4-4-12 hex digits, either case.
// - email:      a practical subset of RFC 5322 addr-spec: dot-atom local part "@" a domain of at least
//               two labels (letters, digits, inner hyphens, at most 63 characters each).
// - uri:        RFC 3986 URI (scheme ":" hier-part ["?" query] ["#" fragment]) with percent-encoding;
//               hosts are reg-names or IPv4 (no bracketed IP literals); the path is never empty
//               right after the scheme ("a:" is RFC 3986 but common validators, ajv-formats among
//               them, refuse it).
//
// - ipv4:       dotted quad, each part 0-255 without leading zeros.
// - ipv6:       RFC 4291 text forms with "::" compression (no embedded IPv4, no zone), hex digits
//               either case; the same language as zod's ipv6 pattern.
// - ipvanyaddress (Pydantic's IPvAnyAddress): ipv4 or ipv6.
// - duration:   ISO 8601 / RFC 3339 duration with integer components: "P" then weeks ("P3W"), or a
//               non-empty date part Y?M?D? and/or "T" with a non-empty time part H?M?S? ("P1DT2H",
//               "PT0S"). Pydantic's timedelta; every such string also matches zod's iso.duration
//               pattern.
// - base64 / byte: padded standard base64 (OpenAPI "byte"); base64url: unpadded URL-safe base64
//               (zod's pattern).
// - cuid, cuid2, nanoid, ulid: zod's own definitions.
// - binary (Pydantic's bytes), password: any string (they describe content, not syntax).
//
// Every format also has a regular-expression form (FORMAT_REGEX) so that a `pattern`, lookaheads
// or length bounds can be intersected with it exactly (automaton.ts). Formats without a GBNF form
// below are emitted from the regex.
//
// With a maxLength, email and uri use a stricter subset whose parts have fixed length budgets that
// add up to at most maxLength (GBNF cannot count across parts):
// - email: atext{1,L} "@" label "." label, labels of letters and digits only;
// - uri:   scheme (≤ 8) "://" host (reg-name characters, no percent-encoding) ["/" path].

import { seq, type GrammarBuilder } from "./gbnf.ts";

export type FormatGrammar = { expr: string; minLength: number; maxLength: number };

const GBNF_FORMATS = ["date", "time", "date-time", "uuid", "email", "uri"] as const;
export type SupportedFormat = (typeof GBNF_FORMATS)[number];

/** Formats with a hand-written GBNF form (formatGrammar). */
export function isSupportedFormat(f: string): f is SupportedFormat {
  return (GBNF_FORMATS as readonly string[]).includes(f);
}

const DATE_RE =
  "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29" +
  "|\\d{4}-(?:02-(?:0[1-9]|1\\d|2[0-8])|(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30))";
const HOUR_RE = "(?:[01]\\d|2[0-3])";
const TIME_RE = `${HOUR_RE}:[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-]${HOUR_RE}:[0-5]\\d)`;
const ATEXT_RE = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const LABEL_RE = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const U_UNRES = "[A-Za-z0-9._~-]";
const U_PCT = "%[0-9A-Fa-f]{2}";
const U_SUB = "[!$&'()*+,;=]";
const U_PCHAR = `(?:${U_UNRES}|${U_PCT}|${U_SUB}|[:@])`;
const U_AUTH = `(?:(?:${U_UNRES}|${U_PCT}|${U_SUB}|:)*@)?(?:${U_UNRES}|${U_PCT}|${U_SUB})*(?::\\d*)?`;
const U_HIER = `(?://${U_AUTH}(?:/${U_PCHAR}*)*|/(?:${U_PCHAR}+(?:/${U_PCHAR}*)*)?|${U_PCHAR}+(?:/${U_PCHAR}*)*)`;
const OCTET_RE = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]\\d|\\d)";
const IPV4_RE = `(?:${OCTET_RE}\\.){3}${OCTET_RE}`;
const H16 = "[0-9a-fA-F]{1,4}";
const IPV6_RE =
  `(?:(?:${H16}:){7}${H16}|(?:${H16}:){1,7}:|(?:${H16}:){1,6}:${H16}|(?:${H16}:){1,5}(?::${H16}){1,2}` +
  `|(?:${H16}:){1,4}(?::${H16}){1,3}|(?:${H16}:){1,3}(?::${H16}){1,4}|(?:${H16}:){1,2}(?::${H16}){1,5}` +
  `|${H16}:(?::${H16}){1,6}|:(?:(?::${H16}){1,7}|:))`;
const DUR_DATE = "(?:\\d+Y(?:\\d+M)?(?:\\d+D)?|\\d+M(?:\\d+D)?|\\d+D)";
const DUR_TIME = "T(?:\\d+H(?:\\d+M)?(?:\\d+S)?|\\d+M(?:\\d+S)?|\\d+S)";
const B64 = "[A-Za-z0-9+/]";

/** Every format the grammar enforces, as a regular expression (full match, `u` flag). */
export const FORMAT_REGEX: Readonly<Record<string, string>> = {
  date: DATE_RE,
  time: TIME_RE,
  "date-time": `(?:${DATE_RE})T${TIME_RE}`,
  uuid: "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
  email: `${ATEXT_RE}+(?:\\.${ATEXT_RE}+)*@${LABEL_RE}(?:\\.${LABEL_RE})+`,
  uri: `[A-Za-z][A-Za-z0-9+.-]*:${U_HIER}(?:\\?(?:${U_PCHAR}|[/?])*)?(?:#(?:${U_PCHAR}|[/?])*)?`,
  ipv4: IPV4_RE,
  ipv6: IPV6_RE,
  ipvanyaddress: `${IPV4_RE}|${IPV6_RE}`,
  duration: `P(?:\\d+W|${DUR_DATE}(?:${DUR_TIME})?|${DUR_TIME})`,
  base64: `(?:${B64}{4})*(?:${B64}{2}==|${B64}{3}=)?`,
  byte: `(?:${B64}{4})*(?:${B64}{2}==|${B64}{3}=)?`,
  base64url: "(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?",
  cuid: "[cC][0-9a-z]{6,}",
  cuid2: "[0-9a-z]+",
  nanoid: "[a-zA-Z0-9_-]{21}",
  ulid: "[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}",
};

/** Formats that say nothing about a string's syntax: any string is one. */
export const ANY_STRING_FORMATS: ReadonlySet<string> = new Set(["binary", "password", "textarea"]);

/**
 * zod's own format names that it always emits together with the `pattern` that defines them
 * (z.string().startsWith() → format "starts_with" + pattern "^prefix.*", z.cuid() → "cuid" +
 * pattern, …): with that pattern present the format adds nothing, so the pattern alone is enforced.
 */
export const PATTERN_DEFINED_FORMATS: ReadonlySet<string> = new Set([
  "starts_with", "ends_with", "includes", "lowercase", "uppercase", "regex", "cuid", "cuid2", "nanoid", "ulid",
  "xid", "ksuid", "e164", "cidrv4", "cidrv6", "base64url", "emoji", "hex", "mac", "guid", "hostname", "jwt",
]);

/** Shortest string of the bounded email/uri subsets ("a@b.c", "a://b"). */
export const BOUNDED_FORMAT_MIN_LENGTH = 5;

/** Length budgets of the bounded email subset: local part (1..local), two labels (1..label each). */
function emailBudget(maxLength: number): { local: number; label: number } {
  // local "@" label "." label: L + 2k + 2 ≤ maxLength.
  const label = Math.max(1, Math.min(63, Math.floor((maxLength - 3) / 4)));
  return { local: Math.min(64, maxLength - 2 - 2 * label), label };
}

/** Length budgets of the bounded uri subset: scheme (1..S) "://" host (1..H) ("/" path (0..P))?. */
function uriBudget(maxLength: number): { scheme: number; host: number; path: number } {
  // S + 3 + H + 1 + P ≤ maxLength.
  const scheme = Math.max(1, Math.min(8, Math.floor((maxLength - 3) / 3)));
  const budget = maxLength - 3 - scheme;
  const host = budget >= 3 ? Math.ceil(budget / 2) : budget;
  return { scheme, host, path: budget - host - 1 };
}

/**
 * The bounded email/uri subset (see the header) as a regular expression, for intersecting with a
 * pattern where the exact format ∩ pattern ∩ length automaton is too large (zod's z.email().max(n)
 * emits its own email pattern next to the format and maxLength). Null when maxLength is too short.
 */
export function boundedFormatRegex(format: "email" | "uri", maxLength: number): string | null {
  if (maxLength < BOUNDED_FORMAT_MIN_LENGTH) return null;
  if (format === "email") {
    const { local, label } = emailBudget(maxLength);
    return `${ATEXT_RE}{1,${local}}@[A-Za-z0-9]{1,${label}}\\.[A-Za-z0-9]{1,${label}}`;
  }
  const { scheme, host, path } = uriBudget(maxLength);
  const pathRe = path >= 0 ? `(?:/[A-Za-z0-9._~!$&'()*+,;=:@/-]{0,${path}})?` : "";
  return `[A-Za-z][A-Za-z0-9+.-]{0,${scheme - 1}}://[A-Za-z0-9._~!$&'()*+,;=-]{1,${host}}${pathRe}`;
}

export function formatGrammar(b: GrammarBuilder, format: SupportedFormat, maxLength?: number): FormatGrammar | null {
  const hex = () => b.rule("hex-digit", "[0-9a-fA-F]");
  const date = () => {
    const d28 = `"0" [1-9] | "1" [0-9] | "2" [0-8]`;
    const d30 = `"0" [1-9] | [12] [0-9] | "30"`;
    const d31 = `"0" [1-9] | [12] [0-9] | "3" [01]`;
    const monthDay = b.rule("month-day", `"02-" (${d28}) | ("0" [13578] | "1" [02]) "-" (${d31}) | ("0" [469] | "11") "-" (${d30})`);
    const div4 = `"0" [48] | [2468] [048] | [13579] [26]`;
    const leapYear = b.rule("leap-year", `[0-9] [0-9] (${div4}) | ("0" [048] | [2468] [048] | [13579] [26]) "00"`);
    return b.rule("date", `[0-9]{4} "-" ${monthDay} | ${leapYear} "-02-29"`);
  };
  const time = () => {
    const hour = `([01] [0-9] | "2" [0-3])`;
    const offset = `("Z" | [+-] ${hour} ":" [0-5] [0-9])`;
    return b.rule("time", `${hour} ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ${offset}`);
  };
  switch (format) {
    case "date":
      return { expr: date(), minLength: 10, maxLength: 10 };
    case "time":
      return { expr: time(), minLength: 9, maxLength: 24 };
    case "date-time":
      return { expr: b.rule("date-time", `${date()} "T" ${time()}`), minLength: 20, maxLength: 35 };
    case "uuid": {
      const h = hex();
      return { expr: b.rule("uuid", `${h}{8} "-" ${h}{4} "-" ${h}{4} "-" ${h}{4} "-" ${h}{12}`), minLength: 36, maxLength: 36 };
    }
    case "email": {
      if (maxLength !== undefined) {
        if (maxLength < BOUNDED_FORMAT_MIN_LENGTH) return null;
        const { local, label: k } = emailBudget(maxLength);
        const atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\x2D]";
        const label = b.repeat("email-label", "[A-Za-z0-9]", 1, k);
        const expr = b.rule("email-bounded", `${b.repeat("email-local", atom, 1, local)} "@" ${label} "." ${label}`);
        return { expr, minLength: BOUNDED_FORMAT_MIN_LENGTH, maxLength: local + 2 * k + 2 };
      }
      const atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\x2D]";
      const label = b.rule("email-label", `[A-Za-z0-9] ([A-Za-z0-9\\x2D]{0,61} [A-Za-z0-9])?`);
      return {
        expr: b.rule("email", `${atext}+ ("." ${atext}+)* "@" ${label} ("." ${label})+`),
        minLength: 5,
        maxLength: Infinity,
      };
    }
    case "uri": {
      if (maxLength !== undefined) {
        if (maxLength < BOUNDED_FORMAT_MIN_LENGTH) return null;
        const { scheme, host, path } = uriBudget(maxLength);
        const schemeExpr = seq("[A-Za-z]", scheme > 1 ? b.repeat("uri-scheme", "[A-Za-z0-9+.\\x2D]", 0, scheme - 1) : "");
        const hostExpr = b.repeat("uri-host", "[A-Za-z0-9._~!$&'()*+,;=\\x2D]", 1, host);
        const pathExpr = path >= 0 ? ` ("/" ${b.repeat("uri-path", "[A-Za-z0-9._~!$&'()*+,;=:@/\\x2D]", 0, path)})?` : "";
        const expr = b.rule("uri-bounded", `${schemeExpr} "://" ${hostExpr}${pathExpr}`);
        return { expr, minLength: BOUNDED_FORMAT_MIN_LENGTH, maxLength: scheme + 3 + host + (path >= 0 ? 1 + path : 0) };
      }
      const h = hex();
      const unreserved = "[A-Za-z0-9._~\\x2D]";
      const subDelims = "[!$&'()*+,;=]";
      const pct = `"%" ${h} ${h}`;
      const pchar = b.rule("uri-pchar", `${unreserved} | ${pct} | ${subDelims} | [:@]`);
      const regChar = b.rule("uri-reg-char", `${unreserved} | ${pct} | ${subDelims}`);
      const userChar = b.rule("uri-user-char", `${regChar} | ":"`);
      const segment = `${pchar}*`;
      const authority = b.rule("uri-authority", `(${userChar}* "@")? ${regChar}* (":" [0-9]*)?`);
      const hier = b.rule(
        "uri-hier",
        `"//" ${authority} ("/" ${segment})* | "/" (${pchar}+ ("/" ${segment})*)? | ${pchar}+ ("/" ${segment})*`,
      );
      const tail = b.rule("uri-query-char", `${pchar} | [/?]`);
      return {
        expr: b.rule("uri", `[A-Za-z] [A-Za-z0-9+.\\x2D]* ":" ${hier} ("?" ${tail}*)? ("#" ${tail}*)?`),
        minLength: 2,
        maxLength: Infinity,
      };
    }
  }
}
