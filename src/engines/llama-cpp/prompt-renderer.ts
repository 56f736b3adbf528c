import { asksNoThinking } from "../../core/reasoning-control.ts";
import {
  type ChatHistoryItem,
  type ChatModelFunctions,
  type ChatWrapper,
  type ChatWrapperSettings,
  ChatMLChatWrapper,
  HarmonyChatWrapper,
  JinjaTemplateChatWrapper,
  Llama2ChatWrapper,
  type JinjaTemplateChatWrapperOptions,
  type LlamaModel,
  LlamaText,
  MistralChatWrapper,
  type ResolvableChatWrapperTypeName,
  resolveChatWrapper,
  SpecialToken,
  SpecialTokensText,
  type Token,
  type Tokenizer,
} from "node-llama-cpp";
import { ApiError, invalidField } from "../../core/errors.ts";
import type { GenerationRequest, Message, PromptInput } from "../../core/types.ts";
import { toChatHistory } from "./chat-history.ts";
import { InlineReasoningCut } from "./inline-reasoning.ts";
import { MessageTrim } from "./message-trim.ts";
import { wantsToolResponses } from "./gemma4-tool-calls.ts";
import { Gemma4Thinking } from "./gemma4-thinking.ts";
import { prepareToolRendering } from "./tool-layouts.ts";
import { renderJinjaLikePython } from "./jinja-python.ts";
import { FaithfulChatMLChatWrapper } from "./chatml-wrapper.ts";
import { FaithfulMistralChatWrapper, writesNemoCallIds } from "./mistral-wrapper.ts";
import type { ReasoningPlan } from "./decode-loop.ts";
import { HarmonyLayout, usesHarmonyLayout } from "./harmony.ts";
import { type OpenTurn, OpenTurns, type ThinkingSwitch } from "./open-turn.ts";
import { tokenizeRawText } from "./raw-text.ts";
import { MarkerBreaker } from "./marker-text.ts";
import { RunTokenizer } from "./prompt-runs.ts";
import { leavesOutEmptySystem, mergeSystemMessages, systemMergingWrapper, withoutEmptyLeadingSystem } from "./system-messages.ts";
import { memoTokenizer } from "./tokenize-memo.ts";

// Everything about turning a canonical prompt into the tokens a model sees: which chat template
// (node-llama-cpp chat wrapper) a model gets, how chat, text, infill and token prompts become tokens,
// which of the template's stop triggers are tokens and which are text, and how a thinking section is
// opened or closed at the end of the prompt. The engine (llama-engine.ts) only wires these together
// with the constraints and the decode loop.

/** A prompt as tokens, with the stops its format needs. */
export interface RenderedPrompt {
  tokens: Token[];
  /** Single special tokens that end a turn in this format. */
  stopTokens: Set<Token>;
  /** Text stops the format needs (checked by the core like a request's stop strings). */
  formatStops: string[];
  /** Text the format writes right before an end-of-turn token, not the answer's when it ends there (see splitTriggers). */
  formatEndings?: string[];
  /** Set when a chat prompt's open turn is the template's own generation prompt (open-turn.ts). */
  openTurn?: OpenTurn;
}

/** How a chat prompt's thinking section is set up, and how the decode loop handles it. */
export interface ReasoningPrompt {
  plan: ReasoningPlan;
  /** Appended to the rendered prompt: opens the section, or (thinking off) opens and closes it empty. */
  promptSuffix: Token[];
  /** Written by the engine when thinking ends, before the answer. */
  answerOpening?: Token[];
}

export interface RendererOptions {
  /** The model's id, for error messages. */
  id: string;
  /** A node-llama-cpp chat wrapper to use instead of the one the model's template resolves to. */
  chatWrapper?: string;
  /** Token ids are valid below this. */
  vocabSize: number;
}

export class PromptRenderer {
  readonly wrapper: ChatWrapper;
  /** Set for gpt-oss's message layout. */
  readonly harmony: HarmonyLayout | undefined;
  private readonly id: string;
  private readonly vocabSize: number;
  /** The model's Jinja chat template, if it has one. */
  private readonly template: string | undefined;

  /** The model file's template renders chat prompts: run as Jinja, or by the ChatML wrapper that writes exactly what it writes. */
  private templateRenders = false;

  /** The model file's template when it is what renders chat prompts (not a built-in format that differs). */
  get templateText(): string | undefined {
    return this.templateRenders || this.wrapper instanceof JinjaTemplateChatWrapper ? this.template : undefined;
  }
  /** The model's tokenizer, remembering recent template parts and messages (tokenize-memo.ts). */
  private readonly tokenizer: Tokenizer;
  /** Set when the template refuses a system role: system messages are merged into the next (system-messages.ts). */
  private readonly mergesSystem: boolean = false;
  /** node-llama-cpp's wrapper for the model's family, for a conversation such a template still refuses. */
  private readonly familyWrapper: ChatWrapper | undefined;
  /** Set when the template writes nothing for an empty leading system message (Phi 3.5's). */
  private readonly leavesOutEmptySystem: boolean = false;
  /** How the template cuts reasoning out of earlier answers' text, done before rendering (inline-reasoning.ts). */
  private readonly inlineReasoning: InlineReasoningCut | undefined;
  /** How the template trims message texts, done before rendering (message-trim.ts). */
  private readonly trimmed: MessageTrim | undefined;
  /** Set for Gemma 4's templates: their thinking section and generation prompts (gemma4-thinking.ts). */
  private readonly gemma4: Gemma4Thinking | undefined;

