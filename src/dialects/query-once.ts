import { z } from "zod";

/**
 * A query parameter that is given at most once. Repeated (`?limit=5&limit=6`), Fastify hands it
 * over as an array, which read as "expected number, received NaN" or as a type error.
 */
export function once<T extends z.ZodType>(schema: T) {
  return z
    .unknown()
    .check((ctx) => {
      if (Array.isArray(ctx.value)) ctx.issues.push({ code: "custom", message: "this query parameter may be given once", input: ctx.value });
    })
    .pipe(schema);
}

/**
 * A whole number in a query string (a page's `limit`): decimal digits, with a sign at most. Read with
 * z.coerce.number(), it was whatever Number() makes of the text: `0x10` listed 16 items, `1e1` 10,
 * ` 7` and `0b11` were taken, and an empty `limit=` read as 0, "too small".
 */
export function queryInt(min: number, max: number) {
  return z
    .string()
    .regex(/^-?\d+$/, "must be an integer")
    .transform(Number)
    .pipe(z.number().min(min).max(max));
}
