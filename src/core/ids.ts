import { randomBytes } from "node:crypto";

/** Opaque unique ids in the prefix style OpenAI clients recognise (chatcmpl-…, cmpl-…, call_…). */
export function newId(prefix: string): string {
  return `${prefix}${randomBytes(12).toString("base64url")}`;
}

export const SYSTEM_FINGERPRINT = "fp_plinth_0_1";
