import { z } from "zod";
import { boundedRecord } from "../json-object.ts";

/** OpenAI's metadata limits: at most 16 pairs, keys up to 64 characters, string values up to 512. */
export const METADATA_MAX_PAIRS = 16;
export const METADATA_MAX_KEY = 64;
export const METADATA_MAX_VALUE = 512;

export const metadataSchema = boundedRecord(
  z.string().min(1, "metadata keys must not be empty").max(METADATA_MAX_KEY, `metadata keys are at most ${METADATA_MAX_KEY} characters`),
  z.string().max(METADATA_MAX_VALUE, `metadata values are at most ${METADATA_MAX_VALUE} characters`),
  METADATA_MAX_PAIRS,
  `metadata holds at most ${METADATA_MAX_PAIRS} key-value pairs`,
);
