import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { GenerationRequest, Message } from "../../src/core/types.ts";
import type { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { BPE_SPEC } from "../fixtures/models.ts";
import { templateRenderers } from "../helpers/template-renderers.ts";
import {
  COMMAND_R7B_TEMPLATE,
  COMMAND_R_PLUS_TOOL_USE_TEMPLATE,
  DEEPSEEK_R1_DISTILL_TEMPLATE,
  DEEPSEEK_V3_1_TEMPLATE,
  GEMMA_4_TEMPLATE,
  GIGACHAT_3_TEMPLATE,
  GLM_4_6_TEMPLATE,
  KIMI_K2_TEMPLATE,
  LLAMA_2_CHAT_TEMPLATE,
  MISTRAL_SMALL_3_2_TEMPLATE,
  QWEN3_CODER_TEMPLATE,
} from "../fixtures/real-templates.ts";

// Conversations whose rendering used to differ from the model's own template, checked against
// llama-server --jinja's /apply-template of the same messages on GGUFs carrying these templates
// (the expected texts below are its output; the fixture's BOS text is left out).

const load = templateRenderers(BPE_SPEC);

type Functions = Parameters<PromptRenderer["render"]>[1];

async function promptFor(name: string, template: string) {
  const { model, renderer } = await load(name, template);
  return (messages: Message[], functions?: Functions) => {
    const req = { prompt: { kind: "chat", messages } } as GenerationRequest;
    const rendered = renderer.render(req, functions);
    const suffix = renderer.planReasoning(req, false, rendered.openTurn)?.promptSuffix ?? [];
    return model.detokenize([...rendered.tokens, ...suffix], true).replace(/^<\|startoftext\|>/, "");
  };
}

const CART: Functions = {
  add_to_cart: { description: "Add items", params: { type: "object", properties: { items: { type: "array", items: { type: "string" }, description: "Item names" } }, required: ["items"] } },
} as never;
const WEATHER: Functions = {
  get_weather: { description: "Get the weather for a city", params: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } },
} as never;

const called = (name: string, args: string): Message => ({ role: "assistant", content: "", toolCalls: [{ id: "call_c1", name, arguments: args }] });
const result = (content: string): Message => ({ role: "tool", toolCallId: "call_c1", content });

test("GLM 4.6: a call argument named `items` is written by the template (`args.items()` is the dict's method, as in Python's Jinja)", async () => {
  const prompt = await promptFor("plinth-glm-4.6-fidelity", GLM_4_6_TEMPLATE);
  const text = prompt([{ role: "user", content: "Buy fruit" }, called("add_to_cart", '{"items": ["apple", "pear"]}'), result("done")], CART);
  assert.ok(
    text.endsWith(
      '<|user|>\nBuy fruit<|assistant|>\n<think></think>\n<tool_call>add_to_cart\n<arg_key>items</arg_key>\n<arg_value>["apple", "pear"]</arg_value>\n</tool_call><|observation|>\n<tool_response>\ndone\n</tool_response><|assistant|>',
    ),
    text,
  );
});

test("GigaChat 3: a tool with an array parameter renders (its schema's `items` key no longer hides `.items()`)", async () => {
  const prompt = await promptFor("plinth-gigachat-3-fidelity", GIGACHAT_3_TEMPLATE);
  const tags: Functions = { tag: { description: "Tag a post", params: { type: "object", properties: { tags: { type: "array", items: { type: "string" } } }, required: ["tags"] } } } as never;
  const text = prompt([{ role: "user", content: "Tag it" }], tags);
  assert.ok(text.includes("tag") && text.includes("tags"), text);
  assert.ok(!text.includes("||call"), text);
});

test("Command R+: `json_spec.items` without a call still reads the array's item schema (only a call reaches the dict's method)", async () => {
  const prompt = await promptFor("plinth-command-r-plus-fidelity", COMMAND_R_PLUS_TOOL_USE_TEMPLATE);
  const tags: Functions = { tag: { description: "Tag a post", params: { type: "object", properties: { tags: { type: "array", items: { type: "string" }, description: "Tags" } }, required: ["tags"] } } } as never;
  const text = prompt([{ role: "user", content: "Tag it" }], tags);
  assert.ok(text.includes("def tag(tags: List[str])"), text);
});