  constructor(
    private readonly model: LlamaModel,
    opts: RendererOptions,
  ) {
    this.id = opts.id;
    this.vocabSize = opts.vocabSize;
    // Before node-llama-cpp first runs a template (its checks and its reading of call layouts).
    renderJinjaLikePython();
    const template = model.fileInfo.metadata?.tokenizer?.chat_template;
    this.template = typeof template === "string" ? template : undefined;
    this.tokenizer = memoTokenizer(model);
    // Templates that stamp today's date would render a conversation differently after midnight and
    // lose its cached prefix; the date is pinned to the day the model was loaded.
    const today = new Date(new Date().toISOString().slice(0, 10));
    // A model rendered through its own Jinja template gets each message as the template sees it:
    // node-llama-cpp joins consecutive messages of one role into one by default (two system
    // messages became one block, where the template writes two).
    // Templates that print a date take it as `date_string` (Llama 3.1's), written as llama.cpp writes it.
    const customWrapperSettings = {
      "llama3.1": { todayDate: today },
      "llama3.2-lightweight": { todayDate: today },
      harmony: { todayDate: today },
      // enable_thinking is left to the template's own default: node-llama-cpp sets it true, which
      // turned thinking on in templates whose models are off by default (Gemma 4's, Apertus's).
      jinjaTemplate: {
        joinAdjacentMessagesOfTheSameType: false,
        reasoning: null as unknown as boolean,
        // node-llama-cpp would rewrite every system message as a user turn when a template refuses
        // one; Plinth decides that itself (see renderTemplate).
        convertUnsupportedSystemMessagesToUserMessages: false,
        additionalRenderParameters: { date_string: dateString(today) },
      },
    };
    const type = (opts.chatWrapper ?? "auto") as ResolvableChatWrapperTypeName;
    // node-llama-cpp prints a stack trace when its checks refuse the model's template (Hermes 3's
    // tool-use template: see ownTemplateWrapper); Plinth runs such a template itself below, so the
    // trace is shown only if that fails too.
    const { value: resolved, held: jinjaFailure } = holdingJinjaFailure(type === "auto", () => resolveChatWrapper(model, { type, customWrapperSettings }));
    let wrapper = resolved;
    if (type === "auto" && !(wrapper instanceof HarmonyChatWrapper) && usesHarmonyLayout(model))
      wrapper = resolveChatWrapper(model, { type: "harmony", customWrapperSettings });
    // node-llama-cpp swaps a model's own template for a hand-written wrapper of its family (Qwen,
    // Llama 3, DeepSeek, …) when the two agree on a few sample chats. They part on everything else:
    // the family wrappers join consecutive messages of one role, drop empty ones, leave out a default
    // system prompt the template writes (Qwen 2.5's), open a thinking section for models that have
    // none, and document tools their own way. The template itself is what llama.cpp's server and
    // vLLM render, so it is used whenever node-llama-cpp can run it. A template that refuses a system
    // role (Gemma 2's) is run with system messages merged into the next message, as llama.cpp's
    // server merges them (system-messages.ts); the family wrapper stays for a conversation the
    // template still refuses (one that opens with an assistant turn). A template node-llama-cpp
    // cannot run otherwise (Mistral Nemo's) keeps the family wrapper (mistral-wrapper.ts).
    // Plain ChatML is the exception: rendered by Plinth's own ChatML wrapper (chatml-wrapper.ts),
    // five times faster than the Jinja engine (0.25 against 1.3 ms for 21 messages), but only once
    // it has written a few telling conversations exactly as the template does (a template that adds
    // a default system prompt, or drops empty turns, is not plain ChatML).
    if (type === "auto" && prefersOwnTemplate(wrapper)) {
      const { wrapper: own, mergesSystem } = ownTemplateWrapper(model, customWrapperSettings.jinjaTemplate);
      if (own && mergesSystem) {
        this.mergesSystem = true;
        this.familyWrapper = wrapper;
      }
      // A template that writes tools its own way (LFM 2.5's "List of tools") is not plain ChatML either.
      // Nor is one whose generation prompt differs from its assistant turns (one that opens "<think>").
      const plainChatML =
        own instanceof JinjaTemplateChatWrapper &&
        !/\btools\b/.test(this.template ?? "") &&
        rendersAlike(new FaithfulChatMLChatWrapper(), own) &&
        OpenTurns.probe(own, thinkingMarkers(own, this.template))?.agrees === true;
      if (own && wrapper.constructor === ChatMLChatWrapper) {
        wrapper = plainChatML ? new FaithfulChatMLChatWrapper() : own;
        this.templateRenders = plainChatML;
      } else wrapper = own ?? wrapper;
      if (!own && jinjaFailure) console.error(...jinjaFailure);
    } else if (jinjaFailure) console.error(...jinjaFailure);
    if (wrapper.constructor === ChatMLChatWrapper) wrapper = new FaithfulChatMLChatWrapper();
    // node-llama-cpp picks the family by the model's name, else by `[INST]` in the template, for
    // which it takes Llama 2's (`<s>[INST] <<SYS>>…`): a Mistral Nemo fine-tune under a name of its
    // own got Llama 2's layout for a template that writes Mistral's. A template with `[INST]` and no
    // `<<SYS>>` block is Mistral's.
    if (type === "auto" && wrapper.constructor === Llama2ChatWrapper && writesMistralLayout(this.template)) wrapper = new FaithfulMistralChatWrapper({ callIds: writesNemoCallIds(this.template) });
    if (wrapper.constructor === MistralChatWrapper) wrapper = new FaithfulMistralChatWrapper({ callIds: writesNemoCallIds(this.template) });
    // Tools, calls and results go to the template as it expects them (tool-layouts.ts): a family's
    // call layout where node-llama-cpp could not read one, kept only if an answered call renders.
    if (wrapper instanceof JinjaTemplateChatWrapper && this.template)
      prepareToolRendering(wrapper, this.template, model.tokenizer, (w) => w.generateContextState({ chatHistory: LAYOUT_PROBE, availableFunctions: LAYOUT_PROBE_FUNCTIONS }));
    // Gemma 4 thinks in a section node-llama-cpp cannot find in its template.
    if (wrapper instanceof JinjaTemplateChatWrapper && this.template) this.gemma4 = Gemma4Thinking.adopt(wrapper, this.template);
    this.wrapper = wrapper;
    this.harmony = HarmonyLayout.of(wrapper, model, today);
    if (wrapper instanceof JinjaTemplateChatWrapper && !this.harmony) this.leavesOutEmptySystem = leavesOutEmptySystem(wrapper);
    this.inlineReasoning = wrapper instanceof JinjaTemplateChatWrapper && !this.harmony ? InlineReasoningCut.of(this.template) : undefined;
    if (wrapper instanceof JinjaTemplateChatWrapper && !this.harmony) this.trimmed = MessageTrim.of(this.template);
  }

