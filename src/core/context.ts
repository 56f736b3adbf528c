import type { GenerationEvent, Usage } from "./types.ts";

/**
 * Who is asking, carried with every request through the generation service. Dialects build it from
 * the wire (user fields, later API keys); hooks read it to attribute what they observe.
 */
export interface RequestContext {
  /**
   * The request id: echoed in `x-request-id`, in logs and in the ledger. A client may choose it, so
   * two requests can share it: never a key for per-request state (see `internalId`).
   */
  requestId: string;
  /**
   * Made by the server, unique per HTTP request (copies of a context share it): what hooks and
   * gates key per-request state by.
   */
  internalId: string;
  /** The dialect that received the request ("openai", …), for metrics and logs. */
  dialect: string;
  /**
   * The isolation namespace for state shared between requests (prompt cache, stored objects): made
   * from the end user the request names and any cache salt. Undefined: the anonymous namespace.
   */
  namespace?: string;
  /** The id of the API key that authenticated the request (never the key itself); undefined on an open server. */
  apiKey?: string;
  /**
   * Headers the engine wants on the response (see PreparedGeneration.responseHeaders). The HTTP
   * layer creates the object; copies of the context share it.
   */
  responseHeaders?: Record<string, string>;
}

/**
 * The namespace a request's shared state lives in once its API key is taken into account: requests
 * of different keys never share cached prompts, stored objects or a fairness queue, even when they
 * name the same end user. Without a key the namespace is unchanged, so an open server keeps the
 * namespaces (and stored objects) it always had.
 */
export function keyedNamespace(apiKey: string | undefined, namespace: string | undefined): string | undefined {
  if (apiKey === undefined) return namespace;
  return JSON.stringify(["key", apiKey, namespace ?? null]);
}

/** The same for stores, whose anonymous namespace is "" rather than undefined. */
export function keyedStoreNamespace(apiKey: string | undefined, namespace: string): string {
  return apiKey === undefined ? namespace : JSON.stringify(["key", apiKey, namespace]);
}

/**
 * Where a request's stored objects (responses, conversations, stored chat completions) live: its
 * API key's (the server's own on an open server), as OpenAI keeps them per project. The end user a
 * request names (`user`, `safety_identifier`) isolates the prompt cache, not stored objects: an
 * application reads back what it stored for any of its users, with the official clients' plain
 * `retrieve(id)`.
 */
export function storeNamespace(apiKey: string | undefined): string {
  return keyedStoreNamespace(apiKey, "");
}

/** What a request asks of the server's capacity, as an admission gate sees it. */
export interface AdmissionRequest {
  model: string;
  /** Prompt tokens of the whole request (every prompt of a batch). */
  promptTokens: number;
  /** The most tokens its choices may generate together (their budgets summed). */
  maxCompletionTokens: number;
}

/**
 * A check every request passes before the scheduler admits it: API-key model lists, token rate
 * limits and budgets. `admit` throws an ApiError to refuse; what it returns is called exactly once
 * when the request ends, with its real usage (undefined when it failed before generating).
 */
export interface AdmissionGate {
  /** May this request's key use this model at all? Throws an ApiError (403) when not. */
  authorize(ctx: RequestContext, model: string): void;
  /**
   * Whether `admit` reserves tokens for this request's key (token-per-minute or budget limits): its
   * prompt must then be counted before admission, even where counting costs an engine a round trip.
   */
  countsTokens?(ctx: RequestContext): boolean;
  /**
   * A signal that ends the request when the gate withdraws its admission while it runs (its API key
   * revoked or expired); its reason is the error the request ends with. Undefined: only the client
   * (and a shutdown) end it.
   */
  stopSignal?(ctx: RequestContext): AbortSignal | undefined;
  admit(ctx: RequestContext, req: AdmissionRequest): Promise<AdmissionTicket | undefined> | AdmissionTicket | undefined;
}

/** Settles a request's reservation to what it really used. */
export type AdmissionTicket = (usedTokens: number) => void;

export interface AdmittedInfo {
  model: string;
  /** What kind of generation, in OpenTelemetry's GenAI words: a conversation, or text continued. */
  operation: "chat" | "text_completion";
  /** Prompt tokens of each request of the batch. */
  promptTokens: number[];
  /** Choices that will run (n per request). */
  choices: number;
  /** Each request of the batch's `n` and the most tokens each of its choices may generate (its max_tokens, or what the context leaves). */
  params: Array<{ n: number; maxTokens: number }>;
  /**
   * When the service got the request (performance.now()), before the engine prepared it: a remote
   * engine's opening (after admission, before `admitted` is told) already waits for the upstream's
   * first token, so times to the first token are counted from here, not from admission.
   */
  receivedAt: number;
}

/**
 * How a generation ended: its usage, or the error that ended it with what it had used by then
 * (`spent`: its prompt once a choice had started, the tokens generated before the end). A client
 * that cancels a stream midway has still had those tokens computed for it.
 */
export type Outcome = { usage: Usage; error?: undefined; spent?: undefined } | { error: unknown; usage?: undefined; spent: Usage };

/**
 * Observers of the generation lifecycle: a ledger, a quota, metrics, a store attach here instead of
 * wrapping each dialect's routes. Hooks run synchronously on the request path and must not throw;
 * one that does is reported and ignored.
 */
export interface GenerationHooks {
  /** The request passed every check and holds its place in the scheduler. */
  admitted?(ctx: RequestContext, info: AdmittedInfo): void;
  /** A choice of the request got its slot (it leaves the queue and its prompt starts evaluating). */
  started?(ctx: RequestContext): void;
  /** The first generated text, reasoning or tool call of the request. */
  firstToken?(ctx: RequestContext): void;
  /** Every canonical event, in the order the renderer sees it. */
  event?(ctx: RequestContext, event: GenerationEvent): void;
  /** The request ended, with its usage or the error that ended it (a client disconnect included). */
  finished?(ctx: RequestContext, outcome: Outcome): void;
  /** An embeddings request finished: its model, inputs and the tokens embedded. */
  embedded?(ctx: RequestContext, info: { model: string; inputs: number; tokens: number }): void;
}
