import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { buildApp } from "../../src/app.ts";
import { loadConfig } from "../../src/config/load.ts";
import { GenerationService } from "../../src/core/generation-service.ts";
import { ModelRegistry } from "../../src/core/registry.ts";
import { scriptedApp } from "../helpers/scripted-app.ts";
import { testStore } from "../helpers/test-store.ts";

test("GET / serves the console page with a strict content security policy", async () => {
  const { app } = await scriptedApp();
  try {
    const page = await app.inject({ method: "GET", url: "/" });
    assert.equal(page.statusCode, 200);
    assert.match(String(page.headers["content-type"]), /^text\/html/);
    assert.match(page.body, /<script type="module" src="\/ui\/main\.js">/);
    // The page is told the admin API is off here (no admin key), so it asks /admin/keys nothing.
    assert.match(page.body, /<body data-admin-api="off">/);
    const csp = String(page.headers["content-security-policy"]);
    assert.match(csp, /script-src 'self'/);
    assert.match(csp, /connect-src 'self'/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(page.headers["x-content-type-options"], "nosniff");

    const script = await app.inject({ method: "GET", url: "/ui/main.js" });
    assert.equal(script.statusCode, 200);
    assert.match(String(script.headers["content-type"]), /^text\/javascript/);
    // Unchanged files are not sent again.
    const again = await app.inject({ method: "GET", url: "/ui/main.js", headers: { "if-none-match": String(script.headers.etag) } });
    assert.equal(again.statusCode, 304);

    // Only the console's own files: no other name, no path out of the folder, not its tsconfig.
    for (const url of ["/ui/nope.js", "/ui/tsconfig.json", "/ui/..%2Fplugin.ts", "/ui/../app.ts"]) {
      const r = await app.inject({ method: "GET", url });
      assert.equal(r.statusCode, 404, url);
      assert.ok(r.json().error, url);
    }
  } finally {
    await app.close();
  }
});

test("with the console off (--no-ui, PLINTH_UI=false), / is an ordinary 404", async () => {
  assert.equal(loadConfig({}, {}).ui, true);
  assert.equal(loadConfig({ ui: false }, {}).ui, false);
  assert.equal(loadConfig({}, { PLINTH_UI: "false" }).ui, false);
  const { store, sealer, dispose } = testStore();
  const app = buildApp(new GenerationService(new ModelRegistry(1)), { bodyLimit: 1024, store, sealer, ui: false });
  try {
    for (const url of ["/", "/ui/main.js"]) {
      const r = await app.inject({ method: "GET", url });
      assert.equal(r.statusCode, 404, url);
    }
  } finally {
    await app.close();
    dispose();
  }
});