  /**
   * The prompt's tokens; chat prompts through the template, with the functions it should document.
   * `beforeTokenize` sees the UTF-8 length of the templated text first and may throw: tokenizing runs
   * on the event loop, and a template can make a short message list long (a tool's description).
   */
  render(req: GenerationRequest, functions?: ChatModelFunctions, beforeTokenize?: (bytes: number) => void): RenderedPrompt {
    const prompt = req.prompt;
    if (prompt.kind === "tokens") {
      prompt.tokens.forEach((t, i) => this.checkToken(t, `prompt.tokens[${i}]`));
      return { tokens: prompt.tokens.slice() as Token[], stopTokens: new Set(), formatStops: [] };
    }
    const bos = this.model.tokens.shouldPrependBosToken && this.model.tokens.bos != null ? [this.model.tokens.bos] : [];
    if (prompt.kind === "text") {
      return { tokens: [...bos, ...tokenizeRawText(this.model, prompt.text)], stopTokens: new Set(), formatStops: [] };
    }
    if (prompt.kind === "infill") {
      // Prefix-suffix-middle order, as llama.cpp's own infill endpoint builds it.
      const { prefix, suffix, middle } = this.model.tokens.infill;
      if (prefix == null || suffix == null || middle == null)
        throw invalidField("This model has no fill-in-the-middle tokens, so '{field}' cannot be used.", "prompt.suffix", "unsupported_parameter");
      const tokens = [...bos, prefix, ...this.model.tokenize(prompt.prefix, false), suffix, ...this.model.tokenize(prompt.suffix, false), middle];
      return { tokens, stopTokens: new Set(), formatStops: [] };
    }
    let wrapper = this.harmony?.wrapperFor(req.reasoning?.effort) ?? this.wrapper;
    if (wrapper instanceof JinjaTemplateChatWrapper || this.harmony) this.refuseControlText(req);
    const { state, wrapper: renderedBy } = this.renderChat(wrapper, prompt.messages, thinkingSwitch(req), functions);
    wrapper = renderedBy;
    const { stopTokens, formatStops, formatEndings } = this.splitTriggers(state.stopGenerationTriggers);
    if (this.harmony) formatStops.push(...this.harmony.answerStops);
    // A client's prefill is continued as written; otherwise the open turn is the template's own.
    const turns = prefilled(prompt) || wrapper !== this.wrapper ? undefined : this.openTurns;
    // After tool results the open turn is not the probed one; the template's generation prompt there
    // stands in for node-llama-cpp's where the two differ (DeepSeek V3.2's `\n\n<think>`).
    const afterResults = prompt.messages.at(-1)?.role === "tool";
    const rewritten = turns?.rewrite(state.contextText, thinkingSwitch(req)) ?? (afterResults ? turns?.rewriteAfterResults(state.contextText, thinkingSwitch(req)) : undefined);
    let opened = rewritten?.text ?? (prefilled(prompt) ? state.contextText : this.withoutThinkingMarkers(state.contextText, wrapper));
    let openTurn = rewritten?.openTurn ?? turns?.unwritten();
    // Gemma 4's generation prompt where the open turn was not the probed one (after tool results).
    const written = turns && !rewritten ? this.gemma4?.generationPrompt(tailText(opened), afterResults) : undefined;
    if (turns && written !== undefined) {
      opened = LlamaText([opened, new SpecialTokensText(written)]);
      openTurn = turns.written(written);
    }
    const text = this.withBosAsTheModelWants(opened, wrapper);
    if (beforeTokenize) beforeTokenize(textBytes(text));
    return { tokens: this.runs.tokenize(text, this.markers.break), stopTokens, formatStops, formatEndings, openTurn };
  }

  /**
   * The wrapper's rendering of a conversation, with the system messages as the model's template takes
   * them (system-messages.ts). A template that refuses a system role gets the tools' description in
   * the leading system message, merged like the others; a conversation it still refuses is rendered
   * by node-llama-cpp's wrapper for the model's family, as before the template could be run.
   */
  private renderChat(wrapper: ChatWrapper, messages: Message[], thinking: ThinkingSwitch, functions: ChatModelFunctions | undefined) {
    if (this.inlineReasoning) messages = this.inlineReasoning.apply(messages);
    messages = this.markers.breakMessages(this.trimmed?.apply(messages) ?? messages);
    let history = toChatHistory(messages, { rawResults: handsResultsOver(wrapper) });
    if (wrapper instanceof JinjaTemplateChatWrapper || this.harmony) history = this.breakCallArguments(history);
    if (wrapper !== this.wrapper) return { state: this.withThinkingSwitch(wrapper, thinking, () => renderTemplate(wrapper, history, functions)), wrapper };
    if (this.leavesOutEmptySystem) history = withoutEmptyLeadingSystem(history);
    if (!this.mergesSystem) return { state: this.withThinkingSwitch(wrapper, thinking, () => renderTemplate(wrapper, history, functions)), wrapper };
    const described = functions && Object.keys(functions).length > 0 ? withFunctionsDescribed(wrapper, history, functions) : history;
    try {
      return { state: this.withThinkingSwitch(wrapper, thinking, () => renderTemplate(wrapper, mergeSystemMessages(described), undefined)), wrapper };
    } catch (err) {
      const family = this.familyWrapper;
      if (!family || !(err instanceof ApiError)) throw err;
      return { state: renderTemplate(family, toChatHistory(messages), functions), wrapper: family };
    }
  }

  /**
   * Renders with the template's `enable_thinking` set as llama.cpp's server sets it: on for a
   * template with a thinking section unless the request turns it off (Gemma 4's then writes its
   * thinking instruction into the system turn, as it does under llama-server); a template without
   * one gets none. The generation prompt (open-turn.ts) is rendered the same way. The switch is the
   * wrapper's own setting, set for this synchronous render only.
   */
  private withThinkingSwitch<T>(wrapper: ChatWrapper, thinking: ThinkingSwitch, render: () => T): T {
    if (!(wrapper instanceof JinjaTemplateChatWrapper) || wrapper !== this.wrapper || !this.openTurns?.hasThinking) return render();
    const settable = wrapper as { reasoning: boolean | null };
    const before = settable.reasoning;
    settable.reasoning = thinking !== "off";
    try {
      return render();
    } finally {
      settable.reasoning = before;
    }
  }

  /**
   * A chat prompt opens with BOS exactly when the model's tokenizer adds one (`add_bos_token`), as
   * llama.cpp's own server tokenizes a rendered template. node-llama-cpp's built-in wrappers (ChatML
   * among them) put BOS in front whatever the model says: a Qwen-style model (add_bos_token false,
   * its BOS <|endoftext|>) saw a token it was not trained to see first and counted one prompt token
   * more than llama-server or vLLM. A Jinja template that does not write bos_token got none, where
   * llama-server adds it for a model that asks. A template that writes it itself keeps it.
   */
  private withBosAsTheModelWants(text: LlamaText, wrapper: ChatWrapper): LlamaText {
    const first = text.values[0];
    const opensWithBos = first instanceof SpecialToken && first.value === "BOS";
    const wanted = this.model.tokens.shouldPrependBosToken && this.model.tokens.bos != null;
    if (wanted && !opensWithBos) return LlamaText([new SpecialToken("BOS"), text]);
    if (!wanted && opensWithBos && !(wrapper instanceof JinjaTemplateChatWrapper)) return LlamaText(text.values.slice(1));
    return text;
  }

