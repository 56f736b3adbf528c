import { z } from "zod";
import { drawnSeed, samplerSeed } from "../../core/random.ts";
import type { SamplingParams } from "../../core/types.ts";
import { hasMoreKeysThan, jsonObject } from "../json-object.ts";
import { listOf } from "../list-of.ts";

/** More entries than any vocabulary has (Gemma 3's is 262,144): refused before a key is read. */
export const LOGIT_BIAS_MAX_ENTRIES = 300_000;

// Token ids as strings, without leading zeros: "5" and "05" would name one token twice.
const TOKEN_ID = /^(?:0|[1-9]\d{0,9})$/;

/**
 * token id → bias from -100 to 100. Checked in one plain loop that stops at the first bad entry: a
 * map of a vocabulary's size is legitimate, and zod's record costs seconds at that size.
 */
export function logitBiasSchema() {
  return jsonObject().check((ctx) => {
    const map = ctx.value;
    if (typeof map !== "object" || map === null) return;
    if (hasMoreKeysThan(map, LOGIT_BIAS_MAX_ENTRIES)) {
      ctx.issues.push({ code: "custom", message: `logit_bias holds at most ${LOGIT_BIAS_MAX_ENTRIES} entries`, input: map });
      return;
    }
    for (const key in map) {
      if (!Object.hasOwn(map, key)) continue;
      if (!TOKEN_ID.test(key)) {
        ctx.issues.push({ code: "custom", path: [key], message: 'logit_bias keys must be token ids (integers as strings, without leading zeros: "5" and "05" would name one token twice)', input: key });
        return;
      }
      const bias = map[key];
      if (typeof bias !== "number" || !Number.isFinite(bias) || bias < -100 || bias > 100) {
        ctx.issues.push({ code: "custom", path: [key], message: "logit_bias values are numbers from -100 to 100", input: bias });
        return;
      }
    }
  }) as unknown as z.ZodType<Record<string, number>>;
}

/**
 * A seed as OpenAI defines it: any 64-bit integer. The body is read with JSON.parse, so a seed past
 * 2^53 arrives as the nearest double, which is still an integer; zod's int() refuses those as
 * unsafe, and a client drawing 63-bit seeds had a valid request refused. int64's bounds are taken as
 * doubles (2^63 stands for int64's largest value, which JSON.parse rounds up to it); a number written
 * past int64 that rounds to ±2^63 is refused as the body is parsed (http/seed-literal.ts).
 */
export function seedSchema() {
  return z
    .number()
    .min(-(2 ** 63))
    .max(2 ** 63)
    .check((ctx) => {
      if (!Number.isInteger(ctx.value)) ctx.issues.push({ code: "invalid_type", expected: "int", input: ctx.value });
    });
}

/** Wire schema of the sampling fields Chat Completions and Completions share. */
export const samplingFieldsSchema = {
  temperature: z.number().min(0).max(2).nullish(),
  // OpenAI takes 0 (only the most likely token is left), as SpAk does.
  top_p: z.number().min(0).max(1).nullish(),
  // vLLM's and llama-server's extensions.
  top_k: z.int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  seed: seedSchema().nullish(),
  stop: z.union([z.string(), listOf(z.string(), { max: 16 })]).nullish(),
  n: z.int().min(1).max(128).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: logitBiasSchema().nullish(),
};

/** The sampling fields Chat Completions and Completions share, as they arrive on the wire. */
export interface WireSampling {
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  seed?: number | null;
  frequency_penalty?: number | null;
  presence_penalty?: number | null;
  repetition_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
}

/** What a request that leaves a sampling field out gets; a vendor configures its own. */
export interface SamplingDefaults {
  temperature: number;
  topP: number;
}

export const OPENAI_SAMPLING_DEFAULTS: SamplingDefaults = { temperature: 1, topP: 1 };

/** The defaults filled in explicitly; a missing seed gets a fresh random one per request. */
export function toSamplingParams(w: WireSampling, defaults: SamplingDefaults = OPENAI_SAMPLING_DEFAULTS): SamplingParams {
  return {
    temperature: w.temperature ?? defaults.temperature,
    topP: w.top_p ?? defaults.topP,
    // -1 is vLLM's spelling of "no top-k"; llama.cpp spells it 0.
    topK: w.top_k == null || w.top_k < 0 ? 0 : w.top_k,
    minP: w.min_p ?? 0,
    seed: w.seed == null ? drawnSeed() : samplerSeed(w.seed),
    ...(w.seed == null ? { seedDrawn: true } : {}),
    frequencyPenalty: w.frequency_penalty ?? 0,
    presencePenalty: w.presence_penalty ?? 0,
    repetitionPenalty: w.repetition_penalty ?? 1,
    logitBias: biasMap(w.logit_bias),
  };
}

/**
 * logit_bias as token id → bias, filled in one pass: a vocabulary-sized map is allowed (see
 * logitBiasSchema), and going through Object.entries made a 299k-entry one cost ~350 ms more of the
 * event loop.
 */
function biasMap(wire: Record<string, number> | null | undefined): Map<number, number> {
  const map = new Map<number, number>();
  if (wire) for (const key in wire) if (Object.hasOwn(wire, key)) map.set(Number(key), wire[key]);
  return map;
}

/** Up to 16 strings, as sent. An empty one would match before the first token, ending every answer empty; it is read as no stop string (the README says so). */
export function normaliseStop(stop: string | string[] | null | undefined): string[] {
  if (stop == null) return [];
  return (Array.isArray(stop) ? stop : [stop]).filter((s) => s.length > 0);
}

/**
 * The prompt-cache namespace of a request: the end user it names (`user`, `safety_identifier`) and
 * vLLM's `cache_salt`. Requests share cached prompt state only when both agree.
 */
export function isolationKey(user: string | null | undefined, salt: string | null | undefined): string | undefined {
  if (user == null && salt == null) return undefined;
  return JSON.stringify([user ?? null, salt ?? null]);
}
