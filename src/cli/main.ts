import { parseArgs } from "node:util";
import { prepareDataDir } from "../config/data-dir.ts";
import { ConfigError, loadConfig } from "../config/load.ts";
import { listCachedModels } from "../models/cache-list.ts";
import { resolveModelPath } from "../models/download.ts";
import { parseModelArg } from "../models/source.ts";
import { onlyUsed, type Takes } from "./args.ts";
import { createProgressBar } from "./progress-bar.ts";
import { KEYS_USAGE } from "./keys-usage.ts";
import { SERVE_OPTIONS, USAGE } from "./serve-options.ts";

/** What each command reads; serve reads every serve option, pull and models only where the cache is. */
const COMMAND_TAKES: Record<string, Takes> = {
  serve: { options: Object.keys(SERVE_OPTIONS), words: 0 },
  pull: { options: ["cache-dir"], words: Infinity },
  models: { options: ["cache-dir"], words: 0 },
};

async function main(argv: string[]): Promise<number> {
  // Key and usage commands have options of their own.
  if (argv[0] === "keys" || argv[0] === "usage") {
    if (argv.includes("--help") || argv.includes("-h")) {
      process.stdout.write(KEYS_USAGE);
      return 0;
    }
    // Loaded only when used: the store and the server's whole module graph cost every other command
    // (an argument mistake, --help, pull) a second or more of start-up.
    const { keysCommand, usageCommand } = await import("./keys.ts");
    return argv[0] === "keys" ? keysCommand(argv.slice(1)) : usageCommand(argv.slice(1));
  }
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: SERVE_OPTIONS,
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const [command = "serve", ...rest] = positionals;
  const takes = COMMAND_TAKES[command];
  if (takes) onlyUsed(command, values, rest, takes, "; plinth --help lists each command's options");
  // `--no-ui` is the one negative flag: it sets the `ui` setting (PLINTH_UI=false, `ui: false` in YAML).
  const { "no-ui": noUi, ...flags } = values;
  const config = loadConfig(noUi ? { ...flags, ui: false } : flags);

  if (command === "pull") {
    if (rest.length === 0) throw new ConfigError("pull needs a model, e.g. plinth pull hf:owner/repo/file.gguf");
    for (const arg of rest) {
      const source = parseModelArg(arg);
      const path = await resolveModelPath(source, { cacheDir: config["cache-dir"], progress: createProgressBar(source.id) });
      process.stdout.write(`${path}\n`);
    }
    return 0;
  }
  if (command === "models") {
    const models = listCachedModels(config["cache-dir"]);
    if (models.length === 0) process.stdout.write("no downloaded models (plinth pull hf:owner/repo/file.gguf)\n");
    for (const m of models) process.stdout.write(`${m.ref}\t${(m.bytes / 1e6).toFixed(1)} MB\t${m.path}\n`);
    return 0;
  }
  if (command !== "serve") throw new ConfigError(`unknown command '${command}'\n\n${USAGE}`);

  // One failed generation inside the engine must not take every other client down with it.
  process.on("unhandledRejection", (reason) => {
    process.stderr.write(`plinth: internal error (the server keeps running): ${(reason as Error)?.stack ?? String(reason)}\n`);
  });
  // A data directory that cannot serve is said before the server's modules load (a second and more).
  prepareDataDir(config["data-dir"]);
  const { serve } = await import("./serve.ts");
  const server = await serve(config);
  // SIGTERM/SIGINT: stop accepting, let running requests finish (up to --drain-timeout), end the
  // rest in each dialect's own form, close the store, exit 0. A second signal exits at once.
  // Installed before the models finish loading: a model that is ready serves while the next one
  // still loads (or downloads), and a signal then must drain its requests as at any other time
  // instead of killing the process under them.
  let stopping = false;
  const stop = async () => {
    if (stopping) process.exit(1);
    stopping = true;
    process.stderr.write(`plinth: shutting down (running requests get up to ${config["drain-timeout"]} s)\n`);
    try {
      await server.shutdown(config["drain-timeout"] * 1000);
    } catch (err) {
      // Every step of the shutdown has run (the data directory is released whatever failed before
      // it); what failed is said in one line and the exit status, and the process still ends.
      process.stderr.write(`plinth: stopped, but not cleanly: ${(err as Error)?.message ?? String(err)}\n`);
      process.exit(1);
    }
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  await server.loaded;
  // A shutdown under way aborts the loads still going, which settles `loaded`: it exits by itself.
  if (stopping) return -1;
  // A model that failed does not take the others down: they serve, and /health names the failed one
  // with its error (503 "error"). Only a server none of whose models could load serves nothing; serve()
  // has said why each failed, so it exits.
  const models = server.registry.list();
  const failed = models.filter((m) => m.status === "failed").map((m) => `'${m.id}'`);
  if (models.length > 0 && failed.length === models.length) {
    process.stderr.write(`plinth: no model could be loaded; exiting\n`);
    stopping = true; // a signal from here on exits at once rather than closing a second time
    await server.close().catch((err) => process.stderr.write(`plinth: stopped, but not cleanly: ${(err as Error)?.message ?? String(err)}\n`));
    return 1;
  }
  if (failed.length > 0)
    process.stderr.write(`plinth: serving the other models without ${failed.join(", ")}, which failed to load (/health answers 503 with the error)\n`);
  return -1;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    process.stderr.write(`plinth: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
