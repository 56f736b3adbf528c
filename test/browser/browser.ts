import { existsSync } from "node:fs";
import { after, before } from "node:test";
import { type Browser, type BrowserContextOptions, chromium, type Page } from "playwright-core";

/**
 * The Chromium the browser tests drive: $PLINTH_CHROMIUM when set (a path that does not exist
 * turns the browser tests off), else Debian's `chromium` package (`apt-get install chromium`).
 * Undefined when there is none; the tests then skip, saying why.
 */
export function findChromium(): string | undefined {
  const chosen = process.env.PLINTH_CHROMIUM;
  const candidates = chosen ? [chosen] : ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
  return candidates.find((p) => existsSync(p));
}

export const CHROMIUM = findChromium();

/** The reason to pass as `skip` when no browser is installed (false when one is). */
export const NO_BROWSER: string | false = CHROMIUM
  ? false
  : process.env.PLINTH_CHROMIUM
    ? `no Chromium at PLINTH_CHROMIUM=${process.env.PLINTH_CHROMIUM}`
    : "no Chromium found: install Debian's `chromium` (apt-get install chromium) or set PLINTH_CHROMIUM to run the browser tests";

if (!CHROMIUM) process.stderr.write(`browser tests skipped: ${NO_BROWSER}\n`);

/**
 * Launches headless Chromium once for the file and gives each test a fresh page (its own context,
 * so local storage and IndexedDB start empty; `options` for that context, a time zone say). A
 * second tab of the same browser is `page.context().newPage()`. Read it inside tests and hooks only.
 */
export function useBrowser(): { page: (options?: BrowserContextOptions) => Promise<Page> } {
  let browser: Browser | undefined;
  const pages: Page[] = [];
  before(async () => {
    if (!CHROMIUM) return;
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  });
  after(async () => {
    await browser?.close();
  });
  return {
    page: async (options = {}) => {
      if (!browser) throw new Error("no browser (the test should have been skipped)");
      const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...options });
      const page = await context.newPage();
      page.setDefaultTimeout(15_000);
      pages.push(page);
      return page;
    },
  };
}
