import { Template } from "@huggingface/jinja";
import type { Message } from "../../core/types.ts";

/**
 * The roles whose text a chat template trims (`message['content'] | trim`: Gemma 2 and 4, GLM,
 * Command R+). node-llama-cpp gives the template a placeholder for each message's text and puts the
 * text back after rendering, so the template's trim never reached the text: a user message ending
 * in a newline, or an answer opening with blank lines, went to the model as typed (Gemma 4: 51
 * prompt tokens where llama-server's rendering has 39). Found once per template by rendering a probe
 * conversation whose texts are wrapped in blanks and seeing which come out without them.
 */
export function trimmedRoles(template: string | undefined): ReadonlySet<string> {
  const roles = new Set<string>();
  if (!template) return roles;
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch {
    return roles;
  }
  const padded = (role: string) => `\n\n PLINTH_TRIM_PROBE_${role.toUpperCase()} \n\n`;
  const probe = (messages: Array<{ role: string }>) => {
    try {
      return compiled.render({ messages: messages.map((m) => ({ ...m, content: padded(m.role) })), add_generation_prompt: true, bos_token: "", eos_token: "" });
    } catch {
      return undefined; // a template that refuses the probe (a system role, say) says nothing
    }
  };
  const outputs = [probe([{ role: "user" }, { role: "assistant" }, { role: "user" }]), probe([{ role: "system" }, { role: "user" }])];
  for (const role of ["system", "user", "assistant"]) {
    const bare = `PLINTH_TRIM_PROBE_${role.toUpperCase()}`;
    const seen = outputs.filter((o): o is string => o !== undefined && o.includes(bare));
    // Trimmed only if every rendering shows the text without its blanks on either side.
    if (seen.length > 0 && seen.every((o) => !o.includes(padded(role)) && !o.includes(` ${bare}`) && !o.includes(`${bare} `))) roles.add(role);
  }
  return roles;
}

/** The messages with the text of each trimmed role trimmed, as the template would have. */
export function withTrimmedTexts(messages: Message[], roles: ReadonlySet<string>): Message[] {
  if (roles.size === 0) return messages;
  let changed = false;
  const out = messages.map((m) => {
    if (!roles.has(m.role) || typeof m.content !== "string") return m;
    const trimmed = m.content.trim();
    if (trimmed === m.content) return m;
    changed = true;
    return { ...m, content: trimmed };
  });
  return changed ? out : messages;
}
