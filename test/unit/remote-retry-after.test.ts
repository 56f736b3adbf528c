import assert from "node:assert/strict";
import { test } from "node:test";
import { retryAfterSeconds } from "../../src/engines/remote/http.ts";

test("an upstream's Retry-After: seconds or an HTTP date, held to an hour, nonsense left out", () => {
  const now = Date.parse("Fri, 04 Dec 2026 18:00:00 GMT");
  assert.equal(retryAfterSeconds("7", now), 7);
  assert.equal(retryAfterSeconds("2.2", now), 3);
  assert.equal(retryAfterSeconds("999999", now), 3600);
  // RFC 9110's other form: a date, 60 s ahead.
  assert.equal(retryAfterSeconds("Fri, 04 Dec 2026 18:01:00 GMT", now), 60);
  assert.equal(retryAfterSeconds("Fri, 04 Dec 2026 17:59:00 GMT", now), 0);
  assert.equal(retryAfterSeconds("Sat, 05 Dec 2026 18:00:00 GMT", now), 3600);
  for (const bad of [undefined, "", "  ", "-5", "soon", ["1", "2"]]) assert.equal(retryAfterSeconds(bad as string | undefined, now), undefined, String(bad));
});
