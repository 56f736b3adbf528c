import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { EXTRA_TOKENS, FIXTURE_TOKENS } from "../fixtures/models.ts";
import type { ChatBody, ChatMessageBody } from "../helpers/requests.ts";
import { logprobParts } from "../helpers/logprob-parts.ts";
import { useTestServer } from "../helpers/server.ts";

const s = useTestServer({}, { think: true });

/** Keeps the random model from ending the turn or closing the thinking section by itself. */
const LONG = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100, [EXTRA_TOKENS.thinkClose]: -100 };
const ask = (extra: Partial<ChatBody>) =>
  s.http.chat({
    model: "think",
    messages: [{ role: "user", content: "Think about the river." }],
    max_tokens: 40,
    temperature: 0,
    ...extra,
  });

test("thinking goes to reasoning_content (and reasoning), never into content", async () => {
  const r = await ask({ logit_bias: LONG });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content!.length > 0);
  assert.equal(m.reasoning, m.reasoning_content);
  assert.equal(m.content, "");
  assert.ok(!m.reasoning_content!.includes("<think>"));
  assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 40);
  assert.equal(r.choices[0].finish_reason, "length");
});

test("a thinking budget closes the section and the answer continues", async () => {
  const r = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 8 } });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content!.length > 0);
  assert.ok(m.content!.length > 0, "the answer continues after the forced close");
  assert.ok(!m.content!.includes("</think>") && !m.reasoning_content!.includes("</think>"));
  const reasoningTokens = r.usage!.completion_tokens_details.reasoning_tokens;
  // 8 thinking tokens plus the closing marker's own tokens.
  assert.ok(reasoningTokens >= 8 && reasoningTokens <= 14, `reasoning tokens ${reasoningTokens}`);
  assert.equal(r.usage!.completion_tokens, 40);
});

test("reasoning tokens are counted even when a stop string ends the answer", async () => {
  const r = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 8 }, stop: [" "] });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.ok(!r.choices[0].message.content!.includes(" "));
  assert.ok(r.usage!.completion_tokens_details.reasoning_tokens >= 8, JSON.stringify(r.usage));
});

test("the model's own </think> ends the section", async () => {
  // Lifted so that this random model writes it early; being lifted for the whole answer, it may also
  // turn up later in the answer, as text.
  const r = await ask({ logit_bias: { [FIXTURE_TOKENS.imEnd]: -100, [FIXTURE_TOKENS.endOfSequence]: -100, [EXTRA_TOKENS.thinkClose]: 8 } });
  const m = r.choices[0].message;
  assert.ok(m.content!.length > 0);
  // The marker that ended the section is in neither part.
  assert.ok(!m.content!.startsWith("</think>") && !m.reasoning_content!.includes("</think>"), JSON.stringify(m));
  assert.ok(r.usage!.completion_tokens_details.reasoning_tokens < 40);
});

test("thinking can be turned off five ways (OpenAI's, vLLM's, OpenRouter's, Qwen's and DeepSeek's); content only, no reasoning tokens", async () => {
  const offs = [
    { reasoning_effort: "none" },
    { chat_template_kwargs: { enable_thinking: false } },
    { reasoning: { enabled: false } },
    { enable_thinking: false },
    { thinking: { type: "disabled" } },
  ] as Partial<ChatBody>[];
  for (const off of offs) {
    const r = await ask({ logit_bias: LONG, ...off });
    assert.ok(!r.choices[0].message.reasoning_content, JSON.stringify(off));
    assert.ok(r.choices[0].message.content!.length > 0);
    assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 0);
  }
  // DeepSeek's and Anthropic's thinking object turns it on, with a budget as reasoning's.
  const budgeted = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 8 } });
  const anthropic = await ask({ logit_bias: LONG, thinking: { type: "enabled", budget_tokens: 8 } } as Partial<ChatBody>);
  assert.deepEqual(anthropic.choices[0].message, budgeted.choices[0].message);
  // Switches that disagree are refused, naming the second.
  await assertRefused([
    [{ enable_thinking: true, thinking: { type: "disabled" } }, "thinking.type"],
    [{ chat_template_kwargs: { enable_thinking: false }, enable_thinking: true }, "enable_thinking"],
    [{ reasoning: { enabled: true }, thinking: { type: "disabled" } }, "reasoning.enabled"],
    [{ reasoning_effort: "none", enable_thinking: true }, "reasoning_effort"],
    [{ thinking: { type: "disabled", budget_tokens: 8 } }, "thinking"],
    [{ thinking: { type: "auto" } }, "thinking.type"],
  ]);
});

