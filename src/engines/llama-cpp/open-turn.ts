import { type ChatHistoryItem, type ChatModelFunctions, type JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import { toChatHistory } from "./chat-history.ts";

// The turn a chat prompt leaves open for the answer, written the way the model's template writes it.
//
// node-llama-cpp renders the open turn as an empty assistant message cut off where its content would
// go. llama.cpp's server and vLLM render the template with `add_generation_prompt` instead, and some
// templates write the two differently: DeepSeek R1's generation prompt opens "<think>\n", Qwen 3's
// writes an empty closed thinking section into assistant messages but nothing into the generation
// prompt (and, with enable_thinking=false, the closed section there), Granite 3.3's and SmolLM 3's
// open no thinking unless asked. Measured against llama-server on fixtures carrying those templates,
// every prompt of those models came out one or two tokens apart, and thinking was forced on models
// that do not think by default.
//
// What each writes is found once per model by rendering a probe conversation both ways; a prompt
// whose open turn ends as node-llama-cpp's did on the probe gets the template's generation prompt in
// its place, for the request's thinking switch.

/** How a request sets the template's thinking switch (`enable_thinking`): left alone, on or off. */
export type ThinkingSwitch = "default" | "on" | "off";

/** What the generation prompt does with the thinking section. */
export type OpenTurnThinking = "opened" | "closed" | "none";

export interface OpenTurn {
  /** The template's generation prompt for this switch. */
  text: string;
  thinking: OpenTurnThinking;
  /** The model thinks when the switch is left alone (its template opens the section, or has a switch that is not off by default). */
  thinksByDefault: boolean;
  /**
   * The template writes a thinking section into the model's own turns (its reasoning, or an empty
   * closed section as Kimi K2 Thinking's does): a model trained to open one on its own, which a
   * request turning thinking off has closed for it. Granite 3.3's writes none (its markers are only
   * words of a system prompt it adds when asked), so there is nothing to close.
   */
  writesSection: boolean;
  /**
   * Set on a turn the template leaves unwritten (an answer after tool results) when the template
   * reads the thinking switch itself (its generation prompt turned off is not the one turned on):
   * what it writes there, nothing, is what it wants for either setting.
   */
  templateSwitched?: boolean;
  /**
   * Set for a generation prompt written where node-llama-cpp's open turn was not found (after tool
   * results, `rewriteAfterResults`; Gemma 4's, gemma4-thinking.ts): it is the template's for this
   * switch, so Plinth closes nothing after it, thinking off included.
   */
  final?: boolean;
}

export class OpenTurns {
  private constructor(
    /** What node-llama-cpp writes for the open turn, after the end of the last message, per switch. */
    private readonly rendered: Partial<Record<ThinkingSwitch, string>>,
    private readonly prompts: Partial<Record<ThinkingSwitch, string>>,
    private readonly markers: { open: string; close: string } | undefined,
    /** After tool results, per switch: what node-llama-cpp writes there, and the template's generation prompt. */
    private readonly afterResults: Partial<Record<ThinkingSwitch, { rendered: string; prompt: string }>>,
    private readonly writesSection: boolean,
  ) {}

  /**
   * Probes a template: what follows a user message in node-llama-cpp's rendering (the message's end
   * and the open turn) against what follows it in the template's own rendering with
   * `add_generation_prompt`, for each switch. Undefined when not even the default can be read (the
   * template fails, or writes BOS/EOS there), in which case node-llama-cpp's open turn stays.
   */
  static probe(wrapper: JinjaTemplateChatWrapper, markers: { open: string; close: string } | undefined): OpenTurns | undefined {
    try {
      const jinja = (wrapper as unknown as { _jinjaTemplate?: { render(params: object): string } })._jinjaTemplate;
      if (typeof jinja?.render !== "function") return undefined;
      // Left alone, the switch is on for a template with a thinking section, as llama.cpp's server
      // sets it (DeepSeek V3.1's and R1's as llama.cpp ships them close the section when it is not
      // set); a template without one gets none. The prompt renderer sets the same (withThinkingSwitch).
      const switchFor = (thinking: ThinkingSwitch) => (thinking === "default" && !markers ? undefined : thinking !== "off");
      const generationPrompt = (thinking: ThinkingSwitch) => {
        const enable = switchFor(thinking);
        return jinja.render({
          ...(wrapper.additionalRenderParameters ? structuredClone(wrapper.additionalRenderParameters) : {}),
          messages: [{ role: "user", content: PROBE }],
          bos_token: TOKEN_STAND_IN,
          eos_token: TOKEN_STAND_IN,
          eot_token: TOKEN_STAND_IN,
          add_generation_prompt: true,
          ...(enable === undefined ? {} : { enable_thinking: enable }),
        });
      };
      // Everything after the probe message, both ways: its end as the template writes it, then the
      // open turn. A switch whose rendering cannot be read keeps node-llama-cpp's open turn.
      const rendered: Partial<Record<ThinkingSwitch, string>> = {};
      const prompts: Partial<Record<ThinkingSwitch, string>> = {};
      for (const thinking of ["default", "on", "off"] as const) {
        try {
          const written = textAfterProbe(withSwitch(wrapper, markers ? switchFor(thinking) : undefined));
          const prompt = afterProbe(generationPrompt(thinking));
          if (!written || prompt === undefined || prompt.includes(TOKEN_STAND_IN)) continue;
          rendered[thinking] = written;
          prompts[thinking] = prompt;
        } catch {
          // This switch's rendering fails: the open turn stays node-llama-cpp's for it.
        }
      }
      if (prompts.default === undefined) return undefined;
      return new OpenTurns(
        rendered,
        prompts,
        markers,
        probeAfterResults(wrapper, jinja, switchFor, markers !== undefined),
        markers !== undefined && writesSectionInTurns(wrapper, jinja, markers, switchFor("default")),
      );
    } catch {
      return undefined;
    }
  }

  /**
   * `text` with its open turn rewritten as the template's generation prompt for `thinking`, or
   * undefined when it does not end as the probe's did (then it is left as node-llama-cpp wrote it).
   */
  rewrite(text: LlamaText, thinking: ThinkingSwitch): { text: LlamaText; openTurn: OpenTurn } | undefined {
    const values = [...text.values];
    let last = values.length - 1;
    while (last >= 0 && values[last] === "") last--;
    const tail = values[last];
    if (!(tail instanceof SpecialTokensText)) return undefined;
    const found = this.ending(tail.value, thinking);
    if (!found) return undefined;
    const { rendered, prompt } = found;
    values[last] = new SpecialTokensText(tail.value.slice(0, tail.value.length - rendered.length) + prompt);
    return { text: LlamaText(values.slice(0, last + 1)), openTurn: { text: prompt, thinking: this.thinkingIn(prompt), thinksByDefault: this.thinksByDefault, writesSection: this.writesSection } };
  }

  /**
   * For a prompt that ends with tool results: `text` with what node-llama-cpp wrote after them
   * rewritten as the template's generation prompt there, for `thinking`, where the two differ.
   * node-llama-cpp renders the answer to come as an empty assistant message and cuts it off, which
   * a template that opens the turn after results in its own way writes otherwise: DeepSeek V3.2's
   * generation prompt there is `\n\n<think>` (`\n\n<think></think>` with thinking off), where
   * node-llama-cpp's rendering, thinking markers taken off, left only the blank line. Undefined where
   * the template writes nothing else there, or the text does not end as the probe's did.
   */
  rewriteAfterResults(text: LlamaText, thinking: ThinkingSwitch): { text: LlamaText; openTurn: OpenTurn } | undefined {
    const found = this.afterResults[thinking];
    if (!found || found.rendered === found.prompt) return undefined;
    const values = [...text.values];
    let last = values.length - 1;
    while (last >= 0 && values[last] === "") last--;
    const tail = values[last];
    if (found.rendered !== "") {
      if (!(tail instanceof SpecialTokensText) || !tail.value.endsWith(found.rendered)) return undefined;
      values[last] = new SpecialTokensText(tail.value.slice(0, tail.value.length - found.rendered.length));
    }
    const kept = values.slice(0, last + 1);
    return { text: LlamaText([...kept, new SpecialTokensText(found.prompt)]), openTurn: this.written(found.prompt) };
  }

  /**
   * How `text` ends as node-llama-cpp wrote the probe's open turn for `thinking`, and the generation
   * prompt to put there. A switch may add to the end of a user message (GLM 4.6's "/nothink" with
   * thinking off), which a turn after tool results does not end with: then the open turn is matched
   * by the rendering of a switch that adds nothing there, and the same addition is left off the prompt.
   * So may the template itself (Cohere2 MoE closes a user message's text with <|END_TEXT|>, a
   * results turn with <|END_TOOL_RESULT|>): then what both renderings share at their start (the
   * user message's end) is left out of both, as much as it takes for the rest to end `text`. The
   * cut falls only between two markers (`…>` then `<…`): anywhere else a rest as short as `｜>`
   * ends many a text by chance (DeepSeek's results end `<｜tool▁outputs▁end｜>`).
   */
  private ending(text: string, thinking: ThinkingSwitch): { rendered: string; prompt: string } | undefined {
    const rendered = this.rendered[thinking];
    const prompt = this.prompts[thinking];
    if (rendered === undefined || prompt === undefined) return undefined;
    if (text.endsWith(rendered)) return { rendered, prompt };
    for (const other of ["default", "on", "off"] as const) {
      const shorter = this.rendered[other];
      if (other === thinking || !shorter || shorter.length >= rendered.length || !rendered.endsWith(shorter) || !text.endsWith(shorter)) continue;
      const added = rendered.slice(0, rendered.length - shorter.length);
      if (prompt.startsWith(added)) return { rendered: shorter, prompt: prompt.slice(added.length) };
    }
    let shared = 0;
    while (shared < rendered.length - 1 && rendered[shared] === prompt[shared]) shared++;
    for (let k = 1; k <= shared; k++)
      if (rendered[k - 1] === ">" && rendered[k] === "<" && text.endsWith(rendered.slice(k))) return { rendered: rendered.slice(k), prompt: prompt.slice(k) };
    return undefined;
  }

  /** Whether the template has a thinking section with plain-text markers. */
  get hasThinking(): boolean {
    return this.markers !== undefined;
  }

  /**
   * The thinking section's opening as the template writes it in an assistant turn: what node-llama-cpp's
   * open turn adds to the generation prompt, where that is the opening marker alone (GLM 4.6's
   * "\n<think>"); else the marker. For a section node-llama-cpp finds opened on the response's start,
   * which has no opening of its own to write.
   */
  get opening(): string | undefined {
    if (!this.markers) return undefined;
    const rendered = this.rendered.on ?? "";
    const prompt = this.prompts.on ?? "";
    const added = rendered.startsWith(prompt) ? rendered.slice(prompt.length) : "";
    return added.trim() === this.markers.open ? added : this.markers.open;
  }

  /** Whether every switch's open turn could be read. */
  get complete(): boolean {
    return (["default", "on", "off"] as const).every((t) => this.prompts[t] !== undefined && this.rendered[t] !== undefined);
  }

  /** Whether the template's generation prompt is what node-llama-cpp writes, whatever the switch. */
  get agrees(): boolean {
    return (["default", "on", "off"] as const).every((t) => this.prompts[t] !== undefined && this.prompts[t] === this.rendered[t]);
  }

  /**
   * For a prompt whose open turn could not be rewritten (an answer continuing a turn after its tool
   * results): node-llama-cpp's open turn with the thinking markers taken off, so the section is
   * opened only as `planReasoning` decides for the template.
   */
  unwritten(): OpenTurn {
    const switched = this.prompts.off !== undefined && this.prompts.on !== undefined && this.prompts.off !== this.prompts.on;
    return { text: "", thinking: "none", thinksByDefault: this.thinksByDefault, writesSection: this.writesSection, ...(switched ? { templateSwitched: true } : {}) };
  }

  /** A generation prompt the template writes where node-llama-cpp's open turn was not found (see OpenTurn.final). */
  written(prompt: string): OpenTurn {
    return { text: prompt, thinking: this.thinkingIn(prompt), thinksByDefault: this.thinksByDefault, writesSection: this.writesSection, final: true };
  }

  private get thinksByDefault(): boolean {
    const byDefault = this.thinkingIn(this.prompts.default ?? "");
    if (byDefault !== "none") return byDefault === "opened";
    // A switch that closes the section when turned off means a model that thinks unless told not to.
    return this.prompts.off !== undefined && this.prompts.off !== this.prompts.default;
  }

  /** A lone closing marker (GLM 4.7's with thinking off) closes the section as well as a pair does. */
  private thinkingIn(prompt: string): OpenTurnThinking {
    if (!this.markers) return "none";
    const opens = prompt.lastIndexOf(this.markers.open);
    const closes = prompt.lastIndexOf(this.markers.close);
    if (closes !== -1 && closes > opens) return "closed";
    return opens === -1 ? "none" : "opened";
  }
}

/** node-llama-cpp's rendering of a probe (the user probe unless given) with the template's switch set (undefined: not passed), for this call only. */
function withSwitch(
  wrapper: JinjaTemplateChatWrapper,
  enable: boolean | undefined,
  chatHistory: ChatHistoryItem[] = toChatHistory([{ role: "user", content: PROBE }]),
  availableFunctions?: ChatModelFunctions,
): LlamaText {
  const settable = wrapper as { reasoning: boolean | null };
  const before = settable.reasoning;
  settable.reasoning = enable ?? null;
  try {
    return wrapper.generateContextState({ chatHistory, availableFunctions }).contextText;
  } finally {
    settable.reasoning = before;
  }
}

/**
 * What follows a tool call's result, per switch: in node-llama-cpp's rendering (the result's end and
 * the open turn) and in the template's own with `add_generation_prompt`, each after what the
 * template writes there without it. Only for a wrapper that hands calls and results to its template
 * (tool-layouts.ts); a switch whose renderings cannot be read is left out.
 */
function probeAfterResults(
  wrapper: JinjaTemplateChatWrapper,
  jinja: { render(params: object): string },
  switchFor: (thinking: ThinkingSwitch) => boolean | undefined,
  hasThinking: boolean,
): Partial<Record<ThinkingSwitch, { rendered: string; prompt: string }>> {
  const found: Partial<Record<ThinkingSwitch, { rendered: string; prompt: string }>> = {};
  if (!wrapper.usingJinjaFunctionCallTemplate) return found;
  const history = toChatHistory(
    [
      { role: "user", content: PROBE },
      { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "probe", arguments: "{}" }] },
      { role: "tool", content: RESULT_PROBE, toolCallId: "call_1" },
    ],
    { rawResults: true },
  );
  const messages = [
    { role: "user", content: PROBE },
    { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "probe", arguments: {} } }] },
    { role: "tool", tool_call_id: "call_1", content: RESULT_PROBE },
  ];
  const tools = [{ type: "function", function: { name: "probe", description: "Probe", parameters: RESULT_PROBE_PARAMS } }];
  for (const thinking of ["default", "on", "off"] as const) {
    try {
      const enable = switchFor(thinking);
      const own = (add: boolean) =>
        after(
          jinja.render({
            ...(wrapper.additionalRenderParameters ? structuredClone(wrapper.additionalRenderParameters) : {}),
            messages: structuredClone(messages),
            tools: structuredClone(tools),
            bos_token: TOKEN_STAND_IN,
            eos_token: TOKEN_STAND_IN,
            eot_token: TOKEN_STAND_IN,
            add_generation_prompt: add,
            ...(enable === undefined ? {} : { enable_thinking: enable }),
          }),
          RESULT_PROBE,
        );
      const without = own(false);
      const withPrompt = own(true);
      const written = textAfter(withSwitch(wrapper, hasThinking ? enable : undefined, history, RESULT_PROBE_FUNCTIONS), RESULT_PROBE);
      if (without === undefined || withPrompt === undefined || written === undefined) continue;
      if (!withPrompt.startsWith(without) || !written.startsWith(without) || withPrompt.includes(TOKEN_STAND_IN)) continue;
      found[thinking] = { rendered: written.slice(without.length), prompt: withPrompt.slice(without.length) };
    } catch {
      // This switch's rendering fails: what node-llama-cpp writes after results stays.
    }
  }
  return found;
}

