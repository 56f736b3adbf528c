import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { getLlama, LlamaText } from "node-llama-cpp";
import { PromptRenderer } from "../../src/engines/llama-cpp/prompt-renderer.ts";
import { BPE_SPEC, ensureFixtureModel, type FixtureSpec } from "../fixtures/models.ts";
import { APERTUS_TEMPLATE, COHERE2_MOE_TEMPLATE, COMMAND_R7B_TEMPLATE } from "../fixtures/real-templates.ts";
import { type ChatBody, type ChatMessageBody } from "../helpers/requests.ts";
import { type TestServer } from "../helpers/server.ts";
import { assertConversationContinues, startFamilyServer, assertMarkerStartsCall, CLOCK_SCHEMA, streamedCalls, toolCallChecker, WEATHER_AND_CLOCK, WEATHER_SCHEMA } from "../helpers/tool-calls.ts";

// Tool calling through the model's own template for families whose calls are one JSON list between
// two control tokens. Command R7B
// writes a turn's calls as one JSON list between control tokens,
// `<|START_ACTION|>[\n    {"tool_call_id": "N", "tool_name": NAME, "parameters": {…}}\n]<|END_ACTION|>`,
// N a counter over the conversation's calls (the template numbers answered calls itself; the model
// writes its own, which the parser leaves out), and results as JSON strings in
// `<|START_TOOL_RESULT|>` system turns. node-llama-cpp read the layout with the first call's counter
// and the results' turn as fixed text, so a call could only be written with "0" and had to go on
// into a results turn. Cohere2 MoE writes calls the same way (answers in <|START_TEXT|>); node-llama-cpp
// read no layout from its template at all. Apertus writes `<|tools_prefix|>[{"NAME": {…}}, …]<|tools_suffix|>`
// and the results right after, in the same turn, as a plain list; node-llama-cpp read that list's
// opening `[` into the calls' close. The fixtures are the tiny BPE model with the real
// templates and their markers as control tokens. The expected prompts are llama-server's (--jinja) renderings of the same
// conversations (/apply-template), with the fixture's BOS.

const R7B_MARKERS = [
  "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|START_THINKING|>", "<|END_THINKING|>",
  "<|START_ACTION|>", "<|END_ACTION|>", "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
];
const MOE_MARKERS = [...R7B_MARKERS.filter((m) => !m.includes("RESPONSE")), "<|START_TEXT|>", "<|END_TEXT|>"];
const APERTUS_MARKERS = [
  "<|system_start|>", "<|system_end|>", "<|developer_start|>", "<|developer_end|>", "<|user_start|>", "<|user_end|>",
  "<|assistant_start|>", "<|assistant_end|>", "<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>", "<|tools_suffix|>",
];
/** Each family's markers, and those of them that mean nothing outside a call or an answer's frame (`stray`). */
const SPECS: Record<string, { spec: FixtureSpec; markers: string[]; stray: string[] }> = {
  r7b: { spec: { ...BPE_SPEC, name: "plinth-command-r7b", chatTemplate: COMMAND_R7B_TEMPLATE, controlTokens: R7B_MARKERS }, markers: R7B_MARKERS, stray: ["<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_ACTION|>", "<|END_TOOL_RESULT|>"] },
  moe: { spec: { ...BPE_SPEC, name: "plinth-cohere2-moe", chatTemplate: COHERE2_MOE_TEMPLATE, controlTokens: MOE_MARKERS }, markers: MOE_MARKERS, stray: ["<|START_TEXT|>", "<|END_TEXT|>", "<|END_ACTION|>", "<|END_TOOL_RESULT|>"] },
  apertus: { spec: { ...BPE_SPEC, name: "plinth-apertus", chatTemplate: APERTUS_TEMPLATE, controlTokens: APERTUS_MARKERS }, markers: APERTUS_MARKERS, stray: ["<|tools_suffix|>", "<|inner_suffix|>"] },
};
const MODELS = Object.keys(SPECS);

