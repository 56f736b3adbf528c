import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config/load.ts";
import { listCachedModels } from "../models/cache-list.ts";
import { resolveModelPath } from "../models/download.ts";
import { parseModelArg } from "../models/source.ts";
import { createProgressBar } from "./progress-bar.ts";
import { KEYS_USAGE, keysCommand, usageCommand } from "./keys.ts";
import { serve } from "./serve.ts";

const USAGE = `usage: plinth <command> [options]

commands:
  serve            start the API server (default)
  pull <model>     download an hf:owner/repo/file.gguf model into the cache
  models           list the models in the download cache
  keys             create, list and revoke API keys (plinth keys --help)
  usage            usage totals from the ledger, per key, model or day

serve options (also in plinth.yaml via --config, or PLINTH_<NAME> environment variables; flags win):
  --model [name=]<path|hf:owner/repo/file.gguf>   model to serve (repeatable)
  --upstream NAME=URL[,URL…]  a model served by OpenAI-compatible upstreams (vLLM, SGLang, llama-server,
                         another Plinth); several URLs form a replica pool (repeatable)
  --balance prefix|least|round-robin  how replicas share requests (default prefix: prompt-prefix
                         affinity with bounded load, else fewest outstanding)
  --upstream-slots <n>   requests one replica runs at once (default 64)
  --upstream-attempts <n>  replicas one request may try before any output (default 3)
  --connect-timeout <s>  seconds until an upstream's response head (default 10)
  --first-token-timeout <s>  seconds until an upstream's first token (default 120)
  --idle-timeout <s>     seconds an upstream stream may stall between tokens (default 60)
  --health-interval <s>  seconds between active replica health checks (default 5; 0: off)
  --eject-after <n>      consecutive failures that eject a replica (default 3)
  --eject-time <s>       seconds before an ejected replica gets a trial request (default 5, doubling)
  --host <addr>          listen address (default 127.0.0.1)
  --port <n>             listen port (default 8080)
  --ctx-size <n>         context tokens per sequence (default: the model's, at most 4096)
  --parallel <n>         sequences decoding at once per model (default 4)
  --max-queue <n>        requests allowed to wait for a sequence (default 64)
  --queue-timeout <s>    seconds a request may wait for a sequence before it is refused (default 300; 0: no limit)
  --drain-timeout <s>    on SIGTERM/SIGINT, seconds running requests may take to finish (default 30)
  --embedding-contexts <n>  embedding contexts per model, created on first use (default 2)
  --decode-contexts <n>  CPU generation contexts per model sharing its sequences (default: cores / threads)
  --threads <n>          CPU threads for llama.cpp (default: all cores with the engine npm ci builds,
                         else the cores available less one, at least 1)
  --gpu auto|off|cuda|vulkan|metal
  --body-limit <bytes>   largest accepted request body (default 16 MiB)
  --cors-origin <origin> origin allowed to call from a browser (repeatable or comma-separated; * for any;
                         default none: CORS off, preflights answered 403)
  --allowed-host <name>  name accepted in the Host header besides IP addresses, localhost and --host
                         (repeatable or comma-separated; * turns the DNS-rebinding check off)
  --headers-timeout <s>  seconds the request headers may take to arrive (default 30)
  --body-timeout <s>     seconds a request body may take to arrive (default 60)
  --keep-alive-timeout <s>  seconds an idle connection is kept open (default 65)
  --max-connections <n>  open connections at most; more are refused (default 512; 0: no limit)
  --cache-ram <bytes>    RAM for saved prompt states, reused across requests (default 256 MiB; 0 disables)
  --cache-min-tokens <n> shortest prompt worth saving (default 16)
  --cache-dir <dir>      where downloaded models are kept
  --data-dir <dir>       where stored responses and conversations live (default ~/.local/share/plinth)
  --store-ttl <days>     days stored objects are kept (default 30; 0 keeps them)
  --chat-wrapper <name>  prompt format: auto (the model's template) or mistral, llama3.1, qwen, chatML, …
  --log-format auto|json|pretty  request log lines (default auto: pretty on a terminal, JSON otherwise)
  --log-level <level>    fatal, error, warn, info (default), debug, trace or silent
  --log-bodies           put request and response bodies (prompts, answers) in the request log
  --no-ui                do not serve the web console (playground, operator's view) at /
  --otlp-endpoint <url>  send OpenTelemetry traces over OTLP/HTTP (also OTEL_EXPORTER_OTLP_ENDPOINT; default off)
  --api-key <key>        accept this API key (repeatable; also PLINTH_API_KEY); with any key, requests need one
  --api-key-file <file>  API keys, one a line
  --admin-key <key>      the admin API's key (/admin/keys, /admin/usage; default: admin API off)
  --no-auth              listen on a non-loopback address with no API key (an open server)
  --metrics-auth true|false  whether /metrics needs an API key once keys exist (default true)
  --ledger on|off        write a usage ledger row per request (default on)
  --ledger-retention <days>  days ledger rows are kept (default 90; 0 keeps them)
  --rate-window <s>      length of the rate-limit window (default 60: per minute)
  --config <file>        YAML file with the same settings
`;

