import assert from "../helpers/assert.ts";
import { after, before, describe, test } from "node:test";
import { getLlama, type LlamaModel } from "node-llama-cpp";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import { ensureFixtureModel, EXTRA_TOKENS, FIXTURE_TOKENS, THINKING_SPEC, type FixtureSpec } from "../fixtures/models.ts";
import { type TestServer, startTestServer } from "../helpers/server.ts";
import { templateRenderers } from "../helpers/template-renderers.ts";

// The open turn of a chat prompt is the template's own generation prompt (open-turn.ts), for the
// request's thinking switch, as llama.cpp's server renders it; Plinth opens the thinking section
// itself only where the template does not and the request needs it.

/** Messages as ChatML; assistant turns carry an empty closed thinking section; a switch closes it in the generation prompt (Qwen 3's layout). */
const SWITCH_TEMPLATE = [
  "{%- for message in messages -%}",
  "{%- if message['role'] == 'assistant' -%}",
  "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- else -%}",
  "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}",
  "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}",
  "{%- endif -%}",
].join("");

/** The generation prompt opens the section, and closes it only when the switch is off (DeepSeek R1's as llama.cpp ships it). */
const OPENING_TEMPLATE = [
  "{%- for message in messages -%}",
  "{%- if message['role'] == 'assistant' and message['reasoning_content'] -%}",
  "{{- '<|im_start|>assistant\\n<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- else -%}",
  "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}",
  "{%- if not enable_thinking -%}{{- '</think>' -}}{%- endif -%}",
  "{%- endif -%}",
].join("");

/** Thinking only when its system prompt asks for it: the markers appear, the generation prompt never opens them (Granite 3.3's way). */
const ASK_TO_THINK_TEMPLATE = [
  "{{- '<|im_start|>system\\nYou are Plinth.' -}}",
  "{%- if thinking is defined and thinking -%}{{- ' Think inside <think></think> first.' -}}{%- endif -%}",
  "{{- '<|im_end|>\\n' -}}",
  "{%- for message in messages -%}",
  "{%- if message['role'] == 'assistant' and message['reasoning_content'] -%}",
  "{{- '<|im_start|>assistant\\n<think>' + message['reasoning_content'] + '</think>' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- else -%}",
  "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
].join("");

/** The switch also changes the conversation's own text: a system line when thinking is off (SmolLM 3's way). */
const BODY_SWITCH_TEMPLATE = [
  "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<|im_start|>system\\n/no_think<|im_end|>\\n' -}}{%- endif -%}",
  SWITCH_TEMPLATE,
].join("");

const spec = (name: string, chatTemplate: string): FixtureSpec => ({ ...THINKING_SPEC, name, chatTemplate });
const chat = (messages: Message[], extra: Partial<GenerationRequest> = {}) => ({ prompt: { kind: "chat", messages }, ...extra }) as GenerationRequest;
const HI: Message[] = [{ role: "user", content: "Hi" }];
const ON = { reasoning: { enabled: true } } as Partial<GenerationRequest>;
const OFF = { reasoning: { enabled: false } } as Partial<GenerationRequest>;

