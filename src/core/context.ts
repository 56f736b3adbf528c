import type { GenerationEvent, Usage } from "./types.ts";

/**
 * Who is asking, carried with every request through the generation service. Dialects build it from
 * the wire (user fields, later API keys); hooks read it to attribute what they observe.
 */
export interface RequestContext {
  /** Unique per HTTP request; also the id in logs. */
  requestId: string;
  /** The dialect that received the request ("openai", …), for metrics and logs. */
  dialect: string;
  /**
   * The isolation namespace for state shared between requests (prompt cache, stored objects): made
   * from the end user the request names and any cache salt. Undefined: the anonymous namespace.
   */
  namespace?: string;
  /** The API key that authenticated the request, once keys exist. */
  apiKey?: string;
  /**
   * Headers the engine wants on the response (see PreparedGeneration.responseHeaders). The HTTP
   * layer creates the object; copies of the context share it.
   */
  responseHeaders?: Record<string, string>;
}

export interface AdmittedInfo {
  model: string;
  /** Prompt tokens of each request of the batch. */
  promptTokens: number[];
  /** Choices that will run (n per request). */
  choices: number;
}

export type Outcome = { usage: Usage; error?: undefined } | { error: unknown; usage?: undefined };

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
