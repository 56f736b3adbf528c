import { test } from "node:test";
import assert from "../helpers/assert.ts";
import { createProgressBar } from "../../src/cli/progress-bar.ts";

test("createProgressBar: plain lines every 10% off a TTY, one redrawn line on a TTY", () => {
  const plain: string[] = [];
  const bar = createProgressBar("model.gguf", { write: (s: string) => plain.push(s) });
  for (let r = 0; r <= 1000; r += 10) bar({ received: r, total: 1000 });
  assert.equal(plain.length, 11); // 0%, 10%, ..., 100%
  assert.ok(plain.every((l) => l.endsWith("\n") && l.startsWith("model.gguf: ")));
  assert.match(plain.at(-1) ?? "", /100%/);

  const tty: string[] = [];
  const bar2 = createProgressBar("m", { write: (s: string) => tty.push(s), isTTY: true, columns: 80 });
  bar2({ received: 0, total: 2_000_000 });
  bar2({ received: 2_000_000, total: 2_000_000 });
  assert.ok(tty.every((s) => s.startsWith("\r")));
  assert.match(tty.at(-1) ?? "", /\[=+\] 100% 2\.0\/2\.0 MB.*\n$/);
});
