import { z } from "zod";
import { listOf } from "./list-of.ts";

/**
 * Most stop sequences of a dialect whose documentation sets no limit (Konan, Databricks). The stop
 * matcher compares every stop sequence with the text after each token, on the thread all requests
 * share: a million of them held one request 8 s and every other request with it. 256 is far past
 * what a client needs (OpenAI takes 4, DeepSeek-style APIs 16) and costs a token microseconds.
 */
export const MAX_STOP_SEQUENCES = 256;

/** `stop` as a string or a list of strings, the list bounded by MAX_STOP_SEQUENCES. */
export const boundedStop = z.union([
  z.string(),
  listOf(z.string(), { max: MAX_STOP_SEQUENCES, maxMessage: `at most ${MAX_STOP_SEQUENCES} stop sequences are taken` }),
]);