test("Qwen3-Coder: a user message straight after tool results gets no empty assistant turn in between", async () => {
  const prompt = await promptFor("plinth-qwen3-coder-fidelity", QWEN3_CODER_TEMPLATE);
  const text = prompt([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result('{"temp": 21}'), { role: "user", content: "ok" }], WEATHER);
  assert.ok(
    text.endsWith(
      "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
        '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response>\n<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n',
    ),
    text,
  );
  // An answer the client did send after the results is still written, and the open turn at the end
  // (the model answering the results) is still there.
  const answered = prompt([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result('{"temp": 21}'), { role: "assistant", content: "Mild." }, { role: "user", content: "ok" }], WEATHER);
  assert.ok(answered.includes("</tool_response>\n<|im_end|>\n<|im_start|>assistant\nMild.<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"), answered);
  const open = prompt([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result('{"temp": 21}')], WEATHER);
  assert.ok(open.endsWith("</tool_response>\n<|im_end|>\n<|im_start|>assistant\n"), open);
  // Two rounds of calls, the second answered by a user message too.
  const twice = prompt(
    [{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result("1"), { role: "user", content: "and?" }, { ...called("get_weather", '{"city": "Rome"}'), toolCalls: [{ id: "call_c2", name: "get_weather", arguments: '{"city": "Rome"}' }] }, { role: "tool", toolCallId: "call_c2", content: "2" }, { role: "user", content: "ok" }],
    WEATHER,
  );
  assert.ok(!twice.includes("<|im_start|>assistant\n<|im_end|>"), twice);
  assert.ok(twice.includes("<tool_response>\n2\n</tool_response>\n<|im_end|>\n<|im_start|>user\nok<|im_end|>"), twice);
});

test("reasoning a client sends back inside an earlier answer's text is cut as the template cuts it (DeepSeek R1 distill, V3.1)", async () => {
  const history: Message[] = [{ role: "user", content: "2+2?" }, { role: "assistant", content: "<think>add them</think>4" }, { role: "user", content: "3+3?" }];
  const r1 = await promptFor("plinth-real-deepseek-r1-distill-fidelity", DEEPSEEK_R1_DISTILL_TEMPLATE);
  assert.equal(r1(history), "<｜User｜>2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>\n");
  const v31 = await promptFor("plinth-deepseek-v3.1-fidelity", DEEPSEEK_V3_1_TEMPLATE);
  assert.ok(v31(history).includes("<｜User｜>2+2?<｜Assistant｜><think></think>4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜>"), v31(history));
  // A prefill (the last message, continued by the model) is kept as written.
  assert.ok(r1([{ role: "user", content: "2+2?" }, { role: "assistant", content: "<think>add them</think>" }]).endsWith("<think>add them</think>"));
  // V3.1 cuts plain answers only: a turn that calls tools keeps its text, thinking included, and so
  // does the tool loop under way (the turns after the last user message).
  const loop = v31([{ role: "user", content: "Weather?" }, { ...called("get_weather", '{"city": "Paris"}'), content: "<think>\nplan\n</think>\n\nCalling." }, result("21"), { role: "user", content: "ok" }], WEATHER);
  assert.ok(loop.includes("<think>\nplan\n</think>\n\nCalling."), loop);
  // R1 writes an answer right after tool output as sent, thinking included (its `is_tool` branch).
  const afterTool = r1([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result("21"), { role: "assistant", content: "<think>\nsum up\n</think>\n\nIt is 21." }, { role: "user", content: "ok" }], WEATHER);
  assert.ok(afterTool.includes("<think>\nsum up\n</think>"), afterTool);
});

test("GLM 4.6: reasoning inside a calling turn before the last user message is cut, as the template cuts every turn before it", async () => {
  const prompt = await promptFor("plinth-glm-4.6-fidelity", GLM_4_6_TEMPLATE);
  const text = prompt([{ role: "user", content: "Weather?" }, { ...called("get_weather", '{"city": "Paris"}'), content: "<think>\nplan\n</think>\n\nCalling." }, result("21"), { role: "assistant", content: "Mild." }, { role: "user", content: "thanks" }], WEATHER);
  assert.ok(!text.includes("plan") && text.includes("Calling."), text);
});

test("Kimi K2 (its first template): a result's header names the client's call id", async () => {
  const prompt = await promptFor("plinth-kimi-k2-fidelity", KIMI_K2_TEMPLATE);
  const text = prompt([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result("21")], WEATHER);
  assert.ok(text.includes("## Return of call_c1"), text);
  assert.ok(!text.includes("fc_"), text);
});

test("Mistral Small 3.2: a user message right after tool results, which the template refuses without an answer between, keeps the template's layout", async () => {
  const prompt = await promptFor("plinth-mistral-small-3.2-fidelity", MISTRAL_SMALL_3_2_TEMPLATE);
  const text = prompt([{ role: "user", content: "Weather?" }, called("get_weather", '{"city": "Paris"}'), result('{"temp": 21}'), { role: "user", content: "ok" }], WEATHER);
  assert.ok(text.includes("[TOOL_RESULTS]") && text.includes("[TOOL_CONTENT]") && text.includes("[CALL_ID]"), text);
  assert.ok(text.endsWith("[INST]ok[/INST]"), text);
});

test("Command R7B: an assistant message with text beside its calls is written as the template writes it (the calls only)", async () => {
  const prompt = await promptFor("plinth-command-r7b-fidelity", COMMAND_R7B_TEMPLATE);
  const text = prompt([{ role: "user", content: "Weather?" }, { ...called("get_weather", '{"city": "Paris"}'), content: "Let me check." }, result('{"temp": 21}')], WEATHER);
  assert.ok(
    text.includes(
      '<|USER_TOKEN|>Weather?<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}\n]<|END_ACTION|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>',
    ),
    text,
  );
  assert.ok(!text.includes("Let me check."), text);
});

test("Gemma 4: a template that trims each message's text gets it trimmed (a user message ending in a newline, an answer opening with blanks)", async () => {
  const prompt = await promptFor("plinth-gemma-4-fidelity", GEMMA_4_TEMPLATE);
  const messages: Message[] = [
    { role: "system", content: "  sys  \n" },
    { role: "user", content: "\n  Hello  \n" },
    { role: "assistant", content: " ok \n\n" },
    { role: "user", content: "next " },
  ];
  // llama-server --jinja's rendering of the same messages (with thinking on, its default).
  const text = prompt(messages);
  assert.ok(text.includes("<|turn>user\nHello<turn|>\n<|turn>model\nok<turn|>\n<|turn>user\nnext<turn|>\n<|turn>model\n"), JSON.stringify(text));
  assert.ok(text.includes("\nsys<turn|>"), JSON.stringify(text));
});

test("Llama 2: content.strip() is applied as the template applies it, to the first user text together with the system message before it", async () => {
  const prompt = await promptFor("plinth-llama-2-fidelity", LLAMA_2_CHAT_TEMPLATE);
  // Its probe with a system message showed the user's leading blanks kept (stripped with the
  // <<SYS>> block in front of them), so user texts were never trimmed, even with no system message.
  assert.equal(prompt([{ role: "user", content: "  spaced  out \n " }]), "[INST] spaced  out [/INST]");
  // Hugging Face's rendering of the same messages (BOS and EOS are the fixture's).
  assert.equal(
    prompt([
      { role: "system", content: " sys " },
      { role: "user", content: "  spaced  out \n " },
      { role: "assistant", content: " ok \n" },
      { role: "user", content: "\n again \n" },
    ]),
    "[INST] <<SYS>>\n sys \n<</SYS>>\n\n  spaced  out [/INST] ok <|im_end|><|startoftext|>[INST] again [/INST]",
  );
});
