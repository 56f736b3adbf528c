import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import type { Llama, LlamaGrammar } from "node-llama-cpp";
import { getRuntime } from "../../src/engines/llama-cpp/runtime.ts";
import { customToolGrammar } from "../../src/grammar/custom-tool-grammar.ts";
import { GrammarConversionError, larkToGbnf, type LarkToGbnfOptions } from "../../src/grammar/lark-to-gbnf.ts";

let llama: Llama;

before(async () => {
  llama = await getRuntime({ gpu: "off", threads: 1 });
});

/**
 * Compiles the GBNF with llama.cpp (through node-llama-cpp, no model needed) and returns a full-match
 * test: LlamaGrammar's internal `_testText` runs llama.cpp's own grammar engine over the text. It is
 * not in the public typings, so an upgrade that drops it fails here loudly.
 */
async function compile(gbnf: string): Promise<(text: string) => boolean> {
  const grammar: LlamaGrammar = await llama.createGrammar({ grammar: gbnf });
  const internal = grammar as unknown as { _testText(text: string): boolean };
  assert.equal(typeof internal._testText, "function", "LlamaGrammar._testText is gone");
  return (text) => internal._testText(text);
}

async function check(gbnf: string, yes: string[], no: string[]): Promise<void> {
  const accepts = await compile(gbnf);
  for (const t of yes) assert.ok(accepts(t), `should accept ${JSON.stringify(t)}\n${gbnf}`);
  for (const t of no) assert.ok(!accepts(t), `should reject ${JSON.stringify(t)}\n${gbnf}`);
}

async function lark(definition: string, yes: string[], no: string[], opts?: LarkToGbnfOptions): Promise<string> {
  const gbnf = larkToGbnf(definition, opts);
  await check(gbnf, yes, no);
  return gbnf;
}

