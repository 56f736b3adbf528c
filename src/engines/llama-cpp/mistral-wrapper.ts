import { createHash } from "node:crypto";
import { Template } from "@huggingface/jinja";
import {
  type ChatHistoryItem,
  type ChatModelFunctionCall,
  type ChatModelResponse,
  type ChatWrapperGenerateContextStateOptions,
  type ChatWrapperGeneratedContextState,
  LlamaText,
  MistralChatWrapper,
  SpecialToken,
  SpecialTokensText,
} from "node-llama-cpp";
import type { ClientCallId } from "./chat-history.ts";

/**
 * node-llama-cpp's Mistral wrapper, which a model keeps when node-llama-cpp cannot run its template
 * (Mistral Nemo's writes the system message into the last user turn only, which node-llama-cpp's
 * load-time check does not accept), writing an empty system message as the template does. The
 * template writes `[INST]` + system + "\n\n" + user whenever the conversation opens with a system
 * message, empty or not (llama-server: `[INST]\n\nHi[/INST]`); the wrapper left an empty one out.
 *
 * With `callIds` (a template that writes Mistral Nemo's calls, see writesNemoCallIds), tool calls
 * and results are written as that template writes them rather than as node-llama-cpp's wrapper
 * does: each call `{"name": …, "arguments": …, "id": "<9 letters or digits>"}` in the
 * `[TOOL_CALLS][…]</s>` list, each result `[TOOL_RESULTS]{"content": <the client's text>,
 * "call_id": "<id>"}[/TOOL_RESULTS]`, and the text an assistant message has beside its calls left
 * out. The ids are the client's where they already have the template's shape (Nemo writes such
 * ids itself, and they are handed to the client as the calls' ids), others mapped to that shape
 * (nemoCallIds).
 */
export class FaithfulMistralChatWrapper extends MistralChatWrapper {
  readonly callIds: boolean;
  /** The ids of the conversation being rendered, by call (set for one render). */
  private ids = new Map<ChatModelFunctionCall, string>();

  constructor(options: { callIds?: boolean } = {}) {
    super();
    this.callIds = options.callIds === true;
  }

  override generateContextState(options: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState {
    if (!this.callIds) return this.withEmptySystem(options);
    this.ids = nemoCallIds(options.chatHistory);
    try {
      return this.withEmptySystem(options);
    } finally {
      this.ids = new Map();
    }
  }

  override generateModelResponseText(modelResponse: ChatModelResponse["response"], useRawValues?: boolean): LlamaText {
    if (!this.callIds || !modelResponse.some((r) => typeof r === "object" && r.type === "functionCall"))
      return super.generateModelResponseText(modelResponse, useRawValues);
    const out: Array<LlamaText | string | SpecialTokensText | SpecialToken> = [];
    let text: string[] = [];
    let group: ChatModelFunctionCall[] = [];
    const flushGroup = () => {
      if (group.length === 0) return;
      out.push(new SpecialTokensText("[TOOL_CALLS]"), "[");
      group.forEach((call, k) => {
        if (k > 0) out.push(", ");
        const written = FUNCTION_JSON.render({ f: { name: call.name, arguments: call.params ?? {} } });
        out.push(written.slice(0, -1) + `, "id": "${this.idOf(call, k)}"}`);
      });
      out.push("]", new SpecialToken("EOS"));
      for (const [k, call] of group.entries()) {
        if (call.result === undefined) continue;
        const content = typeof call.result === "string" ? call.result : JSON.stringify(call.result);
        out.push(new SpecialTokensText("[TOOL_RESULTS]"), `{"content": ${content}, "call_id": "${this.idOf(call, k)}"}`, new SpecialTokensText("[/TOOL_RESULTS]"));
      }
      group = [];
    };
    for (const item of modelResponse) {
      if (typeof item === "string") {
        flushGroup();
        text.push(item);
      } else if (item.type === "functionCall") {
        if (item.startsNewChunk !== false || group.length === 0) {
          flushGroup();
          // The text of a message that calls tools: the template leaves it out.
          text = [];
        }
        group.push(item);
      } else {
        flushGroup();
      }
    }
    flushGroup();
    // Text after the last calls' results is the answer, written as the template writes it.
    if (text.length > 0) out.push(text.join(""));
    return LlamaText(out);
  }

  private idOf(call: ChatModelFunctionCall, k: number): string {
    return this.ids.get(call) ?? nemoCallId((call as ClientCallId).plinthCallId ?? `plinth-call-${k}`, new Set());
  }

  private withEmptySystem(options: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState {
    const [first, ...rest] = options.chatHistory;
    // (Several leading system messages are joined by the wrapper; the template refuses them anyway.)
    const empty = first?.type === "system" && LlamaText.fromJSON(first.text).values.length === 0 && rest[0]?.type !== "system";
    if (!empty) return super.generateContextState(options);
    const state = super.generateContextState({ ...options, chatHistory: rest });
    // The system message goes right after the last turn's [INST], where the wrapper writes a non-empty one.
    const values = [...state.contextText.values];
    let at = values.length - 1;
    while (at >= 0 && !(values[at] instanceof SpecialTokensText && (values[at] as SpecialTokensText).value.endsWith("[INST]"))) at--;
    if (at === -1) return state;
    values.splice(at + 1, 0, "\n\n");
    return { ...state, contextText: LlamaText(values) };
  }
}

/** `tojson` as the template writes a call's `function` (Python's separators, its key order). */
const FUNCTION_JSON = new Template("{{ f|tojson }}");

/** Whether a template writes Mistral Nemo's calls: a `[TOOL_CALLS][…]` JSON list with ids, results by `call_id`. */
export function writesNemoCallIds(template: string | undefined): boolean {
  return template !== undefined && template.includes("[TOOL_CALLS][") && template.includes('"call_id": "') && template.includes('"id": "');
}

const NEMO_ID = /^[A-Za-z0-9]{9}$/;
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/**
 * A call id in the shape Mistral Nemo's template requires (9 letters or digits): the client's own
 * where it has that shape, else one derived from it (a hash, so the same id every time the
 * conversation is sent and the prompt cache still matches), different from the conversation's
 * earlier ones (`taken`).
 */
export function nemoCallId(clientId: string, taken: ReadonlySet<string>): string {
  if (NEMO_ID.test(clientId) && !taken.has(clientId)) return clientId;
  for (let attempt = 0; ; attempt++) {
    const digest = createHash("sha256").update(attempt === 0 ? clientId : `${clientId}\u0000${attempt}`).digest();
    let id = "";
    for (let i = 0; i < 9; i++) id += ALPHABET[digest[i]! % ALPHABET.length];
    if (!taken.has(id)) return id;
  }
}

/** The conversation's calls, in order, with their ids (see nemoCallId); a call without a client id is named by its place. */
export function nemoCallIds(history: readonly ChatHistoryItem[]): Map<ChatModelFunctionCall, string> {
  const ids = new Map<ChatModelFunctionCall, string>();
  const taken = new Set<string>();
  let n = 0;
  for (const item of history) {
    if (item.type !== "model") continue;
    for (const r of item.response) {
      if (typeof r !== "object" || r.type !== "functionCall") continue;
      const id = nemoCallId((r as ClientCallId).plinthCallId ?? `plinth-call-${n}`, taken);
      n++;
      taken.add(id);
      ids.set(r, id);
    }
  }
  return ids;
}