/**
 * Whether the template writes a thinking section into an assistant turn, or cuts one out of an
 * answer's text: either way a model trained to think on its own. Probe conversations with an answer
 * as the last message or followed by a user's: one whose reasoning is given as a field
 * (`reasoning_content`, LFM 2.5's `thinking`, a `thinking` content block as Ministral 3 Reasoning's
 * takes it) or not at all shows the opening marker after the probe
 * message (Kimi K2 Thinking's empty `<think></think>`); one whose text holds a section loses the
 * section's text (DeepSeek R1's, Qwen 3's, LFM 2.5's cut at `</think>`). Granite 3.3's does neither.
 */
function writesSectionInTurns(
  wrapper: JinjaTemplateChatWrapper,
  jinja: { render(params: object): string },
  markers: { open: string; close: string },
  enable: boolean | undefined,
): boolean {
  const REASONING = "Plinth reasoning probe 5c1e";
  const ANSWER = "Plinth answer probe";
  const answers = [
    { answer: { role: "assistant", content: ANSWER, reasoning_content: REASONING, thinking: REASONING }, shows: (text: string) => text.includes(markers.open) },
    { answer: { role: "assistant", content: ANSWER }, shows: (text: string) => text.includes(markers.open) },
    // (Mistral's reasoning models take it as a content block.)
    {
      answer: { role: "assistant", content: [{ type: "thinking", thinking: REASONING }, { type: "text", text: ANSWER }] },
      shows: (text: string) => text.includes(markers.open),
    },
    { answer: { role: "assistant", content: `${markers.open}${REASONING}${markers.close}${ANSWER}` }, shows: (text: string) => text.includes(ANSWER) && !text.includes(REASONING) },
  ];
  for (const { answer, shows } of answers) {
    for (const last of [false, true]) {
      try {
        const messages = [{ role: "user", content: PROBE }, answer, ...(last ? [] : [{ role: "user", content: RESULT_PROBE }])];
        const text = jinja.render({
          ...(wrapper.additionalRenderParameters ? structuredClone(wrapper.additionalRenderParameters) : {}),
          messages,
          bos_token: TOKEN_STAND_IN,
          eos_token: TOKEN_STAND_IN,
          eot_token: TOKEN_STAND_IN,
          add_generation_prompt: false,
          ...(enable === undefined ? {} : { enable_thinking: enable }),
        });
        const rest = after(text, PROBE);
        if (rest !== undefined && shows(rest)) return true;
      } catch {
        // A conversation this template refuses tells nothing.
      }
    }
  }
  return false;
}