async function main(argv: string[]): Promise<number> {
  // Key and usage commands have options of their own.
  if (argv[0] === "keys" || argv[0] === "usage") {
    if (argv.includes("--help") || argv.includes("-h")) {
      process.stdout.write(KEYS_USAGE);
      return 0;
    }
    return argv[0] === "keys" ? keysCommand(argv.slice(1)) : usageCommand(argv.slice(1));
  }
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      model: { type: "string", short: "m", multiple: true },
      upstream: { type: "string", multiple: true },
      balance: { type: "string" },
      "upstream-slots": { type: "string" },
      "upstream-attempts": { type: "string" },
      "connect-timeout": { type: "string" },
      "first-token-timeout": { type: "string" },
      "idle-timeout": { type: "string" },
      "health-interval": { type: "string" },
      "eject-after": { type: "string" },
      "eject-time": { type: "string" },
      host: { type: "string" },
      port: { type: "string" },
      "ctx-size": { type: "string" },
      parallel: { type: "string" },
      "max-queue": { type: "string" },
      "queue-timeout": { type: "string" },
      "drain-timeout": { type: "string" },
      "embedding-contexts": { type: "string" },
      "decode-contexts": { type: "string" },
      threads: { type: "string" },
      gpu: { type: "string" },
      "body-limit": { type: "string" },
      "cors-origin": { type: "string", multiple: true },
      "allowed-host": { type: "string", multiple: true },
      "headers-timeout": { type: "string" },
      "body-timeout": { type: "string" },
      "keep-alive-timeout": { type: "string" },
      "max-connections": { type: "string" },
      "cache-ram": { type: "string" },
      "chat-wrapper": { type: "string" },
      "cache-min-tokens": { type: "string" },
      "cache-dir": { type: "string" },
      "data-dir": { type: "string" },
      "store-ttl": { type: "string" },
      "log-format": { type: "string" },
      "log-level": { type: "string" },
      "log-bodies": { type: "boolean" },
      "no-ui": { type: "boolean" },
      "otlp-endpoint": { type: "string" },
      "api-key": { type: "string", multiple: true },
      "api-key-file": { type: "string" },
      "admin-key": { type: "string" },
      "no-auth": { type: "boolean" },
      "metrics-auth": { type: "string" },
      ledger: { type: "string" },
      "ledger-retention": { type: "string" },
      "rate-window": { type: "string" },
      config: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const [command = "serve", ...rest] = positionals;
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
  const server = await serve(config);
  await server.loaded;
  // A server whose model could not be loaded serves nothing useful; serve() has said why, so exit.
  if (server.registry.list().some((m) => m.status === "failed")) {
    await server.close();
    return 1;
  }
  // SIGTERM/SIGINT: stop accepting, let running requests finish (up to --drain-timeout), end the
  // rest in each dialect's own form, close the store, exit 0. A second signal exits at once.
  let stopping = false;
  const stop = async () => {
    if (stopping) process.exit(1);
    stopping = true;
    process.stderr.write(`plinth: shutting down (running requests get up to ${config["drain-timeout"]} s)\n`);
    await server.shutdown(config["drain-timeout"] * 1000);
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
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
