import { z } from "zod";
import { unsupportedField } from "../../core/errors.ts";

/**
 * Fields of OpenAI's Chat Completions and Responses requests that ask something of OpenAI's service
 * around the generation (how long cached prefixes live, moderation) rather than of the model.
 * Plinth's prompt cache keeps prefixes in memory and in its RAM-backed saved states until they are
 * evicted, least recently used first, so the retention values are both taken and neither lifetime
 * is promised; the cache works implicitly, so explicit breakpoints and moderation are refused.
 */
export const serviceFieldsSchema = {
  // "in-memory" is how some releases of OpenAI's Python SDK spelled it.
  prompt_cache_retention: z.enum(["in_memory", "in-memory", "24h"]).nullish(),
  prompt_cache_options: z
    .strictObject({
      ttl: z.literal("30m").optional(),
      mode: z.enum(["implicit", "explicit"]).optional(),
    })
    .nullish(),
  /** Accepted by the schema only so that it can be refused by name. */
  moderation: z.unknown().optional(),
};

export function refuseServiceFields(body: { moderation?: unknown; prompt_cache_options?: { mode?: string } | null }): void {
  if (body.moderation != null) throw unsupportedField("moderation", "is not supported: this server runs no moderation model");
  if (body.prompt_cache_options?.mode === "explicit")
    throw unsupportedField("prompt_cache_options.mode", "'explicit' is not supported: the prompt cache finds shared prefixes by itself (mode 'implicit')");
}

/**
 * OpenAI's `verbosity` (chat) and `text.verbosity` (Responses). Its default, "medium", is the model
 * answering at its own length, which is what happens here; asking for shorter or longer answers
 * would need steering this server does not do, so "low" and "high" are refused rather than echoed
 * as if honoured. Clients that send the default back (Codex-style agents do) are not refused.
 */
export function refuseVerbosity(value: unknown, field: string): void {
  if (value == null || value === "medium") return;
  const shown = typeof value === "string" ? `'${value}'` : JSON.stringify(value);
  throw unsupportedField(field, `cannot be ${shown}: answers here have the model's own length; only 'medium' (the default) is offered`);
}

/**
 * The code of a refused `service_tier`: one of OpenAI's own tiers (flex, scale, priority) is a value
 * this server does not offer, as `verbosity: "low"` is (`unsupported_parameter`); any other is no
 * tier at all (`invalid_value`, OpenAI's code for a value outside its choices).
 */
export function serviceTierCode(tier: string): string {
  return ["flex", "scale", "priority"].includes(tier) ? "unsupported_parameter" : "invalid_value";
}
