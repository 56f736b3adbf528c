import type { JinjaTemplateChatWrapper } from "node-llama-cpp";

// Tool results a template writes as JSON strings (Command R7B's `tool_msg.content|tojson`, Cohere2
// MoE's `{"content": tool_msg.content}|tojson`).
//
// node-llama-cpp hands the template a placeholder for each message's text and puts the text back
// after rendering, so that text never reads as control tokens. `tojson` then quotes the
// placeholder, not the text: a result came out as `"{"temp_c": 21}"`, where Python's Jinja (and
// llama.cpp's server) writes the JSON string `"{\"temp_c\": 21}"`. For a template that writes
// results only that way, each result's text is handed over already escaped as a JSON string's
// body, so that what lands between the quotes is what `tojson` would have written.

type Render = (params: Record<string, unknown>) => string;

/** A result text no template writes by chance, with a quote that `tojson` escapes. */
const PROBE = 'plinth-probe-7Hq2"result';

/**
 * Whether `render` writes a `tool` message's content only as a JSON string (escaped, between
 * quotes), never as it is: a short conversation with an answered call is rendered, and the probe
 * result must show up escaped and nowhere raw. A template that does not render it is left alone.
 */
export function writesResultsAsJsonStrings(render: Render): boolean {
  const call = { id: "call_1", type: "function", function: { name: "probe", arguments: {} } };
  const tool = { type: "function", function: { name: "probe", description: "", parameters: { type: "object", properties: {} } } };
  let text: string;
  try {
    text = render({
      messages: [
        { role: "user", content: "Hi" },
        { role: "assistant", content: "", tool_calls: [call] },
        { role: "tool", tool_call_id: "call_1", content: PROBE },
      ],
      tools: [tool],
      bos_token: "",
      eos_token: "",
      add_generation_prompt: true,
    });
  } catch {
    return false;
  }
  return text.includes(JSON.stringify(PROBE)) && !text.includes(PROBE);
}

/** The body of `text` as a JSON string (what `tojson` writes, less the quotes around it). */
export function jsonStringBody(text: string): string {
  return JSON.stringify(text).slice(1, -1);
}

/**
 * Makes `wrapper` hand each tool result that is text to its template as a JSON string's body (see
 * above). Results that are values are left alone: the template writes those with tojson itself.
 */
export function escapeResultsAsJsonStrings(wrapper: JinjaTemplateChatWrapper): void {
  const generate = wrapper.generateContextState.bind(wrapper);
  wrapper.generateContextState = (options) => {
    const chatHistory = options.chatHistory.map((item) => {
      if (item.type !== "model") return item;
      const response = item.response.map((r) => (typeof r === "object" && r.type === "functionCall" && typeof r.result === "string" ? { ...r, result: jsonStringBody(r.result) } : r));
      return { ...item, response };
    });
    return generate({ ...options, chatHistory });
  };
}
