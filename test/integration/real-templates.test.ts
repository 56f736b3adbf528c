import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { BPE_SPEC, ensureFixtureModel } from "../fixtures/models.ts";
import { MISTRAL_NEMO_TEMPLATE } from "../fixtures/real-templates.ts";

// Real models' templates on the tiny BPE fixture, rendered as llama-server --jinja renders them
// (the expected texts were recorded from llama-server on GGUFs carrying these templates; the
// fixture's tokenizer only changes how the text is cut into tokens, and its BOS text).

let llama: Llama;
const models: LlamaModel[] = [];
before(async () => {
  llama = await getLlama({ gpu: false });
});
after(async () => {
  for (const m of models) await m.dispose();
});

async function rendererFor(name: string, chatTemplate: string) {
  const model = await llama.loadModel({ modelPath: await ensureFixtureModel({ ...BPE_SPEC, name, chatTemplate }) });
  models.push(model);
  const renderer = new PromptRenderer(model, { id: name, vocabSize: 100_000 });
  /** The prompt as text (the fixture's BOS left out), with what `planReasoning` appends. */
  const prompt = (messages: Message[], extra: Partial<GenerationRequest> = {}, functions?: Parameters<PromptRenderer["render"]>[1]) => {
    const req = { prompt: { kind: "chat", messages }, ...extra } as GenerationRequest;
    const rendered = renderer.render(req, functions);
    const suffix = renderer.planReasoning(req, false, rendered.openTurn)?.promptSuffix ?? [];
    return model.detokenize([...rendered.tokens, ...suffix], true).replace(/^<\|startoftext\|>/, "");
  };
  return { renderer, prompt };
}

const HI: Message[] = [{ role: "user", content: "Hi" }];

test("Mistral Nemo: an empty system message is still written before the last user message", async () => {
  const { prompt } = await rendererFor("plinth-real-mistral-nemo", MISTRAL_NEMO_TEMPLATE);
  assert.equal(prompt([{ role: "system", content: "" }, ...HI]), "[INST]\n\nHi[/INST]");
  assert.equal(prompt([{ role: "system", content: "S" }, ...HI]), "[INST]S\n\nHi[/INST]");
  assert.equal(prompt(HI), "[INST]Hi[/INST]");
});