test("reasoning_effort levels set budgets: minimal stops thinking after 64 tokens", async () => {
  const r = await ask({ logit_bias: LONG, reasoning_effort: "minimal", max_tokens: 90 });
  const rt = r.usage!.completion_tokens_details.reasoning_tokens;
  assert.ok(rt >= 64 && rt <= 70, `reasoning tokens ${rt}`);
  assert.ok(r.choices[0].message.content!.length > 0);
});

test("reasoning_effort xhigh and max (OpenAI's upper levels) think without a budget, as high does", async () => {
  const high = await ask({ logit_bias: LONG, reasoning_effort: "high", max_tokens: 90 });
  assert.equal(high.usage!.completion_tokens_details.reasoning_tokens, 90, "high thinks until max_tokens here");
  for (const effort of ["xhigh", "max"] as const) {
    for (const body of [{ reasoning_effort: effort }, { reasoning: { effort } }] as Partial<ChatBody>[]) {
      const r = await ask({ logit_bias: LONG, max_tokens: 90, ...body });
      assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 90, JSON.stringify(body));
      assert.equal(r.choices[0].message.reasoning_content, high.choices[0].message.reasoning_content);
    }
  }
});

test("streaming sends delta.reasoning_content first, then content; equal to the non-streamed result", async () => {
  const params = { logit_bias: LONG, reasoning: { budget_tokens: 10 } };
  const whole = await ask(params);
  const stream = await s.http.chatStream({
    model: "think",
    messages: [{ role: "user", content: "Think about the river." }],
    max_tokens: 40,
    temperature: 0,
    ...params,
  });
  let reasoning = "";
  let content = "";
  let sawContentBeforeReasoningEnded = false;
  for (const c of stream.chunks) {
    const d = c.choices[0]?.delta ?? {};
    if (d.reasoning_content) {
      if (content) sawContentBeforeReasoningEnded = true;
      reasoning += d.reasoning_content;
      assert.equal(d.reasoning, d.reasoning_content);
    }
    if (d.content) content += d.content;
  }
  assert.equal(reasoning, whole.choices[0].message.reasoning_content);
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(sawContentBeforeReasoningEnded, false);
});

test("logprobs split into reasoning_content and content entries", async () => {
  const r = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 6 }, logprobs: true, top_logprobs: 2, max_tokens: 20 });
  const lp = r.choices[0].logprobs!;
  assert.ok(lp.reasoning_content!.length >= 6);
  assert.ok(lp.content.length > 0);
  assert.equal(lp.content.map((e) => e.token).join("").trim(), r.choices[0].message.content!.trim());
});

test("the </think> that closes the section is in neither part's logprobs; a later one is answer text and listed", async () => {
  const parts = await logprobParts(s.http, { model: "think", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0, logit_bias: { [EXTRA_TOKENS.thinkClose]: 100 } });
  assert.deepEqual(parts.reasoning, { text: "", tokens: [] });
  assert.deepEqual(parts.content, { text: "</think>".repeat(3), tokens: Array(3).fill("</think>") });
});

test("reasoning control on a model without a thinking section is refused by name", async () => {
  const r = await s.http.post("/v1/chat/completions", {
    model: "tiny",
    messages: [{ role: "user", content: "x" }],
    reasoning_effort: "high",
  });
  assert.equal(r.status, 400);
  assert.equal(r.error?.param, "reasoning_effort");
  const kw = await s.http.post("/v1/chat/completions", {
    model: "think",
    messages: [{ role: "user", content: "x" }],
    chat_template_kwargs: { some_flag: 1 },
  });
  assert.equal(kw.status, 400);
  assert.equal(kw.error?.param, "chat_template_kwargs.some_flag");
});

