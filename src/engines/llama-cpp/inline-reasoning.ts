import { Template } from "@huggingface/jinja";
import type { Message } from "../../core/types.ts";

/**
 * Reasoning a client sends back inside an answer's text (`<think>…</think>4`, as clients that keep
 * a thinking model's raw output do), cut where the model's template cuts it.
 *
 * Thinking templates cut it themselves (`content.split('</think>')[-1]`: DeepSeek R1 and V3.1, GLM,
 * MiniMax M2, MiniCPM5, LFM2.5), but node-llama-cpp gives the template a placeholder for each
 * message's text and puts the text back after rendering, so the cut never happened: the old
 * reasoning reached the model on every later turn (the real DeepSeek R1 distill template: 99 prompt
 * tokens where llama-server's rendering has 84). Which answers a template cuts depends on where
 * they stand (R1 keeps an answer right after tool output, V3.1 cuts plain answers only, GLM and
 * MiniMax keep the tool loop after the last user message), so the template is asked: the
 * conversation is rendered once with probe texts, and an answer whose probe reasoning does not come
 * out is cut the same way before the real rendering.
 */
export class InlineReasoningCut {
  private readonly compiled: Template | undefined;
  /** `split('</think>', 1)`: the answer is what follows the first marker (else the last). */
  private readonly afterFirst: boolean;

  private constructor(template: string) {
    this.afterFirst = /split\(\s*(['"])<\/think>\1\s*,\s*1\s*\)/.test(template);
    let compiled: Template | undefined;
    try {
      compiled = new Template(template);
    } catch {
      compiled = undefined;
    }
    this.compiled = compiled;
  }

  /** For a template that cuts reasoning out of answers' text (`split('</think>')`), else undefined. */
  static of(template: string | undefined): InlineReasoningCut | undefined {
    if (!template || !/split\(\s*(['"])<\/think>\1\s*(,\s*1\s*)?\)/.test(template)) return undefined;
    const cut = new InlineReasoningCut(template);
    return cut.compiled ? cut : undefined;
  }

  /**
   * The messages with each answer the template would cut cut as it would: the text after the
   * marker, with the blank lines it drops around it. A last assistant message (a prefill the model
   * continues) is left as the client wrote it.
   */
  apply(messages: Message[]): Message[] {
    const candidates = messages.flatMap((m, i) => (m.role === "assistant" && i < messages.length - 1 && m.content.includes("</think>") ? [i] : []));
    if (candidates.length === 0) return messages;
    const rendered = this.probe(messages);
    if (rendered === undefined) return messages;
    let changed = false;
    const out = messages.map((m, i) => {
      if (!candidates.includes(i) || rendered.includes(reasoningProbe(i)) || !rendered.includes(answerProbe(i))) return m;
      const at = this.afterFirst ? m.content.indexOf("</think>") : m.content.lastIndexOf("</think>");
      let answer = m.content.slice(at + "</think>".length);
      // What the template did to the blanks around the probe answer (`\n\n A \n\n`): kept them,
      // dropped the newlines only (`strip('\n')`), or every blank (`| trim`, `.strip()`).
      const a = answerProbe(i);
      if (!rendered.includes(`\n\n ${a}`)) answer = rendered.includes(` ${a}`) ? answer.replace(/^\n+/, "") : answer.trimStart();
      if (!rendered.includes(`${a} \n\n`)) answer = rendered.includes(`${a} `) ? answer.replace(/\n+$/, "") : answer.trimEnd();
      changed = true;
      return { ...m, content: answer };
    });
    return changed ? out : messages;
  }

  /** The template's rendering of the conversation's shape with probe texts; undefined if it refuses. */
  private probe(messages: Message[]): string | undefined {
    const wire = messages.map((m, i) => {
      switch (m.role) {
        case "assistant": {
          const content = m.content.includes("</think>") ? `<think>\n${reasoningProbe(i)}\n</think>\n\n ${answerProbe(i)} \n\n` : answerProbe(i);
          const calls = (m.toolCalls ?? []).map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: argumentsOf(c.arguments) } }));
          return calls.length > 0 ? { role: "assistant", content, tool_calls: calls } : { role: "assistant", content };
        }
        case "tool":
          return { role: "tool", tool_call_id: m.toolCallId, content: `PLINTH_PROBE_T${i}` };
        default:
          return { role: m.role, content: `PLINTH_PROBE_M${i}` };
      }
    });
    try {
      return this.compiled!.render({ messages: wire, add_generation_prompt: true, bos_token: "", eos_token: "" });
    } catch {
      return undefined;
    }
  }
}

const reasoningProbe = (i: number) => `PLINTH_PROBE_R${i}_`;
const answerProbe = (i: number) => `PLINTH_PROBE_A${i}_`;

function argumentsOf(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}