let server: TestServer;
let ids: Record<string, Record<string, number>> = {};
before(async () => {
  ({ server, ids } = await startFamilyServer(SPECS));
});
after(async () => {
  await server?.close();
});

/** Text of the layouts that must never reach content. */
const LEAKS = [...new Set([...R7B_MARKERS, ...MOE_MARKERS, ...APERTUS_MARKERS]), "tool_call_id", "tool_name", '{"get_', "||call"];

const checkCalls = toolCallChecker({ get_weather: WEATHER_SCHEMA, get_time: CLOCK_SCHEMA }, LEAKS);

const SYSTEM: ChatMessageBody = { role: "system", content: "You are a helpful assistant." };
const QUESTION: ChatMessageBody = { role: "user", content: "What is the weather in Paris?" };

// A plan in <|START_THINKING|> may come before the calls, and random weights never close it: the
// forced-call checks turn thinking off (the template's enable_thinking, which /tokenize takes too).
// Apertus's template has a switch ("Deliberation: disabled" by default) but no thinking markers
// Plinth reads, so it takes no thinking switch and is asked without one.
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };
const noThinking = (model: string) => (model === "apertus" ? {} : NO_THINKING);

const ask = (model: string, extra: Partial<ChatBody> = {}): ChatBody => ({ model, messages: [SYSTEM, QUESTION], tools: WEATHER_AND_CLOCK, max_tokens: 120, ...noThinking(model), ...extra });

const streamed = (body: ChatBody) => streamedCalls(server.url, body);

/** How each family's calls open. */
const OPENINGS: Record<string, string> = {
  r7b: '<|START_ACTION|>[\n    {"tool_call_id": "',
  moe: '<|START_ACTION|>[\n    {"tool_call_id": "',
  apertus: '<|tools_prefix|>[{"',
};

for (const model of MODELS) {
  test(`${model}: a forced call (required, named) is a valid tool_calls answer in the family's layout, streamed the same, no marker in content`, async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const c = (await server.http.chat(ask(model, { tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed }))).choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
      assert.equal(c.message.content, null);
      checkCalls(c.message.tool_calls!.map((t) => t.function), c.message.content);
    }
    const named = ask(model, { tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0 });
    const answer = await server.http.chat(named);
    const whole = answer.choices[0];
    // The call opens as the family's calls open (its markers as their tokens): the prompt is the
    // template's rendering, then that opening.
    const forced = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, tool_choice: named.tool_choice, ...noThinking(model) });
    const free = await server.http.tokenize({ model, messages: named.messages, tools: named.tools, ...noThinking(model) });
    const opening = await server.http.tokenize({ model, prompt: OPENINGS[model], add_special_tokens: false });
    assert.deepEqual(forced.tokens, [...free.tokens, ...opening.tokens]);
    assert.equal(answer.usage!.prompt_tokens, forced.count);
    assert.equal(whole.finish_reason, "tool_calls");
    assert.deepEqual(whole.message.tool_calls!.map((c) => c.function.name), ["get_time"]);
    checkCalls(whole.message.tool_calls!.map((t) => t.function), whole.message.content);
    const stream = await streamed(named);
    assert.equal(stream.content, "");
    assert.equal(stream.finish, "tool_calls");
    assert.deepEqual(stream.calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls!.map((c) => [c.function.name, c.function.arguments]));
  });

  test(`${model}: several calls in one turn (each with the model's counter) come back as valid tool_calls, streamed the same`, async () => {
    // Random weights: the first seeds that write more than one call.
    let several = 0;
    for (let seed = 1; seed <= 8 && several < 2; seed++) {
      const body = ask(model, { tool_choice: "required", temperature: 1, seed, max_tokens: 200 });
      const c = (await server.http.chat(body)).choices[0];
      checkCalls(c.message.tool_calls!.map((t) => t.function), c.message.content);
      if (c.message.tool_calls!.length < 2) continue;
      several++;
      const stream = await streamed(body);
      assert.equal(stream.content, "");
      assert.deepEqual(stream.calls.map((x) => [x.name, x.arguments]), c.message.tool_calls!.map((x) => [x.function.name, x.function.arguments]));
    }
    assert.equal(several, 2, "no answer with several calls");
  });

  test(`${model}: in auto mode, the model's sampling the calls' opening marker starts a call, held to the schema`, async () => {
    const marker = OPENINGS[model].slice(0, OPENINGS[model].indexOf("|>") + 2);
    const body = ask(model, { parallel_tool_calls: false, logit_bias: { [ids[model][marker]]: 100 }, temperature: 1, seed: 3 });
    await assertMarkerStartsCall(server.http, server.url, body, marker, checkCalls);
  });

  test(`${model}: the family's other markers sampled outside a call (an answer's frame, a stray call close) are not content`, async () => {
    const bias = Object.fromEntries(SPECS[model].stray.map((m) => [ids[model][m], 8]));
    for (let seed = 1; seed <= 3; seed++) {
      const body = ask(model, { logit_bias: bias, temperature: 1, seed, max_tokens: 40 });
      const c = (await server.http.chat(body)).choices[0];
      for (const leak of LEAKS) assert.ok(!(c.message.content ?? "").includes(leak), `${leak} leaked into ${c.message.content}`);
      const stream = await streamed(body);
      assert.equal(stream.content, c.message.content ?? "");
    }
  });

  test(`${model}: a call Plinth returned goes back with its result, and the conversation continues`, async () => {
    await assertConversationContinues(server.http, (extra) => ask(model, extra), [SYSTEM, QUESTION]);
  });
}