/** Message text no template treats specially, to find where the message ends in a rendering. */
const PROBE = "Plinth probe 7f3a9c: where does this message end?";
/** A tool result's text, likewise. */
const RESULT_PROBE = "Plinth result probe 2b8d4e";
const RESULT_PROBE_PARAMS = { type: "object", properties: {} } as const;
const RESULT_PROBE_FUNCTIONS = { probe: { description: "Probe", params: RESULT_PROBE_PARAMS } };
/** What the probe renders for BOS/EOS tokens: a generation prompt that writes one is not rewritten. */
const TOKEN_STAND_IN = "\u0000plinth-token\u0000";

/** A rendering's text after the last place it writes `probe`. */
function after(text: string, probe: string): string | undefined {
  const at = text.lastIndexOf(probe);
  return at === -1 ? undefined : text.slice(at + probe.length);
}

function afterProbe(text: string): string | undefined {
  return after(text, PROBE);
}

/** The template text after the probe message in node-llama-cpp's rendering (special tokens refuse it). */
function textAfterProbe(text: LlamaText): string | undefined {
  return textAfter(text, PROBE);
}

/** The template text after message text `probe` in node-llama-cpp's rendering (special tokens refuse it). */
function textAfter(text: LlamaText, probe: string): string | undefined {
  let found = false;
  let rest = "";
  for (const value of text.values) {
    if (!found) {
      if (typeof value === "string" && value.includes(probe)) {
        found = true;
        rest = value.slice(value.lastIndexOf(probe) + probe.length);
      }
      continue;
    }
    if (typeof value === "string") rest += value;
    else if (value instanceof SpecialTokensText) rest += value.value;
    else return undefined;
  }
  return found ? rest : undefined;
}
