import { type ChatWrapperSettings, type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import { isGemma4Template } from "./gemma4-tool-calls.ts";

// Gemma 4's thinking section: the model writes `<|channel>thought\n…<channel|>` before its answer,
// the template's `enable_thinking` switch puts `<|think|>` at the top of the system turn, and with
// the switch off the generation prompt ends with the section closed empty
// (`<|turn>model\n<|channel>thought\n<channel|>`). The answer follows the closing marker directly.
//
// node-llama-cpp finds a thinking section by rendering an answer with `reasoning_content`, which
// Gemma 4's templates write only on a turn with tool calls; it found none, so Plinth took Gemma 4
// for a model that cannot think and refused every reasoning control. The section is given here, as
// llama.cpp's server knows it (common_chat_params_init_gemma4: `<|channel>thought` … `<channel|>`).
//
// Where node-llama-cpp's rendering does not end as its probed open turn (open-turn.ts), two things
// llama.cpp's server does are done here: `<|turn>model\n` after a turn that ended with `<turn|>\n`
// (an answer that went with its calls' results), which the server adds itself so the model opens its
// next turn properly; and after tool results, where the template writes no generation prompt of its
// own (the later template; the interleaved one with thinking on), the section is left to the model.
// The interleaved template's closed section there with thinking off is its generation prompt, which
// open-turn.ts writes as it writes any template's after results.

const OPEN = "<|channel>thought\n";
const CLOSE = "<channel|>";

/** The turn end after which llama.cpp's server opens the model's turn itself. */
const TURN_END = "<turn|>\n";
const MODEL_TURN = "<|turn>model\n";

type ThoughtSegment = NonNullable<ChatWrapperSettings["segments"]>["thought"];

export class Gemma4Thinking {
  private constructor() {}

  /**
   * For a Gemma 4 template that writes the section: gives the wrapper the section (where node-llama-cpp
   * found none). Undefined for other templates.
   */
  static adopt(wrapper: JinjaTemplateChatWrapper, template: string): Gemma4Thinking | undefined {
    if (!isGemma4Template(template) || !template.includes("<|channel>thought")) return undefined;
    const settings = wrapper as unknown as { settings: ChatWrapperSettings };
    if (!settings.settings.segments?.thought) {
      const thought: ThoughtSegment = { prefix: LlamaText(new SpecialTokensText(OPEN)), suffix: LlamaText(new SpecialTokensText(CLOSE)) };
      settings.settings = { ...settings.settings, segments: { ...settings.settings.segments, thought } };
    }
    return new Gemma4Thinking();
  }

  /**
   * The generation prompt llama.cpp's server writes where node-llama-cpp's rendering of a chat ends
   * without the probed open turn and the template wrote none of its own: `<|turn>model\n` after a
   * closed turn; nothing after tool results, the section left to the model (OpenTurn.final).
   * Undefined where neither applies (the prompt is then left as it is).
   */
  generationPrompt(rendered: string, endsWithResults: boolean): string | undefined {
    if (rendered.endsWith(TURN_END)) return MODEL_TURN;
    return endsWithResults ? "" : undefined;
  }
}
