import type { Balance } from "./pool.ts";

/**
 * How a remote model is reached: what `--upstream NAME=URL[,URL…]` and a config file's upstream
 * entries describe. The config layer builds it as plain data; the remote factory reads it.
 */
export interface RemoteSource {
  kind: "remote";
  /** The model's id on this server. */
  name: string;
  /** Base URLs of the replicas (`http://host:8000`, with or without a trailing `/v1`). */
  urls: string[];
  /** The model's id on the upstream; undefined: discovered from its /v1/models. */
  model?: string;
  apiKey?: string;
  /**
   * Requests one replica runs at once: configured, or (`learnSlots`) the starting value until a
   * replica reports its own.
   */
  slots: number;
  /** No slot count was configured: each replica's is read from the replica itself. */
  learnSlots: boolean;
  /** Longest a request waits in Plinth for a free replica slot (the server's queue timeout); 0: no limit. */
  queueTimeoutMs: number;
  balance: Balance;
  /** Replicas one request may try (the first included) before it fails. */
  attempts: number;
  connectTimeoutMs: number;
  firstTokenTimeoutMs: number;
  idleTimeoutMs: number;
  healthIntervalMs: number;
  ejectAfter: number;
  ejectMs: number;
  /** Count prompt tokens through the upstream's /tokenize before generating (when it has one). */
  tokenize: boolean;
  /** Canonical fields the upstream lacks: requests that use them are refused with a 400. */
  unsupported: string[];
}
