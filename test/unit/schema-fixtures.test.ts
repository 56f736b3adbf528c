// The JSON Schemas that zod 4 and pydantic 2 emit by default (test/fixtures/schemas/, written by
// scripts/gen-schema-fixtures.ts) compile in strict mode; strings sampled at random from each
// grammar (a small GBNF walker below, no model needed) are accepted by llama.cpp's own grammar
// engine, parse as JSON, validate with ajv (+ ajv-formats), and, for zod, parse with the model.
import assert from "../helpers/assert.ts";
import { before, describe, test } from "node:test";
import { readdirSync, readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { compileJsonSchema, LIBRARY_FORMAT_PATTERNS } from "../../src/grammar/json-schema-to-gbnf.ts";
import { FORMAT_REGEX } from "../../src/grammar/string-formats.ts";
import { zodModels } from "../fixtures/schemas/zod-models.ts";

const FIXTURES = new URL("../fixtures/schemas/", import.meta.url);

// ---------------------------------------------------------------------------------------------
// A random walker over GBNF as this project writes it
// ---------------------------------------------------------------------------------------------

type Expr =
  | { t: "lit"; s: string }
  | { t: "cls"; ranges: Array<[number, number]>; neg: boolean }
  | { t: "ref"; name: string }
  | { t: "alt"; alts: Expr[] }
  | { t: "seq"; items: Expr[] }
  | { t: "rep"; item: Expr; min: number; max: number | undefined };

function parseGbnf(text: string): Map<string, Expr> {
  const rules = new Map<string, Expr>();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z0-9-]+) ::= (.*)$/.exec(line);
    if (!m) continue;
    let i = 0;
    const src = m[2];
    const ws = () => {
      while (src[i] === " ") i++;
    };
    const esc = (): number => {
      const c = src[++i];
      i++;
      const hex = (n: number) => {
        const v = parseInt(src.slice(i, i + n), 16);
        i += n;
        return v;
      };
      if (c === "x") return hex(2);
      if (c === "u") return hex(4);
      if (c === "U") return hex(8);
      return ({ n: 10, r: 13, t: 9 } as Record<string, number>)[c] ?? c.codePointAt(0)!;
    };
    const char = (): number => {
      if (src[i] === "\\") return esc();
      const cp = src.codePointAt(i)!;
      i += cp > 0xffff ? 2 : 1;
      return cp;
    };
    const alt = (): Expr => {
      const alts = [seq()];
      while (src[i] === "|") {
        i++;
        alts.push(seq());
      }
      return alts.length === 1 ? alts[0] : { t: "alt", alts };
    };
    const seq = (): Expr => {
      const items: Expr[] = [];
      for (;;) {
        ws();
        const c = src[i];
        if (c === undefined || c === "|" || c === ")") break;
        let item: Expr;
        if (c === '"') {
          i++;
          let s = "";
          while (src[i] !== '"') s += String.fromCodePoint(char());
          i++;
          item = { t: "lit", s };
        } else if (c === "[") {
          i++;
          const neg = src[i] === "^";
          if (neg) i++;
          const ranges: Array<[number, number]> = [];
          while (src[i] !== "]") {
            const a = char();
            if (src[i] === "-" && src[i + 1] !== "]") {
              i++;
              ranges.push([a, char()]);
            } else ranges.push([a, a]);
          }
          i++;
          item = { t: "cls", ranges, neg };
        } else if (c === "(") {
          i++;
          item = alt();
          ws();
          i++; // )
        } else {
          const name = /^[a-zA-Z0-9-]+/.exec(src.slice(i))![0];
          i += name.length;
          item = { t: "ref", name };
        }
        const q = src[i];
        if (q === "?") item = { t: "rep", item, min: 0, max: 1 };
        else if (q === "*") item = { t: "rep", item, min: 0, max: undefined };
        else if (q === "+") item = { t: "rep", item, min: 1, max: undefined };
        else if (q === "{") {
          const r = /^\{(\d+)(,(\d*))?\}/.exec(src.slice(i))!;
          const min = Number(r[1]);
          item = { t: "rep", item, min, max: r[2] === undefined ? min : r[3] === "" ? undefined : Number(r[3]) };
          i += r[0].length - 1;
        }
        if (q === "?" || q === "*" || q === "+" || q === "{") i++;
        items.push(item);
      }
      return items.length === 1 ? items[0] : { t: "seq", items };
    };
    rules.set(m[1], alt());
  }
  return rules;
}

const POOL = [..."abcXYZ019 _-.:/@+=!~'\"\\\n\t{}[]é中😀"].map((c) => c.codePointAt(0)!);

