import { getLlama, LlamaLogLevel, LlamaGrammarEvaluationState, type Token } from "node-llama-cpp";
import { ensureFixtureModel } from "./test/fixtures/models.ts";
import { jsonSchemaToGbnf, JSON_OBJECT_GBNF } from "./src/grammar/json-schema-to-gbnf.ts";
const llama = await getLlama({gpu:false, maxThreads:2, build:"never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({ modelPath: await ensureFixtureModel() });
const ctx = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
const seqn = ctx.getSequence();
const prompt = model.tokenize("Hello, please answer in JSON.");
async function run(gbnf: string | null, seed: number, cap = 200) {
  await seqn.clearHistory();
  const grammar = gbnf ? await llama.createGrammar({ grammar: gbnf }) : undefined;
  const state = grammar ? new LlamaGrammarEvaluationState({ model, grammar }) : undefined;
  const out: Token[] = []; let ended = "cap";
  const t0 = performance.now();
  for await (const tok of seqn.evaluate(prompt, { temperature: 1, topK: 0, topP: 1, seed, grammarEvaluationState: state, yieldEogToken: true })) {
    if (model.isEogToken(tok)) { ended = "eog"; break; }
    out.push(tok); if (out.length >= cap) break;
  }
  const ms = performance.now() - t0;
  return { text: model.detokenize(out), n: out.length, ended, ms };
}
for (const [name, g] of [["free", null], ["json_object", JSON_OBJECT_GBNF], ["enum", jsonSchemaToGbnf({type: "object", properties: {a: {enum: ["x", "yy"]}, b: {type: "boolean"}, c: {type: "string", maxLength: 8}}, required: ["a", "b", "c"], additionalProperties: false})]] as const) {
  for (let seed = 1; seed <= 4; seed++) { const r = await run(g, seed); console.log(name, seed, r.n, r.ended, (r.n / r.ms * 1000).toFixed(0), "tok/s", JSON.stringify(r.text).slice(0, 200)); }
}
