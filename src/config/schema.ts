import os from "node:os";
import path from "node:path";
import { z } from "zod";

/** The user's data directory: $XDG_DATA_HOME/plinth, else ~/.local/share/plinth. */
export function defaultDataDir(): string {
  return path.join(process.env.XDG_DATA_HOME || path.join(os.homedir(), ".local", "share"), "plinth");
}

/**
 * A duration in seconds that ends up in a Node timer. Node keeps a timer of at most 2^31-1 ms (about
 * 24.8 days) and fires a longer one after 1 ms instead, so `--body-timeout 3000000` answered every slow
 * body with a 408 at once. The bound leaves room for the upstream head deadline, which adds
 * connect-timeout and first-token-timeout together.
 */
export const MAX_TIMER_SECONDS = 1_000_000;
const timerSeconds = () => z.number().max(MAX_TIMER_SECONDS, `must be at most ${MAX_TIMER_SECONDS} seconds (about 11 days)`);

/** Every server setting, with its default. The same keys work in plinth.yaml, PLINTH_* and flags. */
/** node-llama-cpp's prompt formats by name; "auto" follows the model's own chat template. */
export const chatWrapperName = z.enum(["auto", "general", "deepSeek", "qwen", "llama3.2-lightweight", "llama3.1", "llama3", "llama2Chat", "mistral", "alpacaChat", "functionary", "chatML", "falconChat", "gemma4", "gemma", "harmony", "muse", "seed"]);

/**
 * Every yes/no setting takes the same words, from a flag, PLINTH_* or YAML (where `on` is a string
 * and `1` a number):
 * a boolean, or true/false, on/off, 1/0 in any case. One set for all, so a value that works for
 * --ledger works for log-bodies too.
 */
const YES = new Set(["true", "on", "1"]);
const NO = new Set(["false", "off", "0"]);
const yesNoWord = (v: unknown) => {
  // YAML reads `1` and `0` as numbers.
  const word = typeof v === "string" || typeof v === "number" ? String(v).trim().toLowerCase() : undefined;
  return word === undefined ? v : YES.has(word) ? true : NO.has(word) ? false : v;
};
const yesNoValue = () => z.preprocess(yesNoWord, z.boolean({ error: "must be true/false, on/off or 1/0" }));
const yesNo = (fallback: boolean) => z.preprocess(yesNoWord, z.boolean({ error: "must be true/false, on/off or 1/0" }).default(fallback));

/**
 * A model entry: `[name=]source` as on the command line, or (in a config file) an object that also
 * sets that model's own context size, parallel sequences and prompt format.
 */
export const modelEntry = z.union([
  z.string().min(1),
  z.strictObject({
    source: z.string().min(1),
    name: z.string().min(1).optional(),
    "ctx-size": z.int().min(16).optional(),
    parallel: z.int().min(1).max(256).optional(),
    "chat-wrapper": chatWrapperName.optional(),
  }),
]);
export type ModelEntry = z.infer<typeof modelEntry>;

/**
 * A remote model: `NAME=URL[,URL…]` as on the command line, or (in a config file) an object with
 * its replicas and its own key, upstream model id, timeouts and slots.
 */
export const upstreamEntry = z.union([
  z.string().regex(/^[^=\s]+=\S+$/, "an upstream is NAME=URL[,URL…]"),
  z.strictObject({
    name: z.string().min(1),
    url: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
    /** The model's id on the upstream (default: NAME if the upstream serves it, else its only model). */
    model: z.string().min(1).optional(),
    "api-key": z.string().min(1).optional(),
    slots: z.int().min(1).max(4096).optional(),
    "connect-timeout": timerSeconds().positive().optional(),
    "first-token-timeout": timerSeconds().positive().optional(),
    "idle-timeout": timerSeconds().positive().optional(),
    /** Count prompt tokens through the upstream's /tokenize (default true; off for upstreams without one). */
    tokenize: yesNoValue().optional(),
    /** Request features the upstream lacks, by canonical name (logitBias, topK, reasoning, …): refused with a 400. */
    unsupported: z.array(z.string().min(1)).optional(),
  }),
]);
export type UpstreamEntry = z.infer<typeof upstreamEntry>;

