import type { Message } from "../../core/types.ts";

/**
 * Reasoning a client sends back inside an earlier answer's text (`<think>…</think>4`, as clients that
 * keep a thinking model's raw output do), left out as the model's template leaves it out.
 *
 * Thinking templates cut it themselves (`content.split('</think>')[-1]`, DeepSeek R1, V3.1, V4, GLM,
 * MiniMax, MiniCPM5, Qwen 3), but node-llama-cpp gives the template a placeholder for each message's
 * text and puts the text back after rendering, so the cut never happened: the old reasoning reached
 * the model on every later turn (the real DeepSeek R1 distill template: 99 prompt tokens where
 * llama-server's rendering has 84), and the README's "earlier turns' reasoning is not re-rendered"
 * did not hold for it. This does the template's cut on the text before rendering.
 */
export function cutsInlineReasoning(template: string | undefined): InlineReasoningCut | undefined {
  if (!template) return undefined;
  // The template reads the text after the closing marker: `split('</think>')` (either quote), or
  // DeepSeek V3.1's `split('</think>', 1)`.
  if (!/split\(\s*(['"])<\/think>\1\s*(,\s*1\s*)?\)/.test(template)) return undefined;
  return { trimNewlines: /l?strip\(\s*(['"])\\n\1\s*\)/.test(template) };
}

export interface InlineReasoningCut {
  /** The template drops the newlines that open the answer after the marker (`.lstrip('\n')`, Qwen 3; `.strip('\n')`). */
  trimNewlines: boolean;
}

/**
 * The messages with each earlier answer's text cut after its last `</think>`: answers before the
 * last user message that call no tools. The turns of the tool loop under way (after the last user
 * message: GLM, MiniMax M2, MiniCPM5 and LFM2.5 keep their thinking), a turn that calls tools
 * (DeepSeek V3.1 cuts only plain answers) and a last assistant message (a prefill the model
 * continues) are left as the client wrote them.
 */
export function withoutInlineReasoning(messages: Message[], cut: InlineReasoningCut): Message[] {
  let lastUser = -1;
  messages.forEach((m, i) => {
    if (m.role === "user") lastUser = i;
  });
  let changed = false;
  const out = messages.map((m, i) => {
    if (m.role !== "assistant" || i > lastUser || (m.toolCalls?.length ?? 0) > 0 || typeof m.content !== "string") return m;
    const at = m.content.lastIndexOf("</think>");
    if (at < 0) return m;
    let answer = m.content.slice(at + "</think>".length);
    if (cut.trimNewlines) answer = answer.replace(/^\n+/, "");
    changed = true;
    return { ...m, content: answer };
  });
  return changed ? out : messages;
}
