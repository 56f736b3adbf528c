import { test } from "node:test";
import { newId } from "../../src/core/ids.ts";
import assert from "../helpers/assert.ts";

test("ids keep their prefix, 16 URL-safe characters, and do not repeat across refills of the random pool", () => {
  const seen = new Set<string>();
  // Several times the pool's 341 ids, so the refill path runs too.
  for (let i = 0; i < 5000; i++) {
    const id = newId("chatcmpl-");
    assert.match(id, /^chatcmpl-[A-Za-z0-9_-]{16}$/);
    seen.add(id);
  }
  assert.equal(seen.size, 5000);
});