describe("Lark → GBNF: representative grammars, checked by llama.cpp", () => {
  test("arithmetic expressions: left recursion rewritten, ?-rules, aliases, %ignore WS, NUMBER", async () => {
    const gbnf = await lark(
      String.raw`
// A calculator
start: expr
?expr: expr "+" term -> add
     | expr "-" term -> sub
     | term
?term: term "*" factor | term "/" factor
     | factor
?factor: NUMBER
       | "-" factor -> neg
       | "(" expr ")"
%import common.NUMBER
%import common.WS
%ignore WS
`,
      ["1", "1+2*3", "(1 + 2) * -3.5e2", " 1 ", "1\n+\t2", "((4))/2-1", "1    +    2"],
      ["", "1+", "1 2", "(1", "1+     2", "+1", "1++2", "a"],
    );
    assert.doesNotMatch(gbnf, /^expr ::= expr/m, "left recursion must be gone");
  });

  test("OpenAI's documented style: explicit space terminals, alias lines, no %ignore", async () => {
    await lark(
      String.raw`
start: expr
expr: term (SP ADD SP term)* -> add
| term
term: factor (SP MUL SP factor)* -> mul
| factor
factor: INT
SP: " "
ADD: "+"
MUL: "*"
%import common.INT
`,
      ["1", "1 + 2", "3 * 4 + 5 * 6", "10 * 20"],
      ["1+2", "1  + 2", " 1", "1 +", "-1"],
    );
  });

  test("a SQL-ish SELECT: case-insensitive keywords, regex terminal with the i flag, common imports", async () => {
    await lark(
      String.raw`
start: select_stmt ";"?
select_stmt: "SELECT"i columns "FROM"i table [where_clause] [limit_clause]
columns: "*" | column ("," column)*
column: NAME ["AS"i NAME]
table: NAME
where_clause: "WHERE"i condition (("AND"i | "OR"i) condition)*
condition: NAME OP value
value: SIGNED_NUMBER | ESCAPED_STRING
limit_clause: "LIMIT"i INT
OP: "=" | "!=" | "<" | ">" | "<=" | ">="
NAME.2: /[a-z_][a-z0-9_]*/i
%import common (SIGNED_NUMBER, ESCAPED_STRING, INT)
%import common.WS
%ignore WS
`,
      [
        "SELECT * FROM users",
        "select id, name as n from users where age >= 18 and name = \"bob\" limit 10;",
        "SeLeCt Id FROM t WHERE x != -1.5",
        'SELECT a FROM b WHERE c = "say \\"hi\\""',
      ],
      ["SELECT FROM users", "SELECT * users", "SELECT * FROM users LIMIT x", "DELETE FROM users", 'SELECT a FROM b WHERE c = "open'],
    );
  });

  test("a key=value list with %ignore WS", async () => {
    await lark(
      String.raw`
start: pair ("," pair)*
pair: KEY "=" VALUE
KEY: /[a-z]+/
VALUE: /[0-9]+/ | ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.WS
%ignore WS
`,
      ["a=1", "a = 1, b=\"x y\"", "  a=1  ,\n b = 22 ", 'k="a\\"b"'],
      ["a=", "=1", "a=1,", "a=1 b=2", "A=1", "a=1,     b=2", 'a="x'],
    );
  });

  test("common terminals", async () => {
    const imports = ["DIGIT", "HEXDIGIT", "INT", "SIGNED_INT", "DECIMAL", "FLOAT", "SIGNED_FLOAT", "NUMBER", "SIGNED_NUMBER", "LETTER", "UCASE_LETTER", "LCASE_LETTER", "WORD", "CNAME", "WS", "WS_INLINE", "NEWLINE", "CR", "LF", "ESCAPED_STRING", "SH_COMMENT", "CPP_COMMENT", "C_COMMENT", "SQL_COMMENT"];
    const header = imports.map((n) => `%import common.${n}`).join("\n");
    const cases: Record<string, [string[], string[]]> = {
      DIGIT: [["0", "9"], ["a", "10"]],
      HEXDIGIT: [["a", "F", "7"], ["g", "ff"]],
      INT: [["0", "123"], ["-1", "1.0", ""]],
      SIGNED_INT: [["-1", "+12", "3"], ["--1", "1-"]],
      DECIMAL: [["1.5", "1.", ".5"], ["1", "."]],
      FLOAT: [["1e5", "1.5E-3", ".5", "2.", "3.5"], ["1", "e5", "1e"]],
      SIGNED_FLOAT: [["-1.5", "+.5e+2"], ["-1"]],
      NUMBER: [["1", "1.5", "1e3"], ["-1", "x"]],
      SIGNED_NUMBER: [["-1", "+1.5", "7"], ["1-"]],
      LETTER: [["a", "Z"], ["1", "ab"]],
      UCASE_LETTER: [["A"], ["a"]],
      LCASE_LETTER: [["a"], ["A"]],
      WORD: [["hello", "Hi"], ["hi5", ""]],
      CNAME: [["_x1", "abc", "A_B"], ["1a", "a-b"]],
      WS: [[" ", " \t\r\n\f"], ["", "x"]],
      WS_INLINE: [[" \t "], ["\n"]],
      NEWLINE: [["\n", "\r\n\n"], ["\r", ""]],
      CR: [["\r"], ["\n"]],
      LF: [["\n"], ["\r"]],
      ESCAPED_STRING: [['""', '"a b"', '"\\""', '"\\\\"'], ['"', '"a', '"a"b"', '"\\"', '"a\nb"']],
      SH_COMMENT: [["# hi", "#"], ["# a\nb", "x"]],
      CPP_COMMENT: [["// hi"], ["/ hi"]],
      C_COMMENT: [["/* a */", "/**/", "/* a * b ** / */", "/***/"], ["/* a */ */", "/* a", "/*/"]],
      SQL_COMMENT: [["-- x"], ["- x"]],
    };
    for (const [name, [yes, no]] of Object.entries(cases)) {
      await lark(`start: ${name}\n${header}\n`, yes, no);
    }
    // An alias, and a grammar defining its own DIGIT next to the imported INT (which uses common's).
    await lark(`start: N "," DIGIT\nDIGIT: "x"\n%import common.INT -> N\n`, ["12,x"], ["12,1"]);
  });

  test("repetition: ~ n, ~ n..m, large counts, nesting", async () => {
    await lark(`start: "ab"~2 "-" X~2..4 ("." X~1)~0..2\nX: "0".."9"\n`, ["abab-12", "abab-1234.5.6"], ["ab-12", "abab-1", "abab-12345", "abab-12.5.6.7"]);
    await lark(`start: "a"~1000 "b"~0..1000`, ["a".repeat(1000), "a".repeat(1000) + "b".repeat(1000)], ["a".repeat(999), "a".repeat(1000) + "b".repeat(1001)]);
    await lark(`start: ["x"] "y"? ("z"+ | "w"*) "end"`, ["end", "xyzend", "wwwend", "xzzzend"], ["xxend", "zwend"]);
  });

  test("case-insensitive literals and literal ranges", async () => {
    await lark(`start: "Hello"i " " "WORLD" " " "a".."c"+`, ["hello WORLD abc", "HeLLo WORLD c"], ["hello world a", "hello WORLD d"]);
    await lark(`start: "ü-1"i`, ["ü-1", "Ü-1"], ["u-1"]);
  });

  test("regex terminals: quotes, backslashes, line breaks, flags, classes, Python named groups", async () => {
    await lark(String.raw`start: /"[^"\\]*"/ " " /\\\d+/`, ['"a b" \\12', '"" \\0'], ['"a"b" \\1', '"a" 12', '"a\\" \\1']);
    await lark(String.raw`start: /a.c/s "|" /a.c/`, ["a\nc|abc"], ["abc|a\nc"]);
    await lark(String.raw`start: /[a-c]x(?P<n>y|z)/i`, ["AXy", "bxZ", "cXY"], ["dxy", "axw"]);
    await lark(String.raw`start: /\/path\/[^\s\/]+/`, ["/path/file.txt"], ["/path/a/b", "/path/"]);
    await lark(String.raw`start: /[^x]+/`, ["a\u0001\"\\\n€😀"], ["x", ""]);
    await lark(String.raw`start: "{" /\s*/ "}"`, ["{}", "{ \n\t}"], ["{x}"]);
  });

  test("multi-line definitions, comments, priorities, modifiers, empty alternatives", async () => {
    await lark(
      String.raw`
start: item+  // one or more
# a hash comment
?item.5: A
    | B     -> bee
    | ( C
        | D )
    |
!_tail: "t"
A.2: "a"
B: "b"
C: "c"
D: "d" _tail_term
_tail_term: "!"
`.replace("_tail_term: ", "_TAIL_TERM: ").replace("_tail_term\n", "_TAIL_TERM\n"),
      ["a", "abcd!", "", "aaa"],
      ["d", "e"],
    );
  });

  test("%ignore variants: literal space, WS_INLINE, several, comments dropped, the bound is an option", async () => {
    await lark(`start: "a" "b"\n%ignore " "`, ["ab", " a  b "], ["a\tb", "a\nb", "a     b"]);
    await lark(`start: "a" "b"\n%import common.WS_INLINE\n%ignore WS_INLINE`, ["a \t b"], ["a\nb"]);
    await lark(`start: "a" "b"\n%import common.NEWLINE\n%import common.SH_COMMENT\n%ignore NEWLINE\n%ignore SH_COMMENT\n%ignore /[ ]+/`, ["a\n b\n"], ["a # c\nb", "a\rb"]);
    await lark(`start: "a" "b"\n%import common.WS\n%ignore WS`, ["a" + " ".repeat(10) + "b"], ["a" + " ".repeat(11) + "b"], { maxIgnoredWhitespace: 10 });
    await lark(`start: "a" "b"\n%import common.WS\n%ignore WS`, ["ab"], ["a b"], { maxIgnoredWhitespace: 0 });
    // Repeated tokens each get their own gap; nullable rules add none.
    await lark(`start: x* "b"\nx: "a" | e\ne: "c"?\n%ignore " "`, ["a a  a b", "b", " cab"], []);
  });

  test("direct left recursion is rewritten (several recursive and base alternatives)", async () => {
    await lark(`start: list\nlist: list "," ITEM | list ";" | ITEM | "[" "]"\nITEM: /[0-9]/`, ["1", "1,2;,3", "[],4", "[];;"], [",1", "1,", "[]1"]);
    await lark(`start: a\na: a | a "x" | "y"`, ["y", "yxx"], ["x"]);
  });
});

