import assert from "../helpers/assert.ts";
import { describe, test } from "node:test";
import fc from "fast-check";
import { compileJsonSchema, SchemaLimitError } from "../../src/grammar/json-schema-to-gbnf.ts";
import { readdirSync, readFileSync } from "node:fs";
import { customToolGrammar } from "../../src/grammar/custom-tool-grammar.ts";
import { type GrammarRule, grammarLoadCost, leftRecursionWalk, parseGrammarRules } from "../../src/grammar/load-cost.ts";

// llama.cpp's left-recursion check, ported step by step (it recurses from every rule without
// remembering finished ones), counting the elements it visits. The counter under test computes
// the same number in one pass; this is the slow reference it must agree with.
function bruteForceWalk(rules: readonly GrammarRule[]): number {
  const inProgress = rules.map(() => false);
  const mayBeEmpty = rules.map(() => false);
  let visited = 0;
  const detect = (i: number): boolean => {
    if (inProgress[i]) return true;
    inProgress[i] = true;
    visited += rules[i].size;
    if (rules[i].alts.some((a) => a.length === 0)) mayBeEmpty[i] = true;
    for (const alt of rules[i].alts) {
      for (const e of alt) {
        if (e === -1) break;
        if (detect(e)) return true;
        if (!mayBeEmpty[e]) break;
      }
    }
    inProgress[i] = false;
    return false;
  };
  for (let i = 0; i < rules.length; i++) if (detect(i)) throw new Error("left recursion");
  return visited;
}

/**
 * The rules one by one as llama.cpp stores them: each chain (GrammarRule.chain) written out as its
 * k rules `S next | ε`, the last `S | ε`; the chain's own id stays the first of them.
 */
function expandChains(rules: readonly GrammarRule[]): GrammarRule[] {
  const out: GrammarRule[] = rules.map((r) => ({ alts: r.alts.map((a) => [...a]), size: r.size }));
  rules.forEach((r, id) => {
    if (r.chain === undefined) return;
    const item = r.alts[0].slice(0, -1);
    let next = id;
    for (let i = 1; i < r.chain; i++) {
      const last = i === r.chain - 1;
      const rule: GrammarRule = last ? { alts: [[...item], []], size: r.size - 1 } : { alts: [[...item, out.length + 1], []], size: r.size };
      out.push(rule);
      if (i === 1) out[next].alts[0][item.length] = out.length - 1;
      next = out.length - 1;
    }
  });
  return out;
}

/** Random grammar texts with groups, alternatives that may be empty and every repetition form. */
const grammarTexts = fc.integer({ min: 1, max: 5 }).chain((n) => {
  const item = (i: number): fc.Arbitrary<string> =>
    fc.oneof(
      fc.constantFrom('"a"', '"bc"', "[x-z]"),
      i + 1 < n ? fc.integer({ min: i + 1, max: n - 1 }).map((j) => `r${j}`) : fc.constant('"d"'),
      fc.array(fc.constantFrom('"e"', '""', i + 1 < n ? `r${i + 1}` : '"f"'), { minLength: 1, maxLength: 2 }).map((xs) => `(${xs.join(" | ")})`),
    );
  const postfix = fc.constantFrom("", "", "?", "*", "+", "{3}", "{0,4}", "{2,6}", "{1,}", "{0,2}");
  const alternative = (i: number) => fc.array(fc.tuple(item(i), postfix).map(([x, p]) => x + p), { maxLength: 3 }).map((xs) => xs.join(" "));
  return fc
    .tuple(...Array.from({ length: n }, (_, i) => fc.array(alternative(i), { minLength: 1, maxLength: 3 })))
    .map((rules) => rules.map((alts, i) => `r${i} ::= ${alts.map((a) => (a === "" ? '""' : a)).join(" | ")}`).join("\n"));
});

