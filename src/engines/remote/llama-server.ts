import { patternGrammar } from "../../grammar/schema-grammar.ts";
import type { PromptInput } from "../../core/types.ts";
import { call, readJson } from "./http.ts";
import type { UpstreamBody } from "./wire.ts";
import { contextLength, messagesToUpstream } from "./wire.ts";

/**
 * llama-server (llama.cpp's HTTP server) speaks OpenAI's protocol with a few differences that
 * matter to a router, checked against the llama.cpp that node-llama-cpp bundles:
 *  - its /v1/models entry has no `max_model_len`; `meta.n_ctx` is the context of one slot (the
 *    whole `-c` shared out over `-np`), which is what one request can use;
 *  - its /tokenize reads `content` (text, not messages) and answers `{tokens}`; chat prompts are
 *    rendered first by its /apply-template; /detokenize answers `{content}`;
 *  - sampling names of its own: `repeat_penalty`, `thinking_budget_tokens`; a vLLM-style
 *    `repetition_penalty` would be dropped without a word;
 *  - a chat template without tool support makes it ignore `tools` and `tool_choice` (even
 *    "required"); /props says so in `chat_template_caps`, so such tools are refused here instead;
 *  - without --mmproj it answers an image with a 500; /props says `modalities.vision: false`.
 */

/** Whether a /v1/models entry is llama-server's. */
export function isLlamaServerModel(entry: any): boolean {
  return entry?.owned_by === "llamacpp" || typeof entry?.meta?.n_ctx === "number";
}

/** The context one request can use: one slot's share. */
export function llamaServerContext(entry: any): number | undefined {
  return contextLength(entry?.meta?.n_ctx);
}

/** Canonical features the upstream lacks (its chat template's tools, vision without --mmproj), from its /props (empty when unknown). */
export async function llamaServerLacks(base: URL, headers: Record<string, string>, headTimeoutMs: number): Promise<string[]> {
  try {
    const res = await call(new URL("props", base), { headers, headTimeoutMs });
    const json = (await readJson(res)) as any;
    const caps = res.status === 200 ? json?.chat_template_caps : undefined;
    // A server without a vision projector (--mmproj) says `modalities.vision: false`; images sent to
    // it are refused here by their part rather than answered with its 500 (see contentFault).
    const vision = res.status === 200 ? json?.modalities?.vision : undefined;
    return [...(caps?.supports_tools === false ? ["tools"] : []), ...(vision === false ? ["images"] : [])];
  } catch {
    return [];
  }
}

/** A request body with llama-server's names for the fields it spells differently. */
export function toLlamaServerBody(body: UpstreamBody): UpstreamBody {
  const out = { ...body };
  if (out.repetition_penalty !== undefined) {
    out.repeat_penalty = out.repetition_penalty;
    delete out.repetition_penalty;
  }
  // llama-server has no regex field but takes a GBNF grammar, the form Plinth enforces a regex in.
  const regex = (out.structured_outputs as { regex?: string } | undefined)?.regex;
  if (regex !== undefined) {
    out.grammar = patternGrammar(regex);
    delete out.structured_outputs;
  }
  const budget = (out.reasoning as any)?.budget_tokens;
  if (budget !== undefined) {
    out.thinking_budget_tokens = budget;
    delete out.reasoning;
  }
  return out;
}

/** A JSON POST to the upstream (with failover), as the remote engine makes them. */
export type PostJson = (path: string, body: unknown) => Promise<any>;

/**
 * A prompt's tokens by llama-server's endpoints: a chat prompt is rendered by its own template
 * first, then tokenized with special tokens parsed, as llama-server does before it generates.
 * Undefined when the upstream lacks either endpoint.
 */
export async function llamaServerTokens(post: PostJson, prompt: PromptInput, addSpecial: boolean): Promise<number[] | undefined> {
  let content: string;
  if (prompt.kind === "chat") {
    const rendered = await post("/apply-template", { messages: messagesToUpstream(prompt.messages) });
    if (typeof rendered?.prompt !== "string") return undefined;
    content = rendered.prompt;
  } else if (prompt.kind === "text") content = prompt.text;
  else return undefined;
  const json = await post("/tokenize", { content, add_special: addSpecial, parse_special: true });
  return Array.isArray(json?.tokens) ? json.tokens : undefined;
}
