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
//               hosts are reg-names or IPv4 (no bracketed IP literals).
//
// With a maxLength, email and uri use a stricter subset whose parts have fixed length budgets that
// add up to at most maxLength (GBNF cannot count across parts):
// - email: atext{1,L} "@" label "." label, labels of letters and digits only;
// - uri:   scheme (≤ 8) "://" host (reg-name characters, no percent-encoding) ["/" path].

import { seq, type GrammarBuilder } from "./gbnf.ts";

export type FormatGrammar = { expr: string; minLength: number; maxLength: number };

const SUPPORTED = ["date", "time", "date-time", "uuid", "email", "uri"] as const;
export type SupportedFormat = (typeof SUPPORTED)[number];

export function isSupportedFormat(f: string): f is SupportedFormat {
  return (SUPPORTED as readonly string[]).includes(f);
}

/** Shortest string of the bounded email/uri subsets ("a@b.c", "a://b"). */
export const BOUNDED_FORMAT_MIN_LENGTH = 5;

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
        // local "@" label "." label: L + 2k + 2 ≤ maxLength.
        const k = Math.max(1, Math.min(63, Math.floor((maxLength - 3) / 4)));
        const local = Math.min(64, maxLength - 2 - 2 * k);
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
        // scheme (1..S) "://" host (1..H) ("/" path (0..P))?: S + 3 + H + 1 + P ≤ maxLength.
        const scheme = Math.max(1, Math.min(8, Math.floor((maxLength - 3) / 3)));
        const budget = maxLength - 3 - scheme;
        const host = budget >= 3 ? Math.ceil(budget / 2) : budget;
        const path = budget - host - 1;
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
        `"//" ${authority} ("/" ${segment})* | "/" (${pchar}+ ("/" ${segment})*)? | ${pchar}+ ("/" ${segment})* | ""`,
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
