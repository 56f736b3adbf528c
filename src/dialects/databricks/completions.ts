import { z } from "zod";
import { collectGeneration } from "../../core/collect.ts";
import { ApiError, badRequest, withWireParam } from "../../core/errors.ts";
import { newId } from "../../core/ids.ts";
import { afterFirstEvent } from "../../core/stream-head.ts";
import type { GenerationService, StartedGeneration } from "../../core/generation-service.ts";
import type { GenerationRequest, PromptInput } from "../../core/types.ts";
import type { RouteEnv, RouteResult } from "../../http/respond.ts";
import { usageToWire } from "../openai/chat-to-wire.ts";
import { completionFieldNames } from "../openai/field-names.ts";
import { normaliseStop, toSamplingParams } from "../openai/sampling-fields.ts";
import { modelReasons, usageToDatabricks } from "./chat.ts";
import { samplingFields, streamOptions } from "./chat-protocol.ts";
import type { Routed } from "./endpoints.ts";
import { databricksErrorEvent, databricksStreamErrorBody } from "./errors.ts";
import type { SseWriter } from "../../http/sse.ts";
import { listOf } from "../list-of.ts";

/** Wire schema of a Databricks completions request (`prompt` on /invocations, or /serving-endpoints/completions). */
export const completionRequest = z.strictObject({
  model: z.string().min(1).optional(),
  prompt: z.union([z.string(), listOf(z.string(), { min: 1, max: 2048 })]),
  stream: z.boolean().nullish(),
  stream_options: streamOptions,
  ...samplingFields,
  error_behavior: z.enum(["truncate", "error"]).nullish(),
  suffix: z.string().nullish(),
  echo: z.boolean().nullish(),
  use_raw_prompt: z.boolean().nullish(),
});
export type DatabricksCompletionRequest = z.infer<typeof completionRequest>;

/**
 * Text completions in Databricks' meaning: `suffix` is appended to each completion, `index` is the
 * prompt's index (in a stream, with `n` > 1, the choice's: see streamCompletion), `use_raw_prompt` (default: true on provisioned throughput, false on pay-per-token)
 * skips the chat template, and `error_behavior: "truncate"` (pay-per-token only) shortens what does
 * not fit instead of refusing it.
 */