describe("custom tool formats", () => {
  test("text: any characters", async () => {
    await check(customToolGrammar({ type: "text" }), ["", "anything at all\n\t\"\\ €😀\u0000"], []);
  });

  test("regex: the whole input must match", async () => {
    await check(customToolGrammar({ type: "grammar", syntax: "regex", definition: String.raw`^\d{3}-[a-z]+(\.[a-z]+)*$` }), ["123-abc", "000-a.b.c"], ["123-abc ", "x123-abc", "12-abc"]);
    await check(customToolGrammar({ type: "grammar", syntax: "regex", definition: String.raw`"[^"]*"\n\\` }), ['"a b"\n\\'], ['"a"b"\n\\']);
  });

  test("lark", async () => {
    await check(customToolGrammar({ type: "grammar", syntax: "lark", definition: `start: "x"+` }), ["xxx"], ["", "y"]);
  });

  test("regex refusals and limits", () => {
    for (const [definition, pattern] of [
      ["(?=a)a", /lookaround|lookahead/],
      [String.raw`(a)\1`, /backreference/],
      ["a{100000}", /limit/],
      ["a".repeat(3000), /longer/],
    ] as const) {
      assert.throws(() => customToolGrammar({ type: "grammar", syntax: "regex", definition }), (e: unknown) => e instanceof GrammarConversionError && pattern.test(e.message));
    }
  });
});

