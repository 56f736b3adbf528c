import { ApiError } from "../core/errors.ts";

// A seed is an int64 (OpenAI's, and every dialect here that takes one). JSON.parse hands a number
// over as the nearest double, and past 2^53 several integers share one: int64's largest,
// 9223372036854775807, and 9223372036854775808, one past it, both arrive as the double 2^63 (so do
// 9223372036854776000, how JavaScript writes 2^63, and every integer from 2^63 − 512 to 2^63 + 1024).
// The dialects' schemas take ±2^63 (seedSchema) so that int64's own bounds are taken; whether the
// client sent a value within int64 is read here, on the number as written. Every other double is
// unambiguous: within int64's range it stands for values that all are int64s, and past it for none.

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);
const NUMBER = /-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?/y;

/**
 * A body whose top-level `seed` parsed to ±2^63 but was written as a number outside int64 (or with a
 * fraction) is refused, naming `seed`, as the schema refuses any other seed out of range.
 */
export function refuseSeedBeyondInt64(text: string, parsed: unknown): ApiError | undefined {
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return undefined;
  const seed = (parsed as { seed?: unknown }).seed;
  // Only ±2^63 is ambiguous; a seed past it is refused here too, so that the message quotes the
  // number as sent (18446744073709551616, not the double's 18446744073709552000).
  if (typeof seed !== "number" || (seed < 2 ** 63 && seed > -(2 ** 63))) return undefined;
  const literal = topLevelNumberText(text, "seed");
  if (literal === undefined) return undefined;
  const value = exactInteger(literal);
  if (value === undefined) return new ApiError(400, `Invalid 'seed': expected an integer, got the number ${literal}.`, { param: "seed", code: "invalid_value" });
  // int64's least value is a double, -2^63, whose shortest spelling (JavaScript's JSON.stringify, most
  // languages' float formatting) is -9223372036854776000: past int64 as written, but it names -2^63.
  // 2^63's spelling, 9223372036854776000, names a double past int64 and stays refused.
  if (seed === -(2 ** 63) && value === BigInt(String(seed))) return undefined;
  if (value > INT64_MAX) return new ApiError(400, `Invalid 'seed': is ${literal}; it must be at most ${INT64_MAX}.`, { param: "seed", code: "invalid_value" });
  if (value < INT64_MIN) return new ApiError(400, `Invalid 'seed': is ${literal}; it must be at least ${INT64_MIN}.`, { param: "seed", code: "invalid_value" });
  return undefined;
}

/** The exact value of a JSON number's text, when it is an integer (`9.2e18` and `5.0` are). */
function exactInteger(literal: string): bigint | undefined {
  NUMBER.lastIndex = 0;
  const m = NUMBER.exec(literal);
  if (!m) return undefined;
  const [, whole, fraction = "", exponent = "0"] = m;
  let digits = (whole + fraction).replace(/^0+(?=\d)/, "");
  let scale = Number(exponent) - fraction.length;
  while (scale < 0 && digits.length > 1 && digits.endsWith("0")) {
    digits = digits.slice(0, -1);
    scale++;
  }
  if (scale < 0 && digits !== "0") return undefined;
  const magnitude = scale <= 0 ? BigInt(digits) : BigInt(digits) * 10n ** BigInt(scale);
  return literal.startsWith("-") ? -magnitude : magnitude;
}

/**
 * The text of the number a top-level key of a JSON object holds (the last occurrence, which is the one
 * JSON.parse keeps); undefined if it holds no number. The text is known to be valid JSON.
 */
function topLevelNumberText(text: string, key: string): string | undefined {
  let depth = 0;
  let found: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    else if (c === '"') {
      const start = i;
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      if (depth !== 1) continue;
      let j = i + 1;
      while (/\s/.test(text[j] ?? "")) j++;
      // A key (followed by its colon) that names `key`, however it is escaped.
      if (text[j] !== ":" || JSON.parse(text.slice(start, i + 1)) !== key) continue;
      j++;
      while (/\s/.test(text[j] ?? "")) j++;
      NUMBER.lastIndex = j;
      const m = NUMBER.exec(text);
      found = m ? m[0] : undefined;
    }
  }
  return found;
}
