import assert from "../helpers/assert.ts";
import { test } from "node:test";
import type { Page } from "playwright-core";
import { EXTRA_TOKENS } from "../fixtures/models.ts";
import { NO_EOG, type TestServer, useTestServer } from "../helpers/server.ts";
import { NO_BROWSER, useBrowser } from "./browser.ts";

// The console in headless Chromium against the real server on the fixture models: "tiny" (plain
// text) and "think" (reasoning and tool calls). The browser only clicks and types, as a user would.

const ADMIN = "admin-key-for-the-browser-tests";
// With the admin API on; no API key exists until the last test creates one.
// (No server at all when the tests are skipped for want of a browser.)
const s = NO_BROWSER ? ({} as TestServer) : useTestServer({ "admin-key": ADMIN }, { think: true });
const browser = useBrowser();
const skip = NO_BROWSER;

/** A fresh page on the console, its model lists loaded. */
async function open(): Promise<Page> {
  const page = await browser.page();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${s.url}/`);
  await page.locator("body[data-ready=true]").waitFor();
  assert.deepEqual(errors, []);
  return page;
}

/** Sets the playground's fields: model, max tokens, extra request fields. */
async function configure(page: Page, opts: { model?: string; maxTokens?: number; extra?: object }) {
  if (opts.model) await page.getByLabel("Model", { exact: true }).selectOption(opts.model);
  if (opts.maxTokens !== undefined) await page.getByLabel("max tokens").fill(String(opts.maxTokens));
  if (opts.extra) {
    await page.getByText("More request fields").click();
    await page.getByLabel("Merged into the request (JSON object)").fill(JSON.stringify(opts.extra));
  }
}

async function send(page: Page, text: string) {
  await page.getByLabel("Message", { exact: true }).fill(text);
  await page.getByRole("button", { name: "Send", exact: true }).click();
}

/** The last answer's numbers line, once the answer has finished. */
async function finished(page: Page) {
  const stats = page.locator(".turn-assistant .stats").last();
  await stats.filter({ hasText: "finish:" }).waitFor();
  return (await stats.textContent()) ?? "";
}

test("a prompt streams into the page and ends with its token counts, TTFT and speed", { skip }, async () => {
  const page = await open();
  await configure(page, { model: "tiny", maxTokens: 120, extra: { logit_bias: NO_EOG } });
  // From the keyboard: Enter sends.
  await page.getByLabel("Message", { exact: true }).fill("Tell me a story.");
  await page.getByLabel("Message", { exact: true }).press("Enter");
  // Seen while the answer is still arriving: the streaming marker on partial text.
  const partial = page.locator(".turn-assistant .content.streaming");
  await partial.filter({ hasText: /\S/ }).waitFor();
  const stats = await finished(page);
  assert.match(stats, /120 completion tokens/);
  assert.match(stats, /\d+ prompt tokens/);
  assert.match(stats, /TTFT \d+ ms/);
  assert.match(stats, /tokens\/s/);
  assert.match(stats, /finish: length/);
  assert.ok(((await page.locator(".turn-assistant .content").textContent()) ?? "").length > 20);
  // The conversation was kept in IndexedDB: it is listed, and comes back after a reload.
  await page.reload();
  await page.locator("body[data-ready=true]").waitFor();
  await page.getByRole("button", { name: "Tell me a story.", exact: true }).click();
  await page.locator(".turn-assistant .stats", { hasText: "finish: length" }).waitFor();
});

test("Stop ends an answer mid-stream and the page takes input again", { skip }, async () => {
  const page = await open();
  await configure(page, { model: "tiny", maxTokens: 2000, extra: { logit_bias: NO_EOG } });
  await send(page, "Go on and on.");
  await page.locator(".turn-assistant .content.streaming").filter({ hasText: /\S{3}/ }).waitFor();
  await page.getByRole("button", { name: "Stop" }).click();
  const stats = await finished(page);
  assert.match(stats, /finish: stopped/);
  assert.ok(await page.getByRole("button", { name: "Send", exact: true }).isEnabled());
  assert.ok(await page.getByRole("button", { name: "Stop" }).isHidden());
  const words = ((await page.locator(".turn-assistant .content").textContent()) ?? "").length;
  assert.ok(words > 0 && words < 2000 * 3, `stopped early (${words} characters)`);
});

test("reasoning is shown collapsed above the answer and opens on demand", { skip }, async () => {
  const page = await open();
  const long = { ...NO_EOG, [EXTRA_TOKENS.thinkClose]: -100 };
  await configure(page, { model: "think", maxTokens: 30, extra: { logit_bias: long, reasoning: { budget_tokens: 10 } } });
  await send(page, "Think about the river.");
  const stats = await finished(page);
  assert.match(stats, /reasoning/);
  const reasoning = page.locator(".turn-assistant details.reasoning");
  await reasoning.waitFor();
  assert.equal(await reasoning.getAttribute("open"), null, "collapsed");
  assert.match((await reasoning.locator("summary").textContent()) ?? "", /Reasoning \(\d+ tokens\)/);
  assert.ok(await reasoning.locator(".reasoning-text").isHidden());
  await reasoning.locator("summary").click();
  assert.ok(await reasoning.locator(".reasoning-text").isVisible());
  assert.ok(((await reasoning.locator(".reasoning-text").textContent()) ?? "").length > 0);
  assert.ok(((await page.locator(".turn-assistant .content").textContent()) ?? "").length > 0, "the answer follows the reasoning");
});

const WEATHER_TOOL = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false },
      strict: true,
    },
  },
];

test("a forced tool call is drawn with its arguments, and a hand-entered result continues the chat", { skip }, async () => {
  const page = await open();
  await configure(page, { model: "think", maxTokens: 120, extra: { reasoning_effort: "none" } });
  await page.getByText("Tools", { exact: true }).click();
  await page.getByLabel("Tool definitions (JSON array)").fill(JSON.stringify(WEATHER_TOOL));
  await page.getByLabel("tool_choice").selectOption("required");
  await send(page, "What is the weather in Paris?");
  assert.match(await finished(page), /finish: tool_calls/);
  const call = page.locator(".tool-call").first();
  assert.equal(await call.locator(".tool-name").textContent(), "get_weather");
  const args = JSON.parse((await call.locator(".tool-args").textContent()) ?? "");
  assert.equal(typeof args.city, "string");

  // Answer the call by hand; the model goes on without tools forced.
  await page.getByLabel("tool_choice").selectOption("none");
  await call.getByLabel("Result of get_weather").fill('{"temperature": 21}');
  await call.getByRole("button", { name: "Send result" }).click();
  await page.locator(".turn-tool").waitFor();
  assert.match((await page.locator(".turn-tool .content").textContent()) ?? "", /temperature/);
  await page.locator(".turn-assistant").nth(1).locator(".stats", { hasText: "finish:" }).waitFor();
});

test("JSON schema mode shows the parsed result", { skip }, async () => {
  const page = await open();
  await configure(page, { model: "tiny", maxTokens: 80 });
  await page.getByText("Output format").click();
  await page.getByLabel("response_format").selectOption("json_schema");
  const schema = { type: "object", properties: { answer: { type: "string", maxLength: 12 } }, required: ["answer"], additionalProperties: false };
  await page.getByLabel("JSON schema", { exact: true }).fill(JSON.stringify(schema));
  await send(page, "Answer in JSON.");
  assert.match(await finished(page), /finish: stop/);
  const result = page.locator(".json-result");
  assert.equal(await result.locator("h4").textContent(), "Parsed JSON");
  const parsed = JSON.parse((await result.locator("pre.json-ok").textContent()) ?? "");
  assert.equal(typeof parsed.answer, "string");
});

test("token probabilities show on hover, View code writes the request, Regenerate and Edit resend", { skip }, async () => {
  const page = await open();
  await configure(page, { model: "tiny", maxTokens: 12, extra: { logit_bias: NO_EOG, top_k: 40 } });
  await page.getByLabel("token probabilities").check();
  await send(page, "Hello");
  await finished(page);
  const tokens = page.locator(".turn-assistant .tok");
  assert.equal(await tokens.count(), 12);
  assert.match((await tokens.first().getAttribute("title")) ?? "", /logprob -?\d/);

  await page.getByRole("button", { name: "View code" }).click();
  const code = page.locator("#code-text");
  assert.match((await code.textContent()) ?? "", /curl http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions/);
  await page.getByRole("tab", { name: "Python (openai)" }).click();
  const python = (await code.textContent()) ?? "";
  assert.match(python, /client\.chat\.completions\.create\(/);
  assert.match(python, /extra_body=\{\s*"top_k": 40/);
  await page.getByRole("tab", { name: "JavaScript (openai)" }).click();
  assert.match((await code.textContent()) ?? "", /new OpenAI\(\{ baseURL: /);
  await page.getByRole("button", { name: "Close" }).click();

  const first = (await page.locator(".turn-assistant .content").textContent()) ?? "";
  await page.getByLabel("seed").fill("7");
  await page.getByRole("button", { name: "Regenerate" }).click();
  await finished(page);
  assert.equal(await page.locator(".turn-assistant").count(), 1, "the answer was replaced");
  assert.notEqual(await page.locator(".turn-assistant .content").textContent(), first);

  await page.getByRole("button", { name: "Edit message 1" }).click();
  await page.getByRole("textbox", { name: "Edit message" }).fill("Hello again");
  await page.getByRole("button", { name: "Save and send" }).click();
  await finished(page);
  assert.equal(await page.locator(".turn-user .content").textContent(), "Hello again");
  assert.equal(await page.locator(".turn-assistant").count(), 1);
});

test("side by side streams one prompt to two models next to each other", { skip }, async () => {
  const page = await open();
  await configure(page, { maxTokens: 40, extra: { logit_bias: NO_EOG } });
  await page.getByRole("link", { name: "Side by side" }).click();
  await page.getByLabel("Model A").selectOption("tiny");
  await page.getByLabel("Model B").selectOption("think");
  await page.getByLabel("Prompt", { exact: true }).fill("Say something.");
  await page.getByRole("button", { name: "Send to both" }).click();
  for (const col of ["#col-a", "#col-b"]) await page.locator(`${col} .stats`, { hasText: "finish: length" }).waitFor();
  assert.equal(await page.locator("#col-a-title").textContent(), "A · tiny");
  assert.equal(await page.locator("#col-b-title").textContent(), "B · think");
  for (const col of ["#col-a", "#col-b"]) {
    assert.match((await page.locator(`${col} .stats`).textContent()) ?? "", /40 completion tokens/);
    // "think" may spend all 40 tokens reasoning; either way the column shows what it streamed.
    const shown = (await page.locator(`${col} .content`).textContent()) ?? "";
    const reasoning = (await page.locator(`${col} .reasoning-text`).textContent()) ?? "";
    assert.ok(shown.length + reasoning.length > 0);
  }
});

test("on a narrow screen the playground is one column: the thread first, then the settings", { skip }, async () => {
  const page = await open();
  await page.setViewportSize({ width: 390, height: 844 });
  const thread = await page.locator(".thread").boundingBox();
  const settings = await page.locator("#settings").boundingBox();
  assert.ok(thread && settings);
  assert.ok(settings.y >= thread.y + thread.height - 1, "settings below the thread");
  assert.ok(settings.width > 300 && thread.width > 300, "both full width");
  const overflow = await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth");
  assert.equal(overflow, 0, "no sideways scrolling");
});

test("the operator's view lists the models with their state and charts the metrics", { skip }, async () => {
  const page = await open();
  await page.getByRole("link", { name: "Operator" }).click();
  const rows = page.locator("#models-table tbody tr");
  await rows.filter({ hasText: "think" }).waitFor();
  assert.match((await rows.filter({ hasText: "tiny" }).textContent()) ?? "", /ready/);
  // Traffic while the page watches: the throughput chart sees the tokens.
  await s.http.chat({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 60, logit_bias: NO_EOG });
  const throughput = page.locator("figure.chart", { hasText: "Throughput" });
  await throughput.locator(".chart-value", { hasText: /^[1-9][\d.]* tokens\/s/ }).waitFor({ timeout: 10_000 });
  for (const name of ["Time to first token", "Queue depth", "KV cache usage"])
    await page.locator("figure.chart", { hasText: name }).locator(".chart-value", { hasText: /\d/ }).waitFor();
});

// Last: once a key exists, the server asks every request for one.
test("keys: create one, use it from the playground, see its requests in the usage chart, revoke it", { skip }, async () => {
  const page = await open();
  await page.getByRole("link", { name: "Keys & usage" }).click();
  await page.locator("#keys-status", { hasText: "admin key" }).waitFor();
  await page.getByLabel("Admin key").fill(ADMIN);
  await page.getByRole("button", { name: "Use", exact: true }).click();
  await page.getByRole("heading", { name: "API keys" }).waitFor();

  await page.getByLabel("name", { exact: true }).fill("browser-test");
  await page.getByLabel("tokens/min").fill("100000");
  await page.getByRole("button", { name: "Create key" }).click();
  const secret = (await page.locator("#new-key code.secret").textContent()) ?? "";
  assert.ok(secret.length >= 20, secret);
  const row = page.locator("#keys-table tbody tr", { hasText: "browser-test" });
  await row.waitFor();
  assert.match((await row.textContent()) ?? "", /100000 tokens\/min.*active/);

  // The playground now needs the key: enter it and chat.
  await page.getByRole("button", { name: "API key" }).click();
  await page.getByLabel("Key", { exact: true }).fill(secret);
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("link", { name: "Playground" }).click();
  await configure(page, { model: "tiny", maxTokens: 20 });
  await send(page, "Hello with a key");
  assert.match(await finished(page), /completion tokens/);

  // The ledger writes in batches; ask again until the key's row is there.
  await page.getByRole("link", { name: "Keys & usage" }).click();
  await page.getByLabel("group by").selectOption("key");
  const usage = page.locator("#usage-table tbody tr", { hasText: "browser-test" });
  for (let i = 0; i < 20 && (await usage.count()) === 0; i++) {
    await page.getByRole("button", { name: "Show" }).click();
    await page.waitForTimeout(250);
  }
  const cells = await usage.locator("td").allTextContents();
  assert.ok(Number(cells[0]) >= 1, `requests: ${cells}`);
  assert.ok(Number(cells[5]) > 0, `total tokens: ${cells}`);
  assert.match((await page.locator("#usage-chart svg").getAttribute("aria-label")) ?? "", /Tokens by key/);
  assert.ok((await page.locator("#usage-chart svg text", { hasText: "browser-test" }).count()) === 1);

  page.once("dialog", (d) => void d.accept());
  await row.getByRole("button", { name: "Revoke browser-test" }).click();
  await page.locator("#keys-table tbody tr", { hasText: "revoked" }).waitFor();
});
