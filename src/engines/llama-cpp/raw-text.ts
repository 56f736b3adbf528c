import type { LlamaModel, Token } from "node-llama-cpp";

/**
 * A raw text prompt's tokens (completions, `/tokenize` of a `prompt`): special-token text such as
 * "<|im_start|>" is read as that token, as llama.cpp's server and vLLM read a prompt, so a prompt
 * a client templated itself means what it says. Chat message contents never go through this: the
 * template keeps them text.
 */
export function tokenizeRawText(model: LlamaModel, text: string): Token[] {
  return model.tokenize(text, true);
}