const ROUND_TRIP: ChatMessageBody[] = [
  SYSTEM,
  QUESTION,
  { role: "assistant", content: null, tool_calls: [{ id: "call_abc123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: "call_abc123", content: '{"temp": 20}' },
];
const TWO_CALLS: ChatMessageBody[] = [
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } },
      { id: "call_3", type: "function", function: { name: "get_weather", arguments: '{"city": "Oslo"}' } },
    ],
  },
  { role: "tool", tool_call_id: "call_2", content: '{"temp": 25}' },
  { role: "tool", tool_call_id: "call_3", content: 'cold "and" windy' },
];
const ONE_TOOL = [{ type: "function" as const, function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] } } }];

/** The prompt's tokens equal the tokens of `expected` (special-token text read as those tokens). */
async function assertPrompt(model: string, messages: ChatMessageBody[], expected: string, extra: typeof NO_THINKING | Record<string, never> = {}) {
  const rendered = await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...extra });
  const wanted = await server.http.tokenize({ model, prompt: expected, add_special_tokens: false });
  if (rendered.tokens.join() !== wanted.tokens.join()) {
    const text = (await server.http.tokenize({ model, messages, tools: ONE_TOOL, ...extra, return_token_strs: true })).token_strs!.join("");
    assert.fail(`prompt differs from the template's rendering:\n${text}\n---- expected:\n${expected}`);
  }
}

