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
