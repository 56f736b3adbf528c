/**
 * What loading a grammar costs llama.cpp on the JavaScript thread, against the load cost the schema
 * compiler estimates for it (`src/grammar/load-cost.ts`): the ns per estimated unit should stay
 * roughly constant across shapes, which is what lets one bound (`maxLoadCost`) stand for a time.
 *
 *   node --import tsx bench/grammar-load.ts        (BENCH_ROUNDS, default 3: best of)
 *
 * Not part of `npm run bench`. Shapes: runs of optional properties (quadratic), required properties
 * (linear), bounded strings, a maxProperties count, nested arrays. The bound itself is not applied.
 */
import { compileJsonSchema } from "../src/grammar/json-schema-to-gbnf.ts";
import { DEFAULT_MAX_LOAD_COST } from "../src/grammar/load-cost.ts";
import { getRuntime } from "../src/engines/llama-cpp/runtime.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const props = (n: number, schema: unknown = { type: "integer" }) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, schema]));
const required = (n: number) => Object.keys(props(n));

const shapes: Array<[string, unknown]> = [
  ["250 optional integers", { type: "object", properties: props(250) }],
  ["1,000 optional integers", { type: "object", properties: props(1000) }],
  ["2,000 optional integers", { type: "object", properties: props(2000) }],
  ["1,000 required integers", { type: "object", properties: props(1000), required: required(1000) }],
  ["5,000 required integers", { type: "object", properties: props(5000), required: required(5000) }],
  ["2,000 required strings ≤ 20", { type: "object", properties: props(2000, { type: "string", maxLength: 20 }), required: required(2000) }],
  ["100 optional, maxProperties 50", { type: "object", properties: props(100), maxProperties: 50 }],
  ["200 optional, maxProperties 100", { type: "object", properties: props(200), maxProperties: 100 }],
  ["arrays of objects of 50 numbers", { type: "array", items: { type: "array", items: { type: "object", properties: props(50, { type: "number" }) } } }],
];

const llama = await getRuntime({ gpu: "off", threads: 1 });
console.log(`grammar load: llama.cpp's time against the estimated cost (bound ${DEFAULT_MAX_LOAD_COST / 1e6} M units), best of ${ROUNDS}`);
console.log("shape".padEnd(34), "chars".padStart(9), "M units".padStart(8), "load ms".padStart(8), "ns/unit".padStart(8), " within bound");
for (const [name, schema] of shapes) {
  const { gbnf, loadCost } = compileJsonSchema(schema, { limits: { maxLoadCost: Infinity } });
  let best = Infinity;
  for (let i = 0; i < ROUNDS; i++) {
    const t0 = performance.now();
    await llama.createGrammar({ grammar: gbnf });
    best = Math.min(best, performance.now() - t0);
  }
  console.log(
    name.padEnd(34),
    String(gbnf.length).padStart(9),
    (loadCost / 1e6).toFixed(1).padStart(8),
    best.toFixed(1).padStart(8),
    ((best * 1e6) / loadCost).toFixed(2).padStart(8),
    loadCost <= DEFAULT_MAX_LOAD_COST ? " yes" : " no",
  );
}
await llama.dispose();
