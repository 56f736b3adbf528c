import { ApiError } from "../core/errors.ts";

/** The longest path segment a route takes (model ids can be long); a longer one is a 414. */
export const MAX_PATH_SEGMENT = 500;

export function uriTooLong(): ApiError {
  return new ApiError(414, "A segment of the URL path is longer than this server accepts.", { code: "uri_too_long" });
}

/**
 * A wildcard route's value (a model id that may hold "/"), held to the same segment length as a
 * route's parameters, which the router checks itself.
 */
export function wildcardValue(value: string): string {
  for (const segment of value.split("/")) if (segment.length > MAX_PATH_SEGMENT) throw uriTooLong();
  return value;
}
