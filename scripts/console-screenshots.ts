/**
 * Takes the README's screenshots of the web console (docs/console-*.png) in headless Chromium,
 * against the real server on the fixture models:
 *
 *   node --import tsx scripts/console-screenshots.ts
 *
 * Needs a Chromium (apt-get install chromium, or PLINTH_CHROMIUM). The fixture models write
 * random text; the screenshots show the console, not a model's wisdom.
 */
import { chromium, type Page } from "playwright-core";
import { EXTRA_TOKENS } from "../test/fixtures/models.ts";
import { NO_EOG, startTestServer } from "../test/helpers/server.ts";
import { CHROMIUM } from "../test/browser/browser.ts";
import { dbx, waitForEndpoint } from "../test/helpers/databricks.ts";

if (!CHROMIUM) throw new Error("no Chromium: apt-get install chromium, or set PLINTH_CHROMIUM");
const ADMIN = "admin-key-for-the-screenshots";
const server = await startTestServer({ "admin-key": ADMIN }, { think: true });
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
// An A/B serving endpoint over the two fixture models, for side by side and the operator's view.
const AB = {
  served_entities: [
    { name: "current", entity_name: "tiny" },
    { name: "candidate", entity_name: "think" },
  ],
  traffic_config: { routes: [{ served_model_name: "current", traffic_percentage: 80 }, { served_model_name: "candidate", traffic_percentage: 20 }] },
};
await dbx(server, "POST", "/api/2.0/serving-endpoints", { name: "assistant-ab", config: AB });
await waitForEndpoint(server, "assistant-ab");

async function page(width = 1360, height = 820): Promise<Page> {
  const p = await (await browser.newContext({ viewport: { width, height }, colorScheme: "light" })).newPage();
  await p.goto(`${server.url}/`);
  await p.locator("body[data-ready=true]").waitFor();
  return p;
}

async function chat(p: Page, text: string) {
  const done = p.locator(".turn-assistant .stats", { hasText: "finish:" });
  const before = await done.count();
  await p.getByLabel("Message", { exact: true }).fill(text);
  await p.getByRole("button", { name: "Send", exact: true }).click();
  await done.nth(before).waitFor();
}

try {
  // Playground: reasoning (opened), then a tool call, with logprobs on.
  const p = await page();
  await p.getByLabel("Model", { exact: true }).selectOption("think");
  await p.getByLabel("max tokens").fill("40");
  await p.getByLabel("system prompt").fill("You are a terse assistant.");
  await p.getByLabel("temperature").fill("0.7");
  await p.getByText("More request fields").click();
  await p.getByLabel("Merged into the request (JSON object)").fill(JSON.stringify({ logit_bias: { ...NO_EOG, [EXTRA_TOKENS.thinkClose]: -100 }, reasoning: { budget_tokens: 12 } }));
  await p.getByLabel("token probabilities").check();
  await chat(p, "What should I name my boat?");
  await p.locator("details.reasoning summary").first().click();
  await p.getByLabel("Merged into the request (JSON object)").fill('{"reasoning_effort": "none"}');
  await p.getByText("Tools", { exact: true }).click();
  const tool = { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"] } } };
  await p.getByLabel("Tool definitions (JSON array)").fill(JSON.stringify([tool], null, 1));
  await p.getByLabel("tool_choice").selectOption("required");
  await chat(p, "And the weather at sea?");
  await p.getByRole("button", { name: "Save to server" }).click();
  await p.locator("#save-status .saved-id").waitFor();
  // A token's probabilities, as the keyboard shows them (the mouse shows the same tooltip).
  await p.locator(".tok").nth(3).focus();
  await p.screenshot({ path: "docs/console-playground.png" });

  await p.getByRole("button", { name: "View code" }).click();
  await p.getByRole("tab", { name: "Python (openai)" }).click();
  await p.screenshot({ path: "docs/console-code.png" });
  await p.keyboard.press("Escape");

  // Side by side: two served entities of one endpoint (Databricks' fields only, so no logit_bias).
  await p.getByLabel("tool_choice").selectOption("none");
  await p.getByLabel("Tool definitions (JSON array)").fill("");
  await p.getByLabel("Merged into the request (JSON object)").fill("");
  await p.getByLabel("token probabilities").uncheck();
  await p.getByRole("link", { name: "Side by side" }).click();
  await p.getByLabel("Model A").selectOption({ value: "entity:assistant-ab/current" });
  await p.getByLabel("Model B").selectOption({ value: "entity:assistant-ab/candidate" });
  await p.getByLabel("Prompt", { exact: true }).fill("Write a haiku about rivers.");
  await p.getByRole("button", { name: "Send to both" }).click();
  for (const col of ["#col-a", "#col-b"]) await p.locator(`${col} .stats`, { hasText: "finish:" }).waitFor();
  await p.screenshot({ path: "docs/console-side-by-side.png" });

  // Operator's view under some load.
  await p.getByRole("link", { name: "Operator" }).click();
  const load = Array.from({ length: 6 }, (_, i) =>
    server.http.chat({ model: i % 2 ? "think" : "tiny", messages: [{ role: "user", content: `load ${i}` }], max_tokens: 400 + 100 * i, logit_bias: NO_EOG }),
  );
  await p.waitForTimeout(9000);
  await p.getByRole("button", { name: "Edit traffic of assistant-ab" }).click();
  await p.getByLabel("Traffic to candidate (%)").fill("50");
  await p.getByLabel("Traffic to current (%)").fill("50");
  await p.screenshot({ path: "docs/console-operator.png", fullPage: true });
  await Promise.all(load);

  // Narrow screen.
  const narrow = await page(390, 844);
  await narrow.getByLabel("Model", { exact: true }).selectOption("tiny");
  await narrow.getByLabel("max tokens").fill("30");
  await narrow.getByRole("button", { name: "API key" }).click();
  await narrow.keyboard.press("Escape");
  await narrow.screenshot({ path: "docs/console-narrow.png" });

  // Keys and usage.
  await p.getByRole("link", { name: "Keys & usage" }).click();
  await p.getByLabel("Admin key", { exact: true }).fill(ADMIN);
  await p.getByRole("button", { name: "Use", exact: true }).click();
  for (const name of ["team-research", "batch-jobs"]) {
    await p.getByLabel("name", { exact: true }).fill(name);
    await p.getByLabel("tokens/min").fill(name === "batch-jobs" ? "200000" : "50000");
    await p.getByRole("button", { name: "Create key" }).click();
    await p.locator("#keys-table tbody tr", { hasText: name }).waitFor();
  }
  await p.waitForTimeout(500);
  await p.getByRole("button", { name: "Show" }).click();
  await p.locator("#usage-chart svg").waitFor();
  await p.screenshot({ path: "docs/console-keys.png", fullPage: true });

} finally {
  await browser.close();
  await server.close();
}
