import { AssertionError } from "node:assert";
import { test } from "node:test";
import assert from "../helpers/assert.ts";

test("the tests' assert: a bare ok() fails with its own message at once; the rest is node's strict assert", () => {
  const started = performance.now();
  assert.throws(() => assert.ok(0), (err: unknown) => err instanceof AssertionError && /expected a truthy value, got 0/.test(err.message));
  assert.throws(() => assert(false), AssertionError);
  assert.throws(() => assert.ok(false, "named"), /named/);
  assert.ok(performance.now() - started < 1000);
  assert.throws(() => assert.equal(1, "1" as unknown as number), AssertionError);
  assert.deepEqual({ a: [1] }, { a: [1] });
  assert.equal(assert.strict, assert);
});