  /**
   * node-llama-cpp keeps message contents apart from the template's own text, so a "<|im_end|>" a
   * user types stays text; but tool definitions and earlier tool calls go into the template with
   * it, and come out as control tokens. A tool description (from any MCP server) could then close
   * the turn and open a system turn of its own. Such text in tools and call names is refused,
   * naming where it is. Call arguments are not refused but broken (breakCallArguments): they are
   * what the model wrote, and its call grammar lets a string hold a marker's text (an agent
   * editing a chat template), so refusing them refused the conversation's next turn.
   */
  private refuseControlText(req: GenerationRequest): void {
    const control = this.controlText;
    if (!control || req.prompt.kind !== "chat") return;
    const look = (text: string | undefined, field: string) => {
      const found = text ? control.exec(text) : null;
      if (found)
        throw invalidField(`{field} contains '${found[0]}', which this model's template would read as a control token.`, field);
    };
    (req.tools ?? []).forEach((tool, i) => {
      look(tool.name, `tools[${i}].name`);
      look(tool.description, `tools[${i}].description`);
      look(JSON.stringify(tool.parameters ?? null), `tools[${i}].parameters`);
    });
    req.prompt.messages.forEach((m, i) =>
      (m.toolCalls ?? []).forEach((call, k) => {
        look(call.name, `prompt.messages[${i}].toolCalls[${k}].name`);
      }),
    );
    // An earlier Gemma 4 template writes a result that is JSON as a value too (toolResponsesOnTurn).
    if (this.template && wantsToolResponses(this.template))
      req.prompt.messages.forEach((m, i) => {
        if (m.role === "tool" && typeof m.content === "string" && /^\s*[[{]/.test(m.content)) look(m.content, `prompt.messages[${i}].content`);
      });
  }

  /**
   * Earlier calls' arguments with every control token's and marker's text broken after its first
   * character (MarkerBreaker's break, which the run tokenizer cuts at in template text too), in the
   * values the template writes out: string values and keys of parsed JSON, or the text kept as it
   * was sent. The model then reads such text as the ordinary text tokens it wrote it with. The
   * history's items are this render's own, changed in place.
   */
  private breakCallArguments(history: ChatHistoryItem[]): ChatHistoryItem[] {
    const control = this.controlText;
    if (!control) return history;
    const pattern = new RegExp(control.source, "g");
    const text = (t: string) => this.markers.breakMatches(t, pattern);
    const value = (v: unknown): unknown => {
      if (typeof v === "string") return text(v);
      if (Array.isArray(v)) return v.map(value);
      if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [text(k), value(x)]));
      return v;
    };
    for (const item of history) {
      if (item.type !== "model") continue;
      for (const part of item.response) if (typeof part === "object" && part.type === "functionCall") part.params = value(part.params);
    }
    return history;
  }

  /**
   * The markers llama.cpp finds even in text it tokenizes without special parsing (user-defined
   * tokens such as Qwen 3's `<think>`), kept out of message texts (marker-text.ts). Built on first use.
   */
  private get markers(): MarkerBreaker {
    if (this.markerBreaker) return this.markerBreaker;
    const meta = this.vocabMeta;
    this.markerBreaker = MarkerBreaker.of(this.tokenizer, meta?.tokens, meta?.token_type);
    return this.markerBreaker;
  }
  private markerBreaker: MarkerBreaker | undefined;

  /** Tokenizes a rendered chat prompt as llama.cpp tokenizes the rendered string (prompt-runs.ts). */
  private get runs(): RunTokenizer {
    this.runTokenizer ??= new RunTokenizer(this.model, this.tokenizer, this.vocabMeta?.tokens);
    return this.runTokenizer;
  }
  private runTokenizer: RunTokenizer | undefined;

  private get vocabMeta() {
    return this.model.fileInfo.metadata?.tokenizer?.ggml as { tokens?: readonly string[]; token_type?: readonly number[] } | undefined;
  }

  /**
   * A pattern matching the text of any of the vocabulary's control tokens, and of the markers found
   * in plain text (built on first use).
   */
  private get controlText(): RegExp | undefined {
    if (this.controlPattern !== null) return this.controlPattern;
    const meta = this.vocabMeta;
    const texts = new Set<string>(this.markers.markers);
    meta?.tokens?.forEach((text, id) => {
      if (meta.token_type?.[id] === CONTROL_TOKEN && text.length > 1) texts.add(text);
    });
    const sorted = [...texts].sort((a, b) => b.length - a.length).map(escapeRegExp);
    this.controlPattern = sorted.length > 0 ? new RegExp(sorted.join("|")) : undefined;
    return this.controlPattern;
  }
  private controlPattern: RegExp | undefined | null = null;

  /**
   * The turn left open for the answer ends as the template's generation prompt does: without the
   * thinking markers a template writes there. Qwen 3's writes an empty closed section into every
   * finished assistant turn (node-llama-cpp renders the open turn as one), GLM 4.7's a lone closing
   * marker, Nemotron's an opening one; `planReasoning` then opens or closes the section once.
   */
  private trailingMarkers: RegExp | undefined;

  /** The template's generation prompts (open-turn.ts), probed on first use; undefined where they cannot be read. */
  private get openTurns(): OpenTurns | undefined {
    if (this.openTurnsOnce === null) {
      const thought = this.thought;
      const markers = thought && thinkingMarkers(this.wrapper, this.template);
      // A thinking section without plain-text markers keeps node-llama-cpp's open turn.
      const turns =
        this.wrapper instanceof JinjaTemplateChatWrapper && !this.harmony && (!thought || markers) ? OpenTurns.probe(this.wrapper, markers) : undefined;
      // So does one opened on the response's start unless node-llama-cpp can render every switch:
      // it moves the open turn into `reasoning_content`, which Laguna's template leaves out with
      // thinking off (the request would fail to render).
      this.openTurnsOnce = opensOnStart(thought) && !turns?.complete ? undefined : turns;
    }
    return this.openTurnsOnce;
  }
  private openTurnsOnce: OpenTurns | undefined | null = null;

