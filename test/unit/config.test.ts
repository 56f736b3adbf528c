import assert from "../helpers/assert.ts";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config/load.ts";

test("defaults", () => {
  const c = loadConfig({}, {});
  assert.equal(c.host, "127.0.0.1");
  assert.equal(c.port, 8080);
  // Unset: the engine picks by the binary it runs on (runtime.ts defaultThreads, engine-build.test.ts).
  assert.equal(c.threads, undefined);
  assert.equal(c.gpu, "auto");
  assert.deepEqual(c.model, []);
});

test("file < environment < flags", () => {
  const dir = mkdtempSync(join(tmpdir(), "plinth-config-"));
  const file = join(dir, "plinth.yaml");
  writeFileSync(file, "port: 9000\nparallel: 3\nhost: 0.0.0.0\nmodel:\n  - a=/x/a.gguf\n");
  const c = loadConfig({ config: file, port: "9100" }, { PLINTH_PARALLEL: "6", PLINTH_PORT: "9050" });
  assert.equal(c.port, 9100);
  assert.equal(c.parallel, 6);
  assert.equal(c.host, "0.0.0.0");
  assert.deepEqual(c.model, ["a=/x/a.gguf"]);
});

test("PLINTH_MODEL may list several models and PLINTH_CTX_SIZE maps to ctx-size", () => {
  const c = loadConfig({}, { PLINTH_MODEL: "a.gguf, b=b.gguf", PLINTH_CTX_SIZE: "2048" });
  assert.deepEqual(c.model, ["a.gguf", "b=b.gguf"]);
  assert.equal(c["ctx-size"], 2048);
});

test("bad values name the setting", () => {
  assert.throws(() => loadConfig({ port: "nope" }, {}), (e: unknown) => e instanceof ConfigError && /port/.test(e.message));
  assert.throws(() => loadConfig({ gpu: "tpu" }, {}), (e: unknown) => e instanceof ConfigError && /gpu/.test(e.message));
  assert.throws(() => loadConfig({ config: "/nonexistent/plinth.yaml" }, {}), ConfigError);
});

test("every setting has a serve flag and a line of --help, and the README's option table names it", async () => {
  const { configSchema } = await import("../../src/config/schema.ts");
  const { SERVE_OPTIONS, USAGE } = await import("../../src/cli/serve-options.ts");
  const { readFileSync } = await import("node:fs");
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  // `ui` is the one setting whose flag is its negation.
  const flags = Object.keys(configSchema.shape).map((key) => (key === "ui" ? "no-ui" : key));
  const missing = flags.filter((flag) => !(flag in SERVE_OPTIONS));
  assert.deepEqual(missing, [], "settings without a flag");
  const undocumented = flags.filter((flag) => !USAGE.includes(`--${flag}`));
  assert.deepEqual(undocumented, [], "flags missing from --help");
  const notInReadme = flags.filter((flag) => !readme.includes(`\`--${flag}`));
  assert.deepEqual(notInReadme, [], "flags missing from the README");
  // A flag parses into the setting: the two that were missing once.
  const c = loadConfig({ "route-seed": "7", "scale-to-zero-after": "2.5" }, {});
  assert.equal(c["route-seed"], 7);
  assert.equal(c["scale-to-zero-after"], 2.5);
});

test("a timeout longer than a Node timer holds is refused, not turned into 1 ms", () => {
  // Node fires a timer past 2^31-1 ms after 1 ms: --body-timeout 3000000 made every slow body a 408 at once.
  for (const key of ["body-timeout", "headers-timeout", "send-timeout", "keep-alive-timeout", "queue-timeout", "drain-timeout", "connect-timeout", "first-token-timeout", "idle-timeout", "health-interval", "eject-time"]) {
    assert.throws(
      () => loadConfig({ [key]: "3000000" }, {}),
      (e: unknown) => e instanceof ConfigError && e.message.includes(`'${key}'`) && /at most 1000000 seconds/.test(e.message),
      key,
    );
    assert.equal(loadConfig({ [key]: "1000000" }, {})[key as "body-timeout"], 1_000_000);
  }
  const dir = mkdtempSync(join(tmpdir(), "plinth-config-"));
  const file = join(dir, "plinth.yaml");
  writeFileSync(file, "upstream:\n  - name: big\n    url: http://h:8000\n    first-token-timeout: 5000000\n");
  assert.throws(() => loadConfig({ config: file }, {}), (e: unknown) => e instanceof ConfigError && /first-token-timeout/.test(e.message));
});

test("an unknown key in the config file is refused, naming it", () => {
  const dir = mkdtempSync(join(tmpdir(), "plinth-config-"));
  const file = join(dir, "plinth.yaml");
  writeFileSync(file, "prot: 9000\nparallel: 2\n");
  assert.throws(() => loadConfig({ config: file }, {}), (e: unknown) => e instanceof ConfigError && /unknown setting 'prot'/.test(e.message));
  writeFileSync(file, "no-ui: true\n");
  assert.throws(() => loadConfig({ config: file }, {}), (e: unknown) => e instanceof ConfigError && /'no-ui'.*ui: false/.test(e.message));
  writeFileSync(file, "ui: false\nparallel: 2\n");
  const c = loadConfig({ config: file }, {});
  assert.equal(c.ui, false);
  assert.equal(c.parallel, 2);
});

test("a config file that is not valid YAML is refused naming the file", () => {
  const dir = mkdtempSync(join(tmpdir(), "plinth-config-"));
  const file = join(dir, "plinth.yaml");
  for (const text of ["port: [1\n", "port: 1\nport: 2\n", "model:\n  - a\n - b\n"]) {
    writeFileSync(file, text);
    assert.throws(
      () => loadConfig({ config: file }, {}),
      (e: unknown) => e instanceof ConfigError && e.message.startsWith(`config file ${file} is not valid YAML: `) && /line \d+/.test(e.message),
      JSON.stringify(text),
    );
  }
});

test("every yes/no setting takes the same words, from the environment and from YAML", () => {
  const dir = mkdtempSync(join(tmpdir(), "plinth-config-"));
  const file = join(dir, "plinth.yaml");
  const words: [string, boolean][] = [["true", true], ["on", true], ["1", true], ["ON", true], ["false", false], ["off", false], ["0", false], ["Off", false]];
  for (const key of ["log-bodies", "ui", "no-auth", "metrics-auth", "ledger"] as const) {
    const env = `PLINTH_${key.toUpperCase().replaceAll("-", "_")}`;
    for (const [word, value] of words) {
      assert.equal(loadConfig({}, { [env]: word })[key], value, `${env}=${word}`);
      writeFileSync(file, `${key}: ${word}\n`);
      assert.equal(loadConfig({ config: file }, {})[key], value, `${key}: ${word} in YAML`);
    }
    assert.throws(
      () => loadConfig({}, { [env]: "maybe" }),
      (e: unknown) => e instanceof ConfigError && e.message.includes(`'${key}'`) && /true\/false, on\/off or 1\/0/.test(e.message),
      env,
    );
  }
  // An upstream's own yes/no in the file too.
  writeFileSync(file, "upstream:\n  - name: up\n    url: http://h:8000\n    tokenize: off\n");
  assert.deepEqual((loadConfig({ config: file }, {}).upstream[0] as { tokenize?: boolean }).tokenize, false);
});
