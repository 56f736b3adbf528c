import { after, before } from "node:test";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";

/**
 * Fixture models that carry a given chat template, each with the renderer the engine would build for
 * it: for tests of how a template is rendered, without a server. Registers its own setup and
 * teardown in the suite it is called in (models are disposed after it).
 */
export function templateRenderers(base: FixtureSpec): (name: string, chatTemplate: string) => Promise<{ model: LlamaModel; renderer: PromptRenderer }> {
  let llama: Llama;
  const models: LlamaModel[] = [];
  before(async () => {
    llama = await getLlama({ gpu: false });
  });
  after(async () => {
    for (const m of models) await m.dispose();
  });
  return async (name, chatTemplate) => {
    const model = await llama.loadModel({ modelPath: await ensureFixtureModel({ ...base, name, chatTemplate }) });
    models.push(model);
    return { model, renderer: new PromptRenderer(model, { id: name, vocabSize: 100_000 }) };
  };
}