test("earlier turns' reasoning is not re-rendered, so the next turn shares the prefix", async () => {
  const first = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 6 }, user: "multi" });
  const history: ChatMessageBody[] = [
    { role: "user", content: "Think about the river." },
    { role: "assistant", content: first.choices[0].message.content, reasoning_content: first.choices[0].message.reasoning_content },
    { role: "user", content: "And the city?" },
  ];
  const tok = await s.http.post("/tokenize", { model: "think", messages: history });
  assert.equal(tok.status, 200);
  const again = await s.http.chat({ model: "think", messages: history, max_tokens: 4, user: "multi" });
  assert.ok(again.usage!.prompt_tokens_details.cached_tokens > 5);
});

test("a model rendered through its own Jinja template gets one block per message and BOS when its tokenizer adds one (as llama-server renders it)", async () => {
  const tokens = async (messages: Array<{ role: string; content: string }>) => {
    const r = await s.http.postRaw("/tokenize", JSON.stringify({ model: "think", messages }));
    assert.equal(r.status, 200, r.text);
    return (JSON.parse(r.text) as { tokens: number[] }).tokens;
  };
  const one = await tokens([
    { role: "system", content: "AAA" },
    { role: "user", content: "hi" },
  ]);
  const two = await tokens([
    { role: "system", content: "AAA" },
    { role: "system", content: "BBB" },
    { role: "user", content: "hi" },
  ]);
  // llama-server on this file: [1, 3, 1045, 15, 294, 294, 294, 4, 15, 3, 1045, 15, 295, 295, 295, 4, …].
  assert.equal(one[0], FIXTURE_TOKENS.bos);
  assert.equal(two[0], FIXTURE_TOKENS.bos);
  const imStart = FIXTURE_TOKENS.imStart;
  assert.equal(two.filter((t) => t === imStart).length, one.filter((t) => t === imStart).length + 1, "the second system message is a block of its own");
});

test("vLLM's thinking_token_budget is the thinking budget, include_reasoning: false leaves the thinking out, llama-server's reasoning_format 'deepseek' is what is done", async () => {
  const budgeted = await ask({ logit_bias: LONG, thinking_token_budget: 8 } as Partial<ChatBody>);
  const reasoningTokens = budgeted.usage!.completion_tokens_details.reasoning_tokens;
  assert.ok(reasoningTokens >= 8 && reasoningTokens <= 14, `reasoning tokens ${reasoningTokens}`);
  assert.ok(budgeted.choices[0].message.content!.length > 0, "the answer continues after the forced close");
  const same = await ask({ logit_bias: LONG, reasoning: { budget_tokens: 8 }, reasoning_format: "deepseek" } as Partial<ChatBody>);
  assert.deepEqual(budgeted.choices[0].message, same.choices[0].message);

  // Generated and counted as before, but not returned: streamed or not.
  const hidden = await ask({ logit_bias: LONG, thinking_token_budget: 8, include_reasoning: false } as Partial<ChatBody>);
  assert.equal(hidden.choices[0].message.reasoning_content, undefined);
  assert.equal(hidden.choices[0].message.content, budgeted.choices[0].message.content);
  assert.equal(hidden.usage!.completion_tokens_details.reasoning_tokens, reasoningTokens);
  // OpenRouter's spelling of the same.
  const excluded = await ask({ logit_bias: LONG, thinking_token_budget: 8, reasoning: { exclude: true } } as Partial<ChatBody>);
  assert.deepEqual(excluded.choices[0].message, hidden.choices[0].message);
  assert.equal(excluded.usage!.completion_tokens_details.reasoning_tokens, reasoningTokens);
  const streamed = await s.http.post("/v1/chat/completions", {
    model: "think", messages: [{ role: "user", content: "Think about the river." }], max_tokens: 40, temperature: 0,
    logit_bias: LONG, thinking_token_budget: 8, include_reasoning: false, stream: true,
  });
  assert.equal(streamed.status, 200, streamed.text);
  assert.ok(!streamed.text.includes("reasoning"), streamed.text);

  const refused: Array<[Record<string, unknown>, string]> = [
    [{ thinking_token_budget: 8, reasoning_effort: "none" }, "thinking_token_budget"],
    [{ thinking_token_budget: 8, reasoning: { budget_tokens: 9 } }, "thinking_token_budget"],
    [{ reasoning_format: "none" }, "reasoning_format"],
    [{ include_reasoning: "no" }, "include_reasoning"],
  ];
  await assertRefused(refused);
  // A model without a thinking section names the field that asked, as for reasoning_effort.
  await assertRefused([[{ thinking_token_budget: 8 }, "thinking_token_budget"]], "tiny");
});

