import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before } from "node:test";
import OpenAI from "openai";
import { serve, type RunningServer } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { modelSpecs, upstreamSpecs } from "../../src/config/models.ts";
import { BPE_SPEC, ensureBertFixtureModel, ensureFixtureModel, FIXTURE_TOKENS, HARMONY_SPEC, NUCLEUS_SPEC, SPM_SPEC, THINKING_SPEC } from "../fixtures/models.ts";
import { type PlinthHttp, plinthHttp } from "./requests.ts";

export interface TestServer extends RunningServer {
  /** The official openai client, for checks that the client itself copes with Plinth's answers. */
  client: OpenAI;
  /** Typed requests over plain HTTP (see requests.ts): bodies are the server's own schema inputs. */
  http: PlinthHttp;
  model: string;
  modelPath: string;
}

export interface TestServerOptions {
  /** Also serve the BERT embedding fixture (an embedding-only model) as "bert". */
  bert?: boolean;
  /** Also serve the thinking/tool-call fixture (THINKING_SPEC) as "think". */
  think?: boolean;
  /** Also serve the gpt-oss-layout fixture (HARMONY_SPEC) as "oss". */
  harmony?: boolean;
  /**
   * Also serve the fixtures with real-style tokenizers: SPM_SPEC (Llama 2 style SentencePiece) as
   * "spm" and BPE_SPEC (GPT-2 style byte-level BPE) as "bpe".
   */
  tokenizers?: boolean;
  /** Also serve NUCLEUS_SPEC (a fixed next-token distribution, for sampler checks) as "nucleus". */
  nucleus?: boolean;
}

/**
 * The real server, in this process, on a random loopback port, serving the generated fixture model.
 * Threads are kept to one so a test run behaves the same on a busy 2-core CI machine.
 */
export async function startTestServer(settings: Record<string, unknown> = {}, opts: TestServerOptions = {}): Promise<TestServer> {
  const modelPath = await ensureFixtureModel();
  const models = [`tiny=${modelPath}`];
  if (opts.bert) models.push(`bert=${await ensureBertFixtureModel()}`);
  if (opts.think) models.push(`think=${await ensureFixtureModel(THINKING_SPEC)}`);
  if (opts.harmony) models.push(`oss=${await ensureFixtureModel(HARMONY_SPEC)}`);
  if (opts.nucleus) models.push(`nucleus=${await ensureFixtureModel(NUCLEUS_SPEC)}`);
  if (opts.tokenizers) models.push(`spm=${await ensureFixtureModel(SPM_SPEC)}`, `bpe=${await ensureFixtureModel(BPE_SPEC)}`);
  // Stored objects go to a directory of the test's own unless it names one (and then keeps it).
  const ownDataDir = settings["data-dir"] === undefined ? mkdtempSync(path.join(tmpdir(), "plinth-test-")) : undefined;
  const config = loadConfig({ model: models, port: "0", threads: "1", "data-dir": ownDataDir, ...settings }, {});
  const server = await serve(config, { log: () => {} });
  const { close, shutdown } = server;
  server.close = async () => {
    // Connections a client opened and never sent a request on (undici opens some around aborted
    // requests) are not idle to Node, so a plain close waited for the headers timeout: about a minute.
    // After two seconds the test's server closes whatever is left.
    await close(2_000);
    if (ownDataDir) rmSync(ownDataDir, { recursive: true, force: true });
  };
  server.shutdown = async (drainTimeoutMs) => {
    await shutdown(drainTimeoutMs);
    if (ownDataDir) rmSync(ownDataDir, { recursive: true, force: true });
  };
  await server.loaded;
  // The fixtures the server was started with; a model a restored endpoint loads (at run time) settles
  // on its own schedule, which `loaded` does not wait for.
  const fixtures = new Set([...modelSpecs(config), ...upstreamSpecs(config)].map((m) => m.id));
  for (const status of server.registry.list())
    if (fixtures.has(status.id) && status.status !== "ready") throw new Error(`fixture model '${status.id}' failed to load: ${status.error}`);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
  return { ...server, client, http: plinthHttp(server.url), model: "tiny", modelPath };
}

/**
 * Starts a test server in a node:test `before` hook and closes it in the `after` hook of the suite
 * (or file) it is called in. The returned object stands for the running server: read it inside tests
 * and hooks only (outside the hooks' span it throws).
 */
export function useTestServer(settings: Record<string, unknown> = {}, opts: TestServerOptions = {}): TestServer {
  let running: TestServer | undefined;
  before(async () => {
    running = await startTestServer(settings, opts);
  });
  after(async () => {
    const server = running;
    running = undefined;
    await server?.close();
  });
  return new Proxy({} as TestServer, {
    get(_target, key) {
      if (running === undefined) throw new Error(`useTestServer: read '${String(key)}' while no server runs (only inside tests and hooks)`);
      return Reflect.get(running, key);
    },
  });
}

/** POST JSON (or raw text) and return status, headers and the parsed body, untyped. Prefer `server.http` (requests.ts). */
export function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  return requestJson(url, "POST", body, headers);
}

/** Any method; a body (a string is sent as it is) makes it a JSON request. Parses the answer when it is JSON. */
export async function requestJson(url: string, method: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, json, text };
}

export async function waitFor(predicate: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** logit_bias that bans both end-of-generation tokens of the fixture, so answers run to max_tokens. */
export const NO_EOG: Record<string, number> = { [FIXTURE_TOKENS.endOfSequence]: -100, [FIXTURE_TOKENS.imEnd]: -100 };

/**
 * Posts a streaming request as a client that cancels it midway: reads until `marker` has come
 * `count` times (default: five chat content deltas), then aborts and goes away. Returns what it had
 * read and the response head.
 */
export async function streamThenCancel(
  url: string,
  body: unknown,
  opts: { headers?: Record<string, string>; marker?: RegExp; count?: number } = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const marker = opts.marker ?? /"content":/g;
  const controller = new AbortController();
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...opts.headers },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(marker) ?? []).length < (opts.count ?? 5)) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended before it could be cancelled: ${text.slice(-300)}`);
    text += decoder.decode(value, { stream: true });
  }
  controller.abort();
  await reader.cancel().catch(() => {});
  return { status: res.status, headers: res.headers, text };
}