  private withoutThinkingMarkers(text: LlamaText, wrapper: ChatWrapper): LlamaText {
    const thought = this.thought;
    if (!(wrapper instanceof JinjaTemplateChatWrapper) || !thought) return text;
    const values = [...text.values];
    let last = values.length - 1;
    while (last >= 0 && values[last] === "") last--;
    const tail = values[last];
    if (!(tail instanceof SpecialTokensText)) return text;
    // A section node-llama-cpp opened on the response's start, where `planReasoning` opens it as the
    // template writes it: its opening comes off.
    const opening = wrapper === this.wrapper && opensOnStart(thought) ? this.openTurns?.opening : undefined;
    if (opening !== undefined) {
      if (!tail.value.endsWith(opening)) return text;
      values[last] = new SpecialTokensText(tail.value.slice(0, tail.value.length - opening.length));
      return LlamaText(values.slice(0, last + 1));
    }
    const open = plainText(thought.prefix)?.trim();
    const close = plainText(thought.suffix)?.trim();
    if (!open || !close) return text;
    this.trailingMarkers ??= new RegExp(`(?:${escapeRegExp(open)}\\s*)?(?:${escapeRegExp(close)}\\s*)?$`);
    const trailing = this.trailingMarkers;
    const kept = tail.value.replace(trailing, "");
    if (kept === tail.value) return text;
    values[last] = new SpecialTokensText(kept);
    return LlamaText(values.slice(0, last + 1));
  }

  /**
   * The thinking section of the model's template, when it has one. node-llama-cpp also finds one in
   * a vocabulary that merely has <think> and </think> tokens (Qwen 3 Coder's, Qwen 3 Instruct 2507's),
   * where the template never opens it; such a model does not think, and opening the section
   * would put its whole answer into reasoning. So the template must mention the opening marker.
   */
  get thought(): NonNullable<ChatWrapperSettings["segments"]>["thought"] {
    if (this.thoughtOnce === null) {
      const thought = this.wrapper.settings.segments?.thought;
      const open = thought && plainText(thought.prefix)?.trim();
      const unwritten = this.wrapper instanceof JinjaTemplateChatWrapper && !!this.template && !!open && !this.template.includes(open);
      this.thoughtOnce = unwritten ? undefined : thought;
    }
    return this.thoughtOnce;
  }
  private thoughtOnce: NonNullable<ChatWrapperSettings["segments"]>["thought"] | null = null;

  /**
   * The thinking section's markers that are control tokens (Gemma 4's `<|channel>` and `<channel|>`),
   * by token, with their text. Such a token decodes to nothing, so the decode loop reads these as
   * their text while a section may be open, as it reads a call layout's markers; otherwise the model's
   * thinking could never be told from its answer (`thought\n…` went into content).
   */
  get thinkingMarkers(): ReadonlyMap<Token, string> {
    if (this.thinkingMarkersOnce) return this.thinkingMarkersOnce;
    const markers = new Map<Token, string>();
    const silent = new Set<Token>();
    const thought = this.thought;
    for (const part of [thought?.prefix, thought?.suffix]) {
      const text = plainText(part);
      if (!text) continue;
      for (const token of LlamaText(new SpecialTokensText(text)).tokenize(this.tokenizer)) {
        if (this.model.isEogToken(token)) continue;
        const attributes = this.model.getTokenAttributes(token);
        // Gemma 4's own vocabulary types its channel markers as user-defined tokens, which decode to
        // their text: they are the same markers, and nothing where they are not read (silentMarkers).
        // (Not so for <think>-style tags, which models write as text.)
        const userDefined = !!this.gemma4 && attributes.userDefined;
        if (!(this.model.isSpecialToken(token) && attributes.control) && !userDefined) continue;
        const spelled = this.model.detokenize([token], true);
        if (!spelled || !text.includes(spelled)) continue;
        markers.set(token, spelled);
        if (userDefined) silent.add(token);
      }
    }
    this.thinkingMarkersOnce = markers;
    this.silentMarkersOnce = silent;
    return markers;
  }
  private thinkingMarkersOnce: ReadonlyMap<Token, string> | undefined;

  /** Of `thinkingMarkers`, those the vocabulary types as user-defined tokens (see LoopSetup.silentMarkers); undefined when none. */
  get silentMarkers(): ReadonlySet<Token> | undefined {
    if (!this.silentMarkersOnce) void this.thinkingMarkers;
    return this.silentMarkersOnce!.size ? this.silentMarkersOnce : undefined;
  }
  private silentMarkersOnce: Set<Token> | undefined;

  /**
   * For chat prompts on a model whose template has a thinking section: the tokens that open it
   * (or, turned off, open and close it empty) after the generation prompt, and how to end it.
   */
  planReasoning(req: GenerationRequest, modelMayCall: boolean, openTurn?: OpenTurn, constrained = false): ReasoningPrompt | undefined {
    const thought = this.thought;
    // A client's prefill continues an answer: the template has written the turn as it is, and what
    // follows is more of it, not a thinking section.
    if (req.prompt.kind === "chat" && thought && prefilled(req.prompt)) return undefined;
    if (req.prompt.kind !== "chat" || !thought) {
      if (req.reasoning !== undefined && !asksNoThinking(req.reasoning))
        throw invalidField(
          `The model '${this.id}' has no thinking section in its chat template, so reasoning cannot be controlled.`,
          "reasoning",
          // OpenAI's code for a reasoning field sent to a model that does not reason.
          "unsupported_parameter",
        );
      return undefined;
    }
    // Some templates open the section in every assistant turn ("openedOnStart"): node-llama-cpp's
    // open turn has opened it, and there is no prefix to add. Where the open turn is the template's
    // generation prompt instead (GLM 4.6's, which leaves the opening to the model), the prefix is
    // the opening as the template writes it (open-turn.ts).
    const openedOnStart = opensOnStart(thought);
    const opening = openedOnStart && openTurn ? this.openTurns?.opening : undefined;
    const prefix = !openedOnStart ? LlamaText(thought.prefix as string | LlamaText) : LlamaText(opening === undefined ? [] : new SpecialTokensText(opening));
    const suffix = LlamaText(thought.suffix ?? "");
    const enabled = req.reasoning?.enabled ?? true;
    // What follows the closed section: a blank line for <think>-style templates; gpt-oss's next
    // message, which the engine writes itself (see harmony.ts); nothing for Gemma 4's, whose answer
    // follows `<channel|>` directly.
    const answerOpening = this.harmony?.answerOpening(modelMayCall);
    // (A suffix that already ends its line or paragraph, as Qwen 3's "\n</think>\n\n", gets only the rest.)
    const newlines = /\n*$/.exec(suffix.toString())![0].length;
    const layout = this.harmony || this.gemma4 ? LlamaText([]) : LlamaText(new SpecialTokensText("\n\n".slice(Math.min(newlines, 2))));
    const closed = [...LlamaText([prefix, suffix, layout]).tokenize(this.tokenizer), ...(answerOpening ?? [])];
    let promptSuffix = enabled ? prefix.tokenize(this.tokenizer) : closed;
    let startsInside = enabled;
    let closedInPrompt = !enabled;
    if (openTurn)
      ({ promptSuffix, startsInside, closedInPrompt } = this.afterOpenTurn(openTurn, thinkingSwitch(req), constrained, prefix, suffix, layout, closed));
    return {
      promptSuffix,
      answerOpening,
      plan: {
        open: prefix.toString().trim(),
        // The marker with the newline the template puts before it ("\n</think>"), so that newline
        // is not thinking; but not with the newlines after it ("\n</think>\n\n"): the closing
        // comes a token at a time ("\n", "</think>", "\n\n", as the forced close writes it), and
        // while the trailing newlines are still to come the plain "</think>" matched first, leaving
        // the leading newline in the thinking. The splitter drops newlines after a marker anyway.
        close: [...new Set([suffix.toString().replace(/\n+$/, ""), suffix.toString().trim()])],
        startsInside,
        closedInPrompt,
        budget: req.reasoning?.budgetTokens,
        closeTokens: LlamaText([suffix, layout]).tokenize(this.tokenizer),
        // Gemma 4's channel markers are never answer text (llama.cpp's parser reads the answer up to
        // them): an empty channel or a lone closing marker before the answer is nothing.
        ...(this.gemma4 ? { stray: [...new Set(this.thinkingMarkers.values())] } : {}),
      },
    };
  }

