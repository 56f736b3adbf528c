// Where the body parser dropped "__proto__" keys (src/http/body.ts), for the fields that must say so.

/** Objects of parsed bodies that held a "__proto__" key, and every object or array above one. */
export const PROTO_HOLDERS = new WeakSet<object>();
export const PROTO_BELOW = new WeakSet<object>();

/**
 * Where under `value` the body parser dropped a "__proto__" key (`["properties", "__proto__"]`), or
 * undefined. Fields whose keys are data (metadata, logit_bias, a JSON Schema's properties) refuse
 * it by this path rather than be served without the entry. Only branches holding one are walked.
 */
export function droppedProtoPath(value: unknown): Array<string | number> | undefined {
  const path: Array<string | number> = [];
  let at = value;
  while (at !== null && typeof at === "object" && PROTO_BELOW.has(at)) {
    if (PROTO_HOLDERS.has(at)) return [...path, "__proto__"];
    const entries: Array<[string | number, unknown]> = Array.isArray(at) ? at.map((v, i) => [i, v]) : Object.entries(at);
    const next = entries.find(([, v]) => v !== null && typeof v === "object" && PROTO_BELOW.has(v));
    if (!next) return undefined;
    path.push(next[0]);
    at = next[1];
  }
  return undefined;
}