test("llama-server's reasoning_budget_tokens and thinking_budget_tokens are the thinking budget too, not dropped", async () => {
  const vllm = await ask({ logit_bias: LONG, thinking_token_budget: 8 } as Partial<ChatBody>);
  for (const field of ["reasoning_budget_tokens", "thinking_budget_tokens"]) {
    const r = await ask({ logit_bias: LONG, [field]: 8 } as Partial<ChatBody>);
    assert.deepEqual(r.choices[0].message, vllm.choices[0].message, field);
    assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, vllm.usage!.completion_tokens_details.reasoning_tokens, field);
  }
  // -1 is llama-server's "no budget": the whole answer may be thinking, as with no field at all.
  const unlimited = await ask({ logit_bias: LONG, reasoning_budget_tokens: -1 } as Partial<ChatBody>);
  assert.equal(unlimited.usage!.completion_tokens_details.reasoning_tokens, 40);
  // vLLM's thinking_token_budget takes -1 for the same (it validates it to None), on completions too.
  const vllmUnlimited = await ask({ logit_bias: LONG, thinking_token_budget: -1 } as Partial<ChatBody>);
  assert.equal(vllmUnlimited.usage!.completion_tokens_details.reasoning_tokens, 40);
  const unlimitedCompletion = await s.http.post("/v1/completions", { model: "think", prompt: "x", max_tokens: 3, thinking_token_budget: -1 });
  assert.equal(unlimitedCompletion.status, 200, unlimitedCompletion.text);

  const refused: Array<[Record<string, unknown>, string]> = [
    [{ reasoning_budget_tokens: 0 }, "reasoning_budget_tokens"],
    [{ reasoning_budget_tokens: -2 }, "reasoning_budget_tokens"],
    [{ thinking_token_budget: -2 }, "thinking_token_budget"],
    [{ reasoning_budget_tokens: 8, thinking_budget_tokens: 9 }, "thinking_budget_tokens"],
    [{ thinking_token_budget: 8, reasoning_budget_tokens: 9 }, "reasoning_budget_tokens"],
    [{ reasoning_budget_tokens: 8, reasoning: { budget_tokens: 9 } }, "reasoning_budget_tokens"],
    [{ thinking_budget_tokens: 8, reasoning_effort: "none" }, "thinking_budget_tokens"],
    [{ reasoning_budget_message: "Time is up." }, "reasoning_budget_message"],
  ];
  await assertRefused(refused);
  await assertRefused([[{ reasoning_budget_tokens: 8 }, "reasoning_budget_tokens"]], "tiny");
  const completion = await s.http.post("/v1/completions", { model: "think", prompt: "x", max_tokens: 3, thinking_budget_tokens: 8 });
  assert.equal(completion.status, 400, completion.text);
  assert.equal(completion.error?.param, "thinking_budget_tokens");
});

/** Each chat request with these extra fields is a 400 naming the paired field. */
async function assertRefused(cases: Array<[Record<string, unknown>, string]>, model = "think"): Promise<void> {
  for (const [extra, param] of cases) {
    const r = await s.http.post("/v1/chat/completions", { model, messages: [{ role: "user", content: "x" }], max_tokens: 3, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.error?.param, param, r.text);
  }
}