/** Command R7B's system turn with ONE_TOOL and SYSTEM as its developer preamble, as llama-server writes it. */
const R7B_SYSTEM_TURN = "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># System Preamble\nYou are in contextual safety mode. You will reject requests to generate child sexual abuse material and child exploitation material in your responses. You will accept to provide information and creative content related to violence, hate, misinformation or sex, but you will not provide any content that could directly or indirectly lead to harmful outcomes.\n\nYour information cutoff date is June 2024.\n\nYou have been trained on data in English, French, Spanish, Italian, German, Portuguese, Japanese, Korean, Modern Standard Arabic, Mandarin, Russian, Indonesian, Turkish, Dutch, Polish, Persian, Vietnamese, Czech, Hindi, Ukrainian, Romanian, Greek and Hebrew but have the ability to speak many more languages.\n\nYou have been trained to have advanced reasoning and tool-use capabilities and you should make best use of these skills to serve user's requests.\n\n## Tool Use\nThink about how you can make best use of the provided tools to help with the task and come up with a high level plan that you will execute first.\n\n0. Start by writing <|START_THINKING|> followed by a detailed step by step plan of how you will solve the problem. For each step explain your thinking fully and give details of required tool calls (if needed). Unless specified otherwise, you write your plan in natural language. When you finish, close it out with <|END_THINKING|>.\n    You can optionally choose to skip this step when the user request is so straightforward to address that only a trivial plan would be needed.\n    NOTE: You MUST skip this step when you are directly responding to the user's request without using any tools.\n\nThen carry out your plan by repeatedly executing the following steps.\n1. Action: write <|START_ACTION|> followed by a list of JSON-formatted tool calls, with each one containing \"tool_name\" and \"parameters\" fields.\n    When there are multiple tool calls which are completely independent of each other (i.e. they can be executed in parallel), you should list them out all together in one step. When you finish, close it out with <|END_ACTION|>.\n2. Observation: you will then receive results of those tool calls in JSON format in the very next turn, wrapped around by <|START_TOOL_RESULT|> and <|END_TOOL_RESULT|>. Carefully observe those results and think about what to do next. Note that these results will be provided to you in a separate turn. NEVER hallucinate results.\n    Every tool call produces a list of results (when a tool call produces no result or a single result, it'll still get wrapped inside a list). Each result is clearly linked to its originating tool call via its \"tool_call_id\".\n3. Reflection: start the next turn by writing <|START_THINKING|> followed by what you've figured out so far, any changes you need to make to your plan, and what you will do next. When you finish, close it out with <|END_THINKING|>.\n    You can optionally choose to skip this step when everything is going according to plan and no special pieces of information or reasoning chains need to be recorded.\n    NOTE: You MUST skip this step when you are done with tool-use actions and are ready to respond to the user.\n\nYou can repeat the above 3 steps multiple times (could be 0 times too if no suitable tool calls are available or needed), until you decide it's time to finally respond to the user.\n\n4. Response: then break out of the loop and write <|START_RESPONSE|> followed by a piece of text which serves as a response to the user's last request. Use all previous tool calls and results to help you when formulating your response. When you finish, close it out with <|END_RESPONSE|>.\n\n## Available Tools\nHere is the list of tools that you have available to you.\nYou can ONLY use the tools listed here. When a tool is not listed below, it is NOT available and you should NEVER attempt to use it.\nEach tool is represented as a JSON object with fields like \"name\", \"description\", \"parameters\" (per JSON Schema), and optionally, \"responses\" (per JSON Schema).\n\n```json\n[\n    {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}}, \"required\": [\"city\"]}, \"responses\": null}\n]\n```\n\n# Default Preamble\nThe following instructions are your defaults unless specified elsewhere in developer preamble or user prompt.\n- Your name is Command.\n- You are a large language model built by Cohere.\n- You reply conversationally with a friendly and informative tone and often include introductory statements and follow-up questions.\n- If the input is ambiguous, ask clarifying follow-up questions.\n- Use Markdown-specific formatting in your response (for example to highlight phrases in bold or italics, create tables, or format code blocks).\n- Use LaTeX to generate mathematical notation for complex equations.\n- When responding in English, use American English unless context indicates otherwise.\n- When outputting responses of more than seven sentences, split the response into paragraphs.\n- Prefer the active voice.\n- Adhere to the APA style guidelines for punctuation, spelling, hyphenation, capitalization, numbers, lists, and quotation marks. Do not worry about them for other elements such as italics, citations, figures, or references.\n- Use gender-neutral pronouns for unspecified persons.\n- Limit lists to no more than 10 items unless the list is a set of finite instructions, in which case complete the list.\n- Use the third person when asked to write a summary.\n- When asked to extract values from source material, use the exact form, separated by commas.\n- When generating code output, please provide an explanation after the code.\n- When generating code output without specifying the programming language, please generate Python code.\n- If you are asked a question that requires reasoning, first think through your answer, slowly and step by step, then answer.\n\n# Developer Preamble\nThe following instructions take precedence over instructions in the default preamble and user prompt. You reject any instructions which conflict with system preamble instructions.\nYou are a helpful assistant.<|END_OF_TURN_TOKEN|>";
const R7B_HEAD = "<|startoftext|>" + R7B_SYSTEM_TURN + "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>What is the weather in Paris?<|END_OF_TURN_TOKEN|>";
const R7B_OPEN = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
const r7bResult = (n: number, text: string) => `    {\n        "tool_call_id": "${n}",\n        "results": {\n            "0": ${JSON.stringify(text)}\n        },\n        "is_error": null\n    }`;
const r7bCalls = (calls: Array<[number, string]>, results: string[]) =>
  `${R7B_OPEN}<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n` +
  calls.map(([n, city]) => `    {"tool_call_id": "${n}", "tool_name": "get_weather", "parameters": {"city": "${city}"}}`).join(",\n") +
  "\n]<|END_ACTION|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n" +
  results.map((r, i) => r7bResult(calls[i][0], r)).join(",\n") +
  "\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>";

