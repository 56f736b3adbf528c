import { Template } from "@huggingface/jinja";
import type { Message } from "../../core/types.ts";

/** Which ends of a message's text a template trims. */
interface Ends {
  start: boolean;
  end: boolean;
}

const UNTRIMMED: Ends = Object.freeze({ start: false, end: false });

// A probe text's blanks. A template that trims the text (`| trim`, `.strip()`) drops all of them; one
// that keeps them, or drops only some (`.lstrip('\n')`), leaves the tab next to the text.
const LEAD = "\n \t";
const TRAIL = "\t \n";

/** Conversation shapes whose trimming is remembered (see MessageTrim). */
const MAX_SHAPES = 256;

/**
 * How a chat template trims message texts (`message['content'] | trim`: Gemma 2 and 4, GLM,
 * Command R+; `content.strip()`: Llama 2). node-llama-cpp gives the template a placeholder for each
 * message's text and puts the text back after rendering, so the template's trim never reached the
 * text: a user message ending in a newline, or an answer opening with blanks, went to the model as
 * typed (Gemma 4: 51 prompt tokens where llama-server's rendering has 39). Plinth trims the texts
 * itself before rendering, as the template would have.
 *
 * What a template trims can depend on the conversation: Llama 2's strips the first user message
 * together with the system message it writes in front of it, so that message loses only its
 * trailing blanks, and every later one both. So the template renders the conversation's own shape
 * (its roles, in order) once, with probe texts wrapped in blanks, and each message is trimmed at
 * the ends its probe text came out without them. A conversation the probe cannot stand for (tool
 * calls and results, which the template reads in its own layout) or that the template refuses with
 * probe texts falls back to the roles found trimmed in every one of two fixed probe conversations.
 */
export class MessageTrim {
  /** By shape (the roles joined); null where the probe failed. */
  private readonly shapes = new Map<string, readonly Ends[] | null>();
  private readonly byRole: ReadonlyMap<string, Ends>;

  private constructor(private readonly template: Template) {
    this.byRole = this.roleLevel();
  }

  /** The template's trimming, or undefined for a template that trims nothing (or cannot be read). */
  static of(template: string | undefined): MessageTrim | undefined {
    if (!template || !/\b(?:trim|strip|lstrip|rstrip)\b/.test(template)) return undefined;
    try {
      return new MessageTrim(new Template(template));
    } catch {
      return undefined;
    }
  }

  /** The messages with their texts trimmed as the template would have trimmed them. */
  apply(messages: Message[]): Message[] {
    const ends = this.endsFor(messages);
    let changed = false;
    const out = messages.map((m, i) => {
      const { start, end } = ends(m, i);
      if ((!start && !end) || typeof m.content !== "string") return m;
      const trimmed = start && end ? m.content.trim() : start ? m.content.trimStart() : m.content.trimEnd();
      if (trimmed === m.content) return m;
      changed = true;
      return { ...m, content: trimmed };
    });
    return changed ? out : messages;
  }

  private endsFor(messages: Message[]): (m: Message, i: number) => Ends {
    const plain = messages.every((m) => (m.role === "system" || m.role === "user" || m.role === "assistant") && !m.toolCalls?.length);
    const shape = plain ? this.shape(messages.map((m) => m.role)) : null;
    if (shape) return (_m, i) => shape[i];
    return (m) => this.byRole.get(m.role) ?? UNTRIMMED;
  }

  private shape(roles: string[]): readonly Ends[] | null {
    const key = roles.join(",");
    let found = this.shapes.get(key);
    if (found === undefined) {
      found = this.probe(roles)?.map((ends) => ends ?? UNTRIMMED) ?? null;
      if (this.shapes.size >= MAX_SHAPES) this.shapes.delete(this.shapes.keys().next().value!);
      this.shapes.set(key, found);
    }
    return found;
  }

  /**
   * What the template trims of each message of a conversation with these roles (undefined for a
   * message it does not show); null if it refuses the probe.
   */
  private probe(roles: readonly string[]): Array<Ends | undefined> | null {
    const bare = roles.map((role, i) => `PLINTH_TRIM_PROBE_${i}_${role.toUpperCase()}`);
    const messages = roles.map((role, i) => ({ role, content: `${LEAD}${bare[i]}${TRAIL}` }));
    const render = (extra: object) => this.template.render({ messages, add_generation_prompt: true, bos_token: "", eos_token: "", ...extra });
    let output: string;
    try {
      output = render({});
    } catch {
      // A template that loops over `tools` without asking whether there are any (Command R+'s
      // tool_use one) refuses a conversation without them; the engine renders it with an empty
      // list then (ownTemplateWrapper), and so is it probed.
      try {
        output = render({ tools: [] });
      } catch {
        return null;
      }
    }
    return bare.map((text) => endsIn(output, text));
  }

  /**
   * Per role, the ends trimmed in every fixed probe conversation that shows the role's text: for
   * conversations whose shape cannot be probed.
   */
  private roleLevel(): Map<string, Ends> {
    const probes = [
      ["user", "assistant", "user"],
      ["system", "user"],
    ];
    const seen = new Map<string, Ends>();
    for (const roles of probes) {
      const ends = this.probe(roles);
      if (!ends) continue; // a template that refuses the probe (a system role, say) says nothing
      roles.forEach((role, i) => {
        const shown = ends[i];
        if (!shown) return;
        const before = seen.get(role);
        seen.set(role, before ? { start: before.start && shown.start, end: before.end && shown.end } : shown);
      });
    }
    return seen;
  }
}

/** Which of the blanks around `text` the output dropped, wherever it shows it; undefined where it does not. */
function endsIn(output: string, text: string): Ends | undefined {
  let at = output.indexOf(text);
  if (at < 0) return undefined;
  const ends = { start: true, end: true };
  for (; at >= 0; at = output.indexOf(text, at + text.length)) {
    if (output[at - 1] === "\t") ends.start = false;
    if (output[at + text.length] === "\t") ends.end = false;
  }
  return ends;
}