  /**
   * What goes after the template's own generation prompt, and whether generation starts inside the
   * thinking section. The template decides where it can: a section it opens stays open, one it
   * closes stays closed, and one it leaves to the model (Qwen 3's) is the model's to open, as
   * llama.cpp's server and vLLM leave it. Plinth opens the section itself only where the request
   * needs it and the template does not: thinking asked for on a model whose template would not
   * think (Granite's), or a thinking model whose answer is held to a grammar or a forced tool call
   * from its first token, which could never open the section on its own. Thinking turned off on a
   * template without a switch (DeepSeek R1's) closes the section it opened; after tool results,
   * where a template with a switch writes no open turn, nothing is added. `closedInPrompt`: the
   * prompt ends with the section closed (by the template or by Plinth), so the answer has none.
   */
  private afterOpenTurn(
    turn: OpenTurn,
    thinking: ThinkingSwitch,
    constrained: boolean,
    prefix: LlamaText,
    suffix: LlamaText,
    layout: LlamaText,
    closed: Token[],
  ): { promptSuffix: Token[]; startsInside: boolean; closedInPrompt: boolean } {
    const shut = { startsInside: false, closedInPrompt: true };
    if (thinking === "off") {
      if (turn.thinking === "closed") return { promptSuffix: [], ...shut };
      // The template leaves the section to the model here even with thinking off (Gemma 4's after
      // tool results): nothing is added, and a section the model opens is still its thinking.
      if (turn.final && turn.thinking === "none") return { promptSuffix: [], startsInside: false, closedInPrompt: false };
      if (turn.thinking === "opened") return { promptSuffix: LlamaText([suffix, layout]).tokenize(this.tokenizer), ...shut };
      // DeepSeek V3.1's template, turned off, writes nothing after tool results, as llama-server
      // renders it; an empty section there was text the model never saw.
      if (turn.templateSwitched) return { promptSuffix: [], ...shut };
      // A model that does not think unless asked, whose template never writes a section into its
      // turns (Granite 3.3's, whose markers are only words of the system prompt it adds when asked):
      // the template's generation prompt is the whole prompt, as llama.cpp's server renders it.
      if (!turn.thinksByDefault && !turn.writesSection) return { promptSuffix: [], ...shut };
      return { promptSuffix: closed, ...shut };
    }
    if (turn.thinking === "opened") return { promptSuffix: [], startsInside: true, closedInPrompt: false };
    if (turn.thinking === "closed" && thinking === "default") return { promptSuffix: [], ...shut };
    const open = constrained ? thinking === "on" || turn.thinksByDefault : thinking === "on" && !turn.thinksByDefault;
    if (open) return { promptSuffix: prefix.tokenize(this.tokenizer), startsInside: true, closedInPrompt: false };
    return { promptSuffix: [], startsInside: false, closedInPrompt: turn.thinking === "closed" };
  }

  /** The prompt text to report back (echo); token prompts are spelled by `spell`. */
  promptText(prompt: PromptInput, tokens: Token[], spell: (tokens: Token[]) => string): string {
    if (prompt.kind === "text") return prompt.text;
    if (prompt.kind === "infill") return prompt.prefix;
    return spell(tokens);
  }

  /** Refuses a token id outside the vocabulary, naming the field it came from. */
  checkToken(t: number, field: string): void {
    if (!Number.isInteger(t) || t < 0 || t >= this.vocabSize)
      throw invalidField(`{field} is token ${t}, which is outside the vocabulary (0..${this.vocabSize - 1}).`, field);
  }

  /**
   * What a template's stop triggers (node-llama-cpp's, read off the text after an assistant turn)
   * ask for. A trigger is a sequence, matched whole:
   *  - one token, given as special (`<|im_end|>`): a stop token;
   *  - up to an end-of-turn token (`</s>`, `<|eot_id|>`): the generation ends at that token anyway,
   *    and whatever follows it in the trigger is never reached (Zephyr's `</s>` + "\n"). Text
   *    before it is the template's turn ending (Llama 2's " " + `</s>`, Apriel's "\n" + `<|end|>`):
   *    cut from an answer that ends at the token right after it, and ordinary text anywhere else;
   *  - anything else: a text stop of its whole text, special tokens spelled out, so that it matches
   *    only where the whole sequence is written. Its text parts alone never become a stop (Llama 2's
   *    " " ended every answer at its first space).
   */
  private splitTriggers(triggers: readonly LlamaText[]): { stopTokens: Set<Token>; formatStops: string[]; formatEndings: string[] } {
    const stopTokens = new Set<Token>();
    const formatStops: string[] = [];
    const formatEndings: string[] = [];
    for (const trigger of triggers) {
      const only = trigger.values.length === 1 && (trigger.values[0] instanceof SpecialToken || trigger.values[0] instanceof SpecialTokensText);
      const tokens = only ? trigger.tokenize(this.tokenizer) : [];
      if (tokens.length === 1) {
        stopTokens.add(tokens[0]);
        continue;
      }
      const parts = this.triggerParts(trigger);
      const end = parts.findIndex((p) => typeof p !== "string" && this.model.isEogToken(p));
      if (end >= 0) {
        stopTokens.add(parts[end] as Token);
        const before = parts.slice(0, end);
        // Text with a control token in it (which adds no text to an answer) cannot be told in the answer.
        const text = before.every((p) => typeof p === "string") ? before.join("") : "";
        if (text && !formatEndings.includes(text)) formatEndings.push(text);
        continue;
      }
      const text = parts.map((p) => (typeof p === "string" ? p : this.model.detokenize([p], true))).join("");
      if (text && !formatStops.includes(text)) formatStops.push(text);
    }
    return { stopTokens, formatStops, formatEndings };
  }

