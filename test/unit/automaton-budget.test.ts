import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { AUTOMATON_WORK_BUDGET, AutomatonLimitError, buildDfa, langOfRegex, withAutomatonBudget } from "../../src/grammar/automaton.ts";
import { customToolGrammar, regexGrammar } from "../../src/grammar/custom-tool-grammar.ts";
import { GrammarConversionError } from "../../src/grammar/lark-to-gbnf.ts";
import { parsePattern } from "../../src/grammar/regex-to-gbnf.ts";

// Automata are built on the thread that handles the request. Their size bounds (NFA and DFA states)
// let a 30-character regex through that took 2–3 s to determinise (each subset state holds
// thousands of NFA states), and a Lark grammar of 30 such terminals 8 s, holding every other
// request. Construction steps are metered, per construction and per grammar.

const STEPS = /construction steps/;

test("a small regex whose determinisation is huge is refused by its step count", () => {
  assert.throws(() => regexGrammar("^((c|d|cd|dc|cdc)+){300}$"), (e: unknown) => e instanceof GrammarConversionError && STEPS.test(e.message));
  // Determinising it directly meets the same bound.
  assert.throws(() => buildDfa(langOfRegex(parsePattern("((c|d|cd|dc|cdc)+){300}"))), (e: unknown) => e instanceof AutomatonLimitError && STEPS.test(e.message));
});

test("one Lark grammar shares one budget: terminals that fit alone are refused together", () => {
  const terms = (n: number) =>
    "start: " + Array.from({ length: n }, (_, i) => `T${i}`).join(" ") + "\n" + Array.from({ length: n }, (_, i) => `T${i}: /((q|r|qr|rq|qrq${i})+){20}/`).join("\n");
  const one = customToolGrammar({ type: "grammar", syntax: "lark", definition: terms(1) });
  assert.match(one, /root ::=/);
  const refuse = () => customToolGrammar({ type: "grammar", syntax: "lark", definition: terms(30) });
  assert.throws(refuse, (e: unknown) => e instanceof GrammarConversionError && STEPS.test(e.message));
  // The terminals built before the budget ran out are cached now; they are charged again, so the
  // answer does not depend on what an earlier request left behind.
  assert.throws(refuse, (e: unknown) => e instanceof GrammarConversionError && STEPS.test(e.message));
  assert.equal(customToolGrammar({ type: "grammar", syntax: "lark", definition: terms(1) }), one);
});

test("a budget is the outermost compile's: nested compiles share it, and a spent one stays spent", () => {
  const lang = langOfRegex(parsePattern("(a|ab|b)*c{3}"));
  assert.throws(() => withAutomatonBudget(() => buildDfa(lang), 10), AutomatonLimitError);
  assert.throws(
    () =>
      withAutomatonBudget(() => {
        withAutomatonBudget(() => buildDfa(lang), AUTOMATON_WORK_BUDGET); // nested: the outer budget of 10 counts
      }, 10),
    AutomatonLimitError,
  );
  // Outside any compile, a construction gets a budget of its own.
  assert.ok(buildDfa(lang).states.length > 0);
});

test("everyday patterns stay far inside the budget", () => {
  for (const pattern of ["[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,253}\\.[a-z]{2,24}", "^(\\d{3}-){2}\\d{4}$", "(a|ab|b)*c", "^[A-Z][a-z]+( [A-Z][a-z]+){0,5}$"]) {
    withAutomatonBudget(() => assert.match(regexGrammar(pattern), /root ::=/), AUTOMATON_WORK_BUDGET / 20);
  }
});
