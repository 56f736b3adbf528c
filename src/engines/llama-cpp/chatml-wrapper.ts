import {
  type ChatHistoryItem,
  ChatMLChatWrapper,
  type ChatWrapperGenerateContextStateOptions,
  type ChatWrapperGeneratedContextState,
  LlamaText,
  SpecialToken,
  SpecialTokensText,
} from "node-llama-cpp";

/**
 * ChatML written the way a ChatML model's own template writes it (and llama-server and vLLM with
 * it): one `<|im_start|>role … <|im_end|>` block per message, empty messages included.
 * node-llama-cpp's ChatML wrapper, which a ChatML template resolves to, joins consecutive system
 * messages into one block (a `developer` and a `system` message, two system prompts) and leaves out
 * empty user and assistant messages, so such a conversation reached the model in a shape it was not
 * trained on and counted other prompt tokens than those servers give.
 *
 * Function documentation (tools) goes into the first system block, after its text, as the common
 * ChatML tool templates place it; with no system message it is a system block of its own. Tool calls
 * and results inside assistant turns are written by the base wrapper, unchanged.
 */
export class FaithfulChatMLChatWrapper extends ChatMLChatWrapper {
  override generateContextState({ chatHistory, availableFunctions, documentFunctionParams }: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState {
    const history: ChatHistoryItem[] = chatHistory.slice();
    if (availableFunctions && Object.keys(availableFunctions).length > 0) {
      const docs = this.generateAvailableFunctionsSystemText(availableFunctions, { documentParams: documentFunctionParams });
      const first = history[0];
      if (first?.type === "system")
        history[0] = { type: "system", text: LlamaText.joinValues("\n\n", [LlamaText.fromJSON(first.text), docs]).toJSON() };
      else history.unshift({ type: "system", text: docs.toJSON() });
    }
    const block = (role: string, content: LlamaText, closed = true) =>
      LlamaText([new SpecialTokensText(`<|im_start|>${role}\n`), content, closed ? new SpecialTokensText("<|im_end|>\n") : LlamaText([])]);
    const parts: LlamaText[] = [LlamaText(new SpecialToken("BOS"))];
    history.forEach((item, i) => {
      const last = i === history.length - 1;
      if (item.type === "system") parts.push(block("system", LlamaText.fromJSON(item.text)));
      else if (item.type === "user") parts.push(block("user", LlamaText(item.text)));
      // The last assistant turn stays open: generation continues it.
      else parts.push(block("assistant", this.generateModelResponseText(item.response), !last));
    });
    if (history.at(-1)?.type !== "model") parts.push(block("assistant", LlamaText([]), false));
    return {
      contextText: LlamaText(parts),
      stopGenerationTriggers: [LlamaText(new SpecialToken("EOS")), LlamaText(new SpecialTokensText("<|im_end|>")), LlamaText("<|im_end|>")],
    };
  }
}