describe("refusals name the construct and where", () => {
  const cases: Array<[string, string, RegExp]> = [
    ["%declare", `start: A\n%declare A`, /^%declare at 2:1: /],
    ["%override", `start: "a"\n%override start: "b"`, /^%override at 2:1/],
    ["%extend", `start: "a"\n%extend start: "b"`, /^%extend at 2:1/],
    ["template definition", `_separated{x, sep}: x (sep x)*\nstart: "a"`, /^template _separated\{…\} at 1:1/],
    ["template use", `start: _separated{"a", ","}`, /^template _separated\{…\} at 1:8/],
    ["lookahead in a regex", `start: /a(?=b)/`, /^regex \/a\(\?=b\)\/ at 1:8: .*lookaround/],
    ["lookbehind in a regex", `start: /(?<!a)b/`, /^regex .* at 1:8: .*lookaround/],
    ["backreference in a regex", `start: /(a)\\1/`, /^regex .* at 1:8: .*backreference/],
    ["inline regex flags", `start: /(?i)a/`, /^regex .* at 1:8/],
    ["unsupported regex flag", `start: /a$/m`, /^regex flag "m" at 1:8/],
    ["verbose regex flag", `start: /a/x`, /^regex flag "x" at 1:8/],
    ["undefined terminal", `start: "a" FOO`, /^terminal FOO at 1:12: used but not defined/],
    ["undefined rule", `start: "a"\n  | foo`, /^rule foo at 2:5: used but not defined/],
    ["missing start", `begin: "a"`, /^rule start: the grammar has no `start` rule/],
    ["indirect left recursion", `start: a\na: b "x" | "y"\nb: a "z"`, /^rule a at 2:1: indirect left recursion \(a → b → a\)/],
    ["left recursion behind an empty match", `start: a\na: "x"? a "y" | "z"`, /^rule a at 2:1: left recursion that cannot be rewritten/],
    ["left recursion behind a nullable rule", `start: a\na: e a "y" | "z"\ne: "x"*`, /^rule a at 2:1: left recursion/],
    ["left recursion only", `start: a\na: a "x"`, /^rule a at 2:1: left recursion without a non-recursive alternative/],
    ["rule inside a terminal", `start: A\nA: "a" b\nb: "b"`, /^rule b at 2:8: used inside terminal A/],
    ["recursive terminal", `start: A\nA: "a" A?`, /^terminal A at 2:1: recursive terminal/],
    ["duplicate definition", `start: "a"\nstart: "b"`, /^definition of start at 2:1: start is defined twice/],
    ["import of another module", `start: "a"\n%import python.NAME`, /^%import python.NAME at 2:1/],
    ["import of an unknown common name", `start: X\n%import common.NOPE -> X`, /^%import common.NOPE at 2:1: not one of the common terminals/],
    ["ignoring a rule", `start: "a"\nws: " "\n%ignore ws`, /^%ignore ws at 3:9: only terminals/],
    ["syntax error", `start: "a" )`, /^definition at 1:12: unexpected "\)"/],
    ["unterminated string", `start: "a`, /^string literal at 1:8: unterminated/],
    ["bad literal range", `start: "ab".."z"`, /^literal range at 1:8: both ends must be single characters/],
    ["empty repetition range", `start: "a"~3..1`, /^repetition ~ at 1:11: range 3..1 is empty/],
    ["mixed-case name", `start: Foo\nFoo: "a"`, /^name Foo at 2:1: rule names are lowercase/],
  ];
  for (const [name, definition, message] of cases) {
    test(name, () => {
      const t0 = performance.now();
      assert.throws(() => larkToGbnf(definition), (e: unknown) => {
        assert.ok(e instanceof GrammarConversionError, `not a GrammarConversionError: ${String(e)}`);
        assert.match(e.message, message);
        return true;
      });
      assert.ok(performance.now() - t0 < 100, "refusal took over 100 ms");
    });
  }
});

