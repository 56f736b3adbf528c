import { type ChatHistoryItem, type JinjaTemplateChatWrapper, type JinjaTemplateChatWrapperOptions, LlamaText } from "node-llama-cpp";

// How a model's own template takes system messages, found by rendering the template itself (not
// through node-llama-cpp, which hands every message to the template as a placeholder and so hides
// what the template does with an empty one), and what Plinth does about it before rendering.
//
// - A template that writes a system message only when it has content (Phi 3.5's
//   `if message['role'] == 'system' and message['content']`) got an empty system turn from
//   node-llama-cpp, where llama-server and vLLM write none: such an empty message is left out.
// - A template that refuses a system role (Gemma 2's `raise_exception('System role not supported')`)
//   could not be run by node-llama-cpp at all, and the model got node-llama-cpp's Gemma wrapper,
//   which joins system and user text with "\n\n---\n\n" and drops empty turns. llama.cpp's server
//   merges the leading system message into the message after it, joined by "\n"; Plinth does the same
//   for every system message, so the template renders the conversation.

/** Renders the template as llama.cpp's server does (message contents as they are), or throws. */
function renderDirect(wrapper: JinjaTemplateChatWrapper, messages: { role: string; content: string }[]): string {
  const jinja = (wrapper as unknown as { _jinjaTemplate?: { render(params: object): string } })._jinjaTemplate;
  if (typeof jinja?.render !== "function") throw new Error("no Jinja renderer");
  return jinja.render({
    ...(wrapper.additionalRenderParameters ? structuredClone(wrapper.additionalRenderParameters) : {}),
    messages,
    bos_token: "",
    eos_token: "",
    eot_token: "",
    add_generation_prompt: true,
  });
}

const PROBE_USER = { role: "user", content: "Plinth probe 51c2: a user message" };

/** Whether the template writes nothing for an empty leading system message (false where it cannot tell). */
export function leavesOutEmptySystem(wrapper: JinjaTemplateChatWrapper): boolean {
  try {
    return renderDirect(wrapper, [{ role: "system", content: "" }, PROBE_USER]) === renderDirect(wrapper, [PROBE_USER]);
  } catch {
    return false;
  }
}

/** Whether the template refuses a system message, but renders the same conversation without one. */
function refusesSystemRole(wrapper: JinjaTemplateChatWrapper): boolean {
  try {
    renderDirect(wrapper, [PROBE_USER]);
  } catch {
    return false;
  }
  try {
    renderDirect(wrapper, [{ role: "system", content: "Plinth probe 51c2: a system message" }, PROBE_USER]);
    return false;
  } catch {
    return true;
  }
}

/**
 * The model's template as a wrapper for a template that refuses a system role, or undefined when the
 * template refuses something else. node-llama-cpp's load-time check renders a system message, which
 * such a template refuses: it passes when system messages may become user turns joined to the next
 * one, which is how it is built. Plinth merges system messages before rendering (mergeSystemMessages),
 * so that conversion never writes anything; adjacent messages of one role, which these templates
 * refuse (Gemma 2's roles must alternate), are joined with a blank line, as node-llama-cpp's own
 * Gemma wrapper joined them, where llama-server answers 400.
 */
export function systemMergingWrapper(
  build: (extra: Partial<JinjaTemplateChatWrapperOptions>) => JinjaTemplateChatWrapper,
): JinjaTemplateChatWrapper | undefined {
  try {
    const wrapper = build({ convertUnsupportedSystemMessagesToUserMessages: { format: "{{message}}", use: "ifNeeded" }, joinAdjacentMessagesOfTheSameType: true });
    return refusesSystemRole(wrapper) ? wrapper : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The history with each system message merged into the message after it, "\n" between, as llama.cpp's
 * server merges a leading one (`system_message_not_supported`; it then refuses later ones, with the
 * template's error). A system message with nothing after it becomes a user turn of its own.
 */
export function mergeSystemMessages(history: ChatHistoryItem[]): ChatHistoryItem[] {
  const merged: ChatHistoryItem[] = [];
  let pending: string | undefined;
  for (const item of history) {
    if (item.type === "system") {
      // An empty one adds nothing: llama.cpp's "\n" before the next message is trimmed by the
      // templates that refuse a system role (Gemma 2's `content | trim`), which node-llama-cpp's
      // rendering cannot do (it hands contents over as placeholders).
      const text = LlamaText.fromJSON(item.text).toString();
      if (text !== "") pending = pending === undefined ? text : `${pending}\n${text}`;
      continue;
    }
    if (pending === undefined) {
      merged.push(item);
      continue;
    }
    if (item.type === "user") merged.push({ type: "user", text: `${pending}\n${item.text}` });
    else {
      const [first, ...rest] = item.response;
      // The open turn (an empty response) is not a message: the system text goes in as a user turn.
      if (first === undefined) merged.push({ type: "user", text: pending }, item);
      else merged.push({ ...item, response: typeof first === "string" ? [`${pending}\n${first}`, ...rest] : [`${pending}\n`, first, ...rest] });
    }
    pending = undefined;
  }
  if (pending !== undefined) merged.push({ type: "user", text: pending });
  return merged;
}

/** The history without an empty leading system message (for a template that writes none for it). */
export function withoutEmptyLeadingSystem(history: ChatHistoryItem[]): ChatHistoryItem[] {
  const first = history[0];
  return first?.type === "system" && LlamaText.fromJSON(first.text).toString() === "" ? history.slice(1) : history;
}
