import { z } from "zod";
import { droppedProtoPath } from "../http/proto-keys.ts";

// Request fields that are JSON objects with arbitrary keys (tool parameters, schemas, metadata,
// logit_bias). A body within the size limit can hold a million keys; zod's record checks every key
// and value one by one with its own bookkeeping (~1.5 µs a key here, seconds of the one JavaScript
// thread every request shares). So an object whose contents are checked elsewhere is only
// recognised as an object, and a bounded map is counted before anything else about it is checked.

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Any JSON object, passed on as it came: its contents are checked by whoever reads it (the schema
 * compiler bounds a schema's size and depth before it reads anything else).
 */
export function jsonObject() {
  return z.custom<Record<string, unknown>>(isPlainObject, { error: "expected an object" }).check(refuseProtoKey);
}

// The body parser drops "__proto__" keys (they must never become a prototype). In these objects a
// key is data — a map entry, a schema's property — so the entry would vanish without a word (a
// metadata pair not kept, a declared property missing from the grammar): refused by its path.
function refuseProtoKey(ctx: z.core.ParsePayload<unknown>): void {
  const path = droppedProtoPath(ctx.value);
  if (path) ctx.issues.push({ code: "custom", path, message: '"__proto__" cannot be taken as a key here.', input: ctx.value });
}

/** True when `value` has more than `max` own keys; stops counting at max + 1. */
export function hasMoreKeysThan(value: object, max: number): boolean {
  let n = 0;
  for (const key in value) if (Object.hasOwn(value, key) && ++n > max) return true;
  return false;
}

/**
 * A map of at most `max` entries: the count is checked before any key or value, so an oversized map
 * costs one pass over its keys, not a validation of each.
 */
export function boundedRecord<K extends z.core.$ZodRecordKey, V extends z.core.SomeType>(key: K, value: V, max: number, tooMany: string) {
  const counted = z.unknown().check((ctx) => {
    if (isPlainObject(ctx.value) && hasMoreKeysThan(ctx.value, max)) ctx.issues.push({ code: "custom", message: tooMany, input: ctx.value });
    else refuseProtoKey(ctx);
  });
  return counted.pipe(z.record(key, value));
}
