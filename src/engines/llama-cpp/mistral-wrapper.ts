import {
  type ChatWrapperGenerateContextStateOptions,
  type ChatWrapperGeneratedContextState,
  LlamaText,
  MistralChatWrapper,
  SpecialTokensText,
} from "node-llama-cpp";

/**
 * node-llama-cpp's Mistral wrapper, which a model keeps when node-llama-cpp cannot run its template
 * (Mistral Nemo's writes the system message into the last user turn only, which node-llama-cpp's
 * load-time check does not accept), writing an empty system message as the template does. The
 * template writes `[INST]` + system + "\n\n" + user whenever the conversation opens with a system
 * message, empty or not (llama-server: `[INST]\n\nHi[/INST]`); the wrapper left an empty one out.
 */
export class FaithfulMistralChatWrapper extends MistralChatWrapper {
  override generateContextState(options: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState {
    const [first, ...rest] = options.chatHistory;
    // (Several leading system messages are joined by the wrapper; the template refuses them anyway.)
    const empty = first?.type === "system" && LlamaText.fromJSON(first.text).values.length === 0 && rest[0]?.type !== "system";
    if (!empty) return super.generateContextState(options);
    const state = super.generateContextState({ ...options, chatHistory: rest });
    // The system message goes right after the last turn's [INST], where the wrapper writes a non-empty one.
    const values = [...state.contextText.values];
    let at = values.length - 1;
    while (at >= 0 && !(values[at] instanceof SpecialTokensText && (values[at] as SpecialTokensText).value.endsWith("[INST]"))) at--;
    if (at === -1) return state;
    values.splice(at + 1, 0, "\n\n");
    return { ...state, contextText: LlamaText(values) };
  }
}