  /**
   * A trigger as runs of text and the special tokens between them (control and end-of-generation
   * tokens, which add no text to an answer), each text as the template wrote it.
   */
  private triggerParts(trigger: LlamaText): Array<string | Token> {
    const parts: Array<string | Token> = [];
    const text = (t: string) => {
      if (!t) return;
      if (typeof parts.at(-1) === "string") parts[parts.length - 1] += t;
      else parts.push(t);
    };
    for (const value of trigger.values) {
      if (typeof value === "string") {
        text(value);
        continue;
      }
      const tokens = LlamaText(value).tokenize(this.tokenizer);
      if (value instanceof SpecialTokensText) {
        // The text between the special tokens is cut out of the value, as written (a tokenizer's
        // round trip could add or drop a space).
        let rest = value.value;
        for (const token of tokens) {
          if (!this.model.isSpecialToken(token)) continue;
          const spelled = this.model.detokenize([token], true);
          const at = spelled ? rest.indexOf(spelled) : -1;
          if (at < 0) continue;
          text(rest.slice(0, at));
          parts.push(token);
          rest = rest.slice(at + spelled.length);
        }
        text(rest);
      } else {
        for (const token of tokens) {
          if (this.model.isSpecialToken(token)) parts.push(token);
          else text(this.model.detokenize([token], false));
        }
      }
    }
    return parts;
  }
}

/** The template text a rendering ends with (its last special-token part), or "" when it ends with message text. */
function tailText(text: LlamaText): string {
  const values = text.values.filter((v) => v !== "");
  const last = values.at(-1);
  return last instanceof SpecialTokensText ? last.value : "";
}

/** UTF-8 bytes of a templated text's plain and special-token parts. */
function textBytes(text: LlamaText): number {
  let bytes = 0;
  for (const part of text.values) {
    if (typeof part === "string") bytes += Buffer.byteLength(part, "utf8");
    else if (part instanceof SpecialTokensText) bytes += Buffer.byteLength(part.value, "utf8");
  }
  return bytes;
}

/**
 * Whether the wrapper gives tool results to the template as `tool` messages (node-llama-cpp's
 * template path, set up by prepareToolRendering): then the client's text is passed as sent (see
 * toChatHistory).
 */
function handsResultsOver(wrapper: ChatWrapper): boolean {
  // (As does Mistral Nemo's layout, which writes the client's text as it is: mistral-wrapper.ts.)
  if (wrapper instanceof FaithfulMistralChatWrapper) return wrapper.callIds;
  return wrapper instanceof JinjaTemplateChatWrapper && wrapper.usingJinjaFunctionCallTemplate;
}

/** Whether a wrapper node-llama-cpp resolved stands in for the model's template (see the constructor). */
/**
 * Runs `resolve` (synchronous) with node-llama-cpp's "Error creating Jinja template chat wrapper"
 * message kept back instead of printed, when `hold`; returns what it would have printed.
 */
function holdingJinjaFailure<T>(hold: boolean, resolve: () => T): { value: T; held?: unknown[] } {
  if (!hold) return { value: resolve() };
  const print = console.error;
  let held: unknown[] | undefined;
  console.error = (...args: unknown[]) => {
    if (typeof args[0] === "string" && args[0].includes("Error creating Jinja template chat wrapper")) held = args;
    else print(...args);
  };
  try {
    return { value: resolve(), held };
  } finally {
    console.error = print;
  }
}

/** Whether a template writes Mistral's `[INST]` turns (Llama 2's write theirs with a `<<SYS>>` block). */
function writesMistralLayout(template: string | undefined): boolean {
  return !!template && template.includes("[INST]") && template.includes("[/INST]") && !template.includes("<<SYS>>");
}

function prefersOwnTemplate(wrapper: ChatWrapper): boolean {
  return !(wrapper instanceof JinjaTemplateChatWrapper) && !(wrapper instanceof HarmonyChatWrapper);
}

/** llama.cpp's token type for control tokens (tokenizer.ggml.token_type). */
const CONTROL_TOKEN = 3;

/** Conversations on which templates of one family part ways (see the constructor). */
const PROBES: ChatHistoryItem[][] = [
  [{ role: "user", content: "Hi" }],
  [{ role: "system", content: "A" }, { role: "user", content: "Hi" }],
  [{ role: "system", content: "A" }, { role: "system", content: "B" }, { role: "user", content: "" }],
  [{ role: "user", content: "Hi" }, { role: "assistant", content: "" }, { role: "user", content: "Again" }],
  [{ role: "user", content: "Hi" }, { role: "assistant", content: "Yo" }, { role: "system", content: "C" }, { role: "user", content: "Again" }],
  [{ role: "user", content: "Hi" }, { role: "assistant", content: "Yo" }],
].map((messages) => toChatHistory(messages as Message[]));

/** Whether two wrappers write the probe conversations alike (a leading BOS aside: it is settled later). */
function rendersAlike(a: ChatWrapper, b: ChatWrapper): boolean {
  const text = (w: ChatWrapper, chatHistory: ChatHistoryItem[]) => {
    const values = w.generateContextState({ chatHistory }).contextText.values;
    const first = values[0];
    return LlamaText(first instanceof SpecialToken && first.value === "BOS" ? values.slice(1) : values).toString();
  };
  try {
    return PROBES.every((chatHistory) => text(a, chatHistory) === text(b, chatHistory));
  } catch {
    return false;
  }
}

/**
 * The model's Jinja template as a wrapper (undefined when it has none or node-llama-cpp cannot run
 * it), and whether system messages are to be merged into the next message for it (system-messages.ts).
 */
function ownTemplateWrapper(model: LlamaModel, settings: Partial<JinjaTemplateChatWrapperOptions>): { wrapper?: ChatWrapper; mergesSystem?: boolean } {
  const template = model.fileInfo.metadata?.tokenizer?.chat_template;
  if (typeof template !== "string" || template.trim() === "") return {};
  const build = (extra: Partial<JinjaTemplateChatWrapperOptions> = {}) => new JinjaTemplateChatWrapper({ ...settings, ...extra, template, tokenizer: model.tokenizer });
  try {
    return { wrapper: build() };
  } catch {
    // A template that loops over `tools` without asking whether there are any (Hermes 3's tool-use
    // one) fails node-llama-cpp's checks: its Jinja engine refuses to loop over an undefined value,
    // where llama.cpp's loops over nothing. An empty list stands in when a request brings no tools.
    try {
      return { wrapper: build({ additionalRenderParameters: { ...settings.additionalRenderParameters, tools: [] } }) };
    } catch {
      const merging = systemMergingWrapper(build);
      return merging ? { wrapper: merging, mergesSystem: true } : {};
    }
  }
}

