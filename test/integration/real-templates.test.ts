import assert from "../helpers/assert.ts";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { JinjaTemplateChatWrapper } from "node-llama-cpp";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import { nemoCallId } from "../../src/engines/llama-cpp/mistral-wrapper.ts";
import type { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { BPE_SPEC } from "../fixtures/models.ts";
import { templateRenderers } from "../helpers/template-renderers.ts";
import {
  DEEPSEEK_R1_DISTILL_TEMPLATE,
  GEMMA_2_TEMPLATE,
  GRANITE_3_3_TEMPLATE,
  LFM2_5_TEMPLATE,
  MISTRAL_NEMO_TEMPLATE,
  MISTRAL_SMALL_3_2_TEMPLATE,
  PHI_3_5_TEMPLATE,
} from "../fixtures/real-templates.ts";

// Real models' templates on the tiny BPE fixture, rendered as llama-server --jinja renders them
// (the expected texts were recorded from llama-server on GGUFs carrying these templates; the
// fixture's tokenizer only changes how the text is cut into tokens, and its BOS text).

const load = templateRenderers(BPE_SPEC);

async function rendererFor(name: string, chatTemplate: string) {
  const { model, renderer } = await load(name, chatTemplate);
  /** The prompt as text (the fixture's BOS left out), with what `planReasoning` appends. */
  const prompt = (messages: Message[], extra: Partial<GenerationRequest> = {}, functions?: Parameters<PromptRenderer["render"]>[1]) => {
    const req = { prompt: { kind: "chat", messages }, ...extra } as GenerationRequest;
    const rendered = renderer.render(req, functions);
    const suffix = renderer.planReasoning(req, false, rendered.openTurn)?.promptSuffix ?? [];
    return model.detokenize([...rendered.tokens, ...suffix], true).replace(/^<\|startoftext\|>/, "");
  };
  return { model, renderer, prompt };
}

const HI: Message[] = [{ role: "user", content: "Hi" }];
const PREFILL: Message[] = [...HI, { role: "assistant", content: "Sure, here" }];

test("DeepSeek R1 Distill: a prefilled answer is continued right after it, no thinking section opened behind it", async () => {
  const { renderer, prompt } = await rendererFor("plinth-real-deepseek-r1-distill", DEEPSEEK_R1_DISTILL_TEMPLATE);
  assert.equal(prompt(PREFILL), "<｜User｜>Hi<｜Assistant｜>Sure, here");
  assert.equal(renderer.planReasoning({ prompt: { kind: "chat", messages: PREFILL } } as GenerationRequest, false), undefined);
  // The template's own generation prompt still opens the section.
  assert.equal(prompt(HI), "<｜User｜>Hi<｜Assistant｜><think>\n");
});

test("Granite 3.3: no thinking section unless asked for; a prefill is continued as written", async () => {
  const { prompt } = await rendererFor("plinth-real-granite-3.3", GRANITE_3_3_TEMPLATE);
  const single = prompt(HI);
  assert.ok(single.endsWith("<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"), single);
  assert.ok(!single.includes("<think>"), single);
  const prefill = prompt(PREFILL);
  assert.ok(prefill.endsWith("<|start_of_role|>assistant<|end_of_role|>Sure, here"), prefill);
  assert.ok(prompt(HI, { reasoning: { enabled: true } } as Partial<GenerationRequest>).endsWith("<|end_of_role|><think>"));
  // Turned off, the prompt is the template's: it never writes a thinking section into a turn, so
  // there is none to close (it was `<think></think>\n\n`, text the model never saw in training).
  const off = prompt(HI, { reasoning: { enabled: false } } as Partial<GenerationRequest>);
  assert.equal(off, single);
});

test("LFM 2.5: no switch, but it writes reasoning into answers and cuts it out of their text: a thinking model, whose section thinking off closes", async () => {
  const { prompt } = await rendererFor("plinth-real-lfm2.5", LFM2_5_TEMPLATE);
  assert.ok(prompt(HI).endsWith("<|im_start|>assistant\n"), prompt(HI));
  const off = prompt(HI, { reasoning: { enabled: false } } as Partial<GenerationRequest>);
  assert.ok(off.endsWith("<|im_start|>assistant\n<think></think>\n\n"), off);
});

const TEMPLATES = fileURLToPath(new URL("../../node_modules/node-llama-cpp/llama/llama.cpp/models/templates/", import.meta.url));
const MINISTRAL_REASONING = "mistralai-Ministral-3-14B-Reasoning-2512.jinja";
const noTemplate = (file: string) => (existsSync(TEMPLATES + file) ? false : `llama.cpp's templates/${file} is not in node_modules`);

test("Ministral 3 Reasoning: no switch, reasoning written from `thinking` content blocks: thinking off closes its section", { skip: noTemplate(MINISTRAL_REASONING) }, async () => {
  const { prompt } = await rendererFor("plinth-real-ministral-3-reasoning", readFileSync(TEMPLATES + MINISTRAL_REASONING, "utf8"));
  assert.ok(prompt(HI).endsWith("[INST]Hi[/INST]"), prompt(HI));
  const off = prompt(HI, { reasoning: { enabled: false } } as Partial<GenerationRequest>);
  assert.ok(off.endsWith("[INST]Hi[/INST][THINK][/THINK]\n\n"), off);
});

test("Gemma 2: its own template, with the system message merged into the next one as llama.cpp merges it", async () => {
  const { renderer, prompt } = await rendererFor("plinth-real-gemma-2", GEMMA_2_TEMPLATE);
  assert.ok(renderer.wrapper instanceof JinjaTemplateChatWrapper, renderer.wrapper.constructor.name);
  const turn = (role: string, text: string) => `<start_of_turn>${role}\n${text}<end_of_turn>\n`;
  const open = "<start_of_turn>model\n";
  assert.equal(prompt([{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Hello there" }]), turn("user", "You are a helpful assistant.\nHello there") + open);
  assert.equal(prompt([{ role: "user", content: "" }]), turn("user", "") + open);
  assert.equal(prompt([...HI, { role: "assistant", content: "" }, { role: "user", content: "Hello?" }]), turn("user", "Hi") + turn("model", "") + turn("user", "Hello?") + open);
  assert.equal(prompt([{ role: "system", content: "" }, ...HI]), turn("user", "Hi") + open);
  assert.equal(
    prompt([{ role: "system", content: "S" }, ...HI, { role: "assistant", content: "Yo" }, { role: "user", content: "More" }]),
    turn("user", "S\nHi") + turn("model", "Yo") + turn("user", "More") + open,
  );
  assert.equal(prompt(PREFILL), turn("user", "Hi") + "<start_of_turn>model\nSure, here");
  // What the template refuses (llama-server answers 400) still renders: two user messages are
  // joined, and a conversation opening with the assistant goes to node-llama-cpp's Gemma wrapper.
  assert.equal(prompt([{ role: "user", content: "First" }, { role: "user", content: "Second" }]), turn("user", "First\n\nSecond") + open);
  assert.ok(prompt([{ role: "assistant", content: "Welcome" }, ...HI]).endsWith(turn("user", "Hi") + open));
  // Tools the template does not document are described in the first user turn, after the system text.
  const functions = { get_weather: { description: "Weather of a city", params: { type: "object" as const, properties: { city: { type: "string" as const } } } } };
  const tools = prompt([{ role: "system", content: "Be brief." }, ...HI], {}, functions);
  assert.ok(tools.startsWith("<start_of_turn>user\nBe brief.\n\n"), tools);
  assert.ok(tools.includes("get_weather") && tools.endsWith("\nHi<end_of_turn>\n" + open), tools);
  assert.ok(!tools.includes("---"), tools);
});

test("Phi 3.5: an empty system message is left out, as the template leaves it out", async () => {
  const { prompt } = await rendererFor("plinth-real-p35", PHI_3_5_TEMPLATE);
  assert.equal(prompt([{ role: "system", content: "" }, ...HI]), "<|user|>\nHi<|end|>\n<|assistant|>\n");
  assert.equal(prompt([{ role: "system", content: "S" }, ...HI]), "<|system|>\nS<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
});

test("a Mistral Nemo fine-tune under a name of its own keeps the Mistral layout of its template, not Llama 2's", async () => {
  // node-llama-cpp cannot run the template and picks a family wrapper by the model's name, else by
  // `[INST]` in the template: Llama 2's (`<s>[INST] <<SYS>>…`), which no Mistral template writes.
  const { renderer, prompt } = await rendererFor("plinth-nemo-finetune", MISTRAL_NEMO_TEMPLATE);
  assert.equal(renderer.wrapper.constructor.name, "FaithfulMistralChatWrapper");
  assert.equal(prompt(HI), "[INST]Hi[/INST]");
  assert.equal(prompt([{ role: "system", content: "S" }, ...HI]), "[INST]S\n\nHi[/INST]");
  // Everything as on the model named Mistral: the same wrapper's rendering.
  const { prompt: named } = await rendererFor("plinth-real-mistral-nemo", MISTRAL_NEMO_TEMPLATE);
  const functions = { get_weather: { description: "Weather of a city", params: { type: "object" as const, properties: { city: { type: "string" as const } } } } };
  for (const messages of [[...HI, { role: "assistant", content: "Yo" }, { role: "user", content: "More" }], [{ role: "system", content: "" }, ...HI]] as Message[][]) {
    assert.equal(prompt(messages), named(messages));
    assert.equal(prompt(messages, {}, functions), named(messages, {}, functions));
  }
});

test("Mistral Nemo: an empty system message is still written before the last user message", async () => {
  const { prompt } = await rendererFor("plinth-real-mistral-nemo", MISTRAL_NEMO_TEMPLATE);
  assert.equal(prompt([{ role: "system", content: "" }, ...HI]), "[INST]\n\nHi[/INST]");
  assert.equal(prompt([{ role: "system", content: "S" }, ...HI]), "[INST]S\n\nHi[/INST]");
  assert.equal(prompt(HI), "[INST]Hi[/INST]");
});

test("Mistral Nemo: a tool round trip is written as its template writes it, with call ids of its shape", async () => {
  const { model, renderer, prompt } = await rendererFor("plinth-real-mistral-nemo", MISTRAL_NEMO_TEMPLATE);
  const functions = { get_weather: { description: "Weather of a city", params: { type: "object" as const, properties: { city: { type: "string" as const } } } } };
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: functions.get_weather.params } }];
  const call = (id: string, city: string) => ({ id, name: "get_weather", arguments: JSON.stringify({ city }) });
  const conversations: Message[][] = [
    // OpenAI's ids, a call with text beside it (the template leaves it out), a result that is not JSON.
    [
      { role: "user", content: "Weather in Paris and Oslo?" },
      { role: "assistant", content: "Checking both.", toolCalls: [call("call_abc123XYZdefGHI", "Paris"), call("call_2", "Oslo")] },
      { role: "tool", toolCallId: "call_abc123XYZdefGHI", content: '{"temp": 20, "sky": "clear"}' },
      { role: "tool", toolCallId: "call_2", content: "rain" },
    ],
    // Ids the model wrote itself (9 letters or digits) are kept; two rounds, an answer, a new question.
    [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Paris?" },
      { role: "assistant", content: "", toolCalls: [call("abc123def", "Paris")] },
      { role: "tool", toolCallId: "abc123def", content: "sunny" },
      { role: "assistant", content: "Now Oslo.", toolCalls: [call("call_9", "Oslo")] },
      { role: "tool", toolCallId: "call_9", content: "rain" },
      { role: "assistant", content: "Sunny, then rain." },
      { role: "user", content: "Thanks" },
    ],
  ];
  const jinja = new Template(MISTRAL_NEMO_TEMPLATE);
  for (const messages of conversations) {
    const taken = new Set<string>();
    const ids = new Map<string, string>();
    for (const m of messages)
      for (const c of m.toolCalls ?? []) {
        const id = nemoCallId(c.id, taken);
        assert.match(id, /^[A-Za-z0-9]{9}$/);
        taken.add(id);
        ids.set(c.id, id);
      }
    assert.equal(ids.get("abc123def") ?? "abc123def", "abc123def");
    assert.equal(new Set(ids.values()).size, ids.size);
    const expected = jinja.render({
      bos_token: "",
      eos_token: model.tokens.eosString,
      tools,
      messages: messages.map((m) => ({
        role: m.role,
        content: m.content,
        ...(m.toolCalls ? { tool_calls: m.toolCalls.map((c) => ({ id: ids.get(c.id), type: "function", function: { name: c.name, arguments: JSON.parse(c.arguments) } })) } : {}),
        ...(m.toolCallId ? { tool_call_id: ids.get(m.toolCallId) } : {}),
      })),
    });
    assert.equal(prompt(messages, {}, functions), expected);
    // Token for token as llama.cpp tokenizes the template's text, and the same ids every time it is sent.
    const tokens = renderer.render({ prompt: { kind: "chat", messages } } as GenerationRequest, functions).tokens;
    assert.deepEqual([...tokens], [...(model.tokens.shouldPrependBosToken && model.tokens.bos != null ? [model.tokens.bos] : []), ...model.tokenize(expected, true)], "tokens");
    assert.equal(prompt(messages, {}, functions), expected);
  }
});

test("Mistral Small 3.2: call ids the template takes (9 letters or digits) are written as sent, others mapped to that shape, whatever came before", async () => {
  const { prompt } = await rendererFor("plinth-real-mistral-small-3.2", MISTRAL_SMALL_3_2_TEMPLATE);
  const functions = { get_weather: { description: "Weather of a city", params: { type: "object" as const, properties: { city: { type: "string" as const } } } } };
  const roundTrip = (id: string): Message[] => [
    { role: "user", content: "Paris?" },
    { role: "assistant", content: "", toolCalls: [{ id, name: "get_weather", arguments: '{"city": "Paris"}' }] },
    { role: "tool", toolCallId: id, content: "sunny" },
  ];
  // OpenAI's ids, which the template refuses, first: they were then node-llama-cpp's `fc_1_0000`
  // for every later conversation, ids the template takes included.
  const mapped = prompt(roundTrip("call_abc123XYZdefGHI"), {}, functions);
  const id = nemoCallId("call_abc123XYZdefGHI", new Set());
  assert.ok(mapped.includes(`[TOOL_CALLS]get_weather[CALL_ID]${id}[ARGS]`) && mapped.includes(`[TOOL_RESULTS]${id}[TOOL_CONTENT]sunny[/TOOL_RESULTS]`), mapped);
  const kept = prompt(roundTrip("abc123def"), {}, functions);
  assert.ok(kept.includes("[CALL_ID]abc123def[ARGS]") && kept.includes("[TOOL_RESULTS]abc123def[TOOL_CONTENT]"), kept);
});
