import type { z } from "zod";
import { ApiError } from "../core/errors.ts";
import { PROTO_HOLDERS } from "../http/proto-keys.ts";
import { closestName } from "../core/closest-name.ts";

/**
 * Top-level fields a request's schema does not define are refused by name, as OpenAI refuses them
 * ("Unrecognized request argument supplied"). Dropping them answered a request as if it had not asked:
 * `max_output_tokens` sent to Chat Completions (the Responses API's name) or `max_tokens` sent to the
 * Responses API left the answer without its length limit, and `response_format` on the Responses API
 * left it free text. Every field OpenAI defines for an endpoint, and the fields of vLLM, llama-server,
 * SGLang and others that its schema reads (foreign-fields.ts), is in the schema, so what is refused
 * here is a field of another endpoint or a misspelling; the message says which, when it can tell.
 *
 * Only the top level: nested objects are checked by their own schemas where a stray key could
 * change the answer (`stream_options`, `response_format`, tools, `text`, `reasoning`).
 */

/** For a field of a sibling endpoint: what this endpoint takes instead, in a sentence. */
export type FieldHints = Readonly<Record<string, string>>;

/** The parse function of a route whose body refuses unknown top-level fields. */
export function strictTopLevel<S extends z.ZodObject>(schema: S, hints: FieldHints = {}): (body: unknown) => z.infer<S> {
  const known = new Set(Object.keys(schema.shape));
  return (body) => {
    refuseUnknownFields(body, known, hints);
    return schema.parse(body);
  };
}

/** Throws a 400 naming the first key of `body` that is not in `known`. A body that is not an object is left to the schema. */
export function refuseUnknownFields(body: unknown, known: ReadonlySet<string>, hints: FieldHints = {}): void {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return;
  // The body parser drops a "__proto__" key (it is never the object's prototype) and notes where.
  const keys = PROTO_HOLDERS.has(body) ? ["__proto__", ...Object.keys(body)] : Object.keys(body);
  for (const key of keys) {
    if (known.has(key)) continue;
    const shown = key.length > 64 ? `${key.slice(0, 64)}…` : key;
    const hint = Object.hasOwn(hints, key) ? hints[key] : closest(key, known);
    throw new ApiError(400, `Unrecognized request argument supplied: ${visible(shown)}.${hint ? ` ${hint}` : ""}`, {
      param: shown,
      code: "unknown_field",
    });
  }
}

/**
 * A key as a JSON string whose invisible characters are escaped: a zero-width space or a bidi control
 * in a key ("mo\u200bdel") would otherwise make the message name a field that looks like a known one.
 */
function visible(key: string): string {
  return JSON.stringify(key).replace(/[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/gu, (c) =>
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`).join(""),
  );
}

/** "Did you mean …?" for a key within two edits of a known field (`max_tokns`, `dimension`). */
function closest(key: string, known: ReadonlySet<string>): string {
  const best = closestName(key, known);
  return best ? `Did you mean '${best}'?` : "";
}
