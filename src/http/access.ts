import type { FastifyRequest } from "fastify";

/**
 * Which API key a request authenticated with, as the id of the key (never the key itself). The
 * tenancy layer's request hook records it; route environments read it into the request context.
 * Kept here so the HTTP layer and the dialects need to know nothing about how keys are checked.
 */
const keys = new WeakMap<FastifyRequest, string>();

const names = new WeakMap<FastifyRequest, string>();

export function setRequestKey(request: FastifyRequest, keyId: string, keyName?: string): void {
  keys.set(request, keyId);
  if (keyName !== undefined) names.set(request, keyName);
}

/** The name the key was given (for logs: people recognise names, not ids); undefined when none. */
export function requestKeyName(request: FastifyRequest): string | undefined {
  return names.get(request);
}

/** The key id the request authenticated with; undefined on an open server. */
export function requestKey(request: FastifyRequest): string | undefined {
  return keys.get(request);
}