describe("limits are refused before any expansion, fast", () => {
  const cases: Array<[string, () => string, RegExp]> = [
    ["grammar length", () => `start: "a"\n` + "// padding\n".repeat(20_000), /^grammar: longer than 100000 characters/],
    ["definition count", () => `start: r0\n` + Array.from({ length: 1_001 }, (_, i) => `r${i}: "x"`).join("\n"), /^grammar at 1001:1: more than 1000 rules and terminals/],
    ["huge ~ count", () => `start: "a"~1..1000000000`, /^repetition ~ at 1:15: count 1000000000 is above the limit of 1000/],
    ["total ~ counts", () => `start: ` + Array.from({ length: 30 }, () => `"a"~1000`).join(" "), /repetition counts add up to more than 20000/],
    ["huge regex quantifier", () => `start: /a{5,99999999999}/`, /^regex .* at 1:8: quantifier \{5,99999999999\} is above the limit/],
    ["regex length", () => `start: /${"a".repeat(3000)}/`, /^regex .* at 1:8: longer than 2000 characters/],
    ["regex nesting", () => `start: /${"(".repeat(60)}a${")".repeat(60)}/`, /groups nested deeper than 50/],
    ["grammar nesting", () => `start: ${"(".repeat(60)}"a"${")".repeat(60)}`, /nesting deeper than 50/],
    ["deep nesting (no stack overflow)", () => `start: ${"(".repeat(90_000)}`, /nesting deeper than 50/],
  ];
  for (const [name, make, message] of cases) {
    test(name, () => {
      const definition = make();
      const t0 = performance.now();
      assert.throws(() => larkToGbnf(definition), (e: unknown) => e instanceof GrammarConversionError && message.test(e.message));
      assert.ok(performance.now() - t0 < 100, `refusal took ${(performance.now() - t0).toFixed(0)} ms`);
    });
  }

  test("limits can be changed", () => {
    assert.throws(() => larkToGbnf(`start: "a"~20`, { limits: { maxRepeat: 10 } }), /count 20 is above the limit of 10/);
    assert.doesNotThrow(() => larkToGbnf(`start: "a"~2000`, { limits: { maxRepeat: 2000 } }));
  });
});