/** A list setting: repeated flags, a comma-separated string (flag, PLINTH_* variable) or a YAML list. */
const nameList = z.preprocess(
  (v) => (typeof v === "string" ? [v] : v),
  z.array(z.string()).transform((items) => items.flatMap((s) => s.split(",")).map((s) => s.trim()).filter(Boolean)),
);


export const configSchema = z.object({
  model: z.array(modelEntry).default([]),
  /** Remote models (OpenAI-compatible upstreams), served beside the local ones. */
  upstream: z.array(upstreamEntry).default([]),
  /** How a remote model's replicas share requests. */
  balance: z.enum(["prefix", "least", "round-robin"]).default("prefix"),
  /**
   * Requests one replica runs at once, unless its entry says otherwise. Unset: what each replica
   * reports (a Plinth's model list, llama-server's /props), else 64.
   */
  "upstream-slots": z.int().min(1).max(4096).optional(),
  /** Replicas one request may try before it fails (failover happens only before any output). */
  "upstream-attempts": z.int().min(1).max(16).default(3),
  /** Seconds until an upstream's response head must arrive. */
  "connect-timeout": timerSeconds().positive().default(10),
  /** Seconds until an upstream's first token must arrive. */
  "first-token-timeout": timerSeconds().positive().default(120),
  /** Seconds an upstream stream may stay silent between tokens. */
  "idle-timeout": timerSeconds().positive().default(60),
  /** Seconds between active health checks of upstream replicas; 0: passive checks only. */
  "health-interval": timerSeconds().min(0).default(5),
  /** Consecutive failures that eject a replica. */
  "eject-after": z.int().min(1).default(3),
  /** Seconds an ejected replica waits before a trial request (doubling while trials fail). */
  "eject-time": timerSeconds().positive().default(5),
  host: z.string().min(1).default("127.0.0.1"),
  port: z.int().min(0).max(65535).default(8080),
  "ctx-size": z.int().min(16).optional(),
  parallel: z.int().min(1).max(256).default(4),
  "max-queue": z.int().min(0).default(64),
  /** Seconds a request may wait for a free sequence before it is refused as overloaded; 0: no limit. */
  "queue-timeout": timerSeconds().min(0).default(300),
  /** Seconds running requests may take to finish after a shutdown signal before they are ended. */
  "drain-timeout": timerSeconds().min(0).default(30),
  /** Embedding contexts per model (inputs embedded at once), created on the first embeddings request. */
  "embedding-contexts": z.int().min(1).max(64).default(2),
  /** Generation contexts per model that share its sequences; unset: cores / threads on the CPU (engines/llama-cpp/runtime.ts), 1 on a GPU. */
  "decode-contexts": z.int().min(1).max(64).optional(),
  /** llama.cpp CPU threads per context; unset: by the engine binary (engines/llama-cpp/runtime.ts defaultThreads). */
  threads: z.int().min(1).optional(),
  gpu: z.enum(["auto", "off", "cuda", "vulkan", "metal"]).default("auto"),
  "body-limit": z.int().min(1024).default(16 * 1024 * 1024),
  /** Origins allowed to call from a browser (CORS); "*" allows any; none: CORS off. */
  "cors-origin": nameList.default([]),
  /** Names accepted in the Host header besides IP literals, localhost and the listen address; "*": any. */
  "allowed-host": nameList.default([]),
  /** Seconds the request line and headers may take to arrive. */
  "headers-timeout": timerSeconds().positive().default(30),
  /** Seconds a request body may take to arrive, after its headers. */
  "body-timeout": timerSeconds().positive().default(60),
  /** Seconds an idle keep-alive connection is kept open. */
  "keep-alive-timeout": timerSeconds().positive().default(65),
  /** Seconds a streamed answer waits for its client to take more before the connection is closed. */
  "send-timeout": timerSeconds().positive().default(30),
  /** Open connections at most; more are closed as they arrive (0: no limit). */
  "max-connections": z.int().min(0).default(512),
  /** RAM for saved prompt states (prefix cache beyond what the sequences hold); 0 disables. */
  "cache-ram": z.int().min(0).default(256 * 1024 * 1024),
  /** Shortest prompt worth saving (shorter ones are cheap to evaluate again and would crowd the budget). */
  "cache-min-tokens": z.int().min(1).default(16),
  "cache-dir": z.string().optional(),
  /** Where stored responses, conversations and the server's secret key live (SQLite). */
  "data-dir": z.string().min(1).default(() => defaultDataDir()),
  /** Days a stored object is kept (responses, conversations, stored chat completions); 0 keeps them. */
  "store-ttl": z.number().min(0).default(30),
  /**
   * The prompt format: "auto" follows the model's own chat template; a node-llama-cpp wrapper name
   * (mistral, llama3.1, qwen, chatML, …) overrides it for models whose template is missing or wrong.
   */
  "chat-wrapper": chatWrapperName.default("auto"),
  /** Request log lines: JSON (one object a line), pretty, or auto (pretty on a terminal, JSON otherwise). */
  "log-format": z.enum(["auto", "json", "pretty"]).default("auto"),
  "log-level": z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  /** OTLP/HTTP endpoint for OpenTelemetry traces (else OTEL_EXPORTER_OTLP_ENDPOINT); none: tracing off. */
  "otlp-endpoint": z.string().min(1).optional(),
  /** Seed of the Databricks endpoints' traffic split (replayable A/B routing); none: random. */
  "route-seed": z.int().min(0).optional(),
  /** Seconds a scale-to-zero serving endpoint may sit idle before its models are unloaded. */
  "scale-to-zero-after": z.number().positive().default(1800),
  /** Put request and response bodies (prompts, answers) in the request log. */
  "log-bodies": yesNo(false),
  /** The web console (playground and operator's view) at `/`; `--no-ui` turns it off. */
  ui: yesNo(true),
  /** API keys accepted as they are (no limits); with any key configured, requests need one. */
  "api-key": nameList.default([]),
  /** A file of API keys, one a line (blank lines and lines starting with # are skipped). */
  "api-key-file": z.string().min(1).optional(),
  /** The key of the admin API (/admin/keys, /admin/usage); none: the admin API is off. */
  "admin-key": z.string().min(16, "must be at least 16 characters").optional(),
  /** Listen on a non-loopback address with no API key configured (an open server), knowingly. */
  "no-auth": yesNo(false),
  /** Whether GET /metrics needs an API key once keys are configured. */
  "metrics-auth": yesNo(true),
  /** Write one usage ledger row per request. */
  ledger: yesNo(true),
  /** Days ledger rows are kept; 0 keeps them. */
  "ledger-retention": z.number().min(0).default(90),
  /** Seconds in a rate window: the "minute" of requests and tokens per minute (shorter for tests). */
  "rate-window": z.number().min(0.1).max(3600).default(60),
});

export type PlinthConfig = z.infer<typeof configSchema>;

/** Keys whose values are whole numbers, so strings from the environment and flags can be converted. */
export const NUMERIC_KEYS = ["upstream-slots", "upstream-attempts", "connect-timeout", "first-token-timeout", "idle-timeout", "health-interval", "eject-after", "eject-time", "store-ttl", "port", "ctx-size", "parallel", "max-queue", "queue-timeout", "drain-timeout", "embedding-contexts", "decode-contexts", "threads", "body-limit", "cache-ram", "cache-min-tokens", "headers-timeout", "body-timeout", "keep-alive-timeout", "send-timeout", "max-connections", "route-seed", "scale-to-zero-after", "ledger-retention", "rate-window"] as const;
