import { type ChatWrapper, HarmonyChatWrapper, LlamaText, type LlamaModel, SpecialTokensText, type Token } from "node-llama-cpp";
import type { ToolCallFormat } from "./tool-call-parser.ts";

// gpt-oss writes its answer as a series of messages, each `<|channel|>NAME<|message|>BODY<|end|>`
// and the next one opened with `<|start|>assistant`: thinking in the "analysis" channel, the answer
// in "final" (ended by <|return|>), a tool call as `<|channel|>commentary to=functions.NAME
// <|constrain|>json<|message|>{…}` ended by <|call|>. llama.cpp renders <|start|>, <|message|>,
// <|channel|> and <|constrain|> as text, so the text-level reasoning splitter, call trigger and
// grammars see them; <|end|> however is an end-of-generation token that renders as nothing, so it is
// handed to the decode loop as a marker that closes a message instead of ending the turn.
//
// What Plinth does with that layout: the prompt opens the analysis message (or, with thinking off,
// opens and closes it empty); when thinking ends, the engine itself writes `<|start|>assistant` and,
// unless the model may choose a tool call, the final channel's header, so the answer is never lost
// in a third channel. With tools in auto mode the model writes the header itself: the final header
// is dropped from the answer, and the commentary call header starts a call.

/** The call layout, as gpt-oss writes it (the space before <|constrain|> included). */
export const HARMONY_CALL_FORMAT: ToolCallFormat = {
  sectionPrefix: "",
  prefix: "<|channel|>commentary to=functions.",
  paramsPrefix: " <|constrain|>json<|message|>",
  suffix: "",
  betweenCalls: "",
  sectionSuffix: "",
};

export const FINAL_HEADER = "<|channel|>final<|message|>";
const MESSAGE_END = "<|end|>";
const NEXT_MESSAGE = "<|start|>assistant";

type Effort = "minimal" | "low" | "medium" | "high" | "xhigh" | "max";

/**
 * A model whose template writes gpt-oss's channel markers, with those markers as single tokens.
 * node-llama-cpp recognises gpt-oss by name or by an exact template match; a renamed file with an
 * edited template would otherwise fall back to plain template rendering, and its channels (markers
 * and all) would land in the answer.
 */
export function usesHarmonyLayout(model: LlamaModel): boolean {
  const template = model.fileInfo.metadata.tokenizer?.chat_template;
  if (typeof template !== "string" || !template.includes("<|channel|>") || !template.includes("<|start|>")) return false;
  return ["<|channel|>", "<|message|>", "<|end|>"].every((t) => LlamaText(new SpecialTokensText(t)).tokenize(model.tokenizer).length === 1);
}

export class HarmonyLayout {
  /** <|end|>: closes a message; not the end of the turn. */
  readonly markers: ReadonlyMap<Token, string>;
  /** Text in the answer that ends it (a message end after the final channel). */
  readonly answerStops = [MESSAGE_END];
  private readonly wrappers = new Map<string, ChatWrapper>();

  static of(wrapper: ChatWrapper, model: LlamaModel, today: Date): HarmonyLayout | undefined {
    return wrapper instanceof HarmonyChatWrapper ? new HarmonyLayout(wrapper, model, today) : undefined;
  }

  private constructor(
    private readonly wrapper: ChatWrapper,
    private readonly model: LlamaModel,
    private readonly today: Date,
  ) {
    const end = this.tokens(MESSAGE_END);
    this.markers = new Map(end.length === 1 ? [[end[0], MESSAGE_END]] : []);
  }

  /** What the engine writes after the thinking message: the next message, and its header when `final` is the only choice. */
  answerOpening(modelMayCall: boolean): Token[] {
    return this.tokens(modelMayCall ? NEXT_MESSAGE : NEXT_MESSAGE + FINAL_HEADER);
  }

  /**
   * The template takes the reasoning effort in its system message ("Reasoning: low|medium|high"), so a
   * request that sets one renders with a wrapper of its own.
   */
  wrapperFor(effort: Effort | undefined): ChatWrapper {
    if (effort === undefined) return this.wrapper;
    // The template knows three levels: the ends of OpenAI's scale go to the nearest.
    const level = effort === "minimal" ? "low" : effort === "xhigh" || effort === "max" ? "high" : effort;
    let wrapper = this.wrappers.get(level);
    if (!wrapper) {
      // Everything else as resolved for this model (including how its own template renders).
      const base = this.wrapper as HarmonyChatWrapper & { _jinjaFlags?: object };
      wrapper = new HarmonyChatWrapper({
        modelIdentity: base.modelIdentity,
        cuttingKnowledgeDate: base.cuttingKnowledgeDate,
        todayDate: this.today,
        reasoningEffort: level,
        requiredChannels: base.requiredChannels,
        keepOnlyLastThought: base.keepOnlyLastThought,
        _jinjaFlags: base._jinjaFlags,
      } as ConstructorParameters<typeof HarmonyChatWrapper>[0]);
      this.wrappers.set(level, wrapper);
    }
    return wrapper;
  }

  private tokens(text: string): Token[] {
    return LlamaText(new SpecialTokensText(text)).tokenize(this.model.tokenizer);
  }
}
