// Which rules of a grammar can finish: a rule is productive when one of its alternatives is made
// of terminals and productive rules only. A rule that is not can be entered and never left, so a
// model that walks into it writes until max_tokens: a schema whose required properties refer back
// to themselves with no way out ({"n": {"$ref": "#"}}, required) has no finite value at all.
//
// Computed on the rules llama.cpp builds from the text (load-cost.ts's parser: groups and
// repetitions are rules, and a repetition that may stop has an empty alternative), in time linear in
// the grammar.

import { type ParsedGrammar, parseGrammar } from "./load-cost.ts";

/**
 * The named rules reachable from `root` that cannot finish, in the order they were first named;
 * empty when every reachable rule can. Takes the text or its parse (which a caller that also
 * needs the load cost shares: a long bounded string expands to ~100,000 rules).
 */
export function unfinishableRules(gbnf: string | ParsedGrammar, root = "root"): string[] {
  const { rules, ids } = typeof gbnf === "string" ? parseGrammar(gbnf) : gbnf;
  const n = rules.length;
  const productive = new Uint8Array(n);
  // missing[r][a]: references in alternative a of rule r not yet known to be productive.
  const missing = rules.map((r) => r.alts.map((alt) => alt.filter((e) => e !== -1).length));
  // users[x]: each occurrence of x, as [rule, alternative].
  const users: Array<Array<[number, number]>> = Array.from({ length: n }, () => []);
  const queue: number[] = [];
  const mark = (r: number) => {
    if (productive[r]) return;
    productive[r] = 1;
    queue.push(r);
  };
  rules.forEach((r, id) =>
    r.alts.forEach((alt, a) => {
      if (missing[id][a] === 0) mark(id);
      for (const e of alt) if (e !== -1) users[e].push([id, a]);
    }),
  );
  while (queue.length > 0) {
    const x = queue.pop()!;
    for (const [r, a] of users[x]) if (--missing[r][a] === 0) mark(r);
  }
  const start = ids.get(root);
  if (start === undefined) return [];
  const seen = new Uint8Array(n);
  const stack = [start];
  seen[start] = 1;
  let stuck = false;
  while (stack.length > 0) {
    const r = stack.pop()!;
    if (!productive[r]) stuck = true;
    for (const alt of rules[r].alts)
      for (const e of alt)
        if (e !== -1 && !seen[e]) {
          seen[e] = 1;
          stack.push(e);
        }
  }
  if (!stuck) return [];
  return [...ids].filter(([, id]) => seen[id] && !productive[id]).map(([name]) => name);
}