function sampler(gbnf: string, seed: number): () => string {
  const rules = parseGbnf(gbnf);
  // Shortest expansion of each rule (fixed point), to finish quickly once the output is long.
  const minLen = new Map<string, number>([...rules.keys()].map((k) => [k, Infinity]));
  const min = (e: Expr): number => {
    switch (e.t) {
      case "lit": return e.s.length;
      case "cls": return 1;
      case "ref": return minLen.get(e.name)!;
      case "alt": return Math.min(...e.alts.map(min));
      case "seq": return e.items.reduce((a, x) => a + min(x), 0);
      case "rep": return e.min === 0 ? 0 : e.min * min(e.item);
    }
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (const [k, e] of rules) {
      const v = min(e);
      if (v < minLen.get(k)!) {
        minLen.set(k, v);
        changed = true;
      }
    }
  }
  let state = seed >>> 0 || 1;
  const rand = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
  return () => {
    let out = "";
    const walk = (e: Expr, depth: number): void => {
      const closing = out.length > 400 || depth > 40;
      switch (e.t) {
        case "lit":
          out += e.s;
          return;
        case "cls": {
          const inClass = (cp: number) => e.ranges.some(([a, b]) => a <= cp && cp <= b) !== e.neg;
          const ok = POOL.filter(inClass);
          out += String.fromCodePoint(ok.length > 0 ? ok[Math.floor(rand() * ok.length)] : e.neg ? 0x4e2d : e.ranges[0][0]);
          return;
        }
        case "ref":
          return walk(rules.get(e.name)!, depth + 1);
        case "alt": {
          if (closing) {
            const best = e.alts.reduce((a, b) => (min(b) < min(a) ? b : a));
            return walk(best, depth + 1);
          }
          const finite = e.alts.filter((a) => min(a) < Infinity);
          return walk(finite[Math.floor(rand() * finite.length)], depth + 1);
        }
        case "seq":
          for (const x of e.items) walk(x, depth);
          return;
        case "rep": {
          let n = e.min;
          if (!closing) while ((e.max === undefined || n < e.max) && rand() < 0.6) n++;
          for (let k = 0; k < n; k++) walk(e.item, depth + 1);
        }
      }
    };
    walk(rules.get("root")!, 0);
    return out;
  };
}

// ---------------------------------------------------------------------------------------------

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

function newAjv() {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const re = (src: string) => new RegExp(`^(?:${src})$`, "u");
  ajv.addFormat("ipvanyaddress", re(FORMAT_REGEX.ipvanyaddress));
  ajv.addFormat("binary", () => true);
  // zod's own format names: zod checks them with the pattern it emits next to them.
  for (const f of ["cuid", "cuid2", "nanoid", "ulid", "base64", "base64url", "starts_with", "ends_with", "lowercase", "e164"]) ajv.addFormat(f, () => true);
  return ajv;
}

const fixtures = readdirSync(FIXTURES)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => ({ name: f.replace(/\.json$/, ""), schema: JSON.parse(readFileSync(new URL(f, FIXTURES), "utf8")) as object }));

let llama: Llama;
before(async () => {
  llama = await getLlama({ gpu: false, maxThreads: 2, build: "never", logLevel: LlamaLogLevel.error });
});

describe("zod 4 and pydantic 2 default schemas", () => {
  test("there are fixtures from both libraries", () => {
    assert.ok(fixtures.filter((f) => f.name.startsWith("zod-")).length >= 8, "zod fixtures");
    assert.ok(fixtures.filter((f) => f.name.startsWith("pydantic-")).length >= 7, "pydantic fixtures");
  });

  for (const { name, schema } of fixtures) {
    test(`${name}: strict compile; sampled strings are accepted by llama.cpp and valid`, async () => {
      const { gbnf, relaxed } = compileJsonSchema(schema, { strict: true });
      assert.deepEqual(relaxed, []);
      const grammar = await llama.createGrammar({ grammar: gbnf });
      const accepts = (t: string) => (grammar as unknown as { _testText(t: string): boolean })._testText(t);
      const validate = newAjv().compile(schema);
      const model = name.startsWith("zod-") ? zodModels[name.slice(4)] : undefined;
      for (let seed = 1; seed <= 25; seed++) {
        const text = sampler(gbnf, seed * 7919)();
        assert.ok(accepts(text), `seed ${seed}: llama.cpp rejects the sample ${text}`);
        let value: unknown;
        assert.doesNotThrow(() => (value = JSON.parse(text)), `seed ${seed}: not JSON: ${text}`);
        assert.ok(validate(value), `seed ${seed}: ${text} fails the schema: ${JSON.stringify(validate.errors)}`);
        if (model) {
          // z.url() parses with the WHATWG URL parser, which refuses some RFC 3986 URIs that its
          // JSON Schema (format: uri) allows, e.g. "a://:9" (a port without a host): not checked.
          const issues = (model.safeParse(value).error?.issues ?? []).filter((i) => !(i.code === "invalid_format" && i.format === "url"));
          assert.deepEqual(issues, [], `seed ${seed}: zod rejects ${text}`);
        }
      }
    });
  }

  test("library patterns enforced through their format: every format string matches the pattern", () => {
    for (const [format, patterns] of Object.entries(LIBRARY_FORMAT_PATTERNS)) {
      const { gbnf } = compileJsonSchema({ type: "string", format });
      for (const pattern of patterns) {
        const re = new RegExp(pattern, "u");
        for (let seed = 1; seed <= 300; seed++) {
          const s = JSON.parse(sampler(gbnf, seed)()) as string;
          assert.match(s, re, `${format} sample ${JSON.stringify(s)} against ${pattern}`);
        }
      }
    }
  });
});
