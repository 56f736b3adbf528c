import assert from "../helpers/assert.ts";
import { after, before, test } from "node:test";
import { ensureFixtureModel, EXTRA_TOKENS, FIXTURE_TOKENS, THINKING_SPEC, type FixtureSpec } from "../fixtures/models.ts";
import type { ChatBody } from "../helpers/requests.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

// Thinking turned off closes the section in the prompt, whether the template closes it (its switch
// off: THINKING_TEMPLATE's, RWKV World's, GLM 4.6's, Laguna's) or Plinth does (a template without a
// switch: Kimi K2 Thinking's). Either way the answer has no thinking section: a thinking model told
// not to think may still write an opening marker first, and that is answer text, not the start of
// reasoning. Fixtures with random weights did exactly that at their first token (and some models'
// sections have no opening marker to wait for at all), so the whole answer came back as reasoning.

/**
 * The parts of Kimi K2 Thinking's template (moonshotai/Kimi-K2-Thinking) that shape its thinking
 * section, as it writes them: no switch, an empty closed section in earlier assistant turns, the last
 * turns' reasoning inside `<think>…</think>`, and a generation prompt that opens nothing.
 */
const KIMI_K2_THINKING_TEMPLATE = `{%- macro render_content(msg) -%}
    {%- set c = msg.get('content') -%}
    {%- if c is string -%}
      {{ c }}
    {%- endif -%}
{%- endmacro -%}

{% macro set_roles(message) -%}
  {%- set role_name =  message.get('name') or  message['role'] -%}
  {%- if message['role'] == 'user' -%}
    <|im_user|>{{role_name}}<|im_middle|>
  {%- elif message['role'] == 'assistant' -%}
    <|im_assistant|>{{role_name}}<|im_middle|>
  {%- else -%}
    <|im_system|>{{role_name}}<|im_middle|>
  {%- endif -%}
{%- endmacro -%}

{%- set ns = namespace(last_non_tool_call_assistant_msg=-1) -%}
{%- for idx in range(messages|length-1, -1, -1) -%}
    {%- if messages[idx]['role'] == 'assistant' and not messages[idx].get('tool_calls') -%}
        {%- set ns.last_non_tool_call_assistant_msg = idx -%}
    {%- endif -%}
{%- endfor -%}

{%- set hist_msgs = messages[:ns.last_non_tool_call_assistant_msg+1] -%}
{%- set suffix_msgs = messages[ns.last_non_tool_call_assistant_msg+1:] -%}

{%- if messages|length == 0 or messages[0]['role'] != 'system' -%}
  <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
{%- endif -%}

{%- for message in hist_msgs -%}
  {{set_roles(message)}}
  {%- if message['role'] == 'assistant' -%}
    <think></think>{{render_content(message)}}
  {%- elif message['content'] is not none -%}
    {{render_content(message)}}
  {%- endif -%}
  <|im_end|>
{%- endfor -%}

{%- for message in suffix_msgs -%}
  {{set_roles(message)}}
  {%- if message['role'] == 'assistant' -%}
    {%- set rc = message.get('reasoning_content', '') -%}
    <think>{{rc}}</think>{{render_content(message)}}
  {%- elif message['content'] is not none -%}
    {{render_content(message)}}
  {%- endif -%}
  <|im_end|>
{%- endfor -%}


{%- if add_generation_prompt -%}
  <|im_assistant|>assistant<|im_middle|>
{%- endif -%}`;

const KIMI_SPEC: FixtureSpec = {
  ...THINKING_SPEC,
  name: "plinth-kimi-k2-thinking",
  chatTemplate: KIMI_K2_THINKING_TEMPLATE,
  controlTokens: ["<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>"],
};

let server: TestServer;
before(async () => {
  server = await startTestServer({ model: [`think=${await ensureFixtureModel(THINKING_SPEC)}`, `kimi=${await ensureFixtureModel(KIMI_SPEC)}`] });
});
after(async () => {
  await server?.close();
});

/** The model writes <think> at every step, and never ends its turn or closes a section by itself. */
const WRITES_THINK = {
  [EXTRA_TOKENS.thinkOpen]: 100,
  [EXTRA_TOKENS.thinkClose]: -100,
  [FIXTURE_TOKENS.imEnd]: -100,
  [FIXTURE_TOKENS.endOfSequence]: -100,
};
const OFFS: Partial<ChatBody>[] = [{ reasoning_effort: "none" }, { chat_template_kwargs: { enable_thinking: false } }, { reasoning: { enabled: false } }];
const ask = (model: string, extra: Partial<ChatBody>) =>
  server.http.chat({ model, messages: [{ role: "user", content: "What is the weather in Paris?" }], max_tokens: 6, logit_bias: WRITES_THINK, ...extra });

for (const [model, shape] of [
  ["kimi", "a template without a switch (Plinth closes the section)"],
  ["think", "a template whose switch closes the section"],
] as const) {
  test(`thinking off, ${shape}: a <think> the model writes is answer text, nothing is reasoning`, async () => {
    const plain = await ask(model, {});
    for (const off of OFFS) {
      const r = await ask(model, off);
      // The prompt ends with the section closed: by the template's switch, or by Plinth for a model
      // whose template writes a section into its every turn (Kimi's), though it has no switch.
      assert.ok(r.usage!.prompt_tokens > plain.usage!.prompt_tokens, JSON.stringify({ off, plain: plain.usage, off_: r.usage }));
      const m = r.choices[0].message;
      assert.equal(m.reasoning_content, undefined, JSON.stringify({ off, m }));
      assert.equal(m.content, "<think>".repeat(6), JSON.stringify(off));
      assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 0, JSON.stringify(off));
    }
    // Streamed the same: no reasoning deltas.
    const stream = await server.http.chatStream({ model, messages: [{ role: "user", content: "What is the weather in Paris?" }], max_tokens: 6, logit_bias: WRITES_THINK, reasoning_effort: "none" });
    assert.equal(stream.reasoning, "");
    assert.equal(stream.content, "<think>".repeat(6));
  });

  test(`thinking on, ${shape}: the section is opened and its text is reasoning`, async () => {
    const r = await ask(model, { reasoning_effort: "high" });
    const m = r.choices[0].message;
    assert.equal(m.content, "");
    assert.ok(m.reasoning_content!.length > 0, JSON.stringify(m));
    assert.equal(r.usage!.completion_tokens_details.reasoning_tokens, 6);
  });
}
