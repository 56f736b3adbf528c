import { Transform, type TransformCallback } from "node:stream";
import { ApiError } from "../core/errors.ts";

// JSON.parse runs on the one JavaScript thread, so while it parses a body every other request
// waits. What it costs depends less on a body's size than on how many values it holds: 15 MB of
// one-character text parts (2.75 M values) took 0.2–0.4 s to parse and as long again to validate,
// while 15 MB of prose in a few strings parses in ~15 ms; one object of a million keys took 0.85 s.
// These bounds, checked on the bytes as they arrive (a few tens of ms for a full-size body, spread
// over its arrival), refuse such a body before it is parsed. They sit far above what any request
// of the APIs served needs: 10,000 messages with their parts and calls are ~50,000 objects and
// arrays; a prompt of token ids for a million-token context is a million numbers (which parse at
// ~30 ms a million); a logit_bias map may name every token of a 262k vocabulary. An object's keys
// cost far more than an array's items (a million of them made the object a 0.85 s dictionary), so
// the width bound is on objects only.

/** Values of every kind (strings, numbers, literals, objects, arrays) in one body. */
export const JSON_MAX_VALUES = 2_000_000;
/** Objects and arrays in one body. */
export const JSON_MAX_CONTAINERS = 100_000;
/** Members (keys) of one object. */
export const JSON_MAX_MEMBERS = 300_001;
export interface JsonShapeLimits {
  values: number;
  containers: number;
  members: number;
}
const DEFAULT_LIMITS: JsonShapeLimits = { values: JSON_MAX_VALUES, containers: JSON_MAX_CONTAINERS, members: JSON_MAX_MEMBERS };

/** Objects deeper than this are counted in the totals but their keys are not. */
const TRACKED_DEPTH = 1024;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * Passes a JSON body through unchanged while counting its values, and fails it with a 413 once a
 * bound above is passed. It tells structure from text only by quotes and backslashes, which is
 * enough for counting: a body that is not JSON at all fails in JSON.parse as before.
 */
export class JsonShapeGuard extends Transform {
  private readonly limits: JsonShapeLimits;
  private inString = false;
  private escaped = false;
  /** Commas seen plus the first value: an upper bound on values. */
  private values = 0;
  private containers = 0;
  private depth = 0;
  /** Commas seen in each open container, for the first TRACKED_DEPTH levels; -1 for an array. */
  private readonly commas = new Int32Array(TRACKED_DEPTH);

  constructor(limits: Partial<JsonShapeLimits> = {}) {
    super();
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    const refusal = this.scan(chunk);
    if (refusal) return cb(refusal);
    cb(null, chunk);
  }

  private scan(chunk: Buffer): ApiError | undefined {
    let { inString, escaped, values, containers, depth } = this;
    const commas = this.commas;
    const { values: maxValues, containers: maxContainers, members: maxMembers } = this.limits;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (c === BACKSLASH) escaped = true;
        else if (c === QUOTE) inString = false;
        continue;
      }
      if (c === QUOTE) inString = true;
      else if (c === COMMA) {
        values++;
        if (depth > 0 && depth <= TRACKED_DEPTH && commas[depth - 1] >= 0 && ++commas[depth - 1] >= maxMembers) return tooMany(`more than ${count(maxMembers)} keys in one object`);
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        containers++;
        depth++;
        if (depth <= TRACKED_DEPTH) commas[depth - 1] = c === OPEN_BRACE ? 0 : -1;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (depth > 0) depth--;
      }
    }
    Object.assign(this, { inString, escaped, values, containers, depth });
    if (values + 1 > maxValues) return tooMany(`more than ${count(maxValues)} values`);
    if (containers > maxContainers) return tooMany(`more than ${count(maxContainers)} objects and arrays`);
    return undefined;
  }
}

const count = (n: number) => n.toLocaleString("en-US");

function tooMany(what: string): ApiError {
  return new ApiError(413, `The request body holds ${what}, more than this server parses for one request.`, { code: "request_too_large" });
}