describe("the template's generation prompt", () => {
  const load = templateRenderers(THINKING_SPEC);

  async function rendererFor(name: string, template: string) {
    const { model, renderer } = await load(name, template);
    /** The prompt's text, control tokens spelled out, with what planReasoning appends; and whether generation starts inside the section. */
    const prompt = (req: GenerationRequest, constrained = false) => {
      const rendered = renderer.render(req);
      const reasoning = renderer.planReasoning(req, false, rendered.openTurn, constrained);
      const text = model.detokenize([...rendered.tokens, ...(reasoning?.promptSuffix ?? [])], true);
      // The fixture's tokenizer adds BOS, which is not what these tests are about.
      return { text: text.replace(/^<s>/, ""), inside: reasoning?.plan.startsInside };
    };
    return { renderer, prompt };
  }

  test("a switch the template reads: left alone nothing is opened (the model may), turned off the template's closed section", async () => {
    const { renderer, prompt } = await rendererFor("plinth-think-switch", SWITCH_TEMPLATE);
    assert.ok(renderer.thought, "the template's thinking section is recognised");
    assert.deepEqual(prompt(chat(HI)), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", inside: false });
    // The empty section the template writes into assistant turns is not the open turn's.
    assert.deepEqual(prompt(chat(HI, ON)), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", inside: false });
    assert.deepEqual(prompt(chat(HI, OFF)), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", inside: false });
    // Held to a grammar from its first token, the model could not open it: Plinth does, since this model thinks by default.
    const constrained = prompt(chat(HI), true);
    assert.match(constrained.text, /<\|im_start\|>assistant\n<think>\n?$/);
    assert.equal(constrained.inside, true);
    // Earlier assistant turns keep what the template writes.
    const earlier = prompt(chat([...HI, { role: "assistant", content: "Yo" }, { role: "user", content: "Again" }]));
    assert.ok(earlier.text.includes("<|im_start|>assistant\n<think>\n\n</think>\n\nYo<|im_end|>") && earlier.text.endsWith("Again<|im_end|>\n<|im_start|>assistant\n"), earlier.text);
  });

  test("a generation prompt that opens the section starts inside it; turned off it is closed, as llama.cpp's server sets the switch", async () => {
    const { prompt } = await rendererFor("plinth-think-opening", OPENING_TEMPLATE);
    // Left alone the switch is on (llama-server's default for a template with a thinking section).
    assert.deepEqual(prompt(chat(HI)), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", inside: true });
    assert.deepEqual(prompt(chat(HI), true), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", inside: true });
    assert.deepEqual(prompt(chat(HI, OFF)), { text: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>", inside: false });
  });

  test("a template that would not think opens the section only when thinking is asked for", async () => {
    const { renderer, prompt } = await rendererFor("plinth-think-ask", ASK_TO_THINK_TEMPLATE);
    assert.ok(renderer.thought, "the template's thinking section is recognised");
    const SYSTEM = "<|im_start|>system\nYou are Plinth.<|im_end|>\n";
    assert.deepEqual(prompt(chat(HI)), { text: `${SYSTEM}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n`, inside: false });
    assert.deepEqual(prompt(chat(HI), true), { text: `${SYSTEM}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n`, inside: false });
    const on = prompt(chat(HI, ON));
    assert.match(on.text, /<\|im_start\|>assistant\n<think>\n?$/);
    assert.equal(on.inside, true);
  });

  test("the switch reaches the whole template, not only the generation prompt", async () => {
    const { prompt } = await rendererFor("plinth-think-body-switch", BODY_SWITCH_TEMPLATE);
    assert.equal(prompt(chat(HI)).text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    assert.equal(prompt(chat(HI, OFF)).text, "<|im_start|>system\n/no_think<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  });

  test("a prefilled answer is continued as written", async () => {
    const { prompt } = await rendererFor("plinth-think-opening", OPENING_TEMPLATE);
    const { text } = prompt(chat([...HI, { role: "assistant", content: "Sure, here" }]));
    assert.ok(text.endsWith("<|im_start|>assistant\nSure, here"), text);
  });
});

describe("over HTTP, on a model whose template leaves the section to the model", () => {
  let s: TestServer;
  let model: LlamaModel;
  before(async () => {
    const path = await ensureFixtureModel(spec("plinth-think-switch", SWITCH_TEMPLATE));
    s = await startTestServer({ model: [`q=${path}`] });
    model = await (await getLlama({ gpu: false })).loadModel({ modelPath: path });
  });
  after(async () => {
    await s.close();
    await model.dispose();
  });

  /** Tokens of a text as the template writes it: BOS, then the text with its special tokens. */
  const count = async (text: string) => 1 + model.tokenize(text, true).length;
  const ask = (extra: Record<string, unknown>) =>
    s.http.chat({ model: "q", messages: [{ role: "user", content: "Hi" }], max_tokens: 6, temperature: 0, ...extra });

  test("the prompt is the template's rendering with add_generation_prompt, token for token", async () => {
    const plain = await ask({ logit_bias: { [FIXTURE_TOKENS.imEnd]: -100, [FIXTURE_TOKENS.endOfSequence]: -100 } });
    assert.equal(plain.usage!.prompt_tokens, await count("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    const off = await ask({ chat_template_kwargs: { enable_thinking: false } });
    assert.equal(off.usage!.prompt_tokens, await count("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert.equal(off.choices[0].message.reasoning_content, undefined);
    const tokenized = await s.http.tokenize({ model: "q", messages: [{ role: "user", content: "Hi" }] });
    assert.equal(tokenized.count, plain.usage!.prompt_tokens);
  });

  test("a section the model opens itself is read as reasoning", async () => {
    // Lifted so the random model writes <think> first; it keeps writing it, inside the section, as text.
    const r = await ask({ logit_bias: { [EXTRA_TOKENS.thinkOpen]: 100, [EXTRA_TOKENS.thinkClose]: -100 } });
    const m = r.choices[0].message;
    assert.ok((m.reasoning_content ?? "").length > 0, JSON.stringify(m));
    assert.equal(m.content, "");
    assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 5, JSON.stringify(r.usage));
  });
});
