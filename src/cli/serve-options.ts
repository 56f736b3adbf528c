import type { ParseArgsConfig } from "node:util";

/**
 * The serve command's flags and its help text. Every setting of the config schema has a flag here
 * (test/unit/config.test.ts checks it), so a setting the README documents can always be given on
 * the command line, not only in plinth.yaml or the environment.
 */
export const USAGE = `usage: plinth <command> [options]

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
  --upstream-slots <n>   requests one replica runs at once (default: what the replica reports, else 64)
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
  --send-timeout <s>     seconds a streamed answer waits for a client that has stopped reading before
                         the connection is closed and the generation cancelled (default 30)
  --max-connections <n>  open connections at most; more are refused (default 512; 0: no limit)
  --cache-ram <bytes>    RAM for saved prompt states, reused across requests, per model (default 256 MiB; 0 disables)
  --cache-min-tokens <n> shortest prompt worth saving (default 16)
  --cache-dir <dir>      where downloaded models are kept
  --data-dir <dir>       where stored responses and conversations live (default ~/.local/share/plinth)
  --store-ttl <days>     days stored objects are kept (default 30; 0 keeps them)
  --chat-wrapper <name>  prompt format: auto (the model's template) or mistral, llama3.1, qwen, chatML, …
  --log-format auto|json|pretty  request log lines (default auto: pretty on a terminal, JSON otherwise)
  --log-level <level>    fatal, error, warn, info (default), debug, trace or silent
  --log-bodies           put request and response bodies (prompts, answers) in the request log
  --no-ui                do not serve the web console (playground, operator's view) at /
  --route-seed <n>       seed of the Databricks endpoints' traffic split, so A/B routing can be replayed
                         (default: random)
  --scale-to-zero-after <s>  seconds a scale_to_zero_enabled serving endpoint may idle before its models
                         are unloaded (default 1800)
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

export const SERVE_OPTIONS = {
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
  "send-timeout": { type: "string" },
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
  "route-seed": { type: "string" },
  "scale-to-zero-after": { type: "string" },
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
} satisfies NonNullable<ParseArgsConfig["options"]>;
