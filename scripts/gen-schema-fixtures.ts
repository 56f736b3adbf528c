// Regenerates test/fixtures/schemas/zod-*.json from test/fixtures/schemas/zod-models.ts with zod's
// own z.toJSONSchema (default options), and, when python3 with pydantic v2 is available, the
// pydantic-*.json fixtures with scripts/gen-pydantic-schemas.py.
//   node --import tsx scripts/gen-schema-fixtures.ts
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { zodModels } from "../test/fixtures/schemas/zod-models.ts";

const dir = fileURLToPath(new URL("../test/fixtures/schemas/", import.meta.url));
for (const [name, model] of Object.entries(zodModels)) {
  writeFileSync(`${dir}zod-${name}.json`, JSON.stringify(z.toJSONSchema(model), null, 2) + "\n");
}
console.log(`wrote ${Object.keys(zodModels).length} zod fixtures`);
try {
  const out = execFileSync("python3", [fileURLToPath(new URL("./gen-pydantic-schemas.py", import.meta.url)), dir], { encoding: "utf8" });
  process.stdout.write(out);
} catch (e) {
  console.warn(`pydantic fixtures not regenerated: ${(e as Error).message}`);
}
