import { type ChatWrapperSettings, type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import { isGemma4Template } from "./gemma4-tool-calls.ts";
import type { ThinkingSwitch } from "./open-turn.ts";

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
// Two generation prompts llama.cpp's server writes that node-llama-cpp's rendering does not end as
// its probed open turn (open-turn.ts) are also written here: the one after tool results (the
// interleaved template closes the section there when thinking is off; the later one writes nothing),
// and `<|turn>model\n` after a turn that ended with `<turn|>\n` (an answer that went with its calls'
// results), which the server adds itself so the model opens its next turn properly.

const OPEN = "<|channel>thought\n";
const CLOSE = "<channel|>";

/** The turn end after which llama.cpp's server opens the model's turn itself. */
const TURN_END = "<turn|>\n";
const MODEL_TURN = "<|turn>model\n";

type ThoughtSegment = NonNullable<ChatWrapperSettings["segments"]>["thought"];

export class Gemma4Thinking {
  private constructor(private readonly afterResults: Partial<Record<ThinkingSwitch, string>>) {}

  /**
   * For a Gemma 4 template that writes the section: gives the wrapper the section (where node-llama-cpp
   * found none) and probes the generation prompt after tool results. Undefined for other templates.
   */
  static adopt(wrapper: JinjaTemplateChatWrapper, template: string): Gemma4Thinking | undefined {
    if (!isGemma4Template(template) || !template.includes("<|channel>thought")) return undefined;
    const settings = wrapper as unknown as { settings: ChatWrapperSettings };
    if (!settings.settings.segments?.thought) {
      const thought: ThoughtSegment = { prefix: LlamaText(new SpecialTokensText(OPEN)), suffix: LlamaText(new SpecialTokensText(CLOSE)) };
      settings.settings = { ...settings.settings, segments: { ...settings.settings.segments, thought } };
    }
    return new Gemma4Thinking(probeAfterResults(wrapper));
  }

  /**
   * The generation prompt llama.cpp's server writes where node-llama-cpp's rendering of a chat ends
   * without the probed open turn: `<|turn>model\n` after a closed turn, the template's own after tool
   * results. Undefined where neither applies (the prompt is then left as it is).
   */
  generationPrompt(rendered: string, endsWithResults: boolean, thinking: ThinkingSwitch): string | undefined {
    if (rendered.endsWith(TURN_END)) return MODEL_TURN;
    return endsWithResults ? this.afterResults[thinking] : undefined;
  }
}

/** Message text no template treats specially. */
const PROBE = "Plinth probe 9c2e41";

/**
 * What the template adds after a call's result when asked for a generation prompt, per switch: its
 * rendering of a call and its result with `add_generation_prompt` minus the one without. The messages
 * are OpenAI's; the wrapper's renderer hands them over as llama.cpp's server does (results on the
 * turn for the interleaved template, tool-layouts.ts).
 */
function probeAfterResults(wrapper: JinjaTemplateChatWrapper): Partial<Record<ThinkingSwitch, string>> {
  const jinja = (wrapper as unknown as { _jinjaTemplate?: { render(params: object): string } })._jinjaTemplate;
  if (typeof jinja?.render !== "function") return {};
  const messages = [
    { role: "user", content: PROBE },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "probe", arguments: {} } }] },
    { role: "tool", tool_call_id: "call_1", content: PROBE },
  ];
  const render = (enable: boolean, add: boolean) =>
    jinja.render({
      ...(wrapper.additionalRenderParameters ? structuredClone(wrapper.additionalRenderParameters) : {}),
      messages: structuredClone(messages),
      bos_token: "",
      eos_token: "",
      add_generation_prompt: add,
      enable_thinking: enable,
    });
  const found: Partial<Record<ThinkingSwitch, string>> = {};
  for (const thinking of ["default", "on", "off"] as const) {
    try {
      // Left alone the switch is on, as llama.cpp's server sets it for a template that can think.
      const enable = thinking !== "off";
      const without = render(enable, false);
      const withPrompt = render(enable, true);
      if (withPrompt.startsWith(without)) found[thinking] = withPrompt.slice(without.length);
    } catch {
      // This switch's rendering fails: the prompt is left as node-llama-cpp writes it.
    }
  }
  return found;
}
