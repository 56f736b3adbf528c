import strict from "node:assert/strict";

// Node words the message of a bare `assert.ok(x)` by reading and parsing the calling test's source,
// which on some files compiled by tsx takes minutes (measured: 2.5 min for one failing check in
// chat-tools.test.ts). A failing check must report at once, so `ok` always carries a message.

function ok(value: unknown, message?: string | Error): asserts value {
  strict.ok(value, message ?? `expected a truthy value, got ${String(value)}`);
}

const assert: typeof strict = Object.assign(
  ((value: unknown, message?: string | Error) => ok(value, message)) as typeof strict,
  strict,
  { ok, strict: undefined as never },
);
assert.strict = assert;

export default assert;