/** A call, its result and an answer, rendered once to check a layout given to a template. */
const LAYOUT_PROBE: ChatHistoryItem[] = toChatHistory([
  { role: "user", content: "Weather?" },
  { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "probe_weather", arguments: '{"city": "Paris"}' }] },
  { role: "tool", content: '{"temp": 20}', toolCallId: "call_1" },
  { role: "assistant", content: "20." },
  { role: "user", content: "Thanks" },
] as Message[], { rawResults: true });
const LAYOUT_PROBE_FUNCTIONS: ChatModelFunctions = {
  probe_weather: { description: "Weather of a city", params: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};

/**
 * The wrapper's rendering of a conversation. A template may refuse one (Mistral's raise an error
 * when roles do not alternate): that is the request's fault, a 400, as llama.cpp's server answers.
 */
function renderTemplate(wrapper: ChatWrapper, chatHistory: ChatHistoryItem[], functions: ChatModelFunctions | undefined) {
  try {
    return wrapper.generateContextState({ chatHistory, availableFunctions: functions });
  } catch (err) {
    // Tools a template does not document itself are described in a system message of their own,
    // after the client's; a template that allows one system message (Mistral Small's) refuses that
    // pair. The description then goes at the end of the client's system message instead.
    const merged = functions && Object.keys(functions).length > 0 ? withFunctionsInSystem(wrapper, chatHistory, functions) : undefined;
    if (merged) {
      try {
        return wrapper.generateContextState({ chatHistory: merged });
      } catch {
        // The first refusal is the one to report.
      }
    }
    // A template that takes one system message and leaves out or refuses later ones (DeepSeek R1's,
    // MiniMax's): those go in as user turns marked as system messages, the leading one stays.
    const demoted = laterSystemMessagesAsUser(merged ?? chatHistory);
    if (demoted) {
      try {
        return wrapper.generateContextState({ chatHistory: demoted, availableFunctions: merged ? undefined : functions });
      } catch {
        // As above.
      }
    }
    const reason = err instanceof Error ? err.message : String(err);
    throw invalidField(`The model's chat template cannot render these messages: ${reason}`, "prompt");
  }
}

/** The history with every system message but a first one rewritten as a marked user turn, if it has any. */
function laterSystemMessagesAsUser(history: ChatHistoryItem[]): ChatHistoryItem[] | undefined {
  if (!history.some((item, i) => i > 0 && item.type === "system")) return undefined;
  return history.map((item, i): ChatHistoryItem => {
    if (item.type !== "system" || i === 0) return item;
    return { type: "user", text: `### System message\n\n${LlamaText.fromJSON(item.text).toString()}\n\n----` };
  });
}

/** The history with the functions' description in its leading system message, one of its own where it has none. */
function withFunctionsDescribed(wrapper: ChatWrapper, history: ChatHistoryItem[], functions: ChatModelFunctions): ChatHistoryItem[] {
  const description = wrapper.generateAvailableFunctionsSystemText(functions, { documentParams: true });
  return withFunctionsInSystem(wrapper, history, functions) ?? [{ type: "system", text: description.toJSON() }, ...history];
}

/** The history with the functions' description appended to its leading system message, if it has one. */
function withFunctionsInSystem(wrapper: ChatWrapper, history: ChatHistoryItem[], functions: ChatModelFunctions): ChatHistoryItem[] | undefined {
  const first = history[0];
  if (first?.type !== "system") return undefined;
  const description = wrapper.generateAvailableFunctionsSystemText(functions, { documentParams: true });
  const text = LlamaText([LlamaText.fromJSON(first.text), "\n\n", description]);
  return [{ type: "system", text: text.toJSON() }, ...history.slice(1)];
}

/** Whether a chat prompt ends with an assistant message the model is to continue. */
function prefilled(prompt: PromptInput): boolean {
  if (prompt.kind !== "chat") return false;
  const last = prompt.messages.at(-1);
  return last?.role === "assistant" && (!!last.content || !!last.toolCalls?.length);
}

/** How a request sets the template's thinking switch: turned off, asked for (also by an effort or a budget), or left alone. */
function thinkingSwitch(req: GenerationRequest): ThinkingSwitch {
  if (req.reasoning === undefined) return "default";
  return req.reasoning.enabled === false ? "off" : "on";
}

/**
 * A wrapper's thinking markers as plain text ("<think>", "</think>"), when it has both. A section
 * node-llama-cpp finds opened on the response's start has no opening marker of its own: GLM 4.5/4.6's
 * template writes "\n<think>" into every assistant turn, so node-llama-cpp counts it as part of the
 * turn. Its opening is then taken from a closing tag ("</think>" → "<think>"), if the template writes it.
 */
function thinkingMarkers(wrapper: ChatWrapper, template: string | undefined): { open: string; close: string } | undefined {
  const thought = wrapper.settings.segments?.thought;
  const close = plainText(thought?.suffix)?.trim();
  if (!close) return undefined;
  const openedOnStart = opensOnStart(thought);
  const tag = openedOnStart ? /^<\/([^<>\s/]+)>$/.exec(close)?.[1] : undefined;
  const open = openedOnStart ? (tag && template?.includes(`<${tag}>`) ? `<${tag}>` : undefined) : plainText(thought?.prefix)?.trim();
  return open ? { open, close } : undefined;
}

/** Whether node-llama-cpp finds the thinking section opened on the response's start (no opening marker of its own). */
function opensOnStart(thought: NonNullable<ChatWrapperSettings["segments"]>["thought"]): boolean {
  const prefix = thought?.prefix;
  return typeof prefix === "object" && !(prefix instanceof LlamaText) && "type" in prefix;
}

/** A segment's plain text (a prefix or suffix given as text or LlamaText), or undefined. */
function plainText(part: unknown): string | undefined {
  if (typeof part === "string") return part;
  if (part instanceof LlamaText) return part.values.map((v) => (typeof v === "string" ? v : v instanceof SpecialTokensText ? v.value : "")).join("");
  return undefined;
}

/** A date as llama.cpp passes it to templates (`date_string`): "02 Dec 2026". */
function dateString(day: Date): string {
  const month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][day.getUTCMonth()];
  return `${String(day.getUTCDate()).padStart(2, "0")} ${month} ${day.getUTCFullYear()}`;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