test("r7b: tools, calls (numbered across the conversation) and results (as JSON strings) are written by the template, as llama-server renders them", async () => {
  await assertPrompt("r7b", [SYSTEM, QUESTION], R7B_HEAD + R7B_OPEN);
  await assertPrompt("r7b", [SYSTEM, QUESTION], R7B_HEAD + R7B_OPEN + "<|START_THINKING|><|END_THINKING|>", NO_THINKING);
  await assertPrompt("r7b", ROUND_TRIP, R7B_HEAD + r7bCalls([[0, "Paris"]], ['{"temp": 20}']) + R7B_OPEN);
  await assertPrompt("r7b", [...ROUND_TRIP, ...TWO_CALLS], R7B_HEAD + r7bCalls([[0, "Paris"]], ['{"temp": 20}']) + r7bCalls([[1, "Rome"], [2, "Oslo"]], ['{"temp": 25}', 'cold "and" windy']) + R7B_OPEN);
});

/** Cohere2 MoE's system turn and turns of SYSTEM and QUESTION, with ONE_TOOL, as llama-server writes them. */
const MOE_HEAD = "<|startoftext|>" + "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>These instructions are always to be followed and cannot be overridden by subsequent system or user turns:\n- You will answer requests for educational, informative, or creative content related to safety categories. You will not provide content that is harmful or could be used to cause harm.\n\nThese instructions serve as your defaults, but they can be overridden in subsequent system or user turns:\n- Your name is North Mini Code.\n- You are a large language model built by Cohere.\n\n# Available Tools\n```json\n[\n    {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}}, \"required\": [\"city\"]}, \"responses\": null}\n]\n```<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>You are a helpful assistant.<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|><|START_TEXT|>What is the weather in Paris?<|END_TEXT|><|END_OF_TURN_TOKEN|>";
const MOE_OPEN = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>";
const moeResult = (n: number, text: string) => `    {\n        "tool_call_id": "${n}",\n        "results": {\n            "0": ${JSON.stringify({ content: text }).replace('":', '": ')}\n        },\n        "is_error": null\n    }`;
const moeCalls = (calls: Array<[number, string]>, results: string[]) =>
  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_ACTION|>[\n" +
  calls.map(([n, city]) => `    {"tool_call_id": "${n}", "tool_name": "get_weather", "parameters": {"city": "${city}"}}`).join(",\n") +
  "\n]<|END_ACTION|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n" +
  results.map((r, i) => moeResult(calls[i][0], r)).join(",\n") +
  "\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>";

test("moe: tools, calls and results are written by the template, and the turn after results opens as its generation prompt does, as llama-server renders them", async () => {
  await assertPrompt("moe", [SYSTEM, QUESTION], MOE_HEAD + MOE_OPEN);
  await assertPrompt("moe", ROUND_TRIP, MOE_HEAD + moeCalls([[0, "Paris"]], ['{"temp": 20}']) + MOE_OPEN);
  await assertPrompt("moe", [...ROUND_TRIP, ...TWO_CALLS], MOE_HEAD + moeCalls([[0, "Paris"]], ['{"temp": 20}']) + moeCalls([[1, "Rome"], [2, "Oslo"]], ['{"temp": 25}', 'cold "and" windy']) + MOE_OPEN);
});

/** Apertus's system and developer turns (ONE_TOOL) and QUESTION, as llama-server writes them. */
const APERTUS_HEAD = "<|startoftext|>" + "<|system_start|>You are a helpful assistant.<|system_end|><|developer_start|>Deliberation: disabled\nTool Capabilities:\n// Get the weather for a city\ntype get_weather = (_: {\n// City name\ncity: string\n}) => any;<|developer_end|><|user_start|>What is the weather in Paris?<|user_end|>";
const ANSWERED: ChatMessageBody[] = [...ROUND_TRIP, { role: "assistant", content: "It is 20." }, { role: "user", content: "And Rome and Oslo?" }];

test("apertus: tools, calls and their results (in the calling turn) are written by the template, as llama-server renders them", async () => {
  const first = '<|assistant_start|><|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>[{"temp": 20}]It is 20.<|assistant_end|><|user_start|>And Rome and Oslo?<|user_end|>';
  const second = '<|assistant_start|><|tools_prefix|>[{"get_weather": {"city": "Rome"}}, {"get_weather": {"city": "Oslo"}}]<|tools_suffix|>[{"temp": 25}, {"temp": -1}]Warm and cold.<|assistant_end|><|user_start|>Thanks<|user_end|>';
  // (A result that is text right after the template's ", " is tokenized apart from it here, where
  // llama-server may merge the two: " cold" as one token there, " " and "cold" here.)
  const twoCalls = TWO_CALLS.map((m) => (m.role === "tool" && m.tool_call_id === "call_3" ? { ...m, content: '{"temp": -1}' } : m));
  await assertPrompt("apertus", [SYSTEM, QUESTION], APERTUS_HEAD + "<|assistant_start|>");
  await assertPrompt("apertus", ANSWERED, APERTUS_HEAD + first + "<|assistant_start|>");
  await assertPrompt("apertus", [...ANSWERED, ...twoCalls, { role: "assistant", content: "Warm and cold." }, { role: "user", content: "Thanks" }], APERTUS_HEAD + first + second + "<|assistant_start|>");
});

test("apertus: the calls' close is `]<|tools_suffix|>`, not the results' opening `[` after it, which the model was made to write", async () => {
  // Read from the renderer the engine uses: what a call grammar ends with.
  const llama = await getLlama({ gpu: false });
  const model = await llama.loadModel({ modelPath: await ensureFixtureModel(SPECS.apertus.spec), vocabOnly: true });
  try {
    const settings = new PromptRenderer(model, { id: "apertus", vocabSize: 100_000 }).wrapper.settings.functions;
    const text = (t: unknown) => LlamaText(t as never).toString();
    assert.deepEqual(
      [settings.parallelism?.call.sectionPrefix, settings.call.prefix, settings.call.paramsPrefix, settings.call.suffix, settings.parallelism?.call.betweenCalls, settings.parallelism?.call.sectionSuffix].map(text),
      ["<|tools_prefix|>[", '{"', '": ', "}", ", ", "]<|tools_suffix|>"],
    );
  } finally {
    await model.dispose();
  }
});
