import { z } from "zod";

/**
 * A schema for objects told apart by their `type` field: the schema named by the object's type
 * checks it, `fallback` checks any other type. Unlike a plain union, a malformed object of a known
 * type is refused with that type's own issues (`tools[0].name` is required), and cannot pass as the
 * catch-all instead.
 */
export function byType<M extends Record<string, z.ZodType>, F extends z.ZodType>(map: M, fallback: F) {
  return z.unknown().transform((value, ctx): z.output<M[keyof M]> | z.output<F> => {
    const type = (value as { type?: unknown } | null)?.type;
    const schema: z.ZodType = typeof type === "string" && Object.hasOwn(map, type) ? map[type] : fallback;
    const parsed = schema.safeParse(value);
    if (parsed.success) return parsed.data as z.output<M[keyof M]> | z.output<F>;
    for (const issue of parsed.error.issues) ctx.addIssue({ ...issue } as Parameters<typeof ctx.addIssue>[0]);
    return z.NEVER;
  });
}