export async function databricksCompletion(body: DatabricksCompletionRequest, env: RouteEnv, routed: Routed): Promise<RouteResult> {
  const ppt = routed.endpoint.kind === "pay-per-token";
  if (body.stream_options != null && !body.stream) throw badRequest("stream_options may be set only when stream is true.", "stream_options");
  if ((body.n ?? 1) > 1 && ppt) throw badRequest("n > 1 is available only on provisioned-throughput endpoints; this is a pay-per-token endpoint.", "n");
  if (body.error_behavior != null && !ppt)
    throw badRequest("error_behavior is accepted only by pay-per-token endpoints; this is a provisioned-throughput endpoint.", "error_behavior");
  const raw = body.use_raw_prompt ?? !ppt;
  const prompts = typeof body.prompt === "string" ? [body.prompt] : body.prompt;
  prompts.forEach((p, i) => {
    const field = typeof body.prompt === "string" ? "prompt" : `prompt[${i}]`;
    if (p.length === 0) throw badRequest(`${field} is empty.`, field);
  });
  const n = body.n ?? 1;
  const sampling = toSamplingParams({ temperature: body.temperature, top_p: body.top_p, top_k: body.top_k });
  let texts = prompts.slice();
  let maxTokens = body.max_tokens ?? undefined;
  const promptOf = (text: string): PromptInput => (raw ? { kind: "text", text } : { kind: "chat", messages: [{ role: "user", content: text }] });
  const batchOf = (): GenerationRequest[] =>
    texts.map((text) => ({
      model: routed.model,
      prompt: promptOf(text),
      sampling,
      maxTokens,
      stop: normaliseStop(body.stop),
      n,
    }));
  const names = completionFieldNames({ prompt: body.prompt });
  let started: StartedGeneration;
  for (let attempt = 0; ; attempt++) {
    try {
      started = await env.service.startBatch(env.ctx, batchOf(), env.signal);
      break;
    } catch (err) {
      const overflow = err instanceof ApiError && err.code === "context_length_exceeded";
      if (!overflow || body.error_behavior !== "truncate" || attempt > 40) throw withWireParam(err, names);
      const field = (err as ApiError).field ?? "";
      if (field.endsWith("maxTokens")) maxTokens = undefined;
      else {
        const r = /^batch\[(\d+)\]/.exec(field);
        const which = r ? Number(r[1]) : 0;
        const fitted = await dropStartUntilFits(env.service, texts[which], (text) => ({ ...batchOf()[which], prompt: promptOf(text) }), maxTokens);
        if (fitted === undefined) throw withWireParam(err, names);
        texts = texts.map((x, i) => (i === which ? fitted : x));
      }
    }
  }
  const meta = { id: newId("cmpl-"), created: Math.floor(Date.now() / 1000) };
  const reasons = modelReasons(env, routed.model);
  const lead = (k: number) => (body.echo ? prompts[Math.floor(k / n)] : "");
  const suffix = body.suffix ?? "";
  if (!body.stream) {
    const { choices, usage } = await collectGeneration(started.events, texts.length * n);
    return {
      kind: "json",
      body: {
        id: meta.id,
        object: "text_completion",
        created: meta.created,
        choices: choices.map((c, k) => ({ index: Math.floor(k / n), text: lead(k) + c.text + suffix, finish_reason: c.finishReason })),
        usage: usage ? usageToDatabricks(usageToWire(usage), reasons) : null,
      },
    };
  }
  // A stream's head waits for its first event, so a failure before it keeps its own status.
  const events = await afterFirstEvent(started.events).catch((err) => Promise.reject(withWireParam(err, names)));
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({ id: meta.id, object: "text_completion", created: meta.created, choices, ...extra });
  return {
    kind: "sse",
    write: async (sse) => {
      try {
        await streamCompletion(sse);
      } catch (err) {
        if (env.signal.aborted) throw err;
        // As Databricks chat streams end after a failure: the envelope as the last data event, then
        // [DONE], which every stream of this dialect ends with.
        await sse.data(databricksStreamErrorBody(err, names));
        await sse.data("[DONE]");
      }
    },
    errorEvent: (err) => databricksErrorEvent(err, names),
  };

  /**
   * The reference leaves the streamed form unstated. The n choices of one prompt interleave in a
   * stream, and with the prompt's index on every chunk a client could not tell their texts or ends
   * apart, so a chunk carries its choice's index, prompt × n + choice, as OpenAI's streams do. With
   * n = 1 that is the prompt's index, as in the JSON answer.
   */
  async function streamCompletion(sse: SseWriter): Promise<void> {
    const begun = new Set<number>();
    let held: Record<string, unknown> | undefined;
    const open = async (k: number) => {
      if (begun.has(k)) return;
      begun.add(k);
      if (lead(k)) await sse.data(chunk([{ index: k, text: lead(k), finish_reason: null }]));
    };
    for await (const ev of events) {
      if (sse.closed) return;
      if (ev.type === "text") {
        await open(ev.choice);
        await sse.data(chunk([{ index: ev.choice, text: ev.text, finish_reason: null }]));
      } else if (ev.type === "finish") {
        await open(ev.choice);
        if (held) await sse.data(held);
        held = chunk([{ index: ev.choice, text: suffix, finish_reason: ev.reason }]);
      } else if (ev.type === "usage") {
        const u = usageToDatabricks(usageToWire(ev.usage), reasons);
        if (held) await sse.data({ ...held, usage: u });
        else await sse.data(chunk([], { usage: u }));
        held = undefined;
      }
    }
    if (held) await sse.data(held);
    await sse.data("[DONE]");
  }
}

/**
 * `error_behavior: "truncate"`: the text without as much of its beginning as keeps its prompt from
 * fitting with room for the answer's budget (one token when it has none), or undefined when even
 * its last character would not fit. The overflow is counted in tokens and cut as that share of the
 * text, then counted again: tokens are not spread evenly over a text, so a cut may fall a few
 * tokens short, and the next one takes those. (Cutting a quarter at a time dropped 1,022 tokens
 * from a prompt 6 over.)
 */
async function dropStartUntilFits(
  service: GenerationService,
  text: string,
  requestFor: (text: string) => GenerationRequest,
  maxTokens: number | undefined,
): Promise<string | undefined> {
  for (let round = 0; round < 16 && text.length > 0; round++) {
    const req = requestFor(text);
    const { tokens, contextSize } = await service.tokenize(req.model, req.prompt, req.prompt.kind === "text");
    const over = tokens.length + (maxTokens ?? 1) - contextSize;
    if (over <= 0) return text;
    const own = (await service.tokenize(req.model, { kind: "text", text }, false)).tokens.length;
    if (own <= over) return undefined;
    let cut = Math.max(1, Math.floor((text.length * over) / own));
    // Not between the two halves of a surrogate pair.
    if (cut < text.length && /[\udc00-\udfff]/.test(text[cut])) cut++;
    text = text.slice(cut);
  }
  return text.length > 0 ? text : undefined;
}