/** Random grammars without left recursion: rule i only refers to rules after it. */
const ruleGraphs = fc
  .integer({ min: 1, max: 12 })
  .chain((n) =>
    fc.tuple(
      ...Array.from({ length: n }, (_, i) =>
        fc.array(fc.array(i + 1 < n ? fc.oneof(fc.constant(-1), fc.integer({ min: i + 1, max: n - 1 })) : fc.constant(-1), { maxLength: 4 }), { minLength: 1, maxLength: 4 }),
      ),
    ),
  )
  .map((altsPerRule) => altsPerRule.map((alts): GrammarRule => ({ alts, size: alts.reduce((s, a) => s + a.length + 1, 0) })));

describe("grammar load cost", () => {
  test("the one-pass walk count equals llama.cpp's check run literally (fast-check)", () => {
    fc.assert(fc.property(ruleGraphs, (rules) => leftRecursionWalk(rules) === bruteForceWalk(rules)), { numRuns: 500 });
  });

  test("a repetition's chain kept as one rule counts as the rules written out (fast-check)", () => {
    fc.assert(
      fc.property(grammarTexts, (text) => {
        const rules = parseGrammarRules(text);
        let expected: number;
        try {
          expected = bruteForceWalk(expandChains(rules));
        } catch {
          return fc.pre(false); // left recursive (x* over an item that may be empty): llama.cpp refuses it
        }
        assert.equal(leftRecursionWalk(rules), expected, text);
      }),
      { numRuns: 500 },
    );
    for (const text of ['root ::= ("a"?){0,50}', "root ::= (x | y){2,40}\nx ::= [a-z]?\ny ::= x x", 'root ::= x{0,1000}\nx ::= ("" | "ab")']) {
      const rules = parseGrammarRules(text);
      assert.ok(rules.some((r) => r.chain !== undefined), text);
      assert.equal(leftRecursionWalk(rules), bruteForceWalk(expandChains(rules)), text);
    }
  });

  test("a string of maxLength 98,500 parses into a few hundred rules, not 98,500", () => {
    const schema = { type: "object", properties: { a: { type: "string", maxLength: 98_500 } }, required: ["a"] };
    const { gbnf, loadCost } = compileJsonSchema(schema);
    const rules = parseGrammarRules(gbnf);
    assert.ok(rules.length < 1000, `${rules.length} rules`);
    const expanded = expandChains(rules);
    assert.ok(expanded.length > 98_000, `${expanded.length} rules written out`);
    assert.equal(loadCost, grammarLoadCost(gbnf));
    assert.equal(leftRecursionWalk(rules), bruteForceWalk(expanded));
  });

  test("the walk count of compiled schemas equals the literal check's", () => {
    const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: i % 2 ? "string" : "integer" }]));
    for (const schema of [
      { type: "object", properties: props(40) },
      { type: "object", properties: props(30), required: ["p3", "p17"], additionalProperties: { type: "number" } },
      { type: "object", properties: props(20), maxProperties: 5 },
      { type: "array", items: { anyOf: [{ type: "string", pattern: "^(ab|c)*d?$" }, { type: "boolean" }] }, minItems: 2, maxItems: 9 },
    ]) {
      const rules = parseGrammarRules(compileJsonSchema(schema).gbnf);
      assert.equal(leftRecursionWalk(rules), bruteForceWalk(expandChains(rules)), JSON.stringify(schema).slice(0, 80));
    }
  });

  test("groups and repetitions become rules the way llama.cpp's parser rewrites them", () => {
    // root ::= "a" "a" r1; r1 ::= "a" r2 | ; r2 ::= "a" | — two optional copies after the two required
    // (kept as one chain rule until written out).
    const chained = parseGrammarRules('root ::= "a"{2,4}');
    assert.equal(chained.length, 2);
    assert.equal(chained[1].chain, 2);
    const bounded = expandChains(chained);
    assert.equal(bounded.length, 3);
    assert.deepEqual(bounded[0].alts, [[-1, -1, 1]]);
    assert.deepEqual(bounded[1].alts, [[-1, 2], []]);
    assert.deepEqual(bounded[2].alts, [[-1], []]);
    assert.deepEqual([bounded[1].size, bounded[2].size], [4, 3]);
    // x* is one recursive rule with an empty alternative; a group is a rule of its own.
    const star = parseGrammarRules("root ::= (x | y)* x\nx ::= [a-z]\ny ::= \"yy\" # comment\n");
    const rootAlts = star[0].alts[0];
    assert.equal(rootAlts.length, 2);
    const rec = star[rootAlts[0]];
    assert.ok(rec.alts.some((a) => a.length === 0));
    assert.ok(rec.alts.some((a) => a.includes(rootAlts[0])), "x* refers to itself");
    // Literals count one element per character, escapes included; an empty literal is nothing.
    assert.deepEqual(parseGrammarRules('root ::= "\\u00e9\\n" | ""').map((r) => r.alts), [[[-1], []]]);
    assert.equal(parseGrammarRules('root ::= "\\u00e9\\n"')[0].size, 3);
  });

  test("a chain of optional properties costs quadratically, required ones linearly", () => {
    const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }]));
    const walk = (schema: object) => leftRecursionWalk(parseGrammarRules(compileJsonSchema(schema, { limits: { maxLoadCost: Infinity } }).gbnf));
    const optional = [walk({ type: "object", properties: props(200) }), walk({ type: "object", properties: props(400) })];
    const required = [200, 400].map((n) => walk({ type: "object", properties: props(n), required: Object.keys(props(n)) }));
    assert.ok(optional[1] / optional[0] > 3.5, `optional: ${optional}`);
    assert.ok(required[1] / required[0] < 2.2, `required: ${required}`);
  });

  test("compileJsonSchema refuses a grammar past maxLoadCost, and reports the cost of one within it", () => {
    const props = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }]));
    const small = compileJsonSchema({ type: "object", properties: props(10) });
    assert.equal(small.loadCost, grammarLoadCost(small.gbnf));
    assert.throws(
      () => compileJsonSchema({ type: "object", properties: props(10) }, { limits: { maxLoadCost: small.loadCost - 1 } }),
      (e: unknown) => e instanceof SchemaLimitError && /too long to load/.test(e.message),
    );
    // With the default bound: 1,000 optional properties load, 5,000 do not; 5,000 required ones do.
    assert.ok(compileJsonSchema({ type: "object", properties: props(1000) }).loadCost > 0);
    assert.throws(() => compileJsonSchema({ type: "object", properties: props(5000) }), SchemaLimitError);
    assert.ok(compileJsonSchema({ type: "object", properties: props(5000), required: Object.keys(props(5000)) }).loadCost > 0);
  });

  test("the grammars this server writes parse (library schemas, formats, Lark and regex tools)", () => {
    const dir = new URL("../fixtures/schemas/", import.meta.url);
    const texts = readdirSync(dir)
      .filter((f) => f.endsWith(".json"))
      .map((f) => compileJsonSchema(JSON.parse(readFileSync(new URL(f, dir), "utf8"))).gbnf);
    for (const format of ["date-time", "email", "uuid", "uri"]) texts.push(compileJsonSchema({ type: "string", format }).gbnf);
    texts.push(customToolGrammar({ type: "grammar", syntax: "lark", definition: 'start: "SELECT " NAME (", " NAME)* " FROM " NAME\nNAME: /[a-z_][a-z0-9_]{0,30}/' }));
    texts.push(customToolGrammar({ type: "grammar", syntax: "regex", definition: "^(\\d{3}-){2}\\d{4}$" }));
    assert.ok(texts.length > 10);
    for (const text of texts) {
      const rules = parseGrammarRules(text);
      assert.ok(rules.length > 0 && rules.every((r) => r.alts.length > 0), text.slice(0, 80));
      assert.equal(leftRecursionWalk(rules), bruteForceWalk(expandChains(rules)));
    }
  });

  test("text that is not a grammar throws rather than being costed", () => {
    assert.throws(() => grammarLoadCost("root = x"));
    assert.throws(() => grammarLoadCost('root ::= ("a"'));
    assert.throws(() => grammarLoadCost("root ::= * x"));
  });
});
